// The calls Spark's JVM Kafka connector (spark-sql-kafka-0-10) makes, with
// kafka-clients 3.9: AdminClient describeTopics + listOffsets(earliest/latest)
// to plan offset ranges, then per range a KafkaConsumer with assign, seek and
// poll until the range end.  Run once against kgw and once against the broker;
// tests/integration/test_spark_jvm_path.py compares the two outputs.  Usage:
//
//   java KgwSparkPathCheck <bootstrap> <via> <topic>
//
// Prints one JSON object per line: describe, offsets, records, done (or error).

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class KgwSparkPathCheck {
    public static void main(String[] args) {
        String via = args.length > 1 ? args[1] : "?";
        try {
            run(args[0], via, args[2]);
            System.out.println("{\"event\":\"done\",\"via\":" + q(via) + "}");
            System.exit(0);
        } catch (Throwable t) {
            System.out.println("{\"event\":\"error\",\"via\":" + q(via) + ",\"type\":" + q(t.getClass().getName())
                    + ",\"message\":" + q(String.valueOf(t.getMessage())) + "}");
            System.exit(1);
        }
    }

    static String q(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static String ids(List<Node> nodes) {
        List<String> out = new ArrayList<>();
        for (Node n : nodes) out.add(Integer.toString(n.id()));
        return "[" + String.join(",", out) + "]";
    }

    static void run(String bootstrap, String via, String topic) throws Exception {
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ap.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        ap.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        Map<TopicPartition, Long> earliest = new TreeMap<>((a, b) -> Integer.compare(a.partition(), b.partition()));
        Map<TopicPartition, Long> latest = new TreeMap<>((a, b) -> Integer.compare(a.partition(), b.partition()));
        List<TopicPartition> tps = new ArrayList<>();
        try (Admin admin = Admin.create(ap)) {
            TopicDescription d = admin.describeTopics(Collections.singleton(topic)).allTopicNames()
                    .get(30, TimeUnit.SECONDS).get(topic);
            List<String> parts = new ArrayList<>();
            for (TopicPartitionInfo p : d.partitions()) {
                tps.add(new TopicPartition(topic, p.partition()));
                parts.add("{\"partition\":" + p.partition() + ",\"leader\":" + (p.leader() == null ? -1 : p.leader().id())
                        + ",\"replicas\":" + ids(p.replicas()) + ",\"isr\":" + ids(p.isr()) + "}");
            }
            System.out.println("{\"event\":\"describe\",\"via\":" + q(via) + ",\"name\":" + q(d.name())
                    + ",\"internal\":" + d.isInternal() + ",\"partitions\":[" + String.join(",", parts) + "]}");
            for (int i = 0; i < 2; i++) {
                OffsetSpec spec = i == 0 ? OffsetSpec.earliest() : OffsetSpec.latest();
                Map<TopicPartition, OffsetSpec> req = new HashMap<>();
                for (TopicPartition tp : tps) req.put(tp, spec);
                Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> got = admin.listOffsets(req).all()
                        .get(30, TimeUnit.SECONDS);
                for (TopicPartition tp : tps) (i == 0 ? earliest : latest).put(tp, got.get(tp).offset());
            }
        }
        StringBuilder offs = new StringBuilder("{\"event\":\"offsets\",\"via\":" + q(via) + ",\"earliest\":{");
        List<String> e = new ArrayList<>(), l = new ArrayList<>();
        for (TopicPartition tp : tps) {
            e.add(q(Integer.toString(tp.partition())) + ":" + earliest.get(tp));
            l.add(q(Integer.toString(tp.partition())) + ":" + latest.get(tp));
        }
        System.out.println(offs.append(String.join(",", e)).append("},\"latest\":{").append(String.join(",", l))
                .append("}}"));

        // One consumer per planned range, as Spark's KafkaDataConsumer does (no group, no commits).
        List<String> records = new ArrayList<>();
        for (TopicPartition tp : tps) {
            long from = earliest.get(tp), until = latest.get(tp);
            Properties cp = new Properties();
            cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
            cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            cp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
            cp.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
            try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cp)) {
                consumer.assign(Collections.singleton(tp));
                consumer.seek(tp, from);
                long deadline = System.currentTimeMillis() + 30_000;
                while (consumer.position(tp) < until) {
                    if (System.currentTimeMillis() > deadline) {
                        throw new IllegalStateException("timed out at " + tp + " position " + consumer.position(tp)
                                + " < " + until);
                    }
                    ConsumerRecords<byte[], byte[]> got = consumer.poll(Duration.ofMillis(500));
                    for (ConsumerRecord<byte[], byte[]> r : got.records(tp)) {
                        if (r.offset() >= until) break;
                        records.add("[" + r.partition() + "," + r.offset() + ","
                                + q(r.key() == null ? null : new String(r.key(), "UTF-8")) + ","
                                + q(r.value() == null ? null : new String(r.value(), "UTF-8")) + ","
                                + r.timestamp() + "," + q(r.timestampType().name) + "]");
                    }
                }
            }
        }
        System.out.println("{\"event\":\"records\",\"via\":" + q(via) + ",\"records\":["
                + String.join(",", records) + "]}");
    }
}
