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

Answers are walked, not decoded.  A large cluster's answer is nearly all partitions, which kgw
neither reads nor changes: the rewrite walks the broker list and copies the rest; the merges
walk the topic entries (:class:`_Answer`), keep, drop, reorder or answer them and set the
authorized operations kgw computes, each kept entry copied as it came, tagged fields this kio
does not know included.  An answer the walk cannot read fails as a CodecError, as a decode did.
"""

from __future__ import annotations

from dataclasses import replace
import dataclasses
import struct
from typing import Any, NamedTuple
from uuid import UUID
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32
from protocol.apis.base import FORWARD, ApiSpec, Decision, RequestInfo
from protocol.apis.generic import inspect_decoded
from protocol.auth_helper import AuthHelper
from protocol.topic_ids import TopicCache
from protocol.codecs import CodecError, decode_response, encode, make, response_class
from protocol.errors import (
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from protocol.headers import RequestHeader
from protocol.apis.topic_common import CLUSTER, INTERNAL_TOPICS, OPS_NOT_REQUESTED, Op, TOPIC, _ZERO_TIME, _ZERO_UUID, _distinct
from protocol.apis.addresses import rewrite_node_list
from protocol.apis.base import NodeMap
from protocol import wire
from protocol.wire import WalkError, array_len, skip_string, skip_tagged, string_bytes, uvarint_bytes

__all__ = ["SPECS"]


CLUSTER_METADATA_TOPIC = "__cluster_metadata"
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ZERO_ID = bytes(16)


def _topic_ops(auth: AuthHelper, name: str, include_ops: bool) -> int:
    return auth.authorized_operations(TOPIC, name) if include_ops else OPS_NOT_REQUESTED


def _cluster_ops(auth: AuthHelper, request: Any, version: int) -> int | None:
    """The cluster's authorized operations kgw answers (v8-10; None in versions without them)."""
    if not 8 <= version <= 10:
        return None
    if getattr(request, "include_cluster_authorized_operations", False):
        return auth.authorized_operations(CLUSTER, "kafka-cluster") if auth.cluster(Op.DESCRIBE) else 0
    return OPS_NOT_REQUESTED


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
    include_ops = bool(getattr(request, "include_topic_authorized_operations", False))
    all_topics = request.topics is None or (version == 0 and not request.topics)

    if not all_topics and version < 12 and any(
            t.name is None or getattr(t, "topic_id", None) is not None for t in request.topics):
        # Kafka: InvalidRequestException -> MetadataRequest.getErrorResponse
        empty = encode(make(response_class(3, version), throttle_time=_ZERO_TIME, brokers=(), cluster_id=None,
                            controller_id=i32(-1), topics=(), cluster_authorized_operations=i32(OPS_NOT_REQUESTED),
                            error_code=ErrorCode(INVALID_REQUEST)))
        entries: list[bytes | memoryview] = [
            _error_entry(version, INVALID_REQUEST, t.name or "", getattr(t, "topic_id", None)) for t in request.topics]
        return Decision(respond=_Answer(version, empty, 0).with_topics(len(entries), entries, None))

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
            answer = _walk_answer(version, buf, off)
            topics = answer.topics
            if by_id:  # only what was asked for, whatever the upstream added
                topics = [t for t in topics if t.topic_id in wanted_set]
            _md_learn(topics, auth.topics)
            named = [t.name for t in topics if t.name is not None and t.error_code != UNKNOWN_TOPIC_ID]
            allowed = auth.filter(TOPIC, Op.DESCRIBE, _distinct(named), log_if_denied=by_id)
            cluster_ops = _cluster_ops(auth, request, version)
            out: list[bytes | memoryview] = []
            kept = 0
            for t in topics:
                if t.name is None or t.error_code == UNKNOWN_TOPIC_ID:
                    out += answer.entry(t, OPS_NOT_REQUESTED, null_name=by_id)
                elif t.name in allowed:
                    out += answer.entry(t, _topic_ops(auth, t.name, include_ops))
                elif by_id:  # ids are not sensitive: the id with a null name
                    out.append(_error_entry(version, TOPIC_AUTHORIZATION_FAILED, None, t.topic_id))
                else:  # all-topics: silently omitted
                    continue
                kept += 1
            return answer.with_topics(kept, out, cluster_ops)

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
        answer = _walk_answer(version, buf, off)
        if nothing_to_merge and not answer.topics and answer.cluster_ops in (None, OPS_NOT_REQUESTED):
            return None  # brokers only, nothing to filter or compute: the answer as it came
        _md_learn(answer.topics, auth.topics)
        upstream: dict[str | None, _Topic] = {}
        for t in answer.topics:
            if t.name in wanted and t.name not in upstream:  # a v0 empty list means "all": keep only ours
                upstream[t.name] = t
        create_denied: set[str] = set()
        if check_create:
            missing = [n for n in names if n in held_back or (
                n in upstream and upstream[n].error_code in (UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION))]
            if missing and not auth.cluster(Op.CREATE, log_if_denied=False):
                create_denied = set(missing) - auth.filter(TOPIC, Op.CREATE, _distinct(missing))
        cluster_ops = _cluster_ops(auth, request, version)
        out: list[bytes | memoryview] = []
        kept = 0
        for name in names:
            if name not in described:
                out.append(_error_entry(version, TOPIC_AUTHORIZATION_FAILED, name, None))
            elif name in create_denied:
                out.append(_error_entry(version, TOPIC_AUTHORIZATION_FAILED, name, None, name in INTERNAL_TOPICS))
            elif name in upstream:
                out += answer.entry(upstream[name], _topic_ops(auth, name, include_ops))
            elif name in held_back:  # CREATE allowed by the time the answer came: not auto-created here
                out.append(_error_entry(version, UNKNOWN_TOPIC_OR_PARTITION, name, None, name in INTERNAL_TOPICS))
            else:
                continue
            kept += 1
        return answer.with_topics(kept, out, cluster_ops)

    return Decision(request=new_request, merge=merge_named)



class _Topic(NamedTuple):
    """A topic entry of a walked Metadata answer: what the merges read of it, and where its parts
    are in the buffer."""

    error_code: int
    name: str | None
    topic_id: UUID | None  # (v10+; the zero id read as None, as kio reads it)
    start: int
    name_at: int
    name_end: int
    ops_at: int  # its topic_authorized_operations (v8+); its end before v8
    end: int


class _Answer:
    """A Metadata answer walked, not decoded: its head (throttle time, brokers, cluster id,
    controller) and each topic entry are copied as they came, partitions and any tagged field
    this kio does not know included, so that the merges only choose, order and add entries and
    set the authorized operations kgw computes.  Every field the walk does not read is the
    upstream's, as the decoding merge passed it on."""

    __slots__ = ("version", "buf", "off", "count_at", "topics", "tail_at", "cluster_ops")

    def __init__(self, version: int, buf: memoryview | bytes, off: int) -> None:
        self.version, self.buf, self.off = version, buf, off
        self.cluster_ops: int | None = None
        self._walk(off)

    def _walk(self, off: int) -> None:
        version, buf = self.version, self.buf
        flexible = version >= 9
        if version >= 3:
            off += 4  # throttle_time_ms
        brokers, off = array_len(buf, off, flexible)
        if brokers < 0:
            raise WalkError("null broker list")
        for _ in range(brokers):
            off = _broker(buf, off, version, flexible)[-1]
        if version >= 2:
            _cluster_id, off = skip_string(buf, off, flexible)
        if version >= 1:
            off += 4  # controller_id
        self.count_at = off
        count, off = array_len(buf, off, flexible)
        if count < 0:
            raise WalkError("null topic list")
        topics = []
        for _ in range(count):
            start = off
            error_code, off = wire.i16(buf, off)
            name_at = off
            name, off = skip_string(buf, off, flexible)
            name_end = off
            if name is None and version < 12:
                raise WalkError("null topic name")
            topic_id = None
            if version >= 10:
                raw = bytes(buf[off:off + 16])
                if len(raw) != 16:
                    raise WalkError("buffer ends inside a topic id")
                off += 16
                if raw != _ZERO_ID:
                    topic_id = UUID(bytes=raw)
            if version >= 1:
                off += 1  # is_internal
            partitions, off = array_len(buf, off, flexible)
            if partitions < 0:
                raise WalkError("null partition list")
            if partitions:  # (a large cluster's answer is nearly all partitions)
                end = None if _native_partitions_end is None else _native_partitions_end(buf, off, version, partitions)
                off = _partitions_end(buf, off, partitions, version) if end is None else end
            ops_at = off
            if version >= 8:
                off += 4  # topic_authorized_operations
            if flexible:
                off = skip_tagged(buf, off)
            if off > len(buf):
                raise WalkError("buffer ends inside a topic")
            topics.append(_Topic(error_code, name, topic_id, start, name_at, name_end, ops_at, off))
        self.topics = topics
        self.tail_at = off
        if 8 <= version <= 10:
            self.cluster_ops, off = wire.i32(buf, off)
        if version >= 13:
            _error_code, off = wire.i16(buf, off)
        if flexible:
            skip_tagged(buf, off)

    def entry(self, topic: _Topic, ops: int, null_name: bool = False) -> tuple[bytes | memoryview, ...]:
        """``topic``'s entry as it came, with ``ops`` as its authorized operations (v8+) and, with
        ``null_name``, a null name (v12+ only: by-id answers)."""
        buf = self.buf
        if self.version < 8:
            return (buf[topic.start:topic.end],)
        if null_name:
            head: tuple[bytes | memoryview, ...] = (buf[topic.start:topic.name_at], b"\x00",
                                                    buf[topic.name_end:topic.ops_at])
        else:
            head = (buf[topic.start:topic.ops_at],)
        return (*head, _I32.pack(ops), buf[topic.ops_at + 4:topic.end])

    def with_topics(self, count: int, entries: list[bytes | memoryview], cluster_ops: int | None) -> bytes:
        """The answer with ``count`` topic entries (``entries``, their parts) in place of its own,
        and ``cluster_ops`` as the cluster's authorized operations (v8-10)."""
        buf, tail_at = self.buf, self.tail_at
        size = uvarint_bytes(count + 1) if self.version >= 9 else _I32.pack(count)
        if cluster_ops is None:
            tail: tuple[bytes | memoryview, ...] = (buf[tail_at:],)
        else:
            tail = (_I32.pack(cluster_ops), buf[tail_at + 4:])
        return b"".join((buf[self.off:self.count_at], size, *entries, *tail))


def _partitions_end(buf: memoryview | bytes, off: int, count: int, version: int) -> int:
    """Where the ``count`` partitions of a topic entry at ``off`` end: in C
    (``protocol/_native.c``'s ``metadata_partitions_end``) where it was built, this walk the
    reference, which also reads what the C walk declines and names what is wrong."""
    flexible = version >= 9
    head = 10 if version < 7 else 14  # error, index, leader (and its epoch from v7)
    node_lists = 2 if version < 5 else 3  # replicas, in-sync (and offline from v5)
    for _ in range(count):
        off += head
        for _ in range(node_lists):
            if flexible and buf[off] < 0x80:  # a one-byte count: nearly every list
                nodes, off = buf[off] - 1, off + 1
            else:
                nodes, off = array_len(buf, off, flexible)
            if nodes < 0:
                raise WalkError("null node list")
            off += 4 * nodes
        if flexible:
            off = off + 1 if buf[off] == 0 else skip_tagged(buf, off)
    return off


def _walk_answer(version: int, buf: memoryview | bytes, off: int) -> _Answer:
    """The Metadata answer at ``off``, walked; one the walk cannot read fails as
    :class:`~protocol.codecs.CodecError`, with kio's reason where kio cannot read it either."""
    try:
        return _Answer(version, buf, off)
    except (WalkError, struct.error, IndexError, UnicodeDecodeError) as e:
        decode_response(3, version, buf, off)
        raise CodecError(f"cannot read Metadata v{version} response: {e}") from None


def _error_entry(version: int, error: int, name: str | None, topic_id: UUID | None, internal: bool = False) -> bytes:
    """A topic entry kgw answers itself: ``error``, no partitions, no operations."""
    flexible = version >= 9
    parts = [_I16.pack(error), b"\x00" if name is None and flexible else
             b"\xff\xff" if name is None else string_bytes(name, flexible)]
    if version >= 10:
        parts.append(_ZERO_ID if topic_id is None else topic_id.bytes)
    if version >= 1:
        parts.append(b"\x01" if internal else b"\x00")
    parts.append(b"\x01" if flexible else b"\x00\x00\x00\x00")  # no partitions
    if version >= 8:
        parts.append(_I32.pack(OPS_NOT_REQUESTED))
    if flexible:
        parts.append(b"\x00")
    return b"".join(parts)


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


try:  # the partitions' walk in C, built by pip where a compiler is found
    from protocol import _native
except ImportError:  # pragma: no cover - a build without a compiler: the reference alone
    _native_partitions_end = None
else:
    _native_partitions_end = _native.metadata_partitions_end


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
