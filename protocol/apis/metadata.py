"""Metadata (3): enforcement, auto-creation and address rewriting.

Theory of operation
-------------------
Metadata (3) is always forwarded, because the client needs the broker list
even when it may see no topic: denied named topics are dropped from the
forwarded request and answered with TOPIC_AUTHORIZATION_FAILED; all-topics and
by-id requests are forwarded whole and their *response* is filtered.  Topic
and cluster authorized operations are always computed by kgw, never passed
through.  Auto topic creation: Kafka checks CLUSTER:CREATE and then
TOPIC:CREATE only for requested topics that do not exist, which kgw learns only
from the response.  kgw predicts the CREATE decision silently (log flags off);
if every described topic is creatable the request goes upstream unchanged,
otherwise it goes with ``allow_auto_topic_creation=false`` and, for topics the
upstream reports missing, the real (logged) checks run when the response
arrives: denied → 29, allowed → the upstream's 3 (the topic is not
auto-created in that mixed case).  Metadata v0-3 cannot switch auto-creation
off; there, a non-creatable topic is never forwarded and is answered 29 (what
Kafka answers for a missing topic without CREATE; for an existing one Kafka would
describe it, but kgw cannot know existence without a request that may create it).
Requests naming topic ids (v12+) are forwarded as Kafka reads them: the ids
only, name-only entries dropped, auto-creation off; the response keeps only the
requested ids and is filtered by name.

Topic ids.  The gateway learns ``topic id -> name`` (and which names exist)
from the upstream Metadata, DescribeTopicPartitions and CreateTopics responses
it merges, in the gateway's bounded :class:`~protocol.topic_ids.TopicCache`
(``AuthHelper.topics``).  Ids are unique
for the life of a cluster and the cache is filled only from upstream
responses, so a learned mapping is never wrong; a missing one makes a
DeleteTopics-by-id entry fail with UNKNOWN_TOPIC_ID (100), as Kafka answers
for an id it does not know.


The response's broker list is rewritten to gateway addresses (:mod:`protocol.apis.addresses`).
"""

from __future__ import annotations

from dataclasses import replace
import dataclasses
import struct
from typing import Any
from uuid import UUID
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32
from protocol.apis.base import FORWARD, ApiSpec, Decision, RequestInfo
from protocol.apis.generic import inspect_decoded
from protocol.auth_helper import AuthHelper
from protocol.topic_ids import TopicCache
from protocol.codecs import decode_response, encode, make, response_class
from protocol.errors import (
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from protocol.headers import RequestHeader
from protocol.apis.topic_common import CLUSTER, INTERNAL_TOPICS, OPS_NOT_REQUESTED, Op, TOPIC, _ZERO_TIME, _ZERO_UUID, _distinct, _elem
from protocol.apis.addresses import rewrite_node_list
from protocol.apis.base import NodeMap
from protocol import wire
from protocol.wire import WalkError, array_len, skip_string, skip_tagged, string_bytes, uvarint_bytes

__all__ = ["SPECS"]


CLUSTER_METADATA_TOPIC = "__cluster_metadata"
_I32 = struct.Struct(">i")


def _md_error_topic(cls: Any, error: int, name: str | None, topic_id: UUID | None, internal: bool = False) -> Any:
    return make(cls, error_code=ErrorCode(error), name=name, topic_id=topic_id, is_internal=internal,
                partitions=(), topic_authorized_operations=i32(OPS_NOT_REQUESTED))


def _md_ops(auth: AuthHelper, topic: Any, include_ops: bool) -> Any:
    if not hasattr(topic, "topic_authorized_operations"):
        return topic
    ops = auth.authorized_operations(TOPIC, topic.name) if include_ops and topic.name is not None else OPS_NOT_REQUESTED
    return dataclasses.replace(topic, topic_authorized_operations=i32(ops))


def _md_cluster_ops(auth: AuthHelper, request: Any, response: Any) -> Any:
    if not hasattr(response, "cluster_authorized_operations"):
        return response
    ops = OPS_NOT_REQUESTED
    if getattr(request, "include_cluster_authorized_operations", False):
        ops = auth.authorized_operations(CLUSTER, "kafka-cluster") if auth.cluster(Op.DESCRIBE) else 0
    return dataclasses.replace(response, cluster_authorized_operations=i32(ops))


def _md_learn(topics: Any, cache: TopicCache) -> None:
    for t in topics:
        if t.name is None:
            continue
        if t.error_code == 0:
            cache.learn(t.name, getattr(t, "topic_id", None))
        elif t.error_code == UNKNOWN_TOPIC_OR_PARTITION:
            cache.forget(t.name)


def _enforce_metadata(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """Metadata (docs/authorization.md): DESCRIBE filter (D=false for all-topics), auto-create CREATE checks,
    topic ops (v8+) and cluster ops (v8-10) computed by kgw."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    version = header.api_version
    cls = response_class(3, version)
    topic_cls = _elem(cls, "topics")
    include_ops = bool(getattr(request, "include_topic_authorized_operations", False))
    all_topics = request.topics is None or (version == 0 and not request.topics)

    if not all_topics and version < 12 and any(
            t.name is None or getattr(t, "topic_id", None) is not None for t in request.topics):
        # Kafka: InvalidRequestException -> MetadataRequest.getErrorResponse
        error_topics = tuple(_md_error_topic(topic_cls, INVALID_REQUEST, t.name or "", getattr(t, "topic_id", None))
                             for t in request.topics)
        return Decision(respond=encode(make(cls, throttle_time=_ZERO_TIME, brokers=(), cluster_id=None,
                                            controller_id=i32(-1), topics=error_topics,
                                            cluster_authorized_operations=i32(OPS_NOT_REQUESTED),
                                            error_code=ErrorCode(INVALID_REQUEST))))

    ids = [] if all_topics else [t.topic_id for t in request.topics
                                 if getattr(t, "topic_id", None) is not None and t.topic_id != _ZERO_UUID]
    if all_topics or ids:
        by_id = not all_topics
        new_request = None
        if by_id:
            # Kafka (KafkaApis.handleTopicMetadataRequest): once any id is given, only the ids
            # count (name-only entries are ignored) and ids name existing topics, so nothing is
            # created.  Forward exactly that: the distinct ids, no names, auto-creation off.
            wanted_ids = list(dict.fromkeys(ids))
            id_topic = type(request.topics[0])
            new_request = encode(dataclasses.replace(
                request, topics=tuple(make(id_topic, topic_id=i, name=None) for i in wanted_ids),
                allow_auto_topic_creation=False))
            wanted_set = set(wanted_ids)

        def merge_filtered(buf: memoryview | bytes, off: int) -> bytes:
            response = decode_response(3, version, buf, off)
            topics = response.topics
            if by_id:  # only what was asked for, whatever the upstream added
                topics = [t for t in topics if getattr(t, "topic_id", None) in wanted_set]
            _md_learn(topics, auth.topics)
            named = [t for t in topics if t.name is not None and t.error_code != UNKNOWN_TOPIC_ID]
            allowed = auth.filter(TOPIC, Op.DESCRIBE, _distinct(t.name for t in named), log_if_denied=by_id)
            response = _md_cluster_ops(auth, request, response)
            out = []
            for t in topics:
                if t.name is None or t.error_code == UNKNOWN_TOPIC_ID:
                    out.append(_md_ops(auth, dataclasses.replace(t, name=None) if by_id else t, False))
                elif t.name in allowed:
                    out.append(_md_ops(auth, t, include_ops))
                elif by_id:  # ids are not sensitive: the id with a null name
                    out.append(_md_error_topic(topic_cls, TOPIC_AUTHORIZATION_FAILED, None, t.topic_id))
                # all-topics: silently omitted
            return encode(dataclasses.replace(response, topics=tuple(out)))

        return Decision(request=new_request, merge=merge_filtered)

    names = _distinct(t.name for t in request.topics)
    described = auth.filter(TOPIC, Op.DESCRIBE, names)  # T/T: named topics
    auto_create = version < 4 or request.allow_auto_topic_creation
    check_create = False  # run Kafka's CREATE checks on the topics the upstream reports missing
    held_back: list[str] = []  # v0-3: topics never forwarded (they would be auto-created)
    forward_auto = getattr(request, "allow_auto_topic_creation", None)
    if auto_create and described:
        # prediction only: log flags off; the logged checks run on the missing topics in merge
        not_creatable: set[str] = set()
        if not auth.allowed(CLUSTER, "kafka-cluster", Op.CREATE, False, False):
            not_creatable = described - auth.filter(TOPIC, Op.CREATE, _distinct(n for n in names if n in described),
                                                    False, False)
        if not_creatable:
            check_create = True
            if version >= 4:
                forward_auto = False
            else:
                # v0-3 always auto-creates: a topic kgw may not let the client create is never
                # forwarded, whatever kgw remembers about its existence (it may have been deleted)
                held_back = [n for n in names if n in not_creatable]
    forwarded = [t for t in request.topics if t.name in described and t.name not in held_back]
    forwarded = _first_of_each_name(forwarded)
    changes: dict[str, Any] = {"topics": tuple(forwarded)}
    if forward_auto is not None:
        changes["allow_auto_topic_creation"] = forward_auto
    unchanged = len(forwarded) == len(request.topics) and forward_auto == getattr(
        request, "allow_auto_topic_creation", None)
    new_request = None if unchanged else encode(dataclasses.replace(request, **changes))
    wanted = {t.name for t in forwarded}

    nothing_to_merge = not names and not getattr(request, "include_cluster_authorized_operations", False)

    def merge_named(buf: memoryview | bytes, off: int) -> bytes | None:
        if nothing_to_merge and _answers_no_topic(version, buf, off):
            return None  # brokers only, nothing to filter or compute: the answer as it came
        response = decode_response(3, version, buf, off)
        _md_learn(response.topics, auth.topics)
        upstream: dict[str, Any] = {}
        for t in response.topics:
            if t.name in wanted and t.name not in upstream:  # a v0 empty list means "all": keep only ours
                upstream[t.name] = t
        create_denied: set[str] = set()
        if check_create:
            missing = [n for n in names if n in held_back or (
                n in upstream and upstream[n].error_code in (UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION))]
            if missing and not auth.cluster(Op.CREATE, log_if_denied=False):
                create_denied = set(missing) - auth.filter(TOPIC, Op.CREATE, _distinct(missing))
        response = _md_cluster_ops(auth, request, response)
        out = []
        for name in names:
            if name not in described:
                out.append(_md_error_topic(topic_cls, TOPIC_AUTHORIZATION_FAILED, name, None))
            elif name in create_denied:
                out.append(_md_error_topic(topic_cls, TOPIC_AUTHORIZATION_FAILED, name, None, name in INTERNAL_TOPICS))
            elif name in upstream:
                out.append(_md_ops(auth, upstream[name], include_ops))
            elif name in held_back:  # CREATE allowed by the time the answer came: not auto-created here
                out.append(_md_error_topic(topic_cls, UNKNOWN_TOPIC_OR_PARTITION, name, None, name in INTERNAL_TOPICS))
        return encode(dataclasses.replace(response, topics=tuple(out)))

    return Decision(request=new_request, merge=merge_named)



def _answers_no_topic(version: int, buf: memoryview | bytes, off: int) -> bool:
    """Whether an answer to a Metadata request naming no topic (the brokers-only refresh clients
    send) holds no topic and, in v8-10, the cluster operations kgw's merge would set (none
    requested): then the merge would give back the same bytes, and it is not decoded.  A walk of
    the answer's head; False for any other answer, or one the walk cannot read (decoded then)."""
    flexible = version >= 9
    try:
        if version >= 3:
            off += 4  # throttle_time_ms
        brokers, off = array_len(buf, off, flexible)
        if brokers < 0:
            return False
        for _ in range(brokers):
            off = _broker(buf, off, version, flexible)[-1]
        if version >= 2:
            _cluster_id, off = skip_string(buf, off, flexible)
        if version >= 1:
            off += 4  # controller_id
        topics, off = array_len(buf, off, flexible)
        if topics != 0:
            return False
        if 8 <= version <= 10:
            operations, off = wire.i32(buf, off)
            return operations == OPS_NOT_REQUESTED
        return True
    except (WalkError, struct.error, IndexError, UnicodeDecodeError):
        return False


def _broker(buf: memoryview | bytes, off: int, version: int,
            flexible: bool) -> tuple[int, str, int, str | None, int, int]:
    """The broker entry of a Metadata answer at ``off``: node id, host, port, rack (v1+), where
    its rack begins and where the entry (tagged fields from v9) ends."""
    node_id, off = wire.i32(buf, off)
    host, off = skip_string(buf, off, flexible)
    port, off = wire.i32(buf, off)
    if host is None:
        raise WalkError("null broker host")
    rest, rack = off, None
    if version >= 1:
        rack, off = skip_string(buf, off, flexible)
    if flexible:
        off = skip_tagged(buf, off)
    return node_id, host, port, rack, rest, off


def _rewrite_metadata(version: int, frame: memoryview, offset: int, nodes: NodeMap) -> bytes:
    """The response with its broker list rewritten (:func:`rewrite_node_list`'s rule: each address
    taught to ``nodes`` and replaced by the gateway's, or the broker left out) and everything
    after it, the topics and their partitions (nearly all of a large cluster's answer), copied as
    it came.  A body the walk cannot read is decoded instead, so that a malformed one fails as
    :class:`~protocol.codecs.CodecError`, as it did when every answer was decoded."""
    try:
        return _rewrite_brokers(version, frame, offset, nodes)
    except (WalkError, struct.error, IndexError, UnicodeDecodeError):
        response = decode_response(3, version, frame, offset)
        return encode(replace(response, brokers=rewrite_node_list(response.brokers, nodes)))


def _rewrite_brokers(version: int, buf: memoryview, off: int, nodes: NodeMap) -> bytes:
    """The walk behind :func:`_rewrite_metadata`: throttle time (v3+), then the brokers (node id,
    host, port, rack from v1, tagged fields from v9), each rewritten or left out; its rack and
    tagged fields are kept as they came."""
    flexible = version >= 9
    head = bytes(buf[off:off + 4]) if version >= 3 else b""  # throttle_time_ms
    off += len(head)
    count, off = array_len(buf, off, flexible)
    if count < 0:
        raise WalkError("null broker list")
    kept: list[bytes | memoryview] = []
    for _ in range(count):  # (each read checks the buffer's end)
        node_id, host, port, rack, rest, off = _broker(buf, off, version, flexible)
        nodes.learn(node_id, host, port, rack)
        address = nodes.advertise(node_id)
        if address is not None:
            kept += (_I32.pack(node_id), string_bytes(address[0], flexible), _I32.pack(address[1]), buf[rest:off])
    size = len(kept) // 4
    return b"".join((head, uvarint_bytes(size + 1) if flexible else _I32.pack(size), *kept, buf[off:]))


SPECS = (
    ApiSpec(3, "Metadata", inspect_decoded, rewrite_response=_rewrite_metadata, enforce=_enforce_metadata, versions=(0, 13)),
)


def _first_of_each_name(topics: list[Any]) -> list[Any]:
    """``topics`` in order, each name once (its first entry)."""
    seen: set[str] = set()
    out = []
    for t in topics:
        if t.name not in seen:
            seen.add(t.name)
            out.append(t)
    return out
