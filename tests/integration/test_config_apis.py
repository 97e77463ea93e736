"""Config APIs through kgw (in front of tansu) with real clients.

* confluent-kafka AdminClient: describe_configs / incremental_alter_configs on the
  gateway's BROKER resource; ``allow.everyone.if.no.acl.found`` and ``super.users``
  changed live, watched on an already open connection; kgw restarted on the same
  metadata directory keeps the change;
* kafka-python admin client: describe, incremental alter, and legacy AlterConfigs
  for a TOPIC, which tansu cannot take (no AlterConfigs): a clear per-resource error;
* the Java AdminClient (tests/integration/java/KgwConfigCheck.java): describeConfigs
  with synonyms and documentation, incrementalAlterConfigs with SET, APPEND,
  SUBTRACT, DELETE and validateOnly, errors, topic configs;
* a secret planted in the authorizer's config never appears in a response, the
  gateway's log or its metrics.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
import warnings
from pathlib import Path

import pytest

from tests.support.acls import add_acl
import trio
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType as KType
    from kafka.admin import NewTopic as KNewTopic

from tests.support.cluster import TANSU_NODE_ID
from tests.support.java import compile_java, java_tools, kafka_classpath
from tests.support.processes import run_tool
from tests.unit.gateway.test_connection import RawClient

pytestmark = pytest.mark.integration

SECRET = "planted-Secret-9f3e1c"
AUTHZ = "tests.support.plugin_authorizer:PluginAuthorizer"  # keeps the ldap.* key below
NODE = str(TANSU_NODE_ID)
T = 20
KTIMEOUTS = dict(request_timeout_ms=15000, reconnect_backoff_max_ms=500, retry_backoff_ms=100)
COMMON = {"socket.timeout.ms": 10000, "reconnect.backoff.max.ms": 500, "broker.address.family": "v4"}
JAVA_DIR = Path(__file__).parent / "java"


def _config(super_users: str = "User:admin") -> dict:
    return {"authorizer": {"class_name": AUTHZ,
                           "config": {"super.users": super_users, "ldap.bind.password": SECRET}}}


def _kgw() -> list[str]:
    script = Path(sys.executable).parent / "kgw"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gateway.cli"]


def seed_acl(data_dir: Path, *resource: str, operation: str) -> None:
    add_acl(data_dir, "--operation", operation, *resource)


def create_upstream_topic(tansu, name: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=tansu.bootstrap, client_id="kgw-it-setup", **KTIMEOUTS)
    try:
        admin.create_topics([KNewTopic(name, 1, 1)], timeout_ms=10000)
    finally:
        admin.close()


def admin_for(gw) -> AdminClient:
    return AdminClient({"bootstrap.servers": gw.bootstrap, **COMMON})


def describe_broker(admin: AdminClient, name: str = NODE) -> dict:
    resource = ConfigResource(ResourceType.BROKER, name)
    return admin.describe_configs([resource], request_timeout=T)[resource].result(timeout=T)


def incremental(admin: AdminClient, name: str, *entries: tuple[str, str | None, AlterConfigOpType]):
    resource = ConfigResource(ResourceType.BROKER, name, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=op) for k, v, op in entries])
    return admin.incremental_alter_configs([resource], request_timeout=T)[resource].result(timeout=T)


async def metadata_error(client: RawClient, topic: str, corr: int) -> int:
    """The topic's error code in a Metadata v12 response on an open connection."""
    await client.send(3, 12, corr, MetadataRequest(topics=(MetadataRequestTopic(name=topic, topic_id=None),),
                                                   allow_auto_topic_creation=False,
                                                   include_topic_authorized_operations=False))
    got, response = await client.receive(3, 12)
    assert got == corr
    (entry,) = response.topics
    return int(entry.error_code)


def assert_no_secret(gw, *texts) -> None:
    for text in texts:
        assert SECRET not in text
    assert SECRET not in gw.stderr_path.read_text(errors="replace")
    assert SECRET not in "\n".join(gw.process.stdout_lines)
    if gw.admin_url:
        with urllib.request.urlopen(gw.admin_url + "/metrics", timeout=10) as page:
            assert SECRET not in page.read().decode()


async def test_live_reconfiguration_watched_on_open_connection_and_kept_on_restart(
        start_gateway, tansu, tmp_path, topic_name):
    create_upstream_topic(tansu, topic_name)
    data_dir = tmp_path / "kgw-cfg" / "metadata"
    seed_acl(data_dir, "--cluster", operation="ALTER_CONFIGS")  # may alter and describe configs, nothing else
    gw = start_gateway(_config(), name="kgw-cfg")
    admin = admin_for(gw)
    run = trio.to_thread.run_sync

    described = await run(describe_broker, admin)
    assert {"listeners", "super.users", "allow.everyone.if.no.acl.found", "authorizer.class.name",
            "socket.request.max.bytes", "metadata.log.dir", "listener.name.external.max.connections",
            "audit.log.level"} <= set(described)
    assert described["super.users"].value == "User:admin"
    assert described["super.users"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert described["listeners"].is_read_only and not described["super.users"].is_read_only
    secret = described["ldap.bind.password"]
    assert secret.is_sensitive and secret.value is None

    client = await RawClient.connect(gw.port)
    try:
        assert await metadata_error(client, topic_name, 1) == 29  # no ACL, allow.everyone false

        await run(incremental, admin, NODE, ("allow.everyone.if.no.acl.found", "true", AlterConfigOpType.SET))
        assert await metadata_error(client, topic_name, 2) == 0  # same connection, decision changed

        await run(incremental, admin, NODE, ("allow.everyone.if.no.acl.found", None, AlterConfigOpType.DELETE))
        assert await metadata_error(client, topic_name, 3) == 29

        await run(incremental, admin, NODE, ("super.users", "User:ANONYMOUS", AlterConfigOpType.APPEND))
        assert await metadata_error(client, topic_name, 4) == 0  # a super user now
    finally:
        await client.stream.aclose()
    described = await run(describe_broker, admin)
    assert described["super.users"].value == "User:admin;User:ANONYMOUS"
    assert described["super.users"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert described["allow.everyone.if.no.acl.found"].source == ConfigSource.DEFAULT_CONFIG.value
    assert_no_secret(gw, repr({k: (v.value, v.synonyms) for k, v in described.items()}))

    # restart on the same metadata directory (new ports): the override is back before the first request
    gw.stop()
    gw2 = start_gateway(_config(), name="kgw-cfg")
    client = await RawClient.connect(gw2.port)
    try:
        assert await metadata_error(client, topic_name, 1) == 0
    finally:
        await client.stream.aclose()
    admin2 = admin_for(gw2)
    described = await run(describe_broker, admin2)
    assert described["super.users"].value == "User:admin;User:ANONYMOUS"
    assert described["super.users"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    await run(incremental, admin2, NODE, ("super.users", "User:ANONYMOUS", AlterConfigOpType.SUBTRACT))
    client = await RawClient.connect(gw2.port)
    try:
        assert await metadata_error(client, topic_name, 1) == 29
    finally:
        await client.stream.aclose()
    assert_no_secret(gw2)


def test_confluent_errors_validate_only_and_topics(start_gateway, tansu, topic_name):
    create_upstream_topic(tansu, topic_name)
    gw = start_gateway(_config("User:ANONYMOUS"), name="kgw-cfg-ck")
    admin = admin_for(gw)
    broker = ConfigResource(ResourceType.BROKER, NODE, incremental_configs=[
        ConfigEntry("listeners", "X://h:1", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception) as err:
        admin.incremental_alter_configs([broker], request_timeout=T)[broker].result(timeout=T)
    assert "read-only" in str(err.value)
    resource = ConfigResource(ResourceType.BROKER, NODE, incremental_configs=[
        ConfigEntry("audit.log.level", "DEBUG", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource], validate_only=True, request_timeout=T)[resource].result(timeout=T)
    assert describe_broker(admin)["audit.log.level"].value == "INFO"  # validate_only changed nothing

    topic = ConfigResource(ResourceType.TOPIC, topic_name)
    configs = admin.describe_configs([topic], request_timeout=T)[topic].result(timeout=T)
    assert isinstance(configs, dict)
    alter = ConfigResource(ResourceType.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([alter], request_timeout=T)[alter].result(timeout=T)
    assert_no_secret(gw)


def test_kafka_python_admin_and_missing_upstream_alter_configs(start_gateway, tansu, topic_name):
    create_upstream_topic(tansu, topic_name)
    gw = start_gateway(_config("User:ANONYMOUS"), name="kgw-cfg-kp")
    admin = KafkaAdminClient(bootstrap_servers=gw.bootstrap, client_id="kgw-it-configs", **KTIMEOUTS)
    try:
        described = admin.describe_configs([KConfigResource(KType.BROKER, NODE)], include_synonyms=True,
                                           config_filter="all")
        broker = described["broker"][NODE]
        assert broker["super.users"]["value"] == "User:ANONYMOUS"
        assert broker["ldap.bind.password"]["value"] is None and broker["ldap.bind.password"]["is_sensitive"]
        assert SECRET not in repr(described)

        result = admin.alter_configs([KConfigResource(KType.BROKER, NODE, {"audit.log.level": "ERROR"})],
                                     incremental=True)
        assert SECRET not in repr(result)
        after = admin.describe_configs([KConfigResource(KType.BROKER, NODE, ["audit.log.level"])])
        entry = after["broker"][NODE]["audit.log.level"]
        assert entry["value"] == "ERROR" and entry["config_source"] == "DYNAMIC_BROKER_CONFIG"

        topic = admin.describe_configs([KConfigResource(KType.TOPIC, topic_name)], config_filter="all")
        assert topic_name in topic["topic"]

        # tansu has no AlterConfigs (33): kgw answers the TOPIC resource with a clear error, no hang
        legacy = admin.alter_configs([KConfigResource(KType.TOPIC, topic_name, {"retention.ms": "7200000"})],
                                     incremental=False, raise_on_unknown=False)
        text = repr(legacy)
        assert "AlterConfigs" in text and "does not support" in text, text
    finally:
        admin.close()
    assert_no_secret(gw)


@pytest.mark.java
@pytest.mark.skipif(java_tools() is None, reason="javac/java not on PATH")
def test_java_admin_client(start_gateway, tansu, topic_name, tmp_path):
    gw = start_gateway(_config("User:ANONYMOUS"), name="kgw-cfg-java")
    cp = kafka_classpath()
    out = compile_java([JAVA_DIR / "KgwConfigCheck.java"], tmp_path / "classes", cp)
    java = java_tools()[1]  # type: ignore[index]
    proc = run_tool([java, "-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                     "-cp", os.pathsep.join([str(out), *map(str, cp)]), "KgwConfigCheck",
                     gw.bootstrap, NODE, topic_name], timeout=170, check=False)
    stdout = proc.stdout.decode("utf-8", "replace")
    stderr = proc.stderr.decode("utf-8", "replace")
    context = f"\n--- stdout ---\n{stdout[-6000:]}\n--- stderr ---\n{stderr[-4000:]}"
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0 and events and events[-1]["event"] == "done", context
    entries = {e["name"]: e for e in events if e["event"] == "broker_entry"}
    su = entries["super.users"]
    assert su["value"] == "User:ANONYMOUS" and su["source"] == "STATIC_BROKER_CONFIG" and su["type"] == "LIST", context
    assert su["doc"] and [s["source"] for s in su["synonyms"]] == ["STATIC_BROKER_CONFIG", "DEFAULT_CONFIG"]
    assert entries["listeners"]["read_only"] is True
    assert entries["ldap.bind.password"]["sensitive"] is True and entries["ldap.bind.password"]["value"] is None
    altered = {e["label"]: e for e in events if e["event"] == "altered"}
    for label in ("set", "append", "subtract", "default", "delete", "validate_only", "topic_set"):
        assert altered[label]["ok"], (label, context)
    assert altered["read_only"]["error"] == "InvalidConfigurationException"
    assert "read-only" in altered["read_only"]["message"]
    assert altered["bad_type"]["error"] == "InvalidConfigurationException"
    assert altered["validate_only_bad"]["error"] == "InvalidConfigurationException"
    after = next(e for e in events if e["event"] == "after_alter")
    assert after["allow"] == "true" and after["max_conn"] == "321"
    assert after["super_users"] == "User:ANONYMOUS;User:java2"
    assert after["audit"]["value"] == "WARNING" and after["audit"]["source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"
    final = next(e for e in events if e["event"] == "final")
    assert final["allow"] == "true"  # validate_only did not change it
    assert final["max_conn"] == "10000" and final["max_conn_source"] == "DEFAULT_CONFIG"
    assert next(e for e in events if e["event"] == "topic_described").get("count", 0) >= 0
    legacy = next(e for e in events if e["event"] == "legacy_topic")
    assert legacy["ok"] is False and legacy["error"] == "UnsupportedVersionException"
    assert "AlterConfigs" in legacy["message"], context
    assert SECRET not in stdout + stderr
    assert_no_secret(gw)
