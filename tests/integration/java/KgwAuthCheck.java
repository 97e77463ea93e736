import java.io.FileInputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.admin.UserScramCredentialsDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java client's security settings against kgw's listeners.
 *
 * <pre>
 * KgwAuthCheck PROPS_FILE roundtrip TOPIC CLIENT_ID         produce one record, read it back by assign
 * KgwAuthCheck PROPS_FILE alter-scram USER PASSWORD MECH    AlterUserScramCredentials upsert, then describe
 * </pre>
 *
 * PROPS_FILE holds bootstrap.servers and the security configs (security.protocol, ssl.*, sasl.*).
 * Output: one JSON object per line; the last is {"event":"done"} or {"event":"error",...}.
 */
public final class KgwAuthCheck {
    private static final Duration T = Duration.ofSeconds(30);

    public static void main(String[] args) {
        try {
            Properties base = new Properties();
            try (FileInputStream in = new FileInputStream(args[0])) {
                base.load(in);
            }
            switch (args[1]) {
                case "roundtrip":
                    roundtrip(base, args[2], args[3]);
                    break;
                case "alter-scram":
                    alterScram(base, args[2], args[3], args[4]);
                    break;
                default:
                    throw new IllegalArgumentException("unknown mode " + args[1]);
            }
            emit("{\"event\":\"done\"}");
            System.exit(0);
        } catch (Throwable t) {
            Throwable root = t;
            while (root.getCause() != null && root.getCause() != root) {
                root = root.getCause();
            }
            emit("{\"event\":\"error\",\"type\":" + json(t.getClass().getName()) + ",\"message\":" + json(String.valueOf(t.getMessage()))
                    + ",\"root_type\":" + json(root.getClass().getName()) + ",\"root_message\":" + json(String.valueOf(root.getMessage())) + "}");
            System.exit(1);
        }
    }

    private static void roundtrip(Properties base, String topic, String clientId) throws Exception {
        Properties p = new Properties();
        p.putAll(base);
        p.put("client.id", clientId);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("acks", "all");
        p.put("linger.ms", "0");
        p.put("max.block.ms", "30000");
        p.put("delivery.timeout.ms", "30000");
        p.put("request.timeout.ms", "15000");
        p.put("enable.idempotence", "false");
        String value = "hello from java " + clientId;
        long offset;
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            RecordMetadata md = producer.send(new ProducerRecord<>(topic, 0, "k", value)).get();
            offset = md.offset();
            emit("{\"event\":\"produced\",\"partition\":" + md.partition() + ",\"offset\":" + offset + "}");
        }
        Properties c = new Properties();
        c.putAll(base);
        c.put("client.id", clientId);
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        c.put("enable.auto.commit", "false");
        c.put("request.timeout.ms", "15000");
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            TopicPartition tp = new TopicPartition(topic, 0);
            consumer.assign(Collections.singletonList(tp));
            consumer.seek(tp, offset);
            long deadline = System.nanoTime() + T.toNanos();
            List<String> got = new ArrayList<>();
            while (got.isEmpty() && System.nanoTime() < deadline) {
                ConsumerRecords<String, String> records = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<String, String> r : records) {
                    got.add(r.value());
                }
            }
            if (got.isEmpty()) {
                throw new IllegalStateException("no record read back within " + T);
            }
            emit("{\"event\":\"consumed\",\"value\":" + json(got.get(0)) + "}");
        }
    }

    private static void alterScram(Properties base, String user, String password, String mechanism) throws Exception {
        ScramMechanism mech = ScramMechanism.fromMechanismName(mechanism);
        try (Admin admin = Admin.create(base)) {
            admin.alterUserScramCredentials(Collections.singletonList(
                    new UserScramCredentialUpsertion(user, new ScramCredentialInfo(mech, 4096),
                            password.getBytes(StandardCharsets.UTF_8)))).all().get();
            emit("{\"event\":\"altered\",\"user\":" + json(user) + "}");
            UserScramCredentialsDescription d = admin.describeUserScramCredentials(Collections.singletonList(user))
                    .description(user).get();
            for (ScramCredentialInfo info : d.credentialInfos()) {
                emit("{\"event\":\"described\",\"user\":" + json(user) + ",\"mechanism\":" + json(info.mechanism().mechanismName())
                        + ",\"iterations\":" + info.iterations() + "}");
            }
        }
    }

    private static synchronized void emit(String line) {
        System.out.println(line);
        System.out.flush();
    }

    private static String json(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            switch (ch) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (ch < 0x20) {
                        b.append(String.format("\\u%04x", (int) ch));
                    } else {
                        b.append(ch);
                    }
            }
        }
        return b.append('"').toString();
    }
}
