"""Several gateways, one state (#14): kgw instances with ``metadata.backend: kafka`` in front of
real Kafka share ACLs, SCRAM users and BROKER configs through the metadata topic.

Every check is over the wire with a client: a request denied at one gateway, an ACL created
through another, the same request allowed - no gateway internals are read except the applied
offset on ``/metrics`` (to know every instance has caught up before comparing them).
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from authz.credentials import PlainCredential
from tests.support.acls import kgw_command
from tests.support.cluster import gateway_env
from tests.support.processes import ProcessError
from tests.support.ports import HOST, free_port, free_port_base

pytestmark = pytest.mark.kafka

T = 30
PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}
COMMON = {"socket.timeout.ms": 10000, "broker.address.family": "v4", "reconnect.backoff.max.ms": 500}


def shared_config(md_topic: str, node_ids: tuple[int, ...], **metadata) -> dict:
    """A SASL listener (PLAIN and SCRAM), admin a super user, the shared metadata backend."""
    return {
        "listeners": [{"name": "SASL", "security_protocol": "SASL_PLAINTEXT", "host": HOST, "port": free_port(),
                       "advertised_host": HOST, "broker_port_base": free_port_base(node_ids),
                       "sasl": {"mechanisms": ["PLAIN", "SCRAM-SHA-256"]}}],
        "users": {"plain": [{"name": u, "password_hash": PlainCredential.hash_password(p, iterations=20_000)}
                            for u, p in PASSWORDS.items()]},
        "authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer",
                       "config": {"super.users": "User:admin"}},
        "metadata": {"backend": "kafka", "topic": md_topic, **metadata},
    }


def start_shared(kafka_gateway, upstream, count: int, md_topic: str, **metadata) -> list:
    gateways = []
    for i in range(count):
        name = f"kgw-{chr(65 + i)}-{uuid.uuid4().hex[:4]}"
        gw = kafka_gateway(shared_config(md_topic, upstream.node_ids, **metadata), upstream=upstream, name=name)
        gateways.append(gw)
    return gateways


_CLIENTS: dict[tuple, AdminClient] = {}


@pytest.fixture(autouse=True)
def _forget_clients():
    yield
    _CLIENTS.clear()


def admin(gw, user: str = "admin", mechanism: str = "PLAIN", password: str | None = None) -> AdminClient:
    """One client per gateway and user, kept alive (a client destroyed early fails its futures)."""
    key = (gw.bootstrap, user, mechanism, password)
    if key not in _CLIENTS:
        _CLIENTS[key] = _new_admin(gw, user, mechanism, password)
    return _CLIENTS[key]


def _new_admin(gw, user: str, mechanism: str, password: str | None) -> AdminClient:
    return AdminClient({"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                        "sasl.mechanism": mechanism, "sasl.username": user,
                        "sasl.password": password if password is not None else PASSWORDS[user], **COMMON})


def can_describe(gw, topic: str, user: str = "alice") -> bool:
    md = admin(gw, user).list_topics(topic=topic, timeout=T)
    err = md.topics[topic].error
    if err is None:
        return True
    assert err.code() == 29, err  # TOPIC_AUTHORIZATION_FAILED, nothing else
    return False


def until(predicate, what: str, timeout: float = T):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"


def applied_offset(gw) -> int:
    text = urllib.request.urlopen(f"{gw.admin_url}/metrics", timeout=5).read().decode()
    return int(float(re.search(r"^kgw_metadata_applied_offset (\S+)$", text, re.M).group(1)))


def readyz(gw) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{gw.admin_url}/readyz", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def read_acl(topic: str, user: str = "alice", op=AclOperation.DESCRIBE) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, f"User:{user}", "*", op,
                      AclPermissionType.ALLOW)


def acls_at(gw) -> set[tuple]:
    found = admin(gw).describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                     AclOperation.ANY, AclPermissionType.ANY)).result(timeout=T)
    return {(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type)
            for b in found}


def make_topic(gw, name: str, replication: int = 1) -> None:
    admin(gw).create_topics([NewTopic(name, 1, replication)], operation_timeout=15)[name].result(timeout=T)


def test_acl_scram_user_and_broker_config_written_at_one_gateway_hold_at_the_others(kafka, kafka_gateway,
                                                                                      topic_name):
    a, b, c = start_shared(kafka_gateway, kafka, 3, f"__kgw_md_{topic_name}")
    make_topic(a, topic_name)
    assert not any(can_describe(gw, topic_name) for gw in (a, b, c))
    admin(a).create_acls([read_acl(topic_name)])[read_acl(topic_name)].result(timeout=T)
    # acknowledged at A: A enforces it at once (read your own writes); B and C follow the log
    assert can_describe(a, topic_name)
    until(lambda: can_describe(b, topic_name) and can_describe(c, topic_name), "the ACL at B and C")

    # a SCRAM user created through B logs in at C
    password = "bob-" + uuid.uuid4().hex
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    futures = admin(b).alter_user_scram_credentials([UserScramCredentialUpsertion("bob", info, password.encode())])
    for f in futures.values():
        f.result(timeout=T)
    until(lambda: applied_offset(c) >= applied_offset(b), "C to apply B's write")
    assert admin(c, "bob", "SCRAM-SHA-256", password).list_topics(timeout=T).brokers

    # a BROKER config altered through C is described identically at A
    key = "listener.name.sasl.max.connections"
    node = str(kafka.node_ids[0])  # a node id kgw advertises: the scope every gateway shares
    resource = ConfigResource("BROKER", node, incremental_configs=[
        ConfigEntry(key, "777", incremental_operation=AlterConfigOpType.SET)])
    admin(c).incremental_alter_configs([resource])[resource].result(timeout=T)
    until(lambda: applied_offset(a) >= applied_offset(c), "A to apply C's write")
    (described,) = admin(a).describe_configs([ConfigResource("BROKER", node)]).values()
    entry = described.result(timeout=T)[key]
    assert (entry.value, entry.source) == ("777", 2)  # DYNAMIC_BROKER_CONFIG

    # a revoked ACL stops the next request at every gateway
    revoke = AclBindingFilter(ResourceType.TOPIC, topic_name, ResourcePatternType.LITERAL, None, None,
                              AclOperation.ANY, AclPermissionType.ANY)
    assert len(admin(b).delete_acls([revoke])[revoke].result(timeout=T)) == 1
    assert not can_describe(b, topic_name)
    until(lambda: not can_describe(a, topic_name) and not can_describe(c, topic_name), "the revocation at A and C")
    for gw in (a, b, c):
        assert readyz(gw)[0] == 200 and "metadata ready" in readyz(gw)[1]

    # the command-line tools work on the shared log while the gateways run
    kgw = [*kgw_command()]
    added = subprocess.run([*kgw, "acls", "add", "--config", str(a.config_path), "--principal", "User:alice",
                            "--operation", "DESCRIBE", "--topic", topic_name], env=gateway_env(),
                           capture_output=True, text=True, timeout=120)
    assert added.returncode == 0, added.stderr
    until(lambda: all(can_describe(gw, topic_name) for gw in (a, b, c)), "the ACL kgw acls added, everywhere")
    exported = subprocess.run([*kgw, "metadata", "export", "--config", str(c.config_path)], env=gateway_env(),
                              capture_output=True, text=True, timeout=120)
    assert exported.returncode == 0, exported.stderr
    doc = json.loads(exported.stdout)
    assert [(e["resourceName"], e["principal"], e["operation"]) for e in doc["acls"]] == [
        (topic_name, "User:alice", "DESCRIBE")]
    assert [e["name"] for e in doc["scramCredentials"]] == ["bob"]
    assert {(e["name"], e["value"]) for e in doc["configs"]} == {(key, "777")}


def test_concurrent_conflicting_writes_converge_to_one_state(kafka, kafka_gateway, topic_name):
    """A and B create and delete the same ACLs at once; afterwards every instance, and a fresh
    one replaying the log, holds the same ACLs."""
    a, b = start_shared(kafka_gateway, kafka, 2, f"__kgw_md_{topic_name}")
    names = [f"{topic_name}-{i}" for i in range(20)]
    errors: list[str] = []

    def writer(gw, seed: int) -> None:
        client = admin(gw)
        try:
            for i, name in enumerate(names):
                acl = read_acl(name)
                client.create_acls([acl])[acl].result(timeout=T)
                if (i + seed) % 3 == 0:
                    f = AclBindingFilter(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, None, None,
                                         AclOperation.ANY, AclPermissionType.ANY)
                    client.delete_acls([f])[f].result(timeout=T)
        except KafkaException as e:
            errors.append(str(e))

    threads = [threading.Thread(target=writer, args=(gw, seed)) for seed, gw in enumerate((a, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    until(lambda: applied_offset(a) == applied_offset(b), "A and B at the same offset")
    state = acls_at(a)
    assert state == acls_at(b)
    assert len({row[1] for row in state}) == len(state)  # no ACL twice, though both created each
    c = start_shared(kafka_gateway, kafka, 1, f"__kgw_md_{topic_name}")[0]
    assert acls_at(c) == state


def test_snapshots_bound_the_log_and_a_new_instance_starts_from_one(kafka, kafka_gateway, topic_name):
    """With a snapshot every few records, the records below the previous snapshot are deleted
    from the log topic (its retention is bounded by kgw), and a gateway started afterwards
    holds exactly the state of the one that wrote them."""
    md_topic = f"__kgw_md_{topic_name}"
    (a,) = start_shared(kafka_gateway, kafka, 1, md_topic, snapshot_every_records=5)
    client = admin(a)
    for probe in (f"{topic_name}-3", f"{topic_name}-29"):
        make_topic(a, probe)
    for i in range(30):
        acl = read_acl(f"{topic_name}-{i}")
        client.create_acls([acl])[acl].result(timeout=T)
    revoke = AclBindingFilter(ResourceType.TOPIC, f"{topic_name}-3", ResourcePatternType.LITERAL, None, None,
                              AclOperation.ANY, AclPermissionType.ANY)
    assert len(client.delete_acls([revoke])[revoke].result(timeout=T)) == 1

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"probe-{topic_name}"})
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(md_topic, 0), timeout=T)
        snap_low, snap_high = consumer.get_watermark_offsets(TopicPartition(f"{md_topic}_snapshots", 0), timeout=T)
    finally:
        consumer.close()
    assert high == 31 and low >= 20, (low, high)  # the head of the log is gone
    assert snap_high > 0

    (b,) = start_shared(kafka_gateway, kafka, 1, md_topic, snapshot_every_records=5)
    assert applied_offset(b) == applied_offset(a) == 30
    assert acls_at(b) == acls_at(a) and len(acls_at(b)) == 29
    assert can_describe(b, f"{topic_name}-29") and not can_describe(b, f"{topic_name}-3")


def test_a_metadata_topic_whose_shape_breaks_order_or_durability_stops_the_start(kafka, kafka_gateway, topic_name,
                                                                                  tmp_path):
    md_topic = f"__kgw_md_{topic_name}"
    direct = AdminClient({"bootstrap.servers": kafka.bootstrap, **COMMON})
    direct.create_topics([NewTopic(md_topic, 3, 1, config={"cleanup.policy": "compact"})])[md_topic].result(timeout=T)
    with pytest.raises(ProcessError):
        kafka_gateway(shared_config(md_topic, kafka.node_ids), upstream=kafka, name="kgw-shape")
    stderr = (tmp_path / "kgw-shape" / "kgw-shape.stderr.log").read_text()
    lines = [line for line in stderr.splitlines() if line.startswith("kgw: cannot run:")]
    assert lines == [f"kgw: cannot run: MetadataTopicShapeError: the metadata topics break ordering or durability: "
                     f"{md_topic} has 3 partitions (one order needs exactly 1); {md_topic} has "
                     f"cleanup.policy=compact, kgw needs delete; {md_topic} has retention.ms=604800000, "
                     f"kgw needs -1"], lines
