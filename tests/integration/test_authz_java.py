"""The Java client (kafka-clients 3.9.1) under kgw's authorization: an idempotent producer
(the default), a transactional producer and a consumer group, each allowed and denied."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from tests.support.acls import seed_acls
from tests.support.java import compile_java, java_tools, kafka_classpath
from tests.support.processes import run_tool

pytestmark = [pytest.mark.integration, pytest.mark.java]

AUTHORIZER = {"authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer"}}


@pytest.fixture(scope="module")
def java_authz(tmp_path_factory) -> list[str]:
    assert java_tools() is not None, "javac/java are required for the java tests"
    cp = kafka_classpath()
    out = compile_java([Path(__file__).parent / "java" / "KgwAuthzCheck.java"], tmp_path_factory.mktemp("authz-java"), cp)
    return [java_tools()[1], "-XX:TieredStopAtLevel=1", "-cp", os.pathsep.join([str(out), *map(str, cp)]),
            "KgwAuthzCheck"]


def _run(java_authz, scenario: str, bootstrap: str, topic: str, ident: str) -> dict:
    done = run_tool([*java_authz, scenario, bootstrap, topic, ident], timeout=120, check=False)
    lines = [json.loads(x) for x in done.stdout.decode().splitlines() if x.startswith("{")]
    assert lines, done.stderr.decode()[-3000:]
    return lines[-1]


def test_java_clients_allowed_and_denied(start_gateway, tmp_path, topic_name, java_authz):
    ok_group, no_group = f"{topic_name}-g-ok", f"{topic_name}-g-no"
    seed_acls(tmp_path / "java-authz" / "metadata",
              ["--topic", topic_name, "--operation", "WRITE"], ["--topic", topic_name, "--operation", "READ"],
              ["--topic", topic_name, "--operation", "CREATE"], ["--group", ok_group, "--operation", "READ"],
              ["--transactional-id", f"{topic_name}-tx-ok", "--operation", "WRITE"])
    gw = start_gateway(AUTHORIZER, name="java-authz")

    # idempotent producer (default): allowed through WRITE on the topic (KIP-679 by resource type)
    assert _run(java_authz, "idempotent-produce", gw.bootstrap, topic_name, "1") == {
        "scenario": "idempotent-produce", "ok": True}
    # consumer group with READ on the group and the topic reads the record and commits
    assert _run(java_authz, "group-consume", gw.bootstrap, topic_name, ok_group) == {
        "scenario": "group-consume", "ok": True, "values": 1}
    # ... and without READ on the group it is refused
    assert _run(java_authz, "group-consume", gw.bootstrap, topic_name, no_group)["error"] == \
        "GroupAuthorizationException"
    # transactional producer: its transactional id needs WRITE
    assert _run(java_authz, "transactional-produce", gw.bootstrap, topic_name, f"{topic_name}-tx-no")["error"] == \
        "TransactionalIdAuthorizationException"
    allowed_txn = _run(java_authz, "transactional-produce", gw.bootstrap, topic_name, f"{topic_name}-tx-ok")
    assert allowed_txn == {"scenario": "transactional-produce", "ok": True}


def test_java_idempotent_producer_without_any_write_is_refused(start_gateway, tmp_path, tansu, topic_name, java_authz):
    admin = KafkaAdminClient(bootstrap_servers=tansu.bootstrap, request_timeout_ms=15000)
    try:
        admin.create_topics([NewTopic(topic_name, 1, 1)])  # exists and may be described: the producer gets
    finally:                                                # as far as InitProducerId, which needs some WRITE
        admin.close()
    seed_acls(tmp_path / "java-noauthz" / "metadata", ["--topic", topic_name, "--operation", "DESCRIBE"])
    gw = start_gateway(AUTHORIZER, name="java-noauthz")
    assert _run(java_authz, "idempotent-produce", gw.bootstrap, topic_name, "2")["error"] == \
        "ClusterAuthorizationException"
