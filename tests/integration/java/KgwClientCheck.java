// Drives the Apache Kafka Java client (kafka-clients 3.9) through kgw and
// prints one JSON object per line on stdout; tests/integration/test_java_client.py
// parses the lines and asserts on them.  Usage:
//
//   java KgwClientCheck <bootstrap> <topic> <group> <partitions> <perPartition>
//
// Records are the same shape as tests/support/kafka_data.py:expected_records:
// record i has key "key-i", value "java:<topic>:value-i", partition i % partitions.
// Exit code 0 when every step ran (assertions are the Python test's job);
// on any exception an {"event":"error"} line is printed and the exit code is 1.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.ListOffsetsResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public final class KgwClientCheck {
    private static final long DEADLINE_MS = 45_000;

    public static void main(String[] args) {
        try {
            Properties extra = new Properties();
            if (args.length > 5) {  // client settings (e.g. SASL) from a properties file
                try (java.io.FileInputStream in = new java.io.FileInputStream(args[5])) {
                    extra.load(in);
                }
            }
            run(args[0], args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]), extra);
            emit("done", new TreeMap<>());
            System.exit(0);
        } catch (Throwable t) {
            Map<String, Object> m = new TreeMap<>();
            m.put("type", t.getClass().getName());
            m.put("message", String.valueOf(t.getMessage()));
            Throwable c = t.getCause();
            if (c != null) {
                m.put("cause", c.getClass().getName() + ": " + c.getMessage());
            }
            emit("error", m);
            t.printStackTrace();
            System.exit(1);
        }
    }

    static void run(String bootstrap, String topic, String group, int partitions, int perPartition,
                    Properties extra) throws Exception {
        Properties common = new Properties();
        common.putAll(extra);
        common.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        common.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        common.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        common.put(AdminClientConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
        common.put(AdminClientConfig.RETRY_BACKOFF_MS_CONFIG, "100");

        int n = partitions * perPartition;
        List<TopicPartition> tps = new ArrayList<>();
        for (int p = 0; p < partitions; p++) tps.add(new TopicPartition(topic, p));

        try (Admin admin = Admin.create(props(common, "client.id", "kgw-it-java-admin"))) {
            // -- createTopics ------------------------------------------------
            admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1)))
                 .all().get(30, TimeUnit.SECONDS);
            emit("created", map("topic", topic));

            // -- describeCluster ---------------------------------------------
            DescribeClusterResult dc = admin.describeCluster();
            Map<String, Object> cluster = new TreeMap<>();
            cluster.put("cluster_id", dc.clusterId().get(30, TimeUnit.SECONDS));
            cluster.put("controller", node(dc.controller().get(30, TimeUnit.SECONDS)));
            List<Object> nodes = new ArrayList<>();
            for (Node nd : dc.nodes().get(30, TimeUnit.SECONDS)) nodes.add(node(nd));
            cluster.put("nodes", nodes);
            emit("cluster", cluster);

            // -- describeTopics ----------------------------------------------
            TopicDescription td = admin.describeTopics(List.of(topic)).allTopicNames()
                                       .get(30, TimeUnit.SECONDS).get(topic);
            List<Object> parts = new ArrayList<>();
            for (TopicPartitionInfo pi : td.partitions()) {
                Map<String, Object> m = new TreeMap<>();
                m.put("partition", pi.partition());
                m.put("leader", node(pi.leader()));
                List<Object> replicas = new ArrayList<>();
                for (Node r : pi.replicas()) replicas.add(node(r));
                m.put("replicas", replicas);
                parts.add(m);
            }
            emit("topic", map("name", td.name(), "partitions", parts));

            // -- KafkaProducer with defaults (idempotence on, acks=all) ------
            Properties pp = props(common, "client.id", "kgw-it-java-producer");
            pp.remove(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG);
            pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
            pp.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, "30000");
            pp.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
                for (int i = 0; i < n; i++) {
                    int p = i % partitions;
                    String key = "key-" + i;
                    String value = "java:" + topic + ":value-" + i;
                    // one record per batch: wait for each ack before the next send
                    RecordMetadata md = producer.send(new ProducerRecord<>(topic, p, key, value))
                                                .get(30, TimeUnit.SECONDS);
                    emit("produced", map("partition", md.partition(), "offset", md.offset(),
                                         "key", key, "value", value));
                }
                emit("leaders", map("via", "producer", "nodes", leaders(producer.partitionsFor(topic))));
            }

            // -- listOffsets ---------------------------------------------------
            for (String spec : List.of("earliest", "latest")) {
                Map<TopicPartition, OffsetSpec> req = new HashMap<>();
                for (TopicPartition tp : tps) {
                    req.put(tp, spec.equals("earliest") ? OffsetSpec.earliest() : OffsetSpec.latest());
                }
                Map<TopicPartition, ListOffsetsResult.ListOffsetsResultInfo> res =
                    admin.listOffsets(req).all().get(30, TimeUnit.SECONDS);
                Map<String, Object> offs = new TreeMap<>();
                for (var e : res.entrySet()) offs.put(String.valueOf(e.getKey().partition()), e.getValue().offset());
                emit("offsets", map("spec", spec, "offsets", offs));
            }

            Properties cp = props(common, "client.id", "kgw-it-java-assign");
            cp.remove(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG);
            cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
            cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            cp.put(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, "100");
            cp.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");

            // -- KafkaConsumer: assign + seekToBeginning, then seek ------------
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
                consumer.assign(tps);
                Map<String, Object> begin = new TreeMap<>();
                for (var e : consumer.beginningOffsets(tps).entrySet()) begin.put(String.valueOf(e.getKey().partition()), e.getValue());
                Map<String, Object> end = new TreeMap<>();
                for (var e : consumer.endOffsets(tps).entrySet()) end.put(String.valueOf(e.getKey().partition()), e.getValue());
                emit("consumer_offsets", map("beginning", begin, "end", end));
                consumer.seekToBeginning(tps);
                pollRecords(consumer, n, "assign");
                TopicPartition last = tps.get(tps.size() - 1);
                consumer.assign(List.of(last));
                consumer.seek(last, 1);
                pollRecords(consumer, perPartition - 1, "seek");
                emit("leaders", map("via", "consumer", "nodes", leaders(consumer.partitionsFor(topic))));
            }

            // -- KafkaConsumer in a group (classic protocol, short timeouts) ---
            Properties gp = new Properties();
            gp.putAll(cp);
            gp.put(ConsumerConfig.CLIENT_ID_CONFIG, "kgw-it-java-group");
            gp.put(ConsumerConfig.GROUP_ID_CONFIG, group);
            gp.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
            gp.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, "6000");
            gp.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, "1000");
            gp.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG, "10000");
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(gp)) {
                consumer.subscribe(List.of(topic));
                pollRecords(consumer, n, "group");
                List<Object> assigned = new ArrayList<>();
                for (TopicPartition tp : consumer.assignment()) assigned.add(tp.partition());
                Collections.sort((List) assigned);
                consumer.commitSync(Duration.ofSeconds(30));
                Map<String, Object> committed = new TreeMap<>();
                for (var e : consumer.committed(Set.copyOf(tps), Duration.ofSeconds(30)).entrySet()) {
                    OffsetAndMetadata om = e.getValue();
                    committed.put(String.valueOf(e.getKey().partition()), om == null ? null : om.offset());
                }
                emit("group", map("assignment", assigned, "committed", committed));
            }
        }
    }

    static void pollRecords(KafkaConsumer<String, String> consumer, int want, String via) {
        int got = 0;
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        while (got < want && System.currentTimeMillis() < deadline) {
            for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                emit("record", map("via", via, "partition", r.partition(), "offset", r.offset(),
                                   "key", r.key(), "value", r.value()));
                got++;
            }
        }
        emit("polled", map("via", via, "count", got));
    }

    static List<Object> leaders(List<PartitionInfo> infos) {
        List<Object> out = new ArrayList<>();
        for (PartitionInfo pi : infos) out.add(node(pi.leader()));
        return out;
    }

    static Map<String, Object> node(Node n) {
        if (n == null) return null;
        return map("id", n.id(), "host", n.host(), "port", n.port());
    }

    static Properties props(Properties base, String k, String v) {
        Properties p = new Properties();
        p.putAll(base);
        p.put(k, v);
        return p;
    }

    static Map<String, Object> map(Object... kv) {
        Map<String, Object> m = new TreeMap<>();
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], kv[i + 1]);
        return m;
    }

    // -- minimal JSON output ------------------------------------------------
    static synchronized void emit(String event, Map<String, Object> fields) {
        Map<String, Object> m = new TreeMap<>(fields);
        m.put("event", event);
        StringBuilder sb = new StringBuilder();
        json(sb, m);
        System.out.println(sb);
        System.out.flush();
    }

    @SuppressWarnings("unchecked")
    static void json(StringBuilder sb, Object o) {
        if (o == null) {
            sb.append("null");
        } else if (o instanceof Number || o instanceof Boolean) {
            sb.append(o);
        } else if (o instanceof Map) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<String, Object> e : ((Map<String, Object>) o).entrySet()) {
                if (!first) sb.append(',');
                first = false;
                json(sb, e.getKey());
                sb.append(':');
                json(sb, e.getValue());
            }
            sb.append('}');
        } else if (o instanceof List) {
            sb.append('[');
            boolean first = true;
            for (Object x : (List<Object>) o) {
                if (!first) sb.append(',');
                first = false;
                json(sb, x);
            }
            sb.append(']');
        } else {
            String s = o.toString();
            sb.append('"');
            for (char c : s.toCharArray()) {
                switch (c) {
                    case '"': sb.append("\\\""); break;
                    case '\\': sb.append("\\\\"); break;
                    case '\n': sb.append("\\n"); break;
                    case '\r': sb.append("\\r"); break;
                    case '\t': sb.append("\\t"); break;
                    default:
                        if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                        else sb.append(c);
                }
            }
            sb.append('"');
        }
    }
}
