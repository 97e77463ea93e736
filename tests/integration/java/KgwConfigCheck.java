import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.config.ConfigResource;

/**
 * Config APIs through kgw with the Java AdminClient (kafka-clients 3.9.1).
 *
 * args: bootstrap brokerId topic
 * Prints one JSON object per line: {"event": ..., ...}; the test asserts on them.
 */
public class KgwConfigCheck {
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

    static void emit(String event, String body) {
        System.out.println("{\"event\":" + q(event) + (body.isEmpty() ? "" : "," + body) + "}");
        System.out.flush();
    }

    static String entry(ConfigEntry e) {
        StringBuilder syn = new StringBuilder("[");
        for (ConfigEntry.ConfigSynonym s : e.synonyms()) {
            if (syn.length() > 1) syn.append(',');
            syn.append("{\"name\":").append(q(s.name())).append(",\"value\":").append(q(s.value()))
               .append(",\"source\":").append(q(s.source().name())).append('}');
        }
        syn.append(']');
        return "\"name\":" + q(e.name()) + ",\"value\":" + q(e.value()) + ",\"source\":" + q(e.source().name())
            + ",\"read_only\":" + e.isReadOnly() + ",\"sensitive\":" + e.isSensitive()
            + ",\"type\":" + q(e.type().name()) + ",\"doc\":" + q(e.documentation()) + ",\"synonyms\":" + syn;
    }

    static Config describe(Admin admin, ConfigResource r, boolean extras) throws Exception {
        DescribeConfigsOptions o = new DescribeConfigsOptions().includeSynonyms(extras).includeDocumentation(extras);
        return admin.describeConfigs(List.of(r), o).all().get().get(r);
    }

    static String error(Throwable t) {
        Throwable c = t instanceof ExecutionException && t.getCause() != null ? t.getCause() : t;
        return "\"error\":" + q(c.getClass().getSimpleName()) + ",\"message\":" + q(c.getMessage());
    }

    static void alter(Admin admin, String label, ConfigResource r, Collection<AlterConfigOp> ops, boolean validateOnly) {
        try {
            admin.incrementalAlterConfigs(Map.of(r, ops), new AlterConfigsOptions().validateOnly(validateOnly)).all().get();
            emit("altered", "\"label\":" + q(label) + ",\"ok\":true");
        } catch (Exception e) {
            emit("altered", "\"label\":" + q(label) + ",\"ok\":false," + error(e));
        }
    }

    static AlterConfigOp op(String name, String value, AlterConfigOp.OpType type) {
        return new AlterConfigOp(new ConfigEntry(name, value), type);
    }

    static String value(Config c, String name) {
        ConfigEntry e = c.get(name);
        return e == null ? null : e.value();
    }

    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "15000");
        p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "30000");
        String brokerId = args[1], topic = args[2];
        ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, brokerId);
        ConfigResource defaults = new ConfigResource(ConfigResource.Type.BROKER, "");
        ConfigResource topicRes = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        try (Admin admin = Admin.create(p)) {
            for (ConfigEntry e : describe(admin, broker, true).entries()) emit("broker_entry", entry(e));

            alter(admin, "set", broker, List.of(
                op("allow.everyone.if.no.acl.found", "true", AlterConfigOp.OpType.SET),
                op("listener.name.external.max.connections", "321", AlterConfigOp.OpType.SET)), false);
            alter(admin, "append", broker, List.of(op("super.users", "User:java1;User:java2", AlterConfigOp.OpType.APPEND)), false);
            alter(admin, "subtract", broker, List.of(op("super.users", "User:java1", AlterConfigOp.OpType.SUBTRACT)), false);
            alter(admin, "default", defaults, List.of(op("audit.log.level", "WARNING", AlterConfigOp.OpType.SET)), false);
            Config after = describe(admin, broker, true);
            emit("after_alter", "\"allow\":" + q(value(after, "allow.everyone.if.no.acl.found"))
                + ",\"super_users\":" + q(value(after, "super.users"))
                + ",\"max_conn\":" + q(value(after, "listener.name.external.max.connections"))
                + ",\"audit\":{" + entry(after.get("audit.log.level")) + "}");

            alter(admin, "delete", broker, List.of(op("listener.name.external.max.connections", null, AlterConfigOp.OpType.DELETE)), false);
            alter(admin, "validate_only", broker, List.of(op("allow.everyone.if.no.acl.found", "false", AlterConfigOp.OpType.SET)), true);
            alter(admin, "read_only", broker, List.of(op("listeners", "X://h:1", AlterConfigOp.OpType.SET)), false);
            alter(admin, "bad_type", broker, List.of(op("allow.everyone.if.no.acl.found", "perhaps", AlterConfigOp.OpType.SET)), false);
            alter(admin, "validate_only_bad", broker, List.of(op("no.such.key", "1", AlterConfigOp.OpType.SET)), true);
            Config last = describe(admin, broker, false);
            emit("final", "\"allow\":" + q(value(last, "allow.everyone.if.no.acl.found"))
                + ",\"max_conn\":" + q(value(last, "listener.name.external.max.connections"))
                + ",\"max_conn_source\":" + q(last.get("listener.name.external.max.connections").source().name()));

            // TOPIC resources go upstream
            try {
                admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            } catch (ExecutionException e) {
                emit("create_topic", error(e));
            }
            try {
                Config t = describe(admin, topicRes, false);
                emit("topic_described", "\"count\":" + t.entries().size());
            } catch (Exception e) {
                emit("topic_described", error(e));
            }
            alter(admin, "topic_set", topicRes, List.of(op("retention.ms", "3600000", AlterConfigOp.OpType.SET)), false);
            try {
                @SuppressWarnings("deprecation")
                AlterConfigsResult r = admin.alterConfigs(Map.of(topicRes, new Config(List.of(new ConfigEntry("retention.ms", "7200000")))));
                r.all().get();
                emit("legacy_topic", "\"ok\":true");
            } catch (Exception e) {
                emit("legacy_topic", "\"ok\":false," + error(e));
            }
        } catch (Exception e) {
            emit("error", error(e));
            System.exit(1);
        }
        emit("done", "");
    }
}
