"""The ACL admin APIs answered by kgw, driven by kafka-python's admin client and the Java AdminClient.

Expectations are Kafka's filter semantics (Kafka's ``AclControlManager``): MATCH returns the LITERAL
ACL on the name and PREFIXED ACLs whose prefix starts it; LITERAL/PREFIXED/ANY filters need
the exact name; a CLUSTER ACL must be named kafka-cluster; a principal needs a colon.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest
from kafka.admin import ACL, ACLFilter, ACLOperation, ACLPermissionType, KafkaAdminClient, ResourcePattern
from kafka.admin import ResourcePatternFilter, ResourceType, ACLResourcePatternType

from tests.support.java import compile_java, java_tools, kafka_classpath
from tests.support.processes import run_tool

pytestmark = pytest.mark.integration

AUTHZ = {"authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer",
                        "config": {"super.users": "User:ANONYMOUS"}}}


def test_kafka_python_admin_create_describe_delete(start_gateway):
    gw = start_gateway(AUTHZ, name="acl-kp")
    p = f"kp{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(bootstrap_servers=gw.bootstrap, request_timeout_ms=20000)
    try:
        acls = [
            ACL("User:alice", "*", ACLOperation.READ, ACLPermissionType.ALLOW,
                ResourcePattern(ResourceType.TOPIC, f"{p}-orders-eu", ACLResourcePatternType.LITERAL)),
            ACL("User:bob", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW,
                ResourcePattern(ResourceType.TOPIC, f"{p}-orders-", ACLResourcePatternType.PREFIXED)),
        ]
        result = admin.create_acls(acls)
        assert len(result["succeeded"]) == 2 and not result["failed"]

        match = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                          ResourcePatternFilter(ResourceType.TOPIC, f"{p}-orders-eu", ACLResourcePatternType.MATCH))
        found, error = admin.describe_acls(match)
        assert sorted(a.principal for a in found) == ["User:alice", "User:bob"]

        literal = ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                            ResourcePatternFilter(ResourceType.TOPIC, f"{p}-orders-eu", ACLResourcePatternType.LITERAL))
        found, _ = admin.describe_acls(literal)
        assert [a.principal for a in found] == ["User:alice"]

        bob = ACLFilter("User:bob", None, ACLOperation.ANY, ACLPermissionType.ANY,
                        ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY))
        deleted = admin.delete_acls([bob])
        (_filter, matched, _err), = deleted
        assert [m.principal for m in matched] == ["User:bob"]
        found, _ = admin.describe_acls(match)
        assert [a.principal for a in found] == ["User:alice"]
    finally:
        admin.close()


@pytest.mark.java
def test_java_admin_client_acls(start_gateway, tmp_path):
    assert java_tools() is not None, "javac/java are required for the java tests"
    cp = kafka_classpath()
    out = compile_java([Path(__file__).parent / "java" / "KgwAclCheck.java"], tmp_path / "classes", cp)
    _javac, java = java_tools()
    gw = start_gateway(AUTHZ, name="acl-java")
    p = f"j{uuid.uuid4().hex[:6]}"
    run = run_tool([java, "-XX:TieredStopAtLevel=1", "-cp", os.pathsep.join([str(out), *map(str, cp)]),
                    "KgwAclCheck", gw.bootstrap, p], timeout=120, check=False)
    lines = [json.loads(x) for x in run.stdout.decode().splitlines() if x.startswith("{")]
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    by = {x["describe"]: [(a["principal"], a["name"], a["pattern"]) for a in x["acls"]] for x in lines if "describe" in x}
    assert {"created": 4} in lines
    assert [x["invalid"] for x in lines if "invalid" in x] == ["InvalidRequestException", "InvalidRequestException"]
    assert sorted(by["match"]) == [("User:alice", f"{p}-orders-eu", "LITERAL"), ("User:bob", f"{p}-orders-", "PREFIXED")]
    assert by["literal"] == [("User:alice", f"{p}-orders-eu", "LITERAL")]
    assert by["prefixed"] == [("User:bob", f"{p}-orders-", "PREFIXED")]
    assert by["any-name"] == [("User:alice", f"{p}-orders-eu", "LITERAL")]
    assert (("User:alice", f"{p}-g", "LITERAL") in by["group"])
    assert {"deleted": 1} in lines
    assert by["after-delete"] == [("User:alice", f"{p}-orders-eu", "LITERAL")]
