"""Kafka's own command-line tools, from the resolved Kafka jars, through kgw in front of Apache
Kafka: ``--bootstrap-server`` is kgw's SASL listener and ``--command-config`` carries the
SASL/PLAIN credentials, as an operator would run them.  Each asserts the tool's exit status
and its output."""

from __future__ import annotations

import json
import re
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from authz.credentials import PlainCredential
from protocol.apis.api_versions import VersionRange, advertised_versions
from protocol.apis.registry import LOCAL_KEYS, REGISTRY
from tests.support.cluster import base_gateway_config, launch_gateway
from tests.support.kafka import run_tool

pytestmark = pytest.mark.kafka

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}
TOPICS = "org.apache.kafka.tools.TopicCommand"
ACLS = "org.apache.kafka.tools.AclCommand"
CONFIGS = "kafka.admin.ConfigCommand"
GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
API_VERSIONS = "org.apache.kafka.tools.BrokerApiVersionsCommand"


class Tools:
    def __init__(self, gw, work: Path, kafka) -> None:
        self.gw, self.work, self.kafka = gw, work, kafka
        self.audit_topic = ""
        self.bootstrap = gw.listeners["SASL"]
        self.props = {user: self._props(user) for user in PASSWORDS}

    def _props(self, user: str) -> Path:
        path = self.work / f"{user}.properties"
        path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                        f'username="{user}" password="{PASSWORDS[user]}";\n')
        return path

    def run(self, main: str, *args: str, user: str = "admin", config_flag: str = "--command-config",
            input: str | None = None, ok: bool = True):
        done = run_tool(main, "--bootstrap-server", self.bootstrap, config_flag, str(self.props[user]), *args,
                        work=self.work, input=input)
        if ok:
            assert done.returncode == 0, f"{main} {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        return done

    def direct(self, main: str, *args: str):
        """The same tool straight at the Kafka node (no kgw, no credentials)."""
        return run_tool(main, "--bootstrap-server", self.kafka.bootstrap, *args, work=self.work)


@pytest.fixture(scope="module")
def tools(_kafka_session, tmp_path_factory) -> Tools:
    work = tmp_path_factory.mktemp("kgw-tools")
    config = base_gateway_config(_kafka_session.bootstrap, work / "metadata", _kafka_session.node_ids)
    listener = config["listeners"][0]
    listener.update(name="SASL", security_protocol="SASL_PLAINTEXT", sasl={"mechanisms": ["PLAIN"]})
    config["users"] = {"plain": [{"name": u, "password_hash": PlainCredential.hash_password(p, iterations=20_000)}
                                 for u, p in PASSWORDS.items()]}
    config["authorizer"] = {"class_name": "authz.standard_authorizer:StandardAuthorizer",
                            "config": {"super.users": "User:admin"}}
    config["alter_configs_policy"] = {"rules": {"topic": {"bounds": {"retention.ms": {"min": 60000}}}}}
    audit_topic = _name("kgw-tools-audit")
    config["audit"] = {"publish": True, "topic": audit_topic, "linger_ms": 100}
    gw = launch_gateway("kgw-tools", config, work, node_ids=_kafka_session.node_ids)
    try:
        tools = Tools(gw, work, _kafka_session)
        tools.audit_topic = audit_topic
        yield tools
    finally:
        gw.stop()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_kafka_topics_create_describe_list_delete(tools):
    topic = _name("tools-topics")
    out = tools.run(TOPICS, "--create", "--topic", topic, "--partitions", "3", "--replication-factor", "1").stdout
    assert f"Created topic {topic}." in out
    described = tools.run(TOPICS, "--describe", "--topic", topic).stdout
    assert f"Topic: {topic}" in described and "PartitionCount: 3" in described
    assert len(re.findall(rf"Topic: {re.escape(topic)}\tPartition: \d", described)) == 3
    assert topic in tools.run(TOPICS, "--list").stdout.split()
    tools.run(TOPICS, "--delete", "--topic", topic)
    assert topic not in tools.direct(TOPICS, "--list").stdout.split()  # gone from Kafka itself


def test_kafka_acls_land_in_kgw_and_let_alice_produce_and_consume(tools):
    prefix = _name("tools-acl")
    topic, group = f"{prefix}-orders", _name("tools-group")
    tools.run(TOPICS, "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1")
    # alice cannot read before the ACLs exist
    denied = tools.run(CONSUMER, "--topic", topic, "--from-beginning", "--max-messages", "1", "--timeout-ms", "8000",
                       "--group", group, user="alice", ok=False)
    assert "AuthorizationException" in denied.stderr + denied.stdout, denied
    tools.run(ACLS, "--add", "--allow-principal", "User:alice", "--operation", "Write", "--operation", "Read",
              "--operation", "Describe", "--topic", prefix, "--resource-pattern-type", "prefixed")
    tools.run(ACLS, "--add", "--allow-principal", "User:alice", "--operation", "Read", "--group", "*")
    listed = tools.run(ACLS, "--list", "--topic", prefix, "--resource-pattern-type", "prefixed").stdout
    assert "principal=User:alice" in listed and "operation=WRITE" in listed and "patternType=PREFIXED" in listed
    assert "name=*" in tools.run(ACLS, "--list", "--group", "*").stdout
    # the ACLs are kgw's: Kafka itself has no authorizer and none of them
    direct = tools.direct(ACLS, "--list")
    assert direct.returncode != 0 and "SecurityDisabledException" in direct.stderr + direct.stdout, direct
    produced = tools.run(PRODUCER, "--topic", topic, user="alice",
                         input="one\ntwo\nthree\n")
    assert produced.returncode == 0
    consumed = tools.run(CONSUMER, "--topic", topic, "--from-beginning", "--max-messages", "3", "--timeout-ms", "20000",
                         "--group", group, user="alice")
    assert consumed.stdout.split() == ["one", "two", "three"]
    described = tools.run(GROUPS, "--describe", "--group", group).stdout
    assert topic in described and group in described
    reset = tools.run(GROUPS, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest", "--execute").stdout
    assert re.search(rf"{re.escape(group)}\s+{re.escape(topic)}\s+0\s+0", reset), reset
    tools.run(ACLS, "--remove", "--force", "--allow-principal", "User:alice", "--operation", "Write", "--topic", prefix,
              "--resource-pattern-type", "prefixed")
    after = tools.run(ACLS, "--list", "--topic", prefix, "--resource-pattern-type", "prefixed").stdout
    assert "operation=WRITE" not in after and "operation=READ" in after


def test_kafka_configs_kgw_broker_configs_and_a_forwarded_topic_config(tools):
    described = tools.run(CONFIGS, "--describe", "--entity-type", "brokers", "--entity-default").stdout
    assert "Default configs for brokers in the cluster are:" in described
    tools.run(CONFIGS, "--alter", "--entity-type", "brokers", "--entity-default",
              "--add-config", "allow.everyone.if.no.acl.found=false")
    assert "allow.everyone.if.no.acl.found=false" in tools.run(
        CONFIGS, "--describe", "--entity-type", "brokers", "--entity-default").stdout
    topic = _name("tools-configs")
    tools.run(TOPICS, "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1")
    tools.run(CONFIGS, "--alter", "--entity-type", "topics", "--entity-name", topic, "--add-config", "retention.ms=3600000")
    direct = tools.direct(CONFIGS, "--describe", "--entity-type", "topics", "--entity-name", topic)
    assert "retention.ms=3600000" in direct.stdout, direct  # forwarded to Kafka and applied there
    refused = tools.run(CONFIGS, "--alter", "--entity-type", "topics", "--entity-name", topic,
                        "--add-config", "retention.ms=1000", ok=False)
    assert refused.returncode != 0
    assert "PolicyViolation" in refused.stderr + refused.stdout and "retention.ms" in refused.stderr + refused.stdout


def test_kafka_configs_on_a_broker_id_says_the_resource_is_kgw_and_how_to_reach_the_broker(tools):
    """`--entity-type brokers --entity-name 1` through kgw is kgw's own BROKER resource: a
    broker-only key is refused with a message that says so and how to change the broker."""
    node = str(tools.kafka.node_ids[0])
    refused = tools.run(CONFIGS, "--alter", "--entity-type", "brokers", "--entity-name", node,
                        "--add-config", "log.cleaner.threads=2", ok=False)
    shown = refused.stderr + refused.stdout
    assert refused.returncode != 0
    assert "'log.cleaner.threads'" in shown and "BROKER config resources are the gateway itself" in shown, shown
    assert "kafka-configs --bootstrap-server pointed at the broker itself" in shown, shown
    direct = tools.direct(CONFIGS, "--describe", "--entity-type", "brokers", "--entity-name", node)
    assert "log.cleaner.threads=2" not in direct.stdout  # nothing reached the broker


def test_kafka_broker_api_versions_shows_only_what_kgw_decodes(tools):
    out = tools.run(API_VERSIONS).stdout
    shown = {int(k): (int(lo), int(hi)) for k, lo, hi in re.findall(r"\((\d+)\): (\d+) to (\d+)", out)}
    assert shown, out
    generous = {key: VersionRange(0, 99) for key in range(200)}
    ours = advertised_versions(generous, LOCAL_KEYS, REGISTRY, authorizer=True)
    for key, (lo, hi) in shown.items():
        spec = REGISTRY[key].versions
        assert spec[0] <= lo <= hi <= spec[1], (REGISTRY[key].name, lo, hi, spec)
        assert key in ours
    assert 0 in shown and 1 in shown and 3 in shown


def _audit_events(tools, want, timeout: float = 30.0) -> list[dict]:
    """The audit topic's events (read straight from Kafka) once ``want(events)`` holds."""
    consumer = Consumer({"bootstrap.servers": tools.kafka.bootstrap, "group.id": _name("audit-reader"),
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([tools.audit_topic])
    events: list[dict] = []
    deadline = time.monotonic() + timeout
    try:
        while not want(events) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                events.append(json.loads(message.value()))
    finally:
        consumer.close()
    return events


def test_every_security_change_is_logged_and_audited_with_who_made_it(tools):
    """ACLs, SCRAM credentials, quotas, topic configs and kgw's own BROKER configs changed with
    Kafka's tools through kgw: one `kgw.changes` line each naming the principal, listener,
    client address, request and exact change (never a password), and an audit event
    `"event": "change"` with the same."""
    uid = _name("trail")
    topic = f"{uid}-t"
    tools.run(TOPICS, "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1")
    tools.run(ACLS, "--add", "--allow-principal", f"User:{uid}", "--operation", "Read", "--topic", topic)
    tools.run(ACLS, "--remove", "--force", "--allow-principal", f"User:{uid}", "--operation", "Read", "--topic", topic)
    tools.run(CONFIGS, "--alter", "--entity-type", "users", "--entity-name", uid,
              "--add-config", "SCRAM-SHA-256=[iterations=4096,password=very-secret-pw]")
    # (ConfigCommand refuses a SCRAM credential and a quota in one call)
    tools.run(CONFIGS, "--alter", "--entity-type", "users", "--entity-name", uid, "--add-config", "producer_byte_rate=1048576")
    tools.run(CONFIGS, "--alter", "--entity-type", "topics", "--entity-name", topic, "--add-config", "retention.ms=7200000")
    tools.run(CONFIGS, "--alter", "--entity-type", "brokers", "--entity-default",
              "--add-config", f"listener.name.sasl.max.connections={9000 + len(uid)}")
    acl = f"(principal=User:{uid}, host=*, operation=READ, permissionType=ALLOW)"
    expected = {  # resource -> (operation, change)
        ("CREATE", f"Topic:LITERAL:{topic}", f"created ACL {acl}"),
        ("DELETE", f"Topic:LITERAL:{topic}", f"deleted ACL {acl}"),
        ("ALTER", f"User:LITERAL:{uid}", "upserted SCRAM-SHA-256 credential (4096 iterations)"),
        ("ALTER_CONFIGS", f"ClientQuota:LITERAL:user={uid}", "set producer_byte_rate=1048576"),
        ("ALTER_CONFIGS", f"Topic:LITERAL:{topic}", "set retention.ms=7200000"),
    }
    lines = [line for line in tools.gw.process.stderr_path.read_text().splitlines() if " kgw.changes: " in line]
    for operation, resource, change in expected:
        found = [line for line in lines if f": {change} on {resource} " in line]
        assert found, (operation, resource, change, lines)
        assert f"principal=User:admin operation={operation} listener=SASL client_address=127.0.0.1" in found[0], found
    assert any(f": set listener.name.sasl.max.connections={9000 + len(uid)} on Broker:LITERAL:<default> " in line
               for line in lines), lines
    assert not any("very-secret-pw" in line for line in lines)
    mine = lambda events: [e for e in events if e.get("event") == "change" and uid in (e.get("resource") or "")]  # noqa: E731
    events = mine(_audit_events(tools, lambda ev: len(mine(ev)) >= len(expected)))
    assert {(e["operation"], e["resource"], e["change"]) for e in events} == expected, events
    assert all(e["principal"] == "User:admin" and e["listener"] == "SASL" and e["client_address"] == "127.0.0.1"
               and e["api"] and e["client_id"] and e["allowed"] for e in events), events
