// A KIP-932 share group through kgw, with the Apache Kafka 4.x Java client: the records of a
// topic are produced, the group set to start at the earliest offset, then they are consumed by a KafkaShareConsumer (explicit acknowledgement) and
// acknowledged. Prints one JSON object per line; tests/integration/test_real_kafka.py asserts.
//
//   java KgwShareCheck <bootstrap> <topic> <group> <records>

import java.time.Duration;
import java.util.Collections;
import java.util.Properties;
import java.util.TreeSet;

import java.util.List;
import java.util.Map;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class KgwShareCheck {
    public static void main(String[] args) {
        String bootstrap = args[0], topic = args[1], group = args[2];
        int records = Integer.parseInt(args[3]);
        try {
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("key.serializer", StringSerializer.class.getName());
            p.put("value.serializer", StringSerializer.class.getName());
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
                for (int i = 0; i < records; i++) {
                    producer.send(new ProducerRecord<>(topic, "k" + i, "share-" + i)).get();
                }
            }
            // a new share group starts at the latest offset: start this one at the earliest,
            // with a GROUP config altered through kgw (forwarded to the broker)
            try (Admin admin = Admin.create(p)) {
                ConfigResource resource = new ConfigResource(ConfigResource.Type.GROUP, group);
                AlterConfigOp op = new AlterConfigOp(new ConfigEntry("share.auto.offset.reset", "earliest"),
                                                     AlterConfigOp.OpType.SET);
                admin.incrementalAlterConfigs(Map.of(resource, List.of(op))).all().get();
            }
            Properties c = new Properties();
            c.put("bootstrap.servers", bootstrap);
            c.put("group.id", group);
            c.put("key.deserializer", StringDeserializer.class.getName());
            c.put("value.deserializer", StringDeserializer.class.getName());
            c.put("share.acknowledgement.mode", "explicit");
            TreeSet<String> seen = new TreeSet<>();
            long deadline = System.currentTimeMillis() + 60_000;
            try (KafkaShareConsumer<String, String> consumer = new KafkaShareConsumer<>(c)) {
                consumer.subscribe(Collections.singletonList(topic));
                while (seen.size() < records && System.currentTimeMillis() < deadline) {
                    ConsumerRecords<String, String> batch = consumer.poll(Duration.ofMillis(500));
                    for (ConsumerRecord<String, String> r : batch) {
                        seen.add(r.value());
                        consumer.acknowledge(r, AcknowledgeType.ACCEPT);
                    }
                    consumer.commitSync();
                }
            }
            System.out.println("{\"event\":\"consumed\",\"count\":" + seen.size() + "}");
            System.out.println("{\"event\":\"done\"}");
        } catch (Exception e) {
            String text = String.valueOf(e).replace("\\", "\\\\").replace("\"", "'");
            System.out.println("{\"event\":\"error\",\"error\":\"" + text + "\"}");
            System.exit(1);
        }
    }
}
