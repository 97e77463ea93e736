"""Produce (0) enforcement with the real spec and StandardAuthorizer, checked on what is forwarded.

Each test encodes a Produce request with kio, runs the registry's inspect and
enforce, and decodes the request kgw would forward (as the broker would): a
denied topic, an invalid batch or a transactional batch without TRANSACTIONAL_ID
WRITE must never be in it, and the record bytes that are forwarded must be the
client's own, untouched.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i64

from authz.acl import AccessControlEntry, AclBinding, AclOperation as Op, AclPermissionType, PatternType
from authz.acl import ResourcePattern, ResourceType as RT
from authz.standard_authorizer import StandardAuthorizer
from protocol.apis.base import FORWARD
from protocol.apis.registry import REGISTRY
from protocol.codecs import decode_request, decode_response, encode, make, nested, request_class, response_class
from protocol.headers import parse_request_header
from tests.support.kio_samples import record_batch
from tests.unit.protocol.test_topics_enforcement import TOPICS, frame, helper

SPEC = REGISTRY[0]


def _authorizer(*acls: tuple[RT, str, Op]) -> StandardAuthorizer:
    a = StandardAuthorizer()
    a.configure({})
    a.load_snapshot({uuid.uuid4(): AclBinding(ResourcePattern(rt, name, PatternType.LITERAL),
                                              AccessControlEntry("User:alice", "*", op, AclPermissionType.ALLOW))
                     for rt, name, op in acls})
    a.complete_initial_load()
    return a


def _request(version: int, topics: dict[str, dict[int, bytes]], txn: str | None = None, acks: int = -1):
    cls = request_class(0, version)
    tcls = nested(cls, "topic_data")
    pcls = nested(tcls, "partition_data")
    return cls(transactional_id=txn, acks=i16(acks), timeout=timedelta(seconds=5), topic_data=tuple(
        tcls(name=name, partition_data=tuple(pcls(index=i32(p), records=r) for p, r in parts.items()))
        for name, parts in topics.items()))


def _enforce(authz, entity):
    body = frame(entity)
    header = parse_request_header(body)
    info = SPEC.inspect(header, body)
    return SPEC.enforce(helper(authz, 0, header.api_version), header, body, info)


def _upstream_response(version: int, forwarded) -> bytes:
    cls = response_class(0, version)
    tcls = nested(cls, "responses")
    pcls = nested(tcls, "partition_responses")
    return encode(make(cls, throttle_time=timedelta(0), responses=tuple(
        tcls(name=t.name, partition_responses=tuple(
            make(pcls, index=p.index, error_code=ErrorCode.none, base_offset=i64(7), log_append_time=None, log_start_offset=i64(0),
                 record_errors=(), error_message=None) for p in t.partition_data))
        for t in forwarded.topic_data)))


def _errors(version: int, body: bytes) -> list[tuple[str, int, int]]:
    response = decode_response(0, version, body, 0)
    return [(t.name, p.index, int(p.error_code)) for t in response.responses for p in t.partition_responses]


@pytest.mark.parametrize("version", [3, 8, 9, 12])
def test_only_allowed_topics_are_forwarded_with_their_bytes_untouched(version):
    a = _authorizer((RT.TOPIC, "ok", Op.WRITE))
    ok_records, no_records = record_batch(b"allowed"), record_batch(b"denied")
    entity = _request(version, {"no": {0: no_records}, "ok": {0: ok_records, 1: record_batch(b"p1")}})
    decision = _enforce(a, entity)
    forwarded = decode_request(0, version, decision.request, 0)
    assert [t.name for t in forwarded.topic_data] == ["ok"]
    assert forwarded.topic_data[0].partition_data[0].records == ok_records
    merged = decision.merge(_upstream_response(version, forwarded), 0)
    assert _errors(version, merged) == [("no", 0, 29), ("ok", 0, 0), ("ok", 1, 0)]


def test_all_allowed_and_valid_is_forwarded_as_it_came():
    a = _authorizer((RT.TOPIC, "ok", Op.WRITE))
    assert _enforce(a, _request(9, {"ok": {0: record_batch()}})) is FORWARD


@pytest.mark.parametrize("txn, acls", [(None, ()), ("tx", ()), ("tx", ((RT.TRANSACTIONAL_ID, "other", Op.WRITE),))])
def test_a_transactional_batch_needs_transactional_id_write_for_the_whole_request(txn, acls):
    a = _authorizer((RT.TOPIC, "ok", Op.WRITE), *acls)
    entity = _request(9, {"ok": {0: record_batch(producer_id=7, attributes=0x10), 1: record_batch()}}, txn=txn)
    decision = _enforce(a, entity)
    assert decision.request is None and decision.merge is None
    assert _errors(9, decision.respond) == [("ok", 0, 53), ("ok", 1, 53)]


def test_a_transactional_batch_with_write_on_its_id_is_forwarded():
    a = _authorizer((RT.TOPIC, "ok", Op.WRITE), (RT.TRANSACTIONAL_ID, "tx", Op.WRITE))
    entity = _request(9, {"ok": {0: record_batch(producer_id=7, attributes=0x10)}}, txn="tx")
    assert _enforce(a, entity) is FORWARD


@pytest.mark.parametrize("records, why", [
    (record_batch(b"a") + record_batch(b"b", producer_id=9, attributes=0x10), "exactly one record batch"),
    (record_batch(b"a") + b"\x00" * 3, "exactly one record batch"),
    (record_batch(b"\x00\x00\x00\x00", producer_id=9, attributes=0x20), "control records"),
    (b"\x00" * 20, "at least one record batch"),
    (None, "at least one record batch"),
])
def test_a_partition_that_is_not_one_plain_batch_is_answered_87_and_not_forwarded(records, why):
    a = _authorizer((RT.TOPIC, "ok", Op.WRITE))
    good = record_batch(b"good")
    entity = _request(9, {"ok": {0: records, 1: good}})
    decision = _enforce(a, entity)
    forwarded = decode_request(0, 9, decision.request, 0)
    assert [(p.index, p.records) for t in forwarded.topic_data for p in t.partition_data] == [(1, good)]
    merged = decode_response(0, 9, decision.merge(_upstream_response(9, forwarded), 0), 0)
    (bad, fine), = [t.partition_responses for t in merged.responses]
    assert (bad.index, int(bad.error_code), fine.index, int(fine.error_code)) == (0, 87, 1, 0)
    assert why in bad.error_message


def test_zstd_before_v7_is_unsupported_compression():
    a = _authorizer((RT.TOPIC, "ok", Op.WRITE))
    decision = _enforce(a, _request(5, {"ok": {0: record_batch(attributes=4)}}))
    assert _errors(5, decision.respond) == [("ok", 0, 76)]
    assert _enforce(a, _request(7, {"ok": {0: record_batch(attributes=4)}})) is FORWARD


def test_acks_zero_with_anything_refused_closes_the_connection():
    a = _authorizer((RT.TOPIC, "ok", Op.WRITE))
    assert _enforce(a, _request(9, {"no": {0: record_batch()}}, acks=0)).close
    assert _enforce(a, _request(9, {"ok": {0: record_batch() + record_batch()}}, acks=0)).close


def test_acks_zero_naming_only_an_empty_denied_topic_forwards_nothing_of_it_and_answers_nothing():
    a = _authorizer((RT.TOPIC, "ok", Op.WRITE))
    decision = _enforce(a, _request(9, {"no": {}, "ok": {0: record_batch()}}, acks=0))
    assert decision.respond is None and decision.close is None
    assert [t.name for t in decode_request(0, 9, decision.request, 0).topic_data] == ["ok"]


# -- v13: topics by id (KIP-516), resolved to names before anything is authorized ---------


@pytest.fixture
def learned():
    LEARNED = TOPICS
    LEARNED.clear()
    ids = {"ok": uuid.uuid4(), "no": uuid.uuid4()}
    for name, topic_id in ids.items():
        LEARNED.learn(name, topic_id)
    yield ids
    LEARNED.clear()


def _request_v13(topics: dict[uuid.UUID, dict[int, bytes]]):
    cls = request_class(0, 13)
    tcls = nested(cls, "topic_data")
    pcls = nested(tcls, "partition_data")
    return cls(transactional_id=None, acks=i16(-1), timeout=timedelta(seconds=5), topic_data=tuple(
        tcls(topic_id=tid, partition_data=tuple(pcls(index=i32(p), records=r) for p, r in parts.items()))
        for tid, parts in topics.items()))


def test_v13_authorizes_the_names_of_the_ids_and_answers_unknown_ids_100(learned):
    """Before: the id's hex string was authorized as a topic name (a wildcard ACL let a
    denied topic through, a prefixed ACL could match random ids)."""
    a = _authorizer((RT.TOPIC, "ok", Op.WRITE))
    ghost = uuid.uuid4()
    good = record_batch(b"good")
    entity = _request_v13({learned["no"]: {0: record_batch()}, learned["ok"]: {0: good}, ghost: {0: record_batch()}})
    decision = _enforce(a, entity)
    forwarded = decode_request(0, 13, decision.request, 0)
    assert [(t.topic_id, [p.records for p in t.partition_data]) for t in forwarded.topic_data] == [
        (learned["ok"], [good])]
    cls = response_class(0, 13)
    tcls = nested(cls, "responses")
    pcls = nested(tcls, "partition_responses")
    upstream = encode(make(cls, throttle_time=timedelta(0), node_endpoints=(), responses=(make(
        tcls, topic_id=learned["ok"], partition_responses=(make(
            pcls, index=i32(0), error_code=ErrorCode.none, base_offset=i64(7), log_append_time=None,
            log_start_offset=i64(0), record_errors=(), error_message=None),)),)))
    merged = decode_response(0, 13, decision.merge(upstream, 0), 0)
    assert [(t.topic_id, [int(p.error_code) for p in t.partition_responses]) for t in merged.responses] == [
        (learned["no"], [29]), (learned["ok"], [0]), (ghost, [100])]


def test_v13_with_a_wildcard_allow_and_a_literal_deny_is_denied(learned):
    a = StandardAuthorizer()
    a.configure({})
    a.load_snapshot({
        uuid.uuid4(): AclBinding(ResourcePattern(RT.TOPIC, "*", PatternType.LITERAL),
                                 AccessControlEntry("User:alice", "*", Op.WRITE, AclPermissionType.ALLOW)),
        uuid.uuid4(): AclBinding(ResourcePattern(RT.TOPIC, "no", PatternType.LITERAL),
                                 AccessControlEntry("User:alice", "*", Op.WRITE, AclPermissionType.DENY))})
    a.complete_initial_load()
    decision = _enforce(a, _request_v13({learned["no"]: {0: record_batch()}}))
    (topic,) = decode_response(0, 13, decision.respond, 0).responses
    assert topic.topic_id == learned["no"] and [int(p.error_code) for p in topic.partition_responses] == [29]
    assert _enforce(a, _request_v13({learned["ok"]: {0: record_batch()}})) is FORWARD
