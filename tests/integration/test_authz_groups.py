"""Consumer-group authorization over the wire: clients -> kgw (StandardAuthorizer) -> tansu.

ACLs are seeded offline with ``kgw acls add`` before the gateway starts; clients on the
PLAINTEXT listener are ``User:ANONYMOUS``.  Topics, records and the starting committed
offset are written straight to tansu, so these tests depend only on the group family
(plus Metadata / Fetch enforcement) in kgw:

* a kafka-python consumer group with READ on the group and the topic consumes exactly
  the records written and commits its offsets through kgw;
* without READ on the group the same consumer gets GROUP_AUTHORIZATION_FAILED, and raw
  JoinGroup / OffsetCommit requests get 30 from kgw;
* ListGroups through kgw shows only the groups the principal may DESCRIBE.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from tests.support.raw_kafka import call

from tests.support.acls import seed_acls
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import GroupAuthorizationFailedError
from kafka.structs import OffsetAndMetadata
from kio.static.primitive import i32, i64

from protocol.apis.group_common import _blank, nested
from protocol.codecs import request_class

pytestmark = pytest.mark.integration

AUTHORIZER = {"authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer", "config": {}}}
ANON = "User:ANONYMOUS"
T = 15
TIMEOUTS = dict(request_timeout_ms=15000, reconnect_backoff_max_ms=500, retry_backoff_ms=100)
# tansu stalls group joins unless the timeouts are short.
GROUP_TIMEOUTS = dict(session_timeout_ms=6000, heartbeat_interval_ms=1000, max_poll_interval_ms=10000)
N = 5


def start(start_gateway, tmp_path: Path, name: str, *acls: list[str]):
    seed_acls(tmp_path / name / "metadata", *acls)
    return start_gateway(AUTHORIZER, name=name)


def prepare_topic(tansu, topic: str, group: str | None) -> list[tuple[int, bytes, bytes]]:
    """Create ``topic`` (1 partition) on tansu, write N records, commit offset 0 for ``group``.

    The committed offset spares the consumer a ListOffsets (no "reset" needed)."""
    admin = KafkaAdminClient(bootstrap_servers=tansu.bootstrap, **TIMEOUTS)
    try:
        admin.create_topics([NewTopic(topic, 1, 1)], timeout_ms=10000)
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, **TIMEOUTS)
    records = [(i, f"k{i}".encode(), f"{topic}-v{i}".encode()) for i in range(N)]
    try:
        for _, k, v in records:
            producer.send(topic, key=k, value=v, partition=0)
        producer.flush(timeout=T)
    finally:
        producer.close()
    if group is not None:
        commit_directly(tansu, topic, group, 0)
    return records


def commit_directly(tansu, topic: str, group: str, offset: int) -> None:
    c = KafkaConsumer(bootstrap_servers=tansu.bootstrap, group_id=group, enable_auto_commit=False, **TIMEOUTS)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.commit({tp: OffsetAndMetadata(offset, "", -1)})
    finally:
        c.close()


def committed_directly(tansu, topic: str, group: str) -> int | None:
    c = KafkaConsumer(bootstrap_servers=tansu.bootstrap, group_id=group, enable_auto_commit=False, **TIMEOUTS)
    try:
        return c.committed(TopicPartition(topic, 0))
    finally:
        c.close()


def consumer(gw, group: str) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=gw.bootstrap, group_id=group, client_id="kgw-it-groups",
                         enable_auto_commit=False, auto_offset_reset="earliest", **GROUP_TIMEOUTS, **TIMEOUTS)


def test_group_with_read_consumes_exact_records_and_commits(start_gateway, tmp_path, tansu, topic_name):
    group = f"grp-{uuid.uuid4().hex[:8]}"
    records = prepare_topic(tansu, topic_name, group)
    gw = start(start_gateway, tmp_path, "gw-read",
               ["--operation", "READ", "--group", group], ["--operation", "READ", "--topic", topic_name])
    c = consumer(gw, group)
    try:
        c.subscribe([topic_name])
        got = []
        deadline = time.monotonic() + 40
        while len(got) < N and time.monotonic() < deadline:
            for _tp, batch in c.poll(timeout_ms=500).items():
                got += [(r.offset, r.key, r.value) for r in batch]
        assert got == records
        c.commit()
        assert c.committed(TopicPartition(topic_name, 0)) == N  # OffsetFetch through kgw
    finally:
        c.close()
    assert committed_directly(tansu, topic_name, group) == N


def test_group_without_read_gets_group_authorization_failed(start_gateway, tmp_path, tansu, topic_name):
    group = f"grp-{uuid.uuid4().hex[:8]}"
    prepare_topic(tansu, topic_name, group)
    # DESCRIBE lets FindCoordinator through; JoinGroup / OffsetCommit need READ
    gw = start(start_gateway, tmp_path, "gw-noread",
               ["--operation", "DESCRIBE", "--group", group], ["--operation", "READ", "--topic", topic_name])
    c = consumer(gw, group)
    try:
        c.subscribe([topic_name])
        with pytest.raises(GroupAuthorizationFailedError):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                c.poll(timeout_ms=500)
    finally:
        c.close()

    join = _blank(request_class(11, 5), group_id=group, session_timeout=timedelta(seconds=6),
                  rebalance_timeout=timedelta(seconds=10), member_id="", protocol_type="consumer")
    r = call(gw.bootstrap, 11, 5, join)
    assert (r.error_code, r.generation_id, r.member_id) == (30, -1, "")

    cls = request_class(8, 2)
    t_cls = nested(cls, "topics")
    p_cls = nested(t_cls, "partitions")
    commit = _blank(cls, group_id=group, generation_id_or_member_epoch=i32(-1), member_id="",
                    retention_time=timedelta(milliseconds=-1), topics=(_blank(t_cls, name=topic_name, partitions=(
                        _blank(p_cls, partition_index=i32(0), committed_offset=i64(3), committed_metadata=""),)),))
    r = call(gw.bootstrap, 8, 2, commit)
    assert [(t.name, [int(p.error_code) for p in t.partitions]) for t in r.topics] == [(topic_name, [30])]
    assert committed_directly(tansu, topic_name, group) == 0  # nothing reached tansu

    # FindCoordinator for a group without any ACL: 30, answered by kgw
    r = call(gw.bootstrap, 10, 1, _blank(request_class(10, 1), key=f"other-{group}", key_type=0))
    assert (r.error_code, r.error_message, r.node_id) == (30, "Group authorization failed.", -1)


def test_list_groups_shows_only_described_groups(start_gateway, tmp_path, tansu, topic_name):
    visible, hidden = f"vis-{uuid.uuid4().hex[:8]}", f"hid-{uuid.uuid4().hex[:8]}"
    prepare_topic(tansu, topic_name, visible)
    commit_directly(tansu, topic_name, hidden, 0)
    upstream = {g.group_id for g in call(tansu.bootstrap, 16, 2, _blank(request_class(16, 2))).groups}
    assert {visible, hidden} <= upstream
    gw = start(start_gateway, tmp_path, "gw-list", ["--operation", "DESCRIBE", "--group", visible])
    through = [g.group_id for g in call(gw.bootstrap, 16, 2, _blank(request_class(16, 2))).groups]
    assert set(through) == upstream & {visible}
    assert hidden not in through

    # CLUSTER:DESCRIBE shows every group
    gw2 = start(start_gateway, tmp_path, "gw-list-all", ["--operation", "DESCRIBE", "--cluster"])
    assert {g.group_id for g in call(gw2.bootstrap, 16, 2, _blank(request_class(16, 2))).groups} == upstream

    # DescribeGroups: per-group 30 for the hidden group
    r = call(gw.bootstrap, 15, 0, _blank(request_class(15, 0), groups=(visible, hidden)))
    assert [(g.group_id, int(g.error_code)) for g in r.groups][1] == (hidden, 30)
    assert r.groups[0].group_id == visible and r.groups[0].error_code != 30
