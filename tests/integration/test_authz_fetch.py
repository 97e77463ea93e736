"""Fetch authorization over the wire: kgw (StandardAuthorizer) in front of tansu.

ACLs are seeded offline with ``kgw acls add`` before the gateway starts:
User:ANONYMOUS may READ topic A; it may only DESCRIBE topic B (so B shows up in
Metadata and is actually fetched, and the denial comes from Fetch).

* raw Fetch requests through the ``kgw run`` process: the allowed topic's
  record batches arrive byte-identical to what tansu returns directly, the
  denied one carries TOPIC_AUTHORIZATION_FAILED, and no fetch session exists;
* a kafka-python consumer (Fetch v12, topic names) and a confluent-kafka
  consumer (Fetch v16, topic ids learned by kgw from the Metadata it forwards)
  assigned A and B get exactly A's records and a topic authorization error for B.
"""

from __future__ import annotations

import time
import uuid
import warnings
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from tests.support.raw_kafka import RawConnection

from tests.support.acls import add_acl

with warnings.catch_warnings():  # kafka-python's schema loader warns on import
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic
    from kafka.errors import TopicAuthorizationFailedError
    from kafka.record.memory_records import MemoryRecords

from kio.schema.metadata.v12 import request as metadata12
from kio.static.primitive import i8, i32, i64

from protocol.codecs import make, nested, request_class

pytestmark = pytest.mark.integration

AUTHORIZER = {"authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer", "config": {}}}
TIMEOUTS = dict(request_timeout_ms=15000, reconnect_backoff_max_ms=500, retry_backoff_ms=100)
TAUTH, UNKNOWN_TOPIC_ID = 29, 100


@dataclass
class Topics:
    a: str
    b: str
    records_a: list[tuple[int, bytes, bytes]]  # (offset, key, value) in partition 0
    records_b: list[tuple[int, bytes, bytes]]


@pytest.fixture
def topics(tansu, topic_name) -> Topics:
    """Two one-partition topics with known records, written directly to tansu (not through kgw)."""
    t = Topics(f"{topic_name}-a", f"{topic_name}-b",
               [(i, b"ka%d" % i, b"value-a-%d" % i) for i in range(5)],
               [(i, b"kb%d" % i, b"value-b-%d" % i) for i in range(3)])
    admin = KafkaAdminClient(bootstrap_servers=tansu.bootstrap, client_id="kgw-it-setup", **TIMEOUTS)
    try:
        created = admin.create_topics([NewTopic(t.a, 1, 1), NewTopic(t.b, 1, 1)], timeout_ms=10000)
        assert all(x["error_code"] == 0 for x in created["topics"]), created
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, linger_ms=0, acks="all", **TIMEOUTS)
    try:
        for topic, recs in ((t.a, t.records_a), (t.b, t.records_b)):
            for offset, key, value in recs:
                md = producer.send(topic, key=key, value=value, partition=0).get(timeout=15)
                assert md.offset == offset
    finally:
        producer.close()
    return t


def seed_acls(data_dir: Path, *acls: tuple[str, str]) -> None:
    """(topic, operation) ACLs for User:ANONYMOUS, offline, before the gateway starts."""
    for topic, operation in acls:
        add_acl(data_dir, "--operation", operation, "--topic", topic)


@pytest.fixture
def authz_gateway(start_gateway, topics, tmp_path):
    seed_acls(tmp_path / "kgw-authz" / "metadata", (topics.a, "READ"), (topics.b, "DESCRIBE"))
    return start_gateway(AUTHORIZER, name="kgw-authz")


# -- a raw Kafka client ---------------------------------------------------------------


def fetch_request(version: int, keys, session_epoch: int = 0):
    cls = request_class(1, version)
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    field = "topic_id" if version >= 13 else "topic"
    return make(
        cls, replica_id=i32(-1), max_wait=timedelta(milliseconds=100), min_bytes=i32(1), max_bytes=i32(1 << 20),
        isolation_level=i8(0), session_id=i32(0), session_epoch=i32(session_epoch), forgotten_topics_data=(),
        rack_id="", cluster_id=None,
        topics=tuple(topic_cls(**{field: key, "partitions": (
            make(part_cls, partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(0),
                 last_fetched_epoch=i32(-1), log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20)),)})
            for key in keys),
    )


def decoded_records(data: bytes | None) -> list[tuple[int, bytes, bytes]]:
    return [(r.offset, r.key, r.value) for batch in MemoryRecords(data or b"") for r in batch]


def partitions(response, field="topic"):
    return {getattr(t, field): p for t in response.responses for p in t.partitions}


def topic_ids(address: str, *names: str) -> dict[str, uuid.UUID]:
    raw = RawConnection(address)
    try:
        _body, md = raw.call_raw(3, 12, metadata12.MetadataRequest(
            topics=tuple(metadata12.MetadataRequestTopic(topic_id=None, name=n) for n in names),
            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
        return {t.name: t.topic_id for t in md.topics}
    finally:
        raw.close()


# -- raw Fetch through the kgw process -------------------------------------------------


def test_fetch_v12_mixed_allowed_records_byte_identical_denied_29(authz_gateway, tansu, topics):
    direct = RawConnection(tansu.bootstrap)
    via = RawConnection(authz_gateway.bootstrap)
    try:
        # what tansu itself answers for A alone
        _b, alone = direct.call_raw(1, 12, fetch_request(12, [topics.a], session_epoch=-1))
        # through kgw: A and B, asking for a new fetch session (epoch 0)
        _b, resp = via.call_raw(1, 12, fetch_request(12, [topics.b, topics.a], session_epoch=0))
    finally:
        direct.close()
        via.close()
    got = partitions(resp)
    assert set(got) == {topics.a, topics.b}
    assert got[topics.a].error_code == 0
    assert got[topics.a].records == partitions(alone)[topics.a].records  # byte-identical batches
    assert decoded_records(got[topics.a].records) == topics.records_a
    b = got[topics.b]
    assert (b.error_code, b.high_watermark, b.records) == (TAUTH, -1, b"")
    assert resp.error_code == 0 and resp.session_id == 0  # made session-less: no session to diverge
    assert [t.topic for t in resp.responses] == [topics.a, topics.b]  # fetched first, then the denied


def test_fetch_only_denied_topic_is_answered_by_kgw(authz_gateway, topics):
    via = RawConnection(authz_gateway.bootstrap)
    try:
        _b, resp = via.call_raw(1, 12, fetch_request(12, [topics.b]))
    finally:
        via.close()
    [(name, p)] = partitions(resp).items()
    assert (name, p.partition_index, p.error_code, p.records) == (topics.b, 0, TAUTH, b"")


def test_fetch_v16_by_ids_kgw_has_not_learned_gets_unknown_topic_id(authz_gateway, tansu, topics):
    """No Metadata response has passed through this gateway, so it cannot name the ids (as Kafka:
    unknown topic id -> 100 before the auth check); nothing is forwarded, nothing leaks."""
    ids = topic_ids(tansu.bootstrap, topics.a, topics.b)
    via = RawConnection(authz_gateway.bootstrap)
    try:
        _b, resp = via.call_raw(1, 16, fetch_request(16, [ids[topics.a], ids[topics.b]]))
    finally:
        via.close()
    got = partitions(resp, "topic_id")
    assert {k: (p.error_code, p.records) for k, p in got.items()} == \
        {ids[topics.a]: (UNKNOWN_TOPIC_ID, b""), ids[topics.b]: (UNKNOWN_TOPIC_ID, b"")}


# -- a real consumer -------------------------------------------------------------------------


def _consume(bootstrap: str, topics: Topics, timeout: float = 30.0):
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="kgw-it-authz-fetch", enable_auto_commit=False,
                             fetch_max_wait_ms=100, **TIMEOUTS)
    a, b = TopicPartition(topics.a, 0), TopicPartition(topics.b, 0)
    got: list[tuple[int, bytes, bytes]] = []
    denied: set[str] = set()
    try:
        consumer.assign([a, b])
        consumer.seek(a, 0)
        consumer.seek(b, 0)
        deadline = time.monotonic() + timeout
        while (len(got) < len(topics.records_a) or not denied) and time.monotonic() < deadline:
            try:
                for tp, recs in consumer.poll(timeout_ms=300).items():
                    assert tp == a, f"records from {tp} must never arrive"
                    got += [(r.offset, r.key, r.value) for r in recs]
            except TopicAuthorizationFailedError as e:
                denied |= set(e.args[0])  # kafka-python raises it with the set of denied topics
                consumer.pause(b)  # as an application would: stop asking for what it may not read
        return got, denied
    finally:
        consumer.close()


def test_kafka_python_consumer_fetch_v12_gets_a_records_and_authorization_error_for_b(authz_gateway, topics):
    got, denied = _consume(authz_gateway.bootstrap, topics)
    assert got == topics.records_a
    assert denied == {topics.b}


# -- topic ids: learned by kgw from the Metadata that passes through it ----------------------


def test_fetch_v16_by_ids_after_metadata_through_kgw(authz_gateway, tansu, topics):
    ids = topic_ids(authz_gateway.bootstrap, topics.a, topics.b)  # B visible: DESCRIBE
    assert ids == topic_ids(tansu.bootstrap, topics.a, topics.b)
    via = RawConnection(authz_gateway.bootstrap)
    try:
        _b, resp = via.call_raw(1, 16, fetch_request(16, [ids[topics.b], ids[topics.a]], session_epoch=0))
    finally:
        via.close()
    got = partitions(resp, "topic_id")
    assert decoded_records(got[ids[topics.a]].records) == topics.records_a
    assert (got[ids[topics.b]].error_code, got[ids[topics.b]].records) == (TAUTH, b"")
    assert resp.session_id == 0


def test_confluent_kafka_consumer_fetch_v16_gets_a_records_and_authorization_error_for_b(authz_gateway, topics):
    from confluent_kafka import Consumer, KafkaError
    from confluent_kafka import TopicPartition as TP

    consumer = Consumer({"bootstrap.servers": authz_gateway.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    got: list[tuple[int, bytes, bytes]] = []
    denied: set[str] = set()
    try:
        consumer.assign([TP(topics.a, 0, 0), TP(topics.b, 0, 0)])
        deadline = time.monotonic() + 30
        while (len(got) < len(topics.records_a) or not denied) and time.monotonic() < deadline:
            msg = consumer.poll(0.3)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                    continue  # librdkafka looks its group coordinator up even when only assigning; no group ACL here
                assert msg.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, msg.error()
                denied.add(msg.topic())
                continue
            assert msg.topic() == topics.a, f"records from {msg.topic()} must never arrive"
            got.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    assert got == topics.records_a
    assert denied == {topics.b}
