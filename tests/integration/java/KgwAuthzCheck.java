import java.time.Duration;
import java.util.*;
import org.apache.kafka.clients.consumer.*;
import org.apache.kafka.clients.producer.*;
import org.apache.kafka.common.serialization.*;

/** Java client behaviour under kgw's authorization: one scenario per run, one JSON line out. */
public class KgwAuthzCheck {
    static String q(String s) { return "\"" + s.replace("\"", "'") + "\""; }

    static String rootCause(Throwable t) {
        while (t.getCause() != null && t.getCause() != t) t = t.getCause();
        return t.getClass().getSimpleName();
    }

    static Properties producerProps(String bootstrap) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "20000");
        p.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "20000");
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        return p;  // defaults: acks=all, enable.idempotence=true
    }

    public static void main(String[] args) {
        String scenario = args[0], bootstrap = args[1], topic = args[2], id = args[3];
        try {
            switch (scenario) {
                case "idempotent-produce": {
                    try (KafkaProducer<String, String> p = new KafkaProducer<>(producerProps(bootstrap))) {
                        p.send(new ProducerRecord<>(topic, "k", "v-" + id)).get();
                    }
                    break;
                }
                case "transactional-produce": {
                    Properties props = producerProps(bootstrap);
                    props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, id);
                    try (KafkaProducer<String, String> p = new KafkaProducer<>(props)) {
                        p.initTransactions();
                    }
                    break;
                }
                case "group-consume": {
                    Properties c = new Properties();
                    c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
                    c.put(ConsumerConfig.GROUP_ID_CONFIG, id);
                    c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
                    c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
                    c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
                    c.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
                    c.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
                    c.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, "10000");
                    c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
                    List<String> values = new ArrayList<>();
                    try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
                        consumer.subscribe(List.of(topic));
                        long deadline = System.currentTimeMillis() + 40000;
                        while (values.isEmpty() && System.currentTimeMillis() < deadline) {
                            for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) values.add(r.value());
                        }
                        consumer.commitSync();
                    }
                    System.out.println("{\"scenario\":" + q(scenario) + ",\"ok\":true,\"values\":" + values.size() + "}");
                    return;
                }
                default: throw new IllegalArgumentException(scenario);
            }
            System.out.println("{\"scenario\":" + q(scenario) + ",\"ok\":true}");
        } catch (Exception e) {
            System.out.println("{\"scenario\":" + q(scenario) + ",\"ok\":false,\"error\":" + q(rootCause(e)) + "}");
        }
    }
}
