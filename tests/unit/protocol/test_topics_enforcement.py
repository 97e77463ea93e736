"""Topic/metadata family enforcement (protocol/apis/topics.py) against a real StandardAuthorizer.

docs/authorization.md: Metadata, DescribeTopicPartitions, ListOffsets, OffsetForLeaderEpoch,
CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords, DescribeProducers, DescribeCluster,
DescribeLogDirs, AlterReplicaLogDirs, ElectLeaders, Alter/ListPartitionReassignments.
"""

from __future__ import annotations

import dataclasses
import io
import ipaddress
import logging
import typing
import uuid
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i8, i16, i32, i64

from authz.acl import AccessControlEntry, AclBinding, AclOperation as Op, AclPermissionType, PatternType
from authz.acl import ResourcePattern, ResourceType as RT
from authz.audit import AUDIT_LOGGER_NAME, TRACE
from authz.authorizer import AuthorizableRequestContext
from authz.principal import KafkaPrincipal
from authz.standard_authorizer import StandardAuthorizer
from protocol.topic_ids import TopicCache
from tests.support.fake_services import FakeServices, FakeUpstream, settle
from protocol.apis.base import FORWARD, Decision
from protocol.apis.registry import REGISTRY
from protocol.auth_helper import AuthHelper
from protocol.codecs import decode_request, decode_response, encode, make, request_class, response_class
from protocol.headers import parse_request_header

ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
ALICE = "User:alice"
MIN = -(2**31)
TOPIC_ALL_OPS = 3576
#: the topic ids the gateway under test has learned (Gateway.topic_ids)
TOPICS = TopicCache()
CLUSTER_ALL_OPS = 8096


# -- helpers -----------------------------------------------------------------


def acl(name, op, rt=RT.TOPIC, pattern=PatternType.PREFIXED, perm=ALLOW, principal=ALICE):
    return AclBinding(ResourcePattern(rt, name, pattern), AccessControlEntry(principal, "*", op, perm))


def cluster_acl(op, perm=ALLOW):
    return acl("kafka-cluster", op, RT.CLUSTER, PatternType.LITERAL, perm)


def authorizer(*bindings):
    a = StandardAuthorizer()
    a.configure({})
    a.load_snapshot({uuid.uuid4(): b for b in bindings})
    a.complete_initial_load()
    return a


def helper(authz, api_key=3, version=0):
    ctx = AuthorizableRequestContext("PLAIN", "PLAINTEXT", KafkaPrincipal("User", "alice"),
                                     ipaddress.ip_address("10.0.0.1"), api_key, version, "cli", 5)
    return AuthHelper(authz, ctx, topics=TOPICS)


def elem(cls, field):
    tp = typing.get_type_hints(cls)[field]
    while not dataclasses.is_dataclass(tp):
        tp = [a for a in typing.get_args(tp) if a is not type(None) and a is not Ellipsis][0]
    return tp


def frame(entity) -> memoryview:
    hcls = entity.__header_schema__
    out = io.BytesIO()
    fields = dict(request_api_key=i16(entity.__api_key__), request_api_version=i16(entity.__version__),
                  correlation_id=i32(5), client_id="cli")
    entity_writer(hcls)(out, make(hcls, **fields))
    out.write(encode(entity))
    return memoryview(out.getvalue())


def enforce(entity, authz) -> Decision:
    body = frame(entity)
    header = parse_request_header(body)
    spec = REGISTRY[header.api_key]
    info = spec.inspect(header, body)
    return spec.enforce(helper(authz, header.api_key, header.api_version), header, body, info)


def sent(entity, decision):
    """The request kgw forwards (decoded)."""
    assert decision.request is not None and decision.respond is None
    return decode_request(entity.__api_key__, entity.__version__, decision.request, 0)


def answered(entity, decision):
    assert decision.respond is not None and decision.request is None and decision.merge is None
    return decode_response(entity.__api_key__, entity.__version__, decision.respond, 0)


def merged(entity, decision, upstream):
    assert decision.merge is not None
    return decode_response(entity.__api_key__, entity.__version__, decision.merge(encode(upstream), 0), 0)


def audit(caplog):
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == AUDIT_LOGGER_NAME]


def lines(caplog, level, *needles):
    return [m for lvl, m in audit(caplog) if lvl == level and all(n in m for n in needles)]


@pytest.fixture(autouse=True)
def _trace(caplog):
    caplog.set_level(TRACE, logger=AUDIT_LOGGER_NAME)
    TOPICS.clear()
    yield
    TOPICS.clear()


def req(key, version, **fields):
    return make(request_class(key, version), **fields)


def resp(key, version, **fields):
    return make(response_class(key, version), throttle_time=timedelta(0), **fields)


E = ErrorCode


# -- registry / no authorizer --------------------------------------------------


KEYS = (2, 3, 19, 20, 21, 23, 34, 35, 37, 43, 45, 46, 60, 61, 75)
FAMILIES = {"protocol.apis.topics", "protocol.apis.metadata", "protocol.apis.topic_admin", "protocol.apis.cluster"}


def test_registry_uses_topics_enforcers():
    for key in KEYS:
        assert REGISTRY[key].enforce.__module__ in FAMILIES, key
    # address rewriting of Metadata and DescribeCluster is kept
    assert REGISTRY[3].rewrite_response is not None and REGISTRY[60].rewrite_response is not None


def test_no_authorizer_forwards_everything():
    entity = md_request(12, ["a"])
    body = frame(entity)
    header = parse_request_header(body)
    info = REGISTRY[3].inspect(header, body)
    for key in KEYS:
        assert REGISTRY[key].enforce(AuthHelper(None, None), header, body, info) is FORWARD


# -- Metadata (3) ----------------------------------------------------------------


def md_request(version, names, auto=True, ops=False, cluster_ops=False, ids=None):
    cls = request_class(3, version)
    tcls = elem(cls, "topics")
    if names is None:
        topics = None
    elif ids is not None:
        topics = tuple(make(tcls, name=None, topic_id=i) for i in ids)
    else:
        topics = tuple(make(tcls, name=n, topic_id=None) for n in names)
    return make(cls, topics=topics, allow_auto_topic_creation=auto, include_topic_authorized_operations=ops,
                include_cluster_authorized_operations=cluster_ops)


def md_topic(version, name, error=0, topic_id=None, ops=12345, parts=1):
    tcls = elem(response_class(3, version), "topics")
    pcls = elem(tcls, "partitions")
    partitions = tuple(make(pcls, error_code=E(0), partition_index=i32(p), leader_id=i32(1), leader_epoch=i32(0),
                            replica_nodes=(i32(1),), isr_nodes=(i32(1),), offline_replicas=()) for p in range(parts))
    return make(tcls, error_code=E(error), name=name, topic_id=topic_id, is_internal=False,
                partitions=partitions if error == 0 else (), topic_authorized_operations=i32(ops))


def md_response(version, topics, cluster_ops=777):
    bcls = elem(response_class(3, version), "brokers")
    return resp(3, version, brokers=(make(bcls, node_id=i32(1), host="gw", port=i32(9092), rack=None),),
                cluster_id="c", controller_id=i32(1), topics=tuple(topics),
                cluster_authorized_operations=i32(cluster_ops), error_code=E(0))


def test_metadata_named_mixed_forwards_allowed_and_answers_29_in_request_order(caplog):
    authz = authorizer(acl("a-", Op.DESCRIBE))
    entity = md_request(12, ["b-1", "a-1", "b-1"], auto=False)
    d = enforce(entity, authz)
    assert [t.name for t in sent(entity, d).topics] == ["a-1"]
    out = merged(entity, d, md_response(12, [md_topic(12, "a-1", topic_id=uuid.uuid4())]))
    assert [(t.name, t.error_code) for t in out.topics] == [("b-1", 29), ("a-1", 0)]
    denied = out.topics[0]
    assert denied.topic_id is None and denied.partitions == () and denied.topic_authorized_operations == MIN
    # ops not requested: never passed through from upstream
    assert out.topics[1].topic_authorized_operations == MIN
    assert len(out.brokers) == 1
    # named topics: denial logged at INFO, refCount 1 (a Set in Kafka)
    assert len(lines(caplog, logging.INFO, "Denied operation = DESCRIBE", "Topic:LITERAL:b-1",
                     "resourceRefCount = 1")) == 1


def test_metadata_requests_look_up_the_response_classes_fields_once(monkeypatch):
    """Every authorized Metadata request names its response's topic class: typing.get_type_hints
    (tens of microseconds, an eval per annotation) runs for the first request only."""
    calls = []
    real = typing.get_type_hints
    monkeypatch.setattr(typing, "get_type_hints", lambda cls, *a, **k: calls.append(cls) or real(cls, *a, **k))
    authz = authorizer(acl("a-", Op.DESCRIBE))
    for _ in range(5):
        entity = md_request(11, ["a-1", "b-1"], auto=False)
        assert [t.name for t in sent(entity, enforce(entity, authz)).topics] == ["a-1"]
    assert calls.count(response_class(3, 11)) <= 1


def test_metadata_nothing_described_still_forwarded_for_brokers():
    entity = md_request(12, ["b-1"], auto=True)
    d = enforce(entity, authorizer())
    assert sent(entity, d).topics == ()
    out = merged(entity, d, md_response(12, []))
    assert [(t.name, t.error_code) for t in out.topics] == [("b-1", 29)] and out.brokers


def test_metadata_topic_and_cluster_ops_computed_by_kgw(caplog):
    authz = authorizer(acl("a-", Op.DESCRIBE), acl("a-", Op.READ), cluster_acl(Op.DESCRIBE))
    entity = md_request(10, ["a-1"], auto=False, ops=True, cluster_ops=True)
    d = enforce(entity, authz)
    out = merged(entity, d, md_response(10, [md_topic(10, "a-1", topic_id=uuid.uuid4())]))
    assert out.topics[0].topic_authorized_operations == (1 << 3) | (1 << 8)
    assert out.cluster_authorized_operations == 1 << 8
    # cluster ops denied -> 0, the DESCRIBE denial is logged at INFO (T/T)
    entity = md_request(10, ["a-1"], auto=False, cluster_ops=True)
    caplog.clear()
    out = merged(entity, enforce(entity, authorizer(acl("a-", Op.DESCRIBE))), md_response(10, []))
    assert out.cluster_authorized_operations == 0
    assert lines(caplog, logging.INFO, "operation = DESCRIBE", "Cluster:LITERAL:kafka-cluster")
    # not requested -> the schema default, not upstream's value
    entity = md_request(10, ["a-1"], auto=False)
    out = merged(entity, enforce(entity, authz), md_response(10, [md_topic(10, "a-1")]))
    assert out.cluster_authorized_operations == MIN


def test_metadata_all_topics_silently_filtered_without_info_log(caplog):
    authz = authorizer(acl("a-", Op.DESCRIBE))
    entity = md_request(12, None, ops=True)
    d = enforce(entity, authz)
    assert d.request is None and d.respond is None
    out = merged(entity, d, md_response(12, [md_topic(12, "a-1"), md_topic(12, "b-1")]))
    assert [t.name for t in out.topics] == ["a-1"]
    assert out.topics[0].topic_authorized_operations == 1 << 8
    assert not lines(caplog, logging.INFO)  # D=false for all-topics
    assert lines(caplog, TRACE, "Denied operation = DESCRIBE", "Topic:LITERAL:b-1")


def test_metadata_v0_empty_list_means_all_topics(caplog):
    entity = md_request(0, [])
    d = enforce(entity, authorizer(acl("a-", Op.DESCRIBE)))
    out = merged(entity, d, md_response(0, [md_topic(0, "a-1"), md_topic(0, "b-1")]))
    assert [t.name for t in out.topics] == ["a-1"]
    assert not lines(caplog, logging.INFO)


def test_metadata_by_id_returns_id_with_null_name_when_denied(caplog):
    ida, idb, idc = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    entity = md_request(12, [], ids=[ida, idb, idc])
    d = enforce(entity, authorizer(acl("a-", Op.DESCRIBE)))
    forwarded = sent(entity, d)  # the ids only, auto-creation off; filtered on the way back
    assert [(t.name, t.topic_id) for t in forwarded.topics] == [(None, ida), (None, idb), (None, idc)]
    assert forwarded.allow_auto_topic_creation is False
    upstream = md_response(12, [md_topic(12, "a-1", topic_id=ida), md_topic(12, "b-1", topic_id=idb),
                                md_topic(12, None, error=100, topic_id=idc),
                                md_topic(12, "a-extra", topic_id=uuid.uuid4())])  # not asked for: dropped
    out = merged(entity, d, upstream)
    assert [(t.name, t.topic_id, t.error_code) for t in out.topics] == [
        ("a-1", ida, 0), (None, idb, 29), (None, idc, 100)]
    assert lines(caplog, logging.INFO, "Denied operation = DESCRIBE", "Topic:LITERAL:b-1")


def test_metadata_mixing_ids_and_names_forwards_only_the_ids_and_never_auto_creates():
    """Finding 1: one id among named topics with auto-creation on must not let the names through."""
    known = uuid.uuid4()
    cls = request_class(3, 12)
    tcls = elem(cls, "topics")
    entity = cls(topics=(tcls(name=None, topic_id=known), *(tcls(name=f"new-{i}", topic_id=None) for i in range(20)),
                         tcls(name="secret", topic_id=uuid.uuid4())),
                 allow_auto_topic_creation=True, include_topic_authorized_operations=False)
    d = enforce(entity, authorizer())  # no ACL at all
    forwarded = sent(entity, d)
    assert all(t.name is None for t in forwarded.topics)
    assert len(forwarded.topics) == 2 and forwarded.topics[0].topic_id == known
    assert forwarded.allow_auto_topic_creation is False
    out = merged(entity, d, md_response(12, [md_topic(12, "hidden", topic_id=known)]))
    assert [(t.name, t.topic_id, t.error_code) for t in out.topics] == [(None, known, 29)]


def test_metadata_v10_with_topic_id_is_an_invalid_request():
    entity = md_request(10, [], ids=[uuid.uuid4()])
    out = answered(entity, enforce(entity, authorizer()))
    assert [t.error_code for t in out.topics] == [42]


def test_metadata_auto_create_denied_forwards_without_auto_create_and_answers_29(caplog):
    authz = authorizer(acl("a-", Op.DESCRIBE))
    entity = md_request(12, ["a-new", "a-old"], auto=True, ops=True)
    d = enforce(entity, authz)
    forwarded = sent(entity, d)
    assert forwarded.allow_auto_topic_creation is False
    assert [t.name for t in forwarded.topics] == ["a-new", "a-old"]
    caplog.clear()
    out = merged(entity, d, md_response(12, [md_topic(12, "a-new", error=3), md_topic(12, "a-old")]))
    assert [(t.name, t.error_code) for t in out.topics] == [("a-new", 29), ("a-old", 0)]
    assert out.topics[0].topic_authorized_operations == MIN and out.topics[0].topic_id is None
    # CLUSTER:CREATE with D=false (TRACE only), then TOPIC:CREATE T/T on the missing topic only
    assert lines(caplog, TRACE, "Denied operation = CREATE", "Cluster:LITERAL:kafka-cluster")
    assert lines(caplog, logging.INFO, "Denied operation = CREATE", "Topic:LITERAL:a-new")
    assert not lines(caplog, logging.INFO, "a-old")


def test_metadata_auto_create_allowed_is_forwarded_unchanged(caplog):
    authz = authorizer(acl("a-", Op.DESCRIBE), acl("a-", Op.CREATE))
    entity = md_request(12, ["a-new"], auto=True)
    d = enforce(entity, authz)
    assert d.request is None and d.merge is not None  # the original request, auto-creation on
    assert not lines(caplog, logging.INFO)
    # the prediction is silent: CREATE decisions only at TRACE (log flags off)
    assert lines(caplog, TRACE, "Allowed operation = CREATE", "Topic:LITERAL:a-new")
    # CLUSTER:CREATE also allows it
    d = enforce(entity, authorizer(acl("a-", Op.DESCRIBE), cluster_acl(Op.CREATE)))
    assert d.request is None and d.merge is not None
    # a topic without DESCRIBE is dropped; auto-creation stays on for the creatable rest
    entity = md_request(12, ["a-new", "b-x"], auto=True)
    forwarded = sent(entity, enforce(entity, authz))
    assert [t.name for t in forwarded.topics] == ["a-new"] and forwarded.allow_auto_topic_creation is True


def test_metadata_auto_create_not_requested_never_checks_create(caplog):
    entity = md_request(12, ["a-new"], auto=False)
    d = enforce(entity, authorizer(acl("a-", Op.DESCRIBE)))
    out = merged(entity, d, md_response(12, [md_topic(12, "a-new", error=3)]))
    assert out.topics[0].error_code == 3
    assert not [m for _, m in audit(caplog) if "CREATE" in m]


def test_metadata_v1_never_forwards_a_topic_without_create_even_one_kgw_saw_exist():
    """v0-3 always auto-creates: a topic kgw saw once may have been deleted since, so kgw's memory
    is no reason to forward it (finding 5 of the hostile-client review)."""
    authz = authorizer(acl("a-", Op.DESCRIBE), acl("a-c", Op.CREATE))
    TOPICS.learn("a-known", None)
    entity = md_request(1, ["a-known", "a-unknown", "a-creatable"])
    d = enforce(entity, authz)
    assert [t.name for t in sent(entity, d).topics] == ["a-creatable"]
    out = merged(entity, d, md_response(1, [md_topic(1, "a-creatable")]))
    assert [(t.name, t.error_code) for t in out.topics] == [("a-known", 29), ("a-unknown", 29), ("a-creatable", 0)]


# -- DescribeTopicPartitions (75) ------------------------------------------------


def dtp_request(names, cursor=None):
    cls = request_class(75, 0)
    tcls = elem(cls, "topics")
    ccls = elem(cls, "cursor")
    return cls(topics=tuple(tcls(name=n) for n in names), response_partition_limit=i32(2000),
               cursor=None if cursor is None else ccls(topic_name=cursor[0], partition_index=i32(cursor[1])))


def dtp_topic(name, error=0):
    tcls = elem(response_class(75, 0), "topics")
    return make(tcls, error_code=E(error), name=name, topic_id=uuid.uuid4(), is_internal=False, partitions=(),
                topic_authorized_operations=i32(99))


def test_describe_topic_partitions_named_mixed(caplog):
    entity = dtp_request(["b-1", "a-1"])
    d = enforce(entity, authorizer(acl("a-", Op.DESCRIBE)))
    assert [t.name for t in sent(entity, d).topics] == ["a-1"]
    out = merged(entity, d, resp(75, 0, topics=(dtp_topic("a-1"),), next_cursor=None))
    assert [(t.name, t.error_code) for t in out.topics] == [("b-1", 29), ("a-1", 0)]
    assert out.topics[0].topic_id is None
    assert out.topics[1].topic_authorized_operations == 1 << 8  # always computed
    assert lines(caplog, logging.INFO, "Denied operation = DESCRIBE", "Topic:LITERAL:b-1")


def test_describe_topic_partitions_all_topics_filtered_but_denials_logged(caplog):
    """All topics: kgw lists the cluster's topics itself, authorizes each (D=true, as Kafka) and
    forwards the named form with the allowed ones: the broker never lists with kgw's authority."""
    entity = dtp_request([])
    d = enforce(entity, authorizer(acl("a-", Op.DESCRIBE)))
    assert d.then is not None and d.request is None and d.merge is None  # nothing before the listing
    decided = settle(d, FakeServices(FakeUpstream(["b-1", "a-2", "a-1", "__consumer_offsets"])))
    forwarded = sent(entity, decided)
    assert [t.name for t in forwarded.topics] == ["a-1", "a-2"] and forwarded.cursor is None
    assert lines(caplog, logging.INFO, "Denied operation = DESCRIBE", "Topic:LITERAL:b-1")  # D=true here
    # a topic deleted since the listing: the named form's error entry is dropped, as Kafka skips it
    out = merged(entity, decided, resp(75, 0, topics=(dtp_topic("a-1"), dtp_topic("a-2", error=3)), next_cursor=None))
    assert [t.name for t in out.topics] == ["a-1"]


def test_describe_topic_partitions_all_topics_with_nothing_visible_is_answered_empty():
    entity = dtp_request([])
    d = settle(enforce(entity, authorizer()), FakeServices(FakeUpstream(["b-1", "c-1"])))
    out = answered(entity, d)
    assert out.topics == () and out.next_cursor is None


def test_describe_topic_partitions_cursor_rules():
    authz = authorizer(acl("a-", Op.DESCRIBE))
    entity = dtp_request(["a-1", "b-1"], cursor=("zz", 0))  # cursor topic not in the list
    assert [t.error_code for t in answered(entity, enforce(entity, authz)).topics] == [42, 42]
    entity = dtp_request(["a-1", "a-2", "b-1"], cursor=("a-2", 3))
    forwarded = sent(entity, enforce(entity, authz))
    assert [t.name for t in forwarded.topics] == ["a-2"] and forwarded.cursor.partition_index == 3
    # the cursor topic itself denied: the cursor is dropped, later topics start at 0
    entity = dtp_request(["a-1", "a-9", "b-1"], cursor=("a-5", 0))
    with pytest.raises(AssertionError):
        sent(entity, enforce(entity, authz))  # a-5 not in the list -> 42 answered
    entity = dtp_request(["a-9", "0-1"], cursor=("0-1", 2))
    forwarded = sent(entity, enforce(entity, authz))
    assert [t.name for t in forwarded.topics] == ["a-9"] and forwarded.cursor is None


# -- ListOffsets (2) ---------------------------------------------------------------


def lo_request(version, topics):
    cls = request_class(2, version)
    tcls = elem(cls, "topics")
    pcls = elem(tcls, "partitions")
    return make(cls, replica_id=i32(-1), isolation_level=i8(0), timeout=timedelta(seconds=1), topics=tuple(
        tcls(name=n, partitions=tuple(make(pcls, partition_index=i32(p), current_leader_epoch=i32(-1),
                                           timestamp=i64(-1)) for p in parts)) for n, parts in topics))


def lo_topic(version, name, parts):
    tcls = elem(response_class(2, version), "topics")
    pcls = elem(tcls, "partitions")
    return tcls(name=name, partitions=tuple(make(pcls, partition_index=i32(p), error_code=E(0), timestamp=i64(-1),
                                                  offset=i64(42), leader_epoch=i32(0)) for p in parts))


def test_list_offsets_allowed_denied_mixed(caplog):
    authz = authorizer(acl("a-", Op.READ))  # READ implies DESCRIBE
    entity = lo_request(7, [("a-1", [0, 1])])
    assert enforce(entity, authz) is FORWARD
    entity = lo_request(7, [("b-1", [0, 1])])
    out = answered(entity, enforce(entity, authz))
    assert [(p.partition_index, p.error_code, p.timestamp, p.offset) for p in out.topics[0].partitions] == [
        (0, 29, -1, -1), (1, 29, -1, -1)]
    caplog.clear()
    entity = lo_request(9, [("b-1", [0]), ("a-1", [0]), ("b-1", [1])])
    d = enforce(entity, authz)
    assert [t.name for t in sent(entity, d).topics] == ["a-1"]
    out = merged(entity, d, resp(2, 9, topics=(lo_topic(9, "a-1", [0]),)))
    assert [(t.name, [p.partition_index for p in t.partitions], t.partitions[0].error_code) for t in out.topics] == [
        ("b-1", [0], 29), ("a-1", [0], 0), ("b-1", [1], 29)]
    # refCount = topic entries carrying the name
    assert lines(caplog, logging.INFO, "Denied operation = DESCRIBE", "Topic:LITERAL:b-1", "resourceRefCount = 2")


# -- OffsetForLeaderEpoch (23) ------------------------------------------------------


def ofle_request(topics):
    cls = request_class(23, 4)
    tcls = elem(cls, "topics")
    pcls = elem(tcls, "partitions")
    return cls(replica_id=i32(-1), topics=tuple(tcls(topic=n, partitions=tuple(
        pcls(partition=i32(p), current_leader_epoch=i32(0), leader_epoch=i32(0)) for p in parts))
        for n, parts in topics))


def test_offset_for_leader_epoch(caplog):
    entity = ofle_request([("a-1", [0]), ("b-1", [0, 1])])
    assert enforce(entity, authorizer(cluster_acl(Op.CLUSTER_ACTION))) is FORWARD
    caplog.clear()
    d = enforce(entity, authorizer(acl("a-", Op.DESCRIBE)))
    assert lines(caplog, TRACE, "Denied operation = CLUSTER_ACTION")  # D=false
    assert not lines(caplog, logging.INFO, "CLUSTER_ACTION")
    assert lines(caplog, logging.INFO, "Denied operation = DESCRIBE", "Topic:LITERAL:b-1")
    assert [t.topic for t in sent(entity, d).topics] == ["a-1"]
    tcls = elem(response_class(23, 4), "topics")
    pcls = elem(tcls, "partitions")
    up = resp(23, 4, topics=(tcls(topic="a-1", partitions=(pcls(error_code=E(0), partition=i32(0),
                                                                  leader_epoch=i32(3), end_offset=i64(9)),)),))
    out = merged(entity, d, up)
    assert [(t.topic, [(p.partition, p.error_code, p.end_offset) for p in t.partitions]) for t in out.topics] == [
        ("a-1", [(0, 0, 9)]), ("b-1", [(0, 29, -1), (1, 29, -1)])]


# -- CreateTopics (19) --------------------------------------------------------------


def ct_request(version, names):
    cls = request_class(19, version)
    tcls = elem(cls, "topics")
    return cls(topics=tuple(tcls(name=n, num_partitions=i32(1), replication_factor=i16(1), assignments=(),
                                 configs=()) for n in names), timeout=timedelta(seconds=5), validate_only=False)


def ct_result(version, name, error=0):
    tcls = elem(response_class(19, version), "topics")
    ccls = elem(tcls, "configs")
    return make(tcls, name=name, topic_id=uuid.uuid4(), error_code=E(error), error_message=None,
                topic_config_error_code=i16(0), num_partitions=i32(1), replication_factor=i16(1),
                configs=(make(ccls, name="cleanup.policy", value="delete", read_only=False, config_source=i8(5),
                              is_sensitive=False),))


def test_create_topics_per_topic_create_and_describe_configs(caplog):
    authz = authorizer(acl("a-", Op.CREATE), acl("a-1", Op.DESCRIBE_CONFIGS, pattern=PatternType.LITERAL))
    entity = ct_request(7, ["b-1", "a-1", "a-2"])
    d = enforce(entity, authz)
    assert [t.name for t in sent(entity, d).topics] == ["a-1", "a-2"]
    r1, r2 = ct_result(7, "a-1"), ct_result(7, "a-2")
    out = merged(entity, d, resp(19, 7, topics=(r2, r1)))
    assert [(t.name, t.error_code) for t in out.topics] == [("b-1", 29), ("a-1", 0), ("a-2", 0)]
    b, a1, a2 = out.topics
    assert b.error_message == "Authorization failed." and b.topic_id is None
    assert a1.configs and a1.topic_config_error_code == 0 and a1.num_partitions == 1
    # created without DESCRIBE_CONFIGS: 29 in topicConfigErrorCode, nothing else returned
    assert (a2.topic_config_error_code, a2.num_partitions, a2.replication_factor, a2.configs) == (29, -1, -1, ())
    assert a2.topic_id == r2.topic_id and TOPICS.name_of(r2.topic_id) == "a-2"
    info = lines(caplog, logging.INFO)
    assert any("Denied operation = CREATE" in m and "Topic:LITERAL:b-1" in m for m in info)
    assert not any("kafka-cluster" in m or "DESCRIBE_CONFIGS" in m for m in info)  # both D=false


def test_create_topics_cluster_create_allows_all_and_whole_denial_is_local(caplog):
    authz = authorizer(cluster_acl(Op.CREATE))
    entity = ct_request(4, ["x", "y"])
    d = enforce(entity, authz)
    assert d.request is None and d.respond is None and d.merge is not None  # forwarded unchanged
    assert not [m for _, m in audit(caplog) if "Operation = CREATE" in m and "Topic:" in m]
    out = answered(entity, enforce(entity, authorizer()))
    assert [(t.name, t.error_code) for t in out.topics] == [("x", 29), ("y", 29)]


def test_create_topics_duplicates_and_cluster_metadata_are_invalid_and_not_authorized(caplog):
    authz = authorizer(acl("", Op.CREATE), acl("", Op.DESCRIBE_CONFIGS))
    entity = ct_request(7, ["d", "__cluster_metadata", "ok", "d"])
    caplog.clear()
    d = enforce(entity, authz)
    assert [t.name for t in sent(entity, d).topics] == ["ok"]
    out = merged(entity, d, resp(19, 7, topics=(ct_result(7, "ok"),)))
    assert [(t.name, t.error_code, t.error_message) for t in out.topics] == [
        ("d", 42, "Duplicate topic name."),
        ("__cluster_metadata", 42, "Creation of internal topic __cluster_metadata is prohibited."),
        ("ok", 0, None)]
    checked = " ".join(m for _, m in audit(caplog))
    assert "Topic:LITERAL:d " not in checked and "__cluster_metadata" not in checked


# -- DeleteTopics (20) ----------------------------------------------------------------


def dt_request(entries):
    cls = request_class(20, 6)
    tcls = elem(cls, "topics")
    return cls(topics=tuple(tcls(name=n, topic_id=i) for n, i in entries), timeout=timedelta(seconds=5))


def dt_result(name, topic_id, error=0):
    return make(elem(response_class(20, 6), "responses"), name=name, topic_id=topic_id, error_code=E(error),
                error_message=None)


def test_delete_topics_cluster_delete_shortcut(caplog):
    entity = dt_request([("x", None), (None, uuid.uuid4())])
    assert enforce(entity, authorizer(cluster_acl(Op.DELETE))) is FORWARD
    caplog.clear()
    enforce(entity, authorizer())
    assert lines(caplog, TRACE, "Denied operation = DELETE", "kafka-cluster")  # D=false


def test_delete_topics_by_name_mixed(caplog):
    authz = authorizer(acl("a-", Op.DELETE), acl("a-", Op.DESCRIBE), acl("c-", Op.DESCRIBE))
    entity = dt_request([("b-1", None), ("a-1", None), ("c-1", None)])
    d = enforce(entity, authz)
    assert [t.name for t in sent(entity, d).topics] == ["a-1"]
    ida = uuid.uuid4()
    out = merged(entity, d, resp(20, 6, responses=(dt_result("a-1", ida),)))
    assert [(r.name, r.topic_id, r.error_code) for r in out.responses] == [
        ("b-1", None, 29), ("a-1", ida, 0), ("c-1", None, 29)]
    assert out.responses[0].error_message == "Topic authorization failed."
    assert lines(caplog, logging.INFO, "Denied operation = DESCRIBE", "Topic:LITERAL:b-1")
    assert lines(caplog, logging.INFO, "Denied operation = DELETE", "Topic:LITERAL:c-1")


def test_delete_topics_by_id():
    authz = authorizer(acl("a-", Op.DELETE), acl("a-", Op.DESCRIBE), acl("c-", Op.DESCRIBE))
    ida, idb, idc, unknown = (uuid.uuid4() for _ in range(4))
    for name, i in (("a-1", ida), ("b-1", idb), ("c-1", idc)):
        TOPICS.learn(name, i)
    entity = dt_request([(None, ida), (None, idb), (None, idc), (None, unknown)])
    d = enforce(entity, authz)
    assert [t.topic_id for t in sent(entity, d).topics] == [ida]
    out = merged(entity, d, resp(20, 6, responses=(dt_result("a-1", ida),)))
    assert [(r.name, r.topic_id, r.error_code) for r in out.responses] == [
        ("a-1", ida, 0),
        (None, idb, 29),  # no DESCRIBE: the name is not revealed
        ("c-1", idc, 29),  # DESCRIBE but no DELETE: with the name
        (None, unknown, 100)]


def test_delete_topics_invalid_entries_and_duplicates():
    authz = authorizer(acl("", Op.DELETE), acl("", Op.DESCRIBE))
    i = uuid.uuid4()
    entity = dt_request([("x", None), ("x", None), (None, None), ("y", i), (None, i), (None, i)])
    out = answered(entity, enforce(entity, authz))
    assert [(r.name, r.topic_id, r.error_code, r.error_message) for r in out.responses] == [
        ("x", None, 42, "Duplicate topic name."),
        (None, None, 42, "Neither topic name nor id were specified."),
        ("y", i, 42, "You may not specify both topic name and topic id."),
        (None, i, 42, "Duplicate topic id.")]


def test_delete_topics_v4_names():
    cls = request_class(20, 4)
    entity = cls(topic_names=("a-1", "b-1"), timeout=timedelta(seconds=1))
    authz = authorizer(acl("a-", Op.DELETE), acl("a-", Op.DESCRIBE))
    d = enforce(entity, authz)
    assert sent(entity, d).topic_names == ("a-1",)
    rcls = elem(response_class(20, 4), "responses")
    out = merged(entity, d, resp(20, 4, responses=(make(rcls, name="a-1", error_code=E(0)),)))
    assert [(r.name, r.error_code) for r in out.responses] == [("a-1", 0), ("b-1", 29)]


# -- CreatePartitions (37) / DeleteRecords (21) / DescribeProducers (61) --------------


def test_create_partitions(caplog):
    cls = request_class(37, 3)
    tcls = elem(cls, "topics")
    entity = cls(topics=tuple(tcls(name=n, count=i32(3), assignments=None) for n in ("b-1", "a-1", "d", "d")),
                 timeout=timedelta(seconds=1), validate_only=False)
    d = enforce(entity, authorizer(acl("a-", Op.ALTER), acl("d", Op.ALTER)))
    assert [t.name for t in sent(entity, d).topics] == ["a-1"]
    rcls = elem(response_class(37, 3), "results")
    out = merged(entity, d, resp(37, 3, results=(rcls(name="a-1", error_code=E(0), error_message=None),)))
    assert [(r.name, r.error_code, r.error_message) for r in out.results] == [
        ("b-1", 29, None), ("a-1", 0, None), ("d", 42, "Duplicate topic name.")]
    assert lines(caplog, logging.INFO, "Denied operation = ALTER", "Topic:LITERAL:b-1")
    assert not [m for _, m in audit(caplog) if "Topic:LITERAL:d " in m]


def test_delete_records():
    cls = request_class(21, 2)
    tcls = elem(cls, "topics")
    pcls = elem(tcls, "partitions")
    entity = cls(topics=tuple(tcls(name=n, partitions=(pcls(partition_index=i32(0), offset=i64(5)),))
                              for n in ("a-1", "b-1")), timeout=timedelta(seconds=1))
    authz = authorizer(acl("a-", Op.DELETE))
    d = enforce(entity, authz)
    assert [t.name for t in sent(entity, d).topics] == ["a-1"]
    rt = elem(response_class(21, 2), "topics")
    rp = elem(rt, "partitions")
    out = merged(entity, d, resp(21, 2, topics=(rt(name="a-1", partitions=(
        rp(partition_index=i32(0), low_watermark=i64(5), error_code=E(0)),)),)))
    assert [(t.name, t.partitions[0].error_code, t.partitions[0].low_watermark) for t in out.topics] == [
        ("a-1", 0, 5), ("b-1", 29, -1)]
    entity = cls(topics=(tcls(name="b-1", partitions=(pcls(partition_index=i32(0), offset=i64(5)),)),),
                 timeout=timedelta(seconds=1))
    assert answered(entity, enforce(entity, authz)).topics[0].partitions[0].error_code == 29


def test_describe_producers(caplog):
    cls = request_class(61, 0)
    tcls = elem(cls, "topics")
    entity = cls(topics=tuple(tcls(name=n, partition_indexes=(i32(0), i32(1))) for n in ("a-1", "b-1", "bad/name")))
    authz = authorizer(acl("a-", Op.READ))
    d = enforce(entity, authz)
    assert [t.name for t in sent(entity, d).topics] == ["a-1"]
    assert not [m for _, m in audit(caplog) if "bad/name" in m]  # invalid name: 17 before auth
    rt = elem(response_class(61, 0), "topics")
    rp = elem(rt, "partitions")
    out = merged(entity, d, resp(61, 0, topics=(rt(name="a-1", partitions=tuple(
        rp(partition_index=i32(p), error_code=E(0), error_message=None, active_producers=()) for p in (0, 1))),)))
    assert [(t.name, [p.error_code for p in t.partitions]) for t in out.topics] == [
        ("a-1", [0, 0]), ("b-1", [29, 29]), ("bad/name", [17, 17])]
    assert out.topics[1].partitions[0].error_message == "Topic authorization failed."
    assert out.topics[2].partitions[0].error_message.startswith("Topic name is invalid: ")
    entity = cls(topics=(tcls(name="a-1", partition_indexes=(i32(0),)),))
    assert enforce(entity, authz) is FORWARD


# -- DescribeCluster (60) ----------------------------------------------------------


def dc_response(error=0, ops=555):
    bcls = elem(response_class(60, 1), "brokers")
    return resp(60, 1, error_code=E(error), error_message=None, endpoint_type=i8(1), cluster_id="c",
                controller_id=i32(1), brokers=(make(bcls, broker_id=i32(1), host="h", port=i32(1), rack=None),),
                cluster_authorized_operations=i32(ops))


def test_describe_cluster_ops(caplog):
    cls = request_class(60, 1)
    entity = cls(include_cluster_authorized_operations=True, endpoint_type=i8(1))
    out = merged(entity, enforce(entity, authorizer(cluster_acl(Op.ALTER))), dc_response())
    assert out.cluster_authorized_operations == (1 << 7) | (1 << 8)  # ALTER implies DESCRIBE
    out = merged(entity, enforce(entity, authorizer()), dc_response())
    assert out.cluster_authorized_operations == 0
    assert lines(caplog, logging.INFO, "Denied operation = DESCRIBE", "kafka-cluster")
    entity = cls(include_cluster_authorized_operations=False, endpoint_type=i8(1))
    caplog.clear()
    out = merged(entity, enforce(entity, authorizer()), dc_response())
    assert out.cluster_authorized_operations == MIN and not audit(caplog)
    entity = cls(include_cluster_authorized_operations=True, endpoint_type=i8(1))
    out = merged(entity, enforce(entity, authorizer(cluster_acl(Op.DESCRIBE))), dc_response(error=114))
    assert out.cluster_authorized_operations == MIN


# -- cluster-only APIs -----------------------------------------------------------------


def test_describe_log_dirs():
    for version, has_error in ((1, False), (4, True)):
        cls = request_class(35, version)
        entity = cls(topics=None)
        assert enforce(entity, authorizer(cluster_acl(Op.DESCRIBE))) is FORWARD
        out = answered(entity, enforce(entity, authorizer()))
        assert out.results == ()
        assert (getattr(out, "error_code", None) == 31) is has_error


def test_alter_replica_log_dirs():
    cls = request_class(34, 2)
    dcls = elem(cls, "dirs")
    tcls = elem(dcls, "topics")
    entity = cls(dirs=(dcls(path="/d1", topics=(tcls(name="a", partitions=(i32(0), i32(1))),)),
                       dcls(path="/d2", topics=(tcls(name="b", partitions=(i32(2),)),))))
    assert enforce(entity, authorizer(cluster_acl(Op.ALTER))) is FORWARD
    out = answered(entity, enforce(entity, authorizer()))
    assert [(r.topic_name, [(p.partition_index, p.error_code) for p in r.partitions]) for r in out.results] == [
        ("a", [(0, 31), (1, 31)]), ("b", [(2, 31)])]


def test_elect_leaders():
    for version in (0, 2):
        cls = request_class(43, version)
        tcls = elem(cls, "topic_partitions")
        entity = make(cls, election_type=i8(0), timeout=timedelta(seconds=1),
                      topic_partitions=(tcls(topic="a", partitions=(i32(0), i32(1))),))
        assert enforce(entity, authorizer(cluster_acl(Op.ALTER))) is FORWARD
        out = answered(entity, enforce(entity, authorizer(cluster_acl(Op.DESCRIBE))))
        assert [p.error_code for p in out.replica_election_results[0].partition_result] == [31, 31]
        assert getattr(out, "error_code", 31) == 31
    entity = make(cls, election_type=i8(0), timeout=timedelta(seconds=1), topic_partitions=None)
    assert answered(entity, enforce(entity, authorizer())).replica_election_results == ()


def test_partition_reassignments():
    cls = request_class(45, 0)
    tcls = elem(cls, "topics")
    pcls = elem(tcls, "partitions")
    entity = cls(timeout=timedelta(seconds=1), topics=(tcls(name="a", partitions=(
        pcls(partition_index=i32(0), replicas=(i32(1),)),)),))
    assert enforce(entity, authorizer(cluster_acl(Op.ALTER))) is FORWARD
    out = answered(entity, enforce(entity, authorizer()))
    assert out.error_code == 31 and out.responses[0].partitions[0].error_code == 31
    cls = request_class(46, 0)
    tcls = elem(cls, "topics")
    entity = cls(timeout=timedelta(seconds=1), topics=(tcls(name="a", partition_indexes=(i32(0), i32(3))),))
    assert enforce(entity, authorizer(cluster_acl(Op.DESCRIBE))) is FORWARD
    out = answered(entity, enforce(entity, authorizer(cluster_acl(Op.ALTER, perm=DENY))))
    assert out.error_code == 31
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in out.topics] == [("a", [0, 3])]


def test_dtp_names_before_the_cursor_are_never_forwarded_nor_returned():
    """Finding 4: names ordered before the cursor were neither authorized nor removed."""
    authz = authorizer(acl("c-", Op.DESCRIBE), acl("a-", Op.DESCRIBE))
    entity = dtp_request(["a-1", "b-secret", "c-1"], cursor=("c-1", 0))
    d = enforce(entity, authz)
    assert [t.name for t in sent(entity, d).topics] == ["c-1"]
    cls = response_class(75, 0)
    tcls = elem(cls, "topics")
    topic = lambda n: make(tcls, error_code=E.none, name=n, topic_id=uuid.uuid4(), is_internal=False, partitions=(),
                           topic_authorized_operations=i32(-2147483648))
    upstream = make(cls, throttle_time=timedelta(0), next_cursor=None, topics=(topic("b-secret"), topic("c-1")))
    out = merged(entity, d, upstream)
    assert [t.name for t in out.topics] == ["c-1"]


def test_dtp_all_topics_pages_over_the_visible_topics_only():
    """The page ends where Kafka's would: the cursor is always a topic the client may see, and
    a page that ends on a hidden topic's place continues with the next visible one."""
    authz = authorizer(acl("a-", Op.DESCRIBE), acl("c-", Op.DESCRIBE))
    services = FakeServices(FakeUpstream(["a-1", "b-secret", "c-1", "c-2"]))
    entity = dtp_request([], cursor=("b-0", 0))  # a cursor between the visible ones
    forwarded = sent(entity, settle(enforce(entity, authz), services))
    assert [t.name for t in forwarded.topics] == ["c-1", "c-2"] and forwarded.cursor is None
    entity = dtp_request([], cursor=("c-1", 3))  # a visible cursor topic keeps its partition
    forwarded = sent(entity, settle(enforce(entity, authz), services))
    assert [t.name for t in forwarded.topics] == ["c-1", "c-2"] and forwarded.cursor.partition_index == 3


# -- Metadata naming no topic: the brokers-only refresh ----------------------------


def _as_sent(decision, upstream: bytes) -> bytes:
    """What the client gets: the merge's body, or the upstream's when it returns None (as the
    connection does)."""
    body = decision.merge(upstream, 0)
    return upstream if body is None else body


@pytest.mark.parametrize("version", range(1, 14))
def test_a_brokers_only_answer_goes_back_as_it_came(version, monkeypatch):
    """An answer with no topic to a request naming none is passed on as it came (not copied, not
    decoded); in v8-10 only when it says what the merge would set, "not requested": otherwise
    the merge sets it.  (That both give the decoding merge's bytes: test_metadata_merge.py.)"""
    import protocol.codecs

    kw = {"allow_auto_topic_creation": False} if version >= 4 else {}
    if 8 <= version <= 10:
        kw["include_cluster_authorized_operations"] = False
    if version >= 8:
        kw["include_topic_authorized_operations"] = False
    request = req(3, version, topics=(), **kw)
    decision = enforce(request, authorizer(acl("t", Op.DESCRIBE)))
    bcls = elem(response_class(3, version), "brokers")

    def answer(cluster_ops):
        return encode(resp(3, version, brokers=(make(bcls, node_id=i32(1), host="b1", port=i32(9092), rack="r"),),
                           cluster_id="c", controller_id=i32(1), topics=(), cluster_authorized_operations=i32(cluster_ops),
                           error_code=E.none))

    monkeypatch.setattr(protocol.codecs, "_decode_checked", None)  # never decoded
    assert decision.merge(answer(MIN), 0) is None
    if 8 <= version <= 10:
        merged_body = decision.merge(answer(8096), 0)
        assert merged_body == answer(MIN)


@pytest.mark.parametrize("version", [1, 9, 12])
def test_topics_an_upstream_adds_to_a_brokers_only_answer_never_reach_the_client(version):
    kw = {"allow_auto_topic_creation": False} if version >= 4 else {}
    if version >= 8:
        kw["include_topic_authorized_operations"] = False
    if 8 <= version <= 10:
        kw["include_cluster_authorized_operations"] = False
    request = req(3, version, topics=(), **kw)
    decision = enforce(request, authorizer(acl("t", Op.DESCRIBE)))
    cls = response_class(3, version)
    tcls = elem(cls, "topics")
    topic = make(tcls, error_code=E.none, name="secret", topic_id=uuid.uuid4(), is_internal=False, partitions=(),
                 topic_authorized_operations=i32(MIN))
    upstream = encode(resp(3, version, brokers=(), cluster_id="c", controller_id=i32(1), topics=(topic,),
                           cluster_authorized_operations=i32(MIN), error_code=E.none))
    assert decode_response(3, version, _as_sent(decision, upstream), 0).topics == ()


def test_cluster_operations_asked_for_are_computed_on_a_brokers_only_answer():
    request = req(3, 9, topics=(), allow_auto_topic_creation=False, include_cluster_authorized_operations=True,
                  include_topic_authorized_operations=False)
    decision = enforce(request, authorizer(cluster_acl(Op.DESCRIBE)))
    upstream = encode(resp(3, 9, brokers=(), cluster_id="c", controller_id=i32(1), topics=(),
                           cluster_authorized_operations=i32(MIN)))
    assert decode_response(3, 9, _as_sent(decision, upstream), 0).cluster_authorized_operations != MIN
