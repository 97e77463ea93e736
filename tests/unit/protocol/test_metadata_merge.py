"""Metadata's merges walk the upstream's answer (protocol/apis/metadata.py's ``_Answer``) instead
of decoding and encoding it.  The reference here is the decoding merge they replaced, run on the
state the same enforcement computed (read from the merge's closure): for any answer kio can
encode, every version, named, all-topics and by-id requests, the bytes and the topics learned
must be the same.  What the walk adds: a topic's tagged field this kio does not know is kept, not
a closed connection, and a cut answer is still a CodecError."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32

from authz.acl import AclOperation as Op
from protocol.apis import metadata
from protocol.apis.topic_common import CLUSTER, INTERNAL_TOPICS, OPS_NOT_REQUESTED, TOPIC, _distinct
from protocol.codecs import (CodecError, UnknownTagError, _decode_checked, decode_response, encode, make, nested,
                             response_class)
from protocol.errors import (INVALID_TOPIC_EXCEPTION, TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID,
                             UNKNOWN_TOPIC_OR_PARTITION)
from tests.unit.protocol.test_topics_enforcement import (TOPICS, acl, authorizer, cluster_acl, enforce,
                                                         md_request)

# -- the decoding merges, as they were: the reference -------------------------------


def _error_topic(cls: Any, error: int, name: str | None, topic_id: uuid.UUID | None, internal: bool = False) -> Any:
    return make(cls, error_code=ErrorCode(error), name=name, topic_id=topic_id, is_internal=internal,
                partitions=(), topic_authorized_operations=i32(OPS_NOT_REQUESTED))


def _ops(auth, topic, include_ops):
    if not hasattr(topic, "topic_authorized_operations"):
        return topic
    ops = auth.authorized_operations(TOPIC, topic.name) if include_ops and topic.name is not None else OPS_NOT_REQUESTED
    return dataclasses.replace(topic, topic_authorized_operations=i32(ops))


def _cluster_ops(auth, request, response):
    if not hasattr(response, "cluster_authorized_operations"):
        return response
    ops = OPS_NOT_REQUESTED
    if getattr(request, "include_cluster_authorized_operations", False):
        ops = auth.authorized_operations(CLUSTER, "kafka-cluster") if auth.cluster(Op.DESCRIBE) else 0
    return dataclasses.replace(response, cluster_authorized_operations=i32(ops))


def _reference(merge, buf: bytes) -> bytes:
    """The decoding merge of the enforcement whose (walking) merge is ``merge``."""
    state = {name: cell.cell_contents for name, cell in zip(merge.__code__.co_freevars, merge.__closure__)
             if name != "wanted_set" or state_has(cell)}
    version, auth, request = state["version"], state["auth"], state["request"]
    topic_cls = nested(response_class(3, version), "topics")
    response = decode_response(3, version, buf, 0)
    if merge.__name__ == "merge_filtered":
        by_id, include_ops = state["by_id"], state["include_ops"]
        topics = response.topics
        if by_id:
            topics = [t for t in topics if getattr(t, "topic_id", None) in state["wanted_set"]]
        metadata._md_learn(topics, auth.topics)
        named = [t for t in topics if t.name is not None and t.error_code != UNKNOWN_TOPIC_ID]
        allowed = auth.filter(TOPIC, Op.DESCRIBE, _distinct(t.name for t in named), log_if_denied=by_id)
        response = _cluster_ops(auth, request, response)
        out = []
        for t in topics:
            if t.name is None or t.error_code == UNKNOWN_TOPIC_ID:
                out.append(_ops(auth, dataclasses.replace(t, name=None) if by_id else t, False))
            elif t.name in allowed:
                out.append(_ops(auth, t, include_ops))
            elif by_id:
                out.append(_error_topic(topic_cls, TOPIC_AUTHORIZATION_FAILED, None, t.topic_id))
        return encode(dataclasses.replace(response, topics=tuple(out)))
    names, described, held_back = state["names"], state["described"], state["held_back"]
    if state["nothing_to_merge"] and not response.topics and getattr(
            response, "cluster_authorized_operations", OPS_NOT_REQUESTED) == OPS_NOT_REQUESTED:
        return buf
    metadata._md_learn(response.topics, auth.topics)
    upstream = {}
    for t in response.topics:
        if t.name in state["wanted"] and t.name not in upstream:
            upstream[t.name] = t
    create_denied: set[str] = set()
    if state["check_create"]:
        missing = [n for n in names if n in held_back or (
            n in upstream and upstream[n].error_code in (UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION))]
        if missing and not auth.cluster(Op.CREATE, log_if_denied=False):
            create_denied = set(missing) - auth.filter(TOPIC, Op.CREATE, _distinct(missing))
    response = _cluster_ops(auth, request, response)
    out = []
    for name in names:
        if name not in described:
            out.append(_error_topic(topic_cls, TOPIC_AUTHORIZATION_FAILED, name, None))
        elif name in create_denied:
            out.append(_error_topic(topic_cls, TOPIC_AUTHORIZATION_FAILED, name, None, name in INTERNAL_TOPICS))
        elif name in upstream:
            out.append(_ops(auth, upstream[name], state["include_ops"]))
        elif name in held_back:
            out.append(_error_topic(topic_cls, UNKNOWN_TOPIC_OR_PARTITION, name, None, name in INTERNAL_TOPICS))
    return encode(dataclasses.replace(response, topics=tuple(out)))


def state_has(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:  # wanted_set: set for by-id requests only
        return False
    return True


def _as_sent(merge, buf: bytes) -> bytes:
    body = merge(memoryview(buf), 0)
    return buf if body is None else body


def _learned() -> tuple[dict, dict]:
    return dict(TOPICS._names), dict(TOPICS._ids)


# -- the answers ------------------------------------------------------------------

NAMES = ["a-1", "a-2", "b-1", "c-new", "__consumer_offsets"]
IDS = [uuid.UUID(int=n) for n in (1, 2, 3)]
ERRORS = [0, 0, 0, 3, 17, 29, 100]


def _answers(version: int):
    cls = response_class(3, version)
    tcls = nested(cls, "topics")
    pcls = nested(tcls, "partitions")
    name = st.sampled_from(NAMES) | (st.none() if version >= 12 else st.sampled_from(NAMES))
    topic = st.builds(
        lambda error, name, topic_id, internal, partitions, ops: make(
            tcls, error_code=ErrorCode(error), name=name, topic_id=topic_id, is_internal=internal,
            partitions=tuple(partitions), topic_authorized_operations=i32(ops)),
        st.sampled_from(ERRORS), name, st.none() | st.sampled_from(IDS) | st.uuids(), st.booleans(),
        st.lists(st.from_type(pcls), max_size=3), st.sampled_from([OPS_NOT_REQUESTED, 0, 12345]))
    return st.builds(lambda response, topics, cluster_ops: dataclasses.replace(
        response, topics=tuple(topics),
        **({"cluster_authorized_operations": i32(cluster_ops)} if 8 <= version <= 10 else {})),
        st.from_type(cls), st.lists(topic, max_size=6), st.sampled_from([OPS_NOT_REQUESTED, 0, 8096]))


def _requests(version: int):
    flags = st.fixed_dictionaries({"auto": st.booleans(), "ops": st.booleans(), "cluster_ops": st.booleans()})
    named = st.builds(lambda names, f: md_request(version, names, **f), st.lists(st.sampled_from(NAMES), max_size=4),
                      flags)
    everything = st.builds(lambda f: md_request(version, [] if version == 0 else None, **f), flags)  # (v0: [] is all)
    kinds = named | everything
    if version >= 12:
        kinds |= st.builds(lambda ids, f: md_request(version, [], ids=ids, **f),
                           st.lists(st.sampled_from(IDS), min_size=1, max_size=3), flags)
    return kinds


ACLS = (
    [acl("a-", Op.DESCRIBE), acl("c-", Op.DESCRIBE), acl("c-", Op.CREATE), acl("a-", Op.READ), acl("__", Op.DESCRIBE)],
    [acl("a-", Op.DESCRIBE), acl("b-", Op.DESCRIBE), cluster_acl(Op.CREATE), cluster_acl(Op.DESCRIBE)],
    [],
)


@pytest.mark.parametrize("version", range(0, 14))
def test_the_walking_merge_gives_the_decoding_merges_bytes_and_learns_the_same(version):
    authorizers = [authorizer(*bindings) for bindings in ACLS]

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(_requests(version), _answers(version), st.sampled_from(range(len(ACLS))))
    def check(request, response, which):
        decision = enforce(request, authorizers[which])
        if decision.merge is None:
            return
        upstream = encode(response)
        TOPICS.clear()
        expected = _reference(decision.merge, upstream)
        expected_learned = _learned()
        TOPICS.clear()
        assert _as_sent(decision.merge, upstream) == expected
        assert _learned() == expected_learned

    check()


def _one_topic_answer(version: int, name: str = "a-1"):
    cls = response_class(3, version)
    tcls = nested(cls, "topics")
    pcls = nested(tcls, "partitions")
    part = make(pcls, error_code=ErrorCode(0), partition_index=i32(0), leader_id=i32(1), leader_epoch=i32(0),
                replica_nodes=(i32(1), i32(2)), isr_nodes=(i32(1),), offline_replicas=())
    topic = make(tcls, error_code=ErrorCode(0), name=name, topic_id=IDS[0], is_internal=False, partitions=(part,),
                 topic_authorized_operations=i32(OPS_NOT_REQUESTED))
    return make(cls, throttle_time=timedelta(0), brokers=(), cluster_id="c", controller_id=i32(1), topics=(topic,),
                cluster_authorized_operations=i32(OPS_NOT_REQUESTED), error_code=ErrorCode(0))


def test_a_topics_and_a_partitions_unknown_tagged_fields_stay_with_them():
    """A newer broker's tagged field in a topic and in a partition: kio cannot decode the answer
    ("Unknown tagged field"), which closed the client's connection; the walk passes both on."""
    request = md_request(12, ["a-1"], auto=False, ops=True)
    decision = enforce(request, authorizer(acl("a-", Op.DESCRIBE)))
    body = encode(_one_topic_answer(12))
    assert body[-3:] == b"\x00\x00\x00"  # partition's, topic's, response's tagged fields: none
    tagged = bytes([1, 9, 2]) + b"hi"  # one field: tag 9, 2 bytes
    # the partition's tagged fields are followed by the topic's operations (4 bytes) and tagged fields
    partition_end = len(body) - 1 - 1 - 4 - 1
    upstream = body[:partition_end] + tagged + body[partition_end + 1:-2] + tagged + body[-1:]
    with pytest.raises(UnknownTagError):  # kio refuses it (kgw's decode leaves the tags out)
        _decode_checked(response_class(3, 12), upstream, 0)
    out = decision.merge(memoryview(upstream), 0)
    ops = 1 << 8  # DESCRIBE
    assert out == upstream[:-1 - len(tagged) - 4] + ops.to_bytes(4, "big") + tagged + upstream[-1:]


@pytest.mark.parametrize("version", [0, 1, 5, 7, 8, 9, 10, 12, 13])
def test_every_cut_of_an_answer_fails_as_a_codec_error(version):
    request = md_request(version, ["a-1"], auto=False)
    decision = enforce(request, authorizer(acl("a-", Op.DESCRIBE)))
    body = encode(_one_topic_answer(version))
    assert decode_response(3, version, decision.merge(body, 0), 0).topics[0].name == "a-1"
    last = len(body) - (1 if version >= 9 else 0)  # an answer without its last tagged fields: cut too
    for cut in range(last):
        with pytest.raises(CodecError):
            decision.merge(memoryview(body[:cut]), 0)


@pytest.mark.parametrize("version", range(0, 14))
def test_the_partitions_walk_in_c_ends_where_the_reference_does(version):
    """The partitions of a topic entry, walked in C (protocol/_native.c): kio's encodings are
    walked there, not declined, to the reference's offset; any cut or changed byte is either
    declined (None: the reference reads it) or walked to the reference's offset."""
    assert metadata._native_partitions_end is not None  # built by make setup
    tcls = nested(response_class(3, version), "topics")
    pcls = nested(tcls, "partitions")

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.from_type(pcls), max_size=4), st.integers(0, 3), st.data())
    def check(partitions, lead, data):
        topic = make(tcls, error_code=ErrorCode(0), name="t", topic_id=None, is_internal=False,
                     partitions=tuple(partitions), topic_authorized_operations=i32(0))
        entry = bytes(lead) + _one_topic_only(version, topic)
        count, at = metadata.array_len(entry, _partitions_at(version, lead), version >= 9)
        assert count == len(partitions)
        end = metadata._partitions_end(entry, at, count, version)
        assert metadata._native_partitions_end(entry, at, version, count) == end
        cut = data.draw(st.integers(0, len(entry)))
        flipped = bytearray(entry)
        if flipped:
            flipped[data.draw(st.integers(0, len(entry) - 1))] = data.draw(st.integers(0, 255))
        for buf in (entry[:cut], bytes(flipped)):
            native = metadata._native_partitions_end(buf, at, version, count)
            if native is not None:
                assert native == metadata._partitions_end(buf, at, count, version)

    check()


def _one_topic_only(version, topic):
    """A topic entry's bytes alone: a response of that one topic, its head and tail cut off."""
    cls = response_class(3, version)
    empty = make(cls, throttle_time=timedelta(0), brokers=(), cluster_id=None, controller_id=i32(1), topics=(),
                 cluster_authorized_operations=i32(0), error_code=ErrorCode(0))
    head = len(encode(empty)) - _tail_size(version)  # up to and including the (empty) topic count
    body = encode(dataclasses.replace(empty, topics=(topic,)))
    return body[head:len(body) - _tail_size(version)]


def _tail_size(version):
    return (4 if 8 <= version <= 10 else 0) + (2 if version >= 13 else 0) + (1 if version >= 9 else 0)


def _partitions_at(version, lead):
    """Where the partition count of ``_one_topic_only``'s entry ("t", after ``lead`` bytes) is."""
    flexible = version >= 9
    return lead + 2 + (2 if flexible else 3) + (16 if version >= 10 else 0) + (1 if version >= 1 else 0)
