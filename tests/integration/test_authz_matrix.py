"""A matrix over the wire: for each API, the principal with the ACL gets the upstream's answer
and the one without gets Kafka's exact error, on one gateway, with raw requests at fixed versions.

(Only APIs the tansu broker implements can be forwarded — its DeleteRecords panics with
"not yet implemented" — the others are covered by the per-family unit tests with a real
StandardAuthorizer.)"""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kio.static.primitive import i32

from protocol.codecs import nested, request_class
from tests.support.acls import seed_acls
from tests.support.raw_kafka import call

pytestmark = pytest.mark.integration

AUTHORIZER = {"authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer"}}
TOPIC_DENIED, GROUP_DENIED = 29, 30


def _offset_fetch(group: str, topic: str):
    cls = request_class(9, 7)
    t = nested(cls, "topics")
    return cls(group_id=group, topics=(t(name=topic, partition_indexes=(i32(0),)),), require_stable=False)


@pytest.fixture
def matrix(start_gateway, tmp_path, tansu, topic_name):
    ok, no = f"{topic_name}-ok", f"{topic_name}-no"
    admin = KafkaAdminClient(bootstrap_servers=tansu.bootstrap, request_timeout_ms=15000)
    try:
        admin.create_topics([NewTopic(ok, 1, 1), NewTopic(no, 1, 1)])
    finally:
        admin.close()
    seed_acls(tmp_path / "matrix" / "metadata",
              ["--topic", ok, "--operation", "DESCRIBE"],
              ["--topic", no, "--operation", "DESCRIBE"],
              ["--group", f"{topic_name}-g-ok", "--operation", "DELETE"],
              ["--group", f"{topic_name}-g-ok", "--operation", "DESCRIBE"])
    gw = start_gateway(AUTHORIZER, name="matrix")
    return gw.broker_addresses[111], ok, no, f"{topic_name}-g-ok", f"{topic_name}-g-no"


def test_delete_groups_per_group(matrix):
    address, _ok, _no, g_ok, g_no = matrix
    cls = request_class(42, 2)
    results = {r.group_id: r.error_code for r in call(address, 42, 2, cls(groups_names=(g_no, g_ok))).results}
    assert results[g_no] == GROUP_DENIED
    assert results[g_ok] == 0  # forwarded: tansu deletes (or ignores) the empty group, and says so


def test_describe_groups_per_group(matrix):
    address, _ok, _no, g_ok, g_no = matrix
    cls = request_class(15, 5)
    groups = call(address, 15, 5, cls(groups=(g_ok, g_no), include_authorized_operations=True)).groups
    codes = {g.group_id: g.error_code for g in groups}
    assert codes[g_no] == GROUP_DENIED and codes[g_ok] == 0  # forwarded and described by tansu
    assert [g.group_id for g in groups] == [g_ok, g_no]  # request order


def test_offset_fetch_group_then_topic(matrix):
    address, ok, no, g_ok, g_no = matrix
    assert call(address, 9, 7, _offset_fetch(g_no, ok)).error_code == GROUP_DENIED
    answer = call(address, 9, 7, _offset_fetch(g_ok, no + "-without-acls"))
    assert answer.error_code == 0
    assert answer.topics[0].partitions[0].error_code == TOPIC_DENIED
