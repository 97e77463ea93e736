"""Fetch (1) authorization: docs/authorization.md Fetch row, one test per behaviour.

The merged responses are checked three ways: they decode with kio, the denied
partitions carry 29 (or 100) in request order after the upstream's topics, and
the upstream's topic entries, record batches included, sit byte for byte in
the merged body at the offset the walk predicts (they were sliced, not re-encoded).
"""

from __future__ import annotations

import io
import ipaddress
import uuid
import warnings
from dataclasses import replace
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as H1
from kio.schema.request_header.v2.header import RequestHeader as H2
from kio.serial import entity_writer
from kio.static.primitive import i8, i16, i32, i64

import protocol.apis.fetch as fetch_mod
from authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation as Op,
    AclPermissionType as Perm,
    PatternType,
    ResourcePattern,
    ResourceType as RT,
)
from authz.authorizer import AuthorizableRequestContext
from authz.principal import KafkaPrincipal
from authz.standard_authorizer import StandardAuthorizer
from protocol.apis.base import FORWARD, SESSIONS_PER_CONNECTION
from protocol import topic_ids
from protocol.apis.fetch import SPECS, walk_fetch_response
from protocol.auth_helper import AuthHelper
from protocol.codecs import CodecError, decode_request, decode_response, encode, make, nested
from protocol.codecs import request_class, response_class
from protocol.headers import parse_request_header

with warnings.catch_warnings():  # kafka-python's schema loader warns on import
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

SPEC = SPECS[0]
TAUTH, UNKNOWN_ID = 29, 100
ORDERS_ID, AUDIT_ID, SECRET_ID, GHOST_ID = (uuid.UUID(int=n) for n in (0x0A, 0x0B, 0x0C, 0x0D))


# -- authorizer ----------------------------------------------------------------


def acl(name, op=Op.READ, rt=RT.TOPIC, principal="User:alice", perm=Perm.ALLOW):
    return AclBinding(ResourcePattern(rt, name, PatternType.LITERAL), AccessControlEntry(principal, "*", op, perm))


class Recording(StandardAuthorizer):
    """A StandardAuthorizer that remembers every authorize call's actions."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def authorize(self, context, actions):
        self.calls.append(list(actions))
        return super().authorize(context, actions)


def authorizer(*bindings) -> Recording:
    a = Recording()
    a.configure({})
    a.load_snapshot({uuid.uuid4(): b for b in bindings})
    a.complete_initial_load()
    return a


#: the topic-id cache the enforcement under test sees (the gateway's Gateway.topic_ids)
TOPICS: dict = {0: None}

def helper(a, version=12) -> AuthHelper:
    context = AuthorizableRequestContext("PLAIN", "PLAINTEXT", KafkaPrincipal("User", "alice"),
                                         ipaddress.ip_address("10.0.0.1"), 1, version, "c1", 9)
    return AuthHelper(a, context, topics=TOPICS[0])


READ_ORDERS_AUDIT = (acl("orders"), acl("audit"))


class Names:
    """A stand-in for the learned topic cache: id -> name."""

    def __init__(self, names):
        self.names = dict(names)

    def name_of(self, topic_id):
        return self.names.get(topic_id)


@pytest.fixture(autouse=True)
def topic_names(monkeypatch):
    names = Names({ORDERS_ID: "orders", AUDIT_ID: "audit", SECRET_ID: "secret"})  # GHOST_ID: never learned
    monkeypatch.setitem(TOPICS, 0, names)
    return names


# -- requests --------------------------------------------------------------------


def records(base: int, *values: bytes) -> bytes:
    b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20, offset=base)
    for i, v in enumerate(values):
        b.append(timestamp=1_700_000_000_000 + i, key=b"k%d" % (base + i), value=v)
    b.close()
    return bytes(b.buffer())


def _key(version, topic):
    """Request/response topic key: the name before v13, the id from v13 on."""
    if version >= 13:
        return {"orders": ORDERS_ID, "audit": AUDIT_ID, "secret": SECRET_ID, "ghost": GHOST_ID}[topic]
    return topic


def fetch_request(version, topics, session_id=0, epoch=-1, replica_id=-1, forgotten=()):
    cls = request_class(1, version)
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    key = "topic_id" if version >= 13 else "topic"
    entries = tuple(
        topic_cls(**{key: _key(version, name), "partitions": tuple(
            make(part_cls, partition=i32(p), current_leader_epoch=i32(-1), fetch_offset=i64(7), last_fetched_epoch=i32(-1),
                 log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20))
            for p in parts)})
        for name, parts in topics
    )
    fields = dict(replica_id=i32(replica_id), max_wait=timedelta(milliseconds=500), min_bytes=i32(1),
                  max_bytes=i32(50 << 20), isolation_level=i8(0), session_id=i32(session_id),
                  session_epoch=i32(epoch), topics=entries, rack_id="", cluster_id=None)
    if version >= 7:
        forgotten_cls = nested(cls, "forgotten_topics_data")
        fields["forgotten_topics_data"] = tuple(
            forgotten_cls(**{key: _key(version, n), "partitions": tuple(i32(p) for p in ps)}) for n, ps in forgotten)
    if version >= 15:
        fields["replica_state"] = nested(cls, "replica_state")(replica_id=i32(replica_id), replica_epoch=i64(-1))
    return make(cls, **fields)


def frame_of(version, body):
    header_cls = H2 if version >= 12 else H1
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(request_api_key=i16(1), request_api_version=i16(version),
                                              correlation_id=i32(9), client_id="c1"))
    out.write(encode(body))
    return memoryview(out.getvalue())


def enforce(a, version, request):
    frame = frame_of(version, request)
    header = parse_request_header(frame)
    info = SPEC.inspect(header, frame)
    return header, frame, SPEC.enforce(helper(a, version), header, frame, info)


# -- responses -------------------------------------------------------------------


def upstream_response(version, topics, session_id=0, error=0, endpoints=()):
    """What the broker answers: ``topics`` = [(name, [(partition, records or None)])]."""
    cls = response_class(1, version)
    topic_cls = nested(cls, "responses")
    part_cls = nested(topic_cls, "partitions")
    abort_cls = nested(part_cls, "aborted_transactions")
    key = "topic_id" if version >= 13 else "topic"
    entries = tuple(
        topic_cls(**{key: _key(version, name), "partitions": tuple(
            make(part_cls, partition_index=i32(p), error_code=ErrorCode.none, high_watermark=i64(42),
                 last_stable_offset=i64(40), log_start_offset=i64(0),
                 aborted_transactions=(abort_cls(producer_id=i64(3), first_offset=i64(1)),),
                 preferred_read_replica=i32(-1), records=recs)
            for p, recs in parts)})
        for name, parts in topics
    )
    return make(cls, throttle_time=timedelta(0), error_code=ErrorCode(error), session_id=i32(session_id),
                responses=entries, node_endpoints=endpoints)


def errors_of(response, version):
    key = "topic_id" if version >= 13 else "topic"
    return [(getattr(t, key), p.partition_index, p.error_code) for t in response.responses for p in t.partitions]


def assert_error_partition(p, code):
    assert p.error_code == code
    assert (p.high_watermark, p.last_stable_offset) == (-1, -1)
    assert getattr(p, "log_start_offset", -1) == -1
    assert p.aborted_transactions == () and p.records == b""  # empty, not null: what Kafka sends
    assert getattr(p, "preferred_read_replica", -1) == -1


# -- all allowed: the hot path ---------------------------------------------------


@pytest.mark.parametrize("version", [4, 11, 12, 13, 16, 17, 18])
def test_all_allowed_sessionless_fetch_is_forwarded_with_one_batched_authorize(version, monkeypatch):
    a = authorizer(*READ_ORDERS_AUDIT)
    request = fetch_request(version, [("orders", [0, 1, 2]), ("audit", [0]), ("orders", [3])])
    frame = frame_of(version, request)
    header = parse_request_header(frame)
    info = SPEC.inspect(header, frame)  # the only decode: inspect's, as for every API
    monkeypatch.setattr(fetch_mod, "encode", None)  # enforcement must not encode anything
    decision = SPEC.enforce(helper(a, version), header, frame, info)
    assert decision is FORWARD
    assert len(a.calls) == 1
    assert [(x.resource_pattern.name, x.operation, x.resource_reference_count, x.log_if_allowed, x.log_if_denied)
            for x in a.calls[0]] == [("orders", Op.READ, 4, True, True), ("audit", Op.READ, 1, True, True)]
    assert all(x.resource_pattern.resource_type is RT.TOPIC and x.resource_pattern.pattern_type is PatternType.LITERAL
               for x in a.calls[0])


def test_reference_count_is_distinct_partitions_per_topic():
    a = authorizer(acl("orders"))
    request = fetch_request(12, [("orders", [0, 1, 1]), ("orders", [0, 2])])
    _h, _f, decision = enforce(a, 12, request)
    assert decision is FORWARD
    assert [(x.resource_pattern.name, x.resource_reference_count) for x in a.calls[0]] == [("orders", 3)]


def test_topic_entries_without_partitions_are_neither_checked_nor_answered_nor_forwarded():
    """They fetch nothing (Kafka neither checks nor answers them), and their names were never
    authorized: kgw forwards the request without them (found by tests/unit/gateway/test_hostile_fuzz.py)."""
    a = authorizer(acl("orders"))
    _h, _f, decision = enforce(a, 16, fetch_request(16, [("orders", [0]), ("secret", []), ("ghost", [])]))
    assert [x.resource_pattern.name for x in a.calls[0]] == ["orders"]
    forwarded = decode_request(1, 16, decision.request, 0)
    assert [len(t.partitions) for t in forwarded.topics] == [1] and forwarded.session_epoch == -1


def test_all_allowed_is_one_authorize_call_with_one_action_per_topic():
    """The all-allowed path asks the authorizer once, one action per topic with the topic's
    partition count as its reference count, and forwards the frame untouched (what the
    per-request cost is, is measured by bench/, not here)."""
    a = authorizer(*READ_ORDERS_AUDIT)
    request = fetch_request(16, [("orders", list(range(32))), ("audit", list(range(5)))])
    frame = frame_of(16, request)
    header = parse_request_header(frame)
    info = SPEC.inspect(header, frame)
    assert SPEC.enforce(helper(a, 16), header, frame, info) is FORWARD
    assert len(a.calls) == 1
    assert [(x.resource_pattern.name, x.operation, x.resource_reference_count) for x in a.calls[0]] == [
        ("orders", Op.READ, 32), ("audit", Op.READ, 5)]


def _sessionless_request(header, frame, decision, request):
    """KIP-227 (id, -1): close the session if any, full fetch, create none; only the epoch changes."""
    assert decision.respond is None and decision.merge is None and decision.close is None
    assert decode_request(1, header.api_version, decision.request, 0) == replace(request, session_epoch=-1)
    original = bytes(frame[header.size:])
    changed = [i for i, (x, y) in enumerate(zip(original, decision.request)) if x != y]
    assert len(decision.request) == len(original) and len(changed) <= 4  # the epoch's 4 bytes only


def session_enforce(a, version, request, state):
    frame = frame_of(version, request)
    header = parse_request_header(frame)
    auth = AuthHelper(a, helper(a, version).context, state, TOPICS[0])
    return header, frame, SPEC.enforce(auth, header, frame, SPEC.inspect(header, frame))


@pytest.mark.parametrize("version", [7, 12, 16])
def test_new_session_is_forwarded_untouched_and_its_id_learned_from_the_response(version):
    a, state = authorizer(*READ_ORDERS_AUDIT), {}
    request = fetch_request(version, [("orders", [0]), ("audit", [1])], session_id=0, epoch=0)
    _, _, decision = session_enforce(a, version, request, state)
    assert decision.request is None and decision.respond is None and decision.merge is not None
    body = encode(upstream_response(version, [("orders", [(0, None)])], session_id=77))
    assert decision.merge(memoryview(body), 0) is None  # the response itself is left as it is
    assert state["fetch_sessions"] == {77: {"orders": {0}, "audit": {1}}}


@pytest.mark.parametrize("version", [12, 16])
def test_incremental_fetch_reauthorizes_every_cached_partition(version):
    a = authorizer(*READ_ORDERS_AUDIT)
    state = {"fetch_sessions": {77: {"orders": {0}, "audit": {1}}}}
    request = fetch_request(version, [("orders", [2])], session_id=77, epoch=3, forgotten=[("audit", [1])])
    _, _, decision = session_enforce(a, version, request, state)
    assert decision is FORWARD
    assert state["fetch_sessions"] == {77: {"orders": {0, 2}}}
    actions = a.calls[-1]
    assert [(x.resource_pattern.name, x.resource_reference_count) for x in actions] == [("orders", 2)]


@pytest.mark.parametrize("version", [12, 16, 17])
def test_an_incremental_fetch_is_one_authorize_call_over_its_whole_session(version):
    """As Kafka: one batch over the session's partitions, the request's among them (their
    decision is the same), each topic counted by its partitions in the session."""
    a = authorizer(*READ_ORDERS_AUDIT)
    state = {"fetch_sessions": {77: {"orders": {0, 1}, "audit": {1}}}}
    for epoch, listed in ((3, [("orders", [0])]), (4, []), (5, [("orders", [1, 0]), ("audit", [1])])):
        a.calls.clear()
        _, _, decision = session_enforce(a, version, fetch_request(version, listed, session_id=77, epoch=epoch), state)
        assert decision is FORWARD
        assert [[(x.resource_pattern.name, x.resource_reference_count) for x in c] for c in a.calls] == [
            [("orders", 2), ("audit", 1)]]
    assert state["fetch_sessions"] == {77: {"orders": {0, 1}, "audit": {1}}}
    # a partition the session does not hold yet joins it, and is counted with it
    a.calls.clear()
    _, _, decision = session_enforce(a, version, fetch_request(version, [("orders", [2])], session_id=77, epoch=6),
                                     state)
    assert decision is FORWARD and state["fetch_sessions"] == {77: {"orders": {0, 1, 2}, "audit": {1}}}
    assert [(x.resource_pattern.name, x.resource_reference_count) for x in a.calls[-1]] == [("orders", 3), ("audit", 1)]


def test_a_connection_opening_session_after_session_keeps_a_bounded_number():
    """A client opening fetch sessions one after another on one connection (the broker gives
    each a new id): kgw keeps the newest SESSIONS_PER_CONNECTION; an older one's next
    incremental fetch goes on without a session, and the client starts over."""
    a, state = authorizer(*READ_ORDERS_AUDIT), {}
    ids = range(1000, 1000 + SESSIONS_PER_CONNECTION * 4)
    for session_id in ids:
        _, _, decision = session_enforce(a, 16, fetch_request(16, [("orders", [0])], session_id=0, epoch=0), state)
        decision.merge(memoryview(encode(upstream_response(16, [("orders", [(0, None)])], session_id=session_id))), 0)
    assert list(state["fetch_sessions"]) == list(ids)[-SESSIONS_PER_CONNECTION:]
    newest = fetch_request(16, [("orders", [0])], session_id=ids[-1], epoch=1)
    assert session_enforce(a, 16, newest, state)[2] is FORWARD
    oldest = fetch_request(16, [("orders", [0])], session_id=ids[0], epoch=1)
    header, frame, decision = session_enforce(a, 16, oldest, state)
    _sessionless_request(header, frame, decision, oldest)


def test_a_session_grown_past_its_partition_bound_is_not_kept(monkeypatch):
    """Incremental fetches naming partition after partition: a session that would hold more
    than SESSION_PARTITIONS goes on without one (epoch -1); a full fetch over the bound
    creates none."""
    monkeypatch.setattr(fetch_mod, "SESSION_PARTITIONS", 4)
    a = authorizer(*READ_ORDERS_AUDIT)
    state = {"fetch_sessions": {77: {"orders": {0, 1}}}}
    request = fetch_request(16, [("orders", [2, 3])], session_id=77, epoch=3)
    assert session_enforce(a, 16, request, state)[2] is FORWARD  # four: at the bound
    request = fetch_request(16, [("orders", [4])], session_id=77, epoch=4)
    header, frame, decision = session_enforce(a, 16, request, state)
    _sessionless_request(header, frame, decision, request)
    assert state["fetch_sessions"] == {}
    full = fetch_request(16, [("orders", [0, 1, 2]), ("audit", [0, 1])], session_id=0, epoch=0)
    header, frame, decision = session_enforce(a, 16, full, state)
    _sessionless_request(header, frame, decision, full)


@pytest.mark.parametrize("version", [12, 16])
def test_a_denied_cached_partition_ends_the_session(version):
    """The request lists only allowed partitions, but the session also holds a topic now denied."""
    a = authorizer(acl("orders"))
    state = {"fetch_sessions": {77: {"orders": {0}, "audit": {1}}}}
    request = fetch_request(version, [("orders", [0])], session_id=77, epoch=3)
    header, frame, decision = session_enforce(a, version, request, state)
    _sessionless_request(header, frame, decision, request)
    assert 77 not in state["fetch_sessions"]


@pytest.mark.parametrize("version,epoch,session_id", [(12, 5, 77), (16, 3, 99)])
def test_a_session_kgw_did_not_see_created_is_not_continued(version, epoch, session_id):
    a = authorizer(*READ_ORDERS_AUDIT)
    request = fetch_request(version, [("orders", [0]), ("audit", [1])], session_id=session_id, epoch=epoch,
                            forgotten=[("audit", [0])])
    header, frame, decision = session_enforce(a, version, request, {})
    _sessionless_request(header, frame, decision, request)


def test_no_authorizer_forwards_everything_sessions_included():
    request = fetch_request(12, [("secret", [0])], session_id=5, epoch=3)
    frame = frame_of(12, request)
    header = parse_request_header(frame)
    decision = SPEC.enforce(AuthHelper(None, None), header, frame, SPEC.inspect(header, frame))
    assert decision is FORWARD


# -- mixed: reduced request, merged response -------------------------------------


@pytest.mark.parametrize("version", [4, 11, 12, 13, 16, 17])
def test_mixed_fetch_forwards_allowed_topics_and_merges_denied_without_touching_records(version):
    a = authorizer(*READ_ORDERS_AUDIT)
    request = fetch_request(version, [("secret", [0, 1]), ("orders", [0, 1]), ("ghost", [4]), ("audit", [0])],
                            session_id=12, epoch=0)
    header, _frame, decision = enforce(a, version, request)
    ghost_is_unknown = version >= 13  # v12- names it, so it is only a topic without READ

    # one batched authorize; the unknown id takes no part in it
    assert len(a.calls) == 1
    expected_actions = [("secret", 2), ("orders", 2)] + ([] if ghost_is_unknown else [("ghost", 1)]) + [("audit", 1)]
    assert [(x.resource_pattern.name, x.resource_reference_count) for x in a.calls[0]] == expected_actions

    # the forwarded request keeps the allowed topics, untouched, and no session
    forwarded = decode_request(1, version, decision.request, 0)
    assert forwarded.topics == (request.topics[1], request.topics[3])
    if version >= 7:
        assert (forwarded.session_id, forwarded.session_epoch, forwarded.forgotten_topics_data) == (12, -1, ())
    assert replace(forwarded, topics=request.topics, **({"session_epoch": request.session_epoch} if version >= 7 else {})) == request

    # the upstream answers for what it was asked
    recs_o0, recs_o1, recs_a0 = records(7, b"o-0-a", b"o-0-b"), records(7, b"o-1-a"), records(7, b"a-0")
    upstream = upstream_response(version, [("orders", [(0, recs_o0), (1, recs_o1)]), ("audit", [(0, recs_a0)])])
    upstream_body = encode(upstream)
    prefix = b"HEADERBYTES"  # the merge sees the body inside a frame, at an offset
    merged = decision.merge(memoryview(prefix + upstream_body), len(prefix))
    got = decode_response(1, version, merged, 0)

    # upstream topics first, untouched; then the errors in request order (unknown ids first, as Kafka)
    assert got.responses[:2] == upstream.responses
    errors = got.responses[2:]
    key = "topic_id" if version >= 13 else "topic"
    if ghost_is_unknown:
        expected = [(GHOST_ID, 4, UNKNOWN_ID), (SECRET_ID, 0, TAUTH), (SECRET_ID, 1, TAUTH)]
    else:
        expected = [("secret", 0, TAUTH), ("secret", 1, TAUTH), ("ghost", 4, TAUTH)]
    assert [(getattr(t, key), p.partition_index, p.error_code) for t in errors for p in t.partitions] == expected
    for t in errors:
        for p in t.partitions:
            assert_error_partition(p, p.error_code)
    assert (got.throttle_time, getattr(got, "session_id", 0)) == (upstream.throttle_time, 0)

    # byte-identical records at the offset the walk predicts: sliced, never re-encoded
    up = walk_fetch_response(version, upstream_body, 0)
    out = walk_fetch_response(version, merged, 0)
    assert out.n_topics == up.n_topics + len(errors)
    assert merged[: up.topics_at] == upstream_body[: up.topics_at]
    assert merged[out.first_topic : out.first_topic + (up.topics_end - up.first_topic)] == \
        upstream_body[up.first_topic : up.topics_end]
    for recs in (recs_o0, recs_o1, recs_a0):
        at = upstream_body.index(recs)
        assert merged.index(recs) == at + (out.first_topic - up.first_topic)
    assert [r.value for b in MemoryRecords(got.responses[0].partitions[0].records) for r in b] == [b"o-0-a", b"o-0-b"]


def test_merge_keeps_rewritten_node_endpoints_in_the_top_level_tags():
    """The connection rewrites addresses first, then merges the rewritten body."""
    version = 17
    a = authorizer(acl("orders"))
    request = fetch_request(version, [("orders", [0]), ("secret", [0])])
    _h, _f, decision = enforce(a, version, request)
    ep_cls = nested(response_class(1, version), "node_endpoints")
    upstream = upstream_response(version, [("orders", [(0, records(0, b"x"))])],
                                 endpoints=(ep_cls(node_id=i32(111), host="10.9.9.9", port=i32(9092), rack=None),))

    class Nodes:
        def learn(self, *args):
            pass

        def advertise(self, node_id):
            return ("gw.local", 30000 + node_id)

    body = memoryview(b"\0" * 9 + encode(upstream))
    rewritten = SPEC.rewrite_response(version, body, 9, Nodes())
    merged = decision.merge(rewritten, 0)
    got = decode_response(1, version, merged, 0)
    assert [(e.node_id, e.host, e.port) for e in got.node_endpoints] == [(111, "gw.local", 30111)]
    assert errors_of(got, version) == [(ORDERS_ID, 0, 0), (SECRET_ID, 0, TAUTH)]


def test_denied_partitions_grouped_by_consecutive_topic_in_request_order():
    a = authorizer(acl("orders"))
    request = fetch_request(12, [("secret", [2]), ("audit", [0]), ("secret", [0]), ("orders", [0]), ("audit", [1])])
    _h, _f, decision = enforce(a, 12, request)
    merged = decision.merge(encode(upstream_response(12, [("orders", [(0, None)])])), 0)
    got = decode_response(1, 12, merged, 0)
    assert [(t.topic, [p.partition_index for p in t.partitions]) for t in got.responses] == \
        [("orders", [0]), ("secret", [2]), ("audit", [0]), ("secret", [0]), ("audit", [1])]


def test_upstream_top_level_error_passes_through_without_partitions():
    a = authorizer(acl("orders"))
    _h, _f, decision = enforce(a, 12, fetch_request(12, [("orders", [0]), ("secret", [0])]))
    body = encode(upstream_response(12, [], error=ErrorCode.fetch_session_id_not_found.value))
    assert decision.merge(body, 0) == body


def test_malformed_upstream_response_is_a_codec_error():
    a = authorizer(acl("orders"))
    _h, _f, decision = enforce(a, 12, fetch_request(12, [("orders", [0]), ("secret", [0])]))
    body = encode(upstream_response(12, [("orders", [(0, records(0, b"x"))])]))
    with pytest.raises(CodecError, match="Fetch v12"):
        decision.merge(body[:-20], 0)


# -- nothing allowed: kgw answers --------------------------------------------------


@pytest.mark.parametrize("version", [4, 12, 13, 16])
def test_all_denied_is_answered_by_kgw(version):
    a = authorizer(acl("orders", principal="User:bob"))
    request = fetch_request(version, [("orders", [1, 0]), ("secret", [0])], session_id=4, epoch=2)
    _h, _f, decision = enforce(a, version, request)
    assert decision.request is None and decision.merge is None
    got = decode_response(1, version, decision.respond, 0)
    key = lambda name: _key(version, name)  # noqa: E731
    assert errors_of(got, version) == [(key("orders"), 1, TAUTH), (key("orders"), 0, TAUTH), (key("secret"), 0, TAUTH)]
    for t in got.responses:
        for p in t.partitions:
            assert_error_partition(p, TAUTH)
    assert getattr(got, "session_id", 0) == 0 and getattr(got, "error_code", 0) == 0
    assert getattr(got, "node_endpoints", ()) == ()


def test_unknown_topic_id_gets_100_before_authorization():
    a = authorizer(acl("orders"))
    request = fetch_request(16, [("ghost", [0, 1])])
    _h, _f, decision = enforce(a, 16, request)
    got = decode_response(1, 16, decision.respond, 0)
    assert errors_of(got, 16) == [(GHOST_ID, 0, UNKNOWN_ID), (GHOST_ID, 1, UNKNOWN_ID)]
    assert a.calls == []  # no action for a topic kgw cannot name


def test_ids_come_from_the_gateway_topic_cache(monkeypatch):
    """The contract with protocol.topic_ids: the gateway's ``TopicCache.learn(name, id)`` / ``name_of(id)``."""
    cache = topic_ids.TopicCache()
    monkeypatch.setitem(TOPICS, 0, cache)
    a = authorizer(acl("orders"))
    request = fetch_request(13, [("orders", [0])])
    _h, _f, before = enforce(a, 13, request)
    assert errors_of(decode_response(1, 13, before.respond, 0), 13) == [(ORDERS_ID, 0, UNKNOWN_ID)]
    assert a.calls == []
    cache.learn("orders", ORDERS_ID)
    _h, _f, after = enforce(a, 13, request)
    assert after is FORWARD
    assert [(x.resource_pattern.name, x.resource_reference_count) for x in a.calls[-1]] == [("orders", 1)]


# -- follower fetch -----------------------------------------------------------------


@pytest.mark.parametrize("version", [12, 16])
def test_follower_fetch_needs_cluster_action_not_topic_read(version):
    a = authorizer(acl("kafka-cluster", op=Op.CLUSTER_ACTION, rt=RT.CLUSTER))
    request = fetch_request(version, [("secret", [0]), ("ghost", [0])], replica_id=3, session_id=8, epoch=4)
    _h, _f, decision = enforce(a, version, request)
    assert decision is FORWARD
    [[action]] = a.calls
    assert (action.resource_pattern.resource_type, action.resource_pattern.name, action.operation) == \
        (RT.CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION)


@pytest.mark.parametrize("version", [11, 12, 15, 16])
def test_follower_fetch_without_cluster_action_gets_29_on_every_partition(version):
    a = authorizer(*READ_ORDERS_AUDIT)  # topic READ does not help a follower
    request = fetch_request(version, [("orders", [0, 1]), ("ghost", [0])], replica_id=2)
    _h, _f, decision = enforce(a, version, request)
    got = decode_response(1, version, decision.respond, 0)
    key = lambda name: _key(version, name)  # noqa: E731
    assert errors_of(got, version) == [(key("orders"), 0, TAUTH), (key("orders"), 1, TAUTH), (key("ghost"), 0, TAUTH)]
    [[action]] = a.calls
    assert action.operation is Op.CLUSTER_ACTION and action.log_if_denied


def test_consumer_replica_ids_are_not_followers():
    """-1 (consumer) and -2/-3 (debugging/future local replica) are not broker ids."""
    a = authorizer(acl("orders"))
    for replica_id in (-1, -2, -3):
        _h, _f, decision = enforce(a, 12, fetch_request(12, [("orders", [0])], replica_id=replica_id))
        assert decision is FORWARD
    assert all(c[0].operation is Op.READ for c in a.calls)


# -- walking -------------------------------------------------------------------------


@pytest.mark.parametrize("version", [4, 5, 7, 11, 12, 13, 16, 17, 18])
def test_walker_reaches_the_end_of_every_version(version):
    upstream = upstream_response(version, [("orders", [(0, records(0, b"x", b"y")), (1, None)]), ("audit", [])])
    body = encode(upstream)
    shape = walk_fetch_response(version, b"xx" + body, 2)
    assert shape.n_topics == 2
    assert shape.topics_end == 2 + len(body) - (1 if version >= 12 else 0)
