import java.util.*;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.common.acl.*;
import org.apache.kafka.common.resource.*;

/** ACL admin APIs through kgw with the Java AdminClient; prints one JSON line per answer. */
public class KgwAclCheck {
    static String q(String s) { return s == null ? "null" : "\"" + s.replace("\"", "\\\"") + "\""; }

    static String show(AclBinding b) {
        return "{\"type\":" + q(b.pattern().resourceType().name()) + ",\"name\":" + q(b.pattern().name())
            + ",\"pattern\":" + q(b.pattern().patternType().name()) + ",\"principal\":" + q(b.entry().principal())
            + ",\"op\":" + q(b.entry().operation().name()) + ",\"perm\":" + q(b.entry().permissionType().name()) + "}";
    }

    static AclBinding acl(ResourceType t, String name, PatternType p, String principal, AclOperation op) {
        return new AclBinding(new ResourcePattern(t, name, p),
            new AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW));
    }

    static void describe(Admin admin, String label, ResourcePatternFilter f) throws Exception {
        Collection<AclBinding> got = admin.describeAcls(new AclBindingFilter(f, AccessControlEntryFilter.ANY)).values().get();
        List<String> names = new ArrayList<>();
        for (AclBinding b : got) names.add(show(b));
        Collections.sort(names);
        System.out.println("{\"describe\":" + q(label) + ",\"acls\":" + names + "}");
    }

    public static void main(String[] args) throws Exception {
        String prefix = args[1];
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        props.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        try (Admin admin = Admin.create(props)) {
            List<AclBinding> create = List.of(
                acl(ResourceType.TOPIC, prefix + "-orders-eu", PatternType.LITERAL, "User:alice", AclOperation.READ),
                acl(ResourceType.TOPIC, prefix + "-orders-", PatternType.PREFIXED, "User:bob", AclOperation.WRITE),
                acl(ResourceType.GROUP, prefix + "-g", PatternType.LITERAL, "User:alice", AclOperation.READ),
                acl(ResourceType.TOPIC, prefix + "-other", PatternType.LITERAL, "User:carol", AclOperation.DESCRIBE));
            admin.createAcls(create).all().get();
            System.out.println("{\"created\":" + create.size() + "}");
            // invalid creations: Kafka's per-binding errors
            for (AclBinding bad : List.of(
                    acl(ResourceType.CLUSTER, "not-kafka-cluster", PatternType.LITERAL, "User:x", AclOperation.ALTER),
                    acl(ResourceType.TOPIC, prefix + "-t", PatternType.LITERAL, "nocolon", AclOperation.READ))) {
                try {
                    admin.createAcls(List.of(bad)).all().get();
                    System.out.println("{\"invalid\":\"accepted\"}");
                } catch (ExecutionException e) {
                    System.out.println("{\"invalid\":" + q(e.getCause().getClass().getSimpleName()) + "}");
                }
            }
            describe(admin, "match", new ResourcePatternFilter(ResourceType.TOPIC, prefix + "-orders-eu", PatternType.MATCH));
            describe(admin, "literal", new ResourcePatternFilter(ResourceType.TOPIC, prefix + "-orders-eu", PatternType.LITERAL));
            describe(admin, "prefixed", new ResourcePatternFilter(ResourceType.TOPIC, prefix + "-orders-", PatternType.PREFIXED));
            describe(admin, "any-name", new ResourcePatternFilter(ResourceType.ANY, prefix + "-orders-eu", PatternType.ANY));
            describe(admin, "group", new ResourcePatternFilter(ResourceType.GROUP, null, PatternType.ANY));
            Collection<AclBinding> deleted = admin.deleteAcls(List.of(new AclBindingFilter(
                new ResourcePatternFilter(ResourceType.TOPIC, null, PatternType.ANY),
                new AccessControlEntryFilter("User:bob", null, AclOperation.ANY, AclPermissionType.ANY)))).all().get();
            System.out.println("{\"deleted\":" + deleted.size() + "}");
            describe(admin, "after-delete", new ResourcePatternFilter(ResourceType.TOPIC, prefix + "-orders-eu", PatternType.MATCH));
        }
    }
}
