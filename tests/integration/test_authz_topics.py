"""Topic/metadata authorization over the wire: kgw (StandardAuthorizer) in front of tansu.

ACLs are seeded offline with ``kgw acls add`` before the gateway starts:
User:ANONYMOUS may DESCRIBE, CREATE, ALTER and DELETE topics with the prefix
``<test>-ok-``, and nothing on ``<test>-no-``.  Real clients (confluent-kafka
AdminClient, kafka-python) and raw requests then show:

* Metadata lists only the allowed topics; a named denied topic gets
  TOPIC_AUTHORIZATION_FAILED;
* CreateTopics for one allowed and one denied topic: one success, one
  TOPIC_AUTHORIZATION_FAILED, and only the allowed topic exists upstream;
* ListOffsets: offsets for the allowed topic, 29 for the denied one;
* DeleteTopics mixed: the allowed topic is gone upstream, the denied one stays.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.raw_kafka import RawConnection

from tests.support.acls import add_acl
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

with warnings.catch_warnings():  # kafka-python's schema loader warns on import
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka import KafkaAdminClient, KafkaProducer
    from kafka.admin import NewTopic as KNewTopic

from kio.static.primitive import i8, i32, i64

from protocol.codecs import make, request_class

pytestmark = pytest.mark.integration

AUTHORIZER = {"authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer", "config": {}}}
KTIMEOUTS = dict(request_timeout_ms=15000, reconnect_backoff_max_ms=500, retry_backoff_ms=100)
COMMON = {"socket.timeout.ms": 10000, "reconnect.backoff.max.ms": 500, "broker.address.family": "v4"}
T = 15
TAUTH = 29
RECORDS = 3


@dataclass
class Names:
    ok: str  # allowed prefix
    no: str  # denied prefix

    @property
    def ok1(self) -> str:
        return self.ok + "1"

    @property
    def no1(self) -> str:
        return self.no + "1"


def seed_acls(data_dir: Path, prefix: str, *operations: str) -> None:
    """PREFIXED topic ACLs for User:ANONYMOUS, offline, before the gateway starts."""
    for op in operations:
        add_acl(data_dir, "--operation", op, "--topic", prefix, "--prefixed")


def upstream_topics(tansu) -> set[str]:
    admin = KafkaAdminClient(bootstrap_servers=tansu.bootstrap, client_id="kgw-it-check", **KTIMEOUTS)
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def create_upstream(tansu, *names: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=tansu.bootstrap, client_id="kgw-it-setup", **KTIMEOUTS)
    try:
        created = admin.create_topics([KNewTopic(n, 1, 1) for n in names], timeout_ms=10000)
        assert all(x["error_code"] == 0 for x in created["topics"]), created
    finally:
        admin.close()


@pytest.fixture
def names(tansu, topic_name) -> Names:
    """``ok-1`` and ``no-1`` exist upstream with RECORDS records each (written directly to tansu)."""
    n = Names(f"{topic_name}-ok-", f"{topic_name}-no-")
    create_upstream(tansu, n.ok1, n.no1)
    producer = KafkaProducer(bootstrap_servers=tansu.bootstrap, linger_ms=0, acks="all", **KTIMEOUTS)
    try:
        for topic in (n.ok1, n.no1):
            for i in range(RECORDS):
                producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0).get(timeout=T)
    finally:
        producer.close()
    return n


@pytest.fixture
def gw(start_gateway, names, tmp_path):
    seed_acls(tmp_path / "kgw-topics" / "metadata", names.ok, "DESCRIBE", "CREATE", "ALTER", "DELETE")
    return start_gateway(AUTHORIZER, name="kgw-topics")


def admin_for(gateway) -> AdminClient:
    return AdminClient({"bootstrap.servers": gateway.bootstrap, "client.id": "kgw-it-authz", **COMMON})


def metadata_request(version: int, topics):
    cls = request_class(3, version)
    tcls = cls.__dataclass_fields__["topics"].type.__args__[0].__args__[0]
    return make(cls, topics=None if topics is None else tuple(make(tcls, name=n, topic_id=None) for n in topics),
                allow_auto_topic_creation=False, include_topic_authorized_operations=True,
                include_cluster_authorized_operations=False)


# -- Metadata --------------------------------------------------------------------------


def test_metadata_lists_only_allowed_topics(gw, names):
    admin = admin_for(gw)
    md = admin.list_topics(timeout=T)
    assert names.ok1 in md.topics
    assert names.no1 not in md.topics
    assert all(not t.startswith(names.no) for t in md.topics)
    # named request for the denied topic: 29, existence not revealed
    md = admin.list_topics(topic=names.no1, timeout=T)
    err = md.topics[names.no1].error
    assert err is not None and err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    raw = RawConnection(gw.bootstrap)
    try:
        resp = raw.call(3, 12, metadata_request(12, [names.no1, names.ok1, names.no + "missing"]))
        assert [(t.name, t.error_code) for t in resp.topics] == [
            (names.no1, TAUTH), (names.ok1, 0), (names.no + "missing", TAUTH)]
        assert resp.topics[1].topic_authorized_operations == (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8)
        assert resp.topics[0].topic_id is None and resp.brokers
        everything = raw.call(3, 12, metadata_request(12, None))
        listed = {t.name for t in everything.topics}
        assert names.ok1 in listed and names.no1 not in listed
    finally:
        raw.close()


# -- CreateTopics ----------------------------------------------------------------------


def test_create_topics_one_allowed_one_denied(gw, names, tansu):
    admin = admin_for(gw)
    ok_new, no_new = names.ok + "new", names.no + "new"
    futures = admin.create_topics([NewTopic(ok_new, 1, 1), NewTopic(no_new, 1, 1)], operation_timeout=10,
                                  request_timeout=T)
    assert futures[ok_new].result(timeout=T) is None
    with pytest.raises(KafkaException) as denied:
        futures[no_new].result(timeout=T)
    assert denied.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    upstream = upstream_topics(tansu)
    assert ok_new in upstream
    assert no_new not in upstream


# -- ListOffsets -----------------------------------------------------------------------


def test_list_offsets_allowed_and_denied(gw, names):
    admin = admin_for(gw)
    ok_tp, no_tp = TopicPartition(names.ok1, 0), TopicPartition(names.no1, 0)
    result = admin.list_offsets({ok_tp: OffsetSpec.latest()}, request_timeout=T)
    assert result[ok_tp].result(timeout=T).offset == RECORDS
    result = admin.list_offsets({no_tp: OffsetSpec.latest()}, request_timeout=T)
    with pytest.raises(KafkaException) as denied:
        result[no_tp].result(timeout=T)
    # librdkafka looks the leader up with Metadata first, which answers 29 for the topic (as a
    # broker does), so it reports "no leaders found" without sending ListOffsets for it
    assert denied.value.args[0].code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._NOENT)

    # one raw ListOffsets naming both: kgw forwards the allowed part and merges the 29 back in order
    cls = request_class(2, 7)
    tcls = cls.__dataclass_fields__["topics"].type.__args__[0]
    pcls = tcls.__dataclass_fields__["partitions"].type.__args__[0]
    request = make(cls, replica_id=i32(-1), isolation_level=i8(0), topics=tuple(
        tcls(name=n, partitions=(make(pcls, partition_index=i32(0), current_leader_epoch=i32(-1),
                                      timestamp=i64(-1)),)) for n in (names.no1, names.ok1)))
    raw = RawConnection(gw.bootstrap)
    try:
        resp = raw.call(2, 7, request)
    finally:
        raw.close()
    assert [(t.name, t.partitions[0].error_code, t.partitions[0].offset) for t in resp.topics] == [
        (names.no1, TAUTH, -1), (names.ok1, 0, RECORDS)]


# -- DeleteTopics ----------------------------------------------------------------------


def test_delete_topics_mixed(gw, names, tansu):
    ok_del, no_del = names.ok + "del", names.no + "del"
    create_upstream(tansu, ok_del, no_del)
    admin = admin_for(gw)
    futures = admin.delete_topics([ok_del, no_del], operation_timeout=10, request_timeout=T)
    assert futures[ok_del].result(timeout=T) is None
    with pytest.raises(KafkaException) as denied:
        futures[no_del].result(timeout=T)
    assert denied.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    deadline = time.monotonic() + T
    while ok_del in (upstream := upstream_topics(tansu)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ok_del not in upstream
    assert no_del in upstream
