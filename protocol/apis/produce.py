"""Produce (0): walked, never decoded; record batches stay opaque bytes.

Theory of operation
-------------------
A Produce request is mostly record batches.  :func:`inspect_produce` walks the
frame with length prefixes only: it reads the transactional id, ``acks``, the
timeout and each topic's name and partition count, and jumps over every
``records`` field by its length.  Nothing is copied.  ``acks=0`` means the
broker sends no response, so the gateway must not wait for one.

Responses from v10 on may carry ``node_endpoints`` (KIP-951: where the new
leader of a partition is), a tagged field at the very end of the body.
:func:`has_top_level_tags` walks the response to that point without building
anything; only a response that carries top-level tagged fields is decoded with
kio, and only one with endpoints is re-encoded with gateway addresses.
"""

from __future__ import annotations

import io
import struct
from dataclasses import replace
from typing import Any
from uuid import UUID
from datetime import timedelta

from kio.schema.errors import ErrorCode
from kio.serial.writers import write_unsigned_varint
from kio.static.primitive import i32 as i32_
from kio.static.primitive import i64 as i64_

from authz.acl import AclOperation, ResourceType
from authz.authorizer import Action
from protocol.auth_helper import AuthHelper, literal_action
from protocol.errors import (
    INVALID_RECORD,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_ID,
    UNSUPPORTED_COMPRESSION_TYPE,
)

from protocol.apis.addresses import rewrite_node_list
from protocol.apis.base import FORWARD, ApiSpec, Decision, NodeMap, RequestInfo
from protocol.codecs import CodecError, decode_response, encode, make, nested, response_class
from protocol.headers import RequestHeader
from protocol.wire import WalkError, array_len, i32, skip_bytes, skip_string, skip_tagged, uvarint

__all__ = ["SPECS", "walk_produce_request", "walk_produce_request_python", "ProduceShape"]


class TopicSpan:
    """One topic entry of a Produce request: its name, partitions, and where its bytes are."""

    __slots__ = ("name", "partitions", "start", "end", "parts_at", "parts_end", "spans", "invalid", "topic_id")

    def __init__(self, name: str | None, partitions: list[int], start: int, end: int, parts_at: int, parts_end: int,
                 spans: list[tuple[int, int]], invalid: dict[int, tuple[int, str]] | None,
                 topic_id: UUID | None = None) -> None:
        #: the topic's name; from v13 on resolved from ``topic_id`` by the enforcement (None: unknown)
        self.name = name
        self.topic_id = topic_id
        self.partitions = partitions
        #: the whole entry; the partition array's length prefix; the end of the last partition
        self.start = start
        self.end = end
        self.parts_at = parts_at
        self.parts_end = parts_end
        #: (start, end) of each partition entry, in request order
        self.spans = spans
        #: position in ``partitions`` -> (error code, message) for partitions whose records the
        #: broker must not see (not exactly one magic-v2 batch, a control batch, ...); None: none
        self.invalid = invalid


class ProduceShape:
    """What the gateway needs of a Produce request, found without decoding any record batch."""

    __slots__ = ("transactional_id", "acks", "timeout_ms", "topics", "transactional", "topics_at", "topics_end",
                 "any_invalid")

    def __init__(self, transactional_id: Any, acks: Any, timeout_ms: Any, topics: Any, transactional: Any, topics_at: Any, topics_end: Any,
                 any_invalid: Any = False) -> None:
        self.transactional_id = transactional_id
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.topics: list[TopicSpan] = topics
        #: some partition's first batch has the transactional attribute bit (0x10) set
        self.transactional = transactional
        #: offsets of the topic array (its length prefix) and of what follows it
        self.topics_at = topics_at
        self.topics_end = topics_end
        #: some partition carries records kgw refuses (see :attr:`TopicSpan.invalid`)
        self.any_invalid = any_invalid


# Record batch v2 header (DefaultRecordBatch): baseOffset int64 @0, batchLength int32 @8,
# partitionLeaderEpoch int32 @12, magic int8 @16, crc uint32 @17, attributes int16 @21, ...
# 61 bytes in all before the records.
_BATCH_OVERHEAD = 61
_BATCH_LENGTH = struct.Struct(">i")
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_ZSTD = 4


def check_batch(frame: memoryview, start: int, end: int, version: int) -> tuple[int, str] | None:
    """Why a partition's ``records`` field must not be forwarded, or None when it is exactly one
    magic-v2 record batch that a client may write.

    Kafka (``ProduceRequest.validateRecords``) refuses Produce v3+ records that are not exactly
    one batch of magic 2 (INVALID_RECORD) and zstd before v7 (UNSUPPORTED_COMPRESSION_TYPE), and
    its log validator refuses control batches from clients.  kgw is stricter in one way: bytes
    after the batch, which Kafka's batch iterator would silently skip, are refused too, so no
    byte reaches the broker that kgw did not account for.  The header fields that authorization
    reads (attributes) are therefore the only batch's, never the first of several.
    """
    size = end - start
    if start < 0:  # null records
        return INVALID_RECORD, f"Produce requests with version {version} must have at least one record batch per partition"
    if size < _BATCH_OVERHEAD:
        return INVALID_RECORD, f"Produce requests with version {version} must have at least one record batch per partition"
    (length,) = _BATCH_LENGTH.unpack_from(frame, start + 8)
    if frame[start + 16] != 2:
        return INVALID_RECORD, (f"Produce requests with version {version} are only allowed to contain record "
                                "batches with magic version 2")
    if length + 12 != size:
        return INVALID_RECORD, (f"Produce requests with version {version} are only allowed to contain exactly one "
                                "record batch per partition")
    attributes = frame[start + 22]
    if attributes & _CONTROL:
        return INVALID_RECORD, "Clients are not allowed to write control records"
    if version < 7 and attributes & 0x07 == _ZSTD:
        return UNSUPPORTED_COMPRESSION_TYPE, f"Produce requests with version {version} must not use ZStandard compression"
    return None


def walk_produce_request(header: RequestHeader, frame: memoryview) -> ProduceShape:
    """The Produce request's shape: by the C walk (protocol/_native.c) when it is built and the
    request has the usual shape it knows, else by :func:`walk_produce_request_python`, the
    reference, which also names what is malformed."""
    if _native_walk is not None:
        shape: ProduceShape | None = _native_walk(frame, header.size, header.flexible, header.api_version)
        if shape is not None:
            return shape
    return walk_produce_request_python(header, frame)


def walk_produce_request_python(header: RequestHeader, frame: memoryview) -> ProduceShape:
    flexible = header.flexible
    version = header.api_version
    # One-byte varints (lengths < 127, no tagged fields) are read inline: this runs for every
    # Produce request, and each helper call costs more than the byte it reads.
    try:
        off = header.size
        txn, off = skip_string(frame, off, flexible)
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, off)
        off += 6
        topics_at = off
        if flexible:
            n_topics = frame[off]
            if n_topics < 0x80:
                off += 1
            else:
                n_topics, off = uvarint(frame, off)
            n_topics -= 1
        else:
            n_topics, off = i32(frame, off)
        if n_topics < 0:
            raise WalkError("negative or null topic array")
        topics = []
        transactional = False
        any_invalid = False
        for _ in range(n_topics):
            start = off
            topic_id = None
            if version >= 13:  # topics by id (KIP-516): resolved to names before anything is authorized
                end_id = off + 16
                if end_id > len(frame):
                    raise WalkError("buffer ends inside a topic id")
                topic_id = UUID(bytes=bytes(frame[off:end_id]))
                name = None  # resolved by the enforcement, from the gateway's learned ids
                off = end_id
            else:
                name, off = skip_string(frame, off, flexible)
                if name is None:
                    raise WalkError("null topic name")
            parts_at = off
            if not flexible:
                n_parts = _I32_AT(frame, off)[0]
                off += 4
            elif frame[off] < 0x80:
                n_parts = frame[off] - 1
                off += 1
            else:
                n_parts, off = array_len(frame, off, flexible)
            if n_parts < 0:
                raise WalkError("negative or null partition array")
            partitions = []
            spans = []
            invalid = None
            for _ in range(n_parts):
                p_start = off
                partitions.append(_I32_AT(frame, off)[0])
                off += 4
                # the records' length, read here when it is an int32 or a varint of one or two
                # bytes (a helper call per partition costs more than the bytes it reads)
                if not flexible:
                    size, head = _I32_AT(frame, off)[0], 4
                elif frame[off] < 0x80:
                    size, head = frame[off] - 1, 1
                elif frame[off + 1] < 0x80:
                    size, head = ((frame[off] & 0x7F) | (frame[off + 1] << 7)) - 1, 2
                else:
                    size = head = -1
                if size >= 0:
                    rec_start = off + head
                    rec_end = off = rec_start + size
                    if off > len(frame):
                        raise WalkError("buffer ends inside a byte field")
                else:  # null, negative or a longer varint
                    rec_start, rec_end, off = skip_bytes(frame, off, flexible)
                # Kafka flags a request transactional by each partition's *first* batch
                # (RequestUtils.hasTransactionalRecords), whatever follows it
                if rec_end - rec_start >= 23 and frame[rec_start + 22] & _TRANSACTIONAL:
                    transactional = True
                problem = check_batch(frame, rec_start, rec_end, version)
                if problem is not None:
                    if invalid is None:
                        invalid = {}
                    invalid[len(partitions) - 1] = problem
                    any_invalid = True
                if flexible:
                    if frame[off] == 0:
                        off += 1
                    else:
                        off = skip_tagged(frame, off)
                spans.append((p_start, off))
            parts_end = off
            if flexible:
                if frame[off] == 0:
                    off += 1
                else:
                    off = skip_tagged(frame, off)
            topics.append(TopicSpan(name, partitions, start, off, parts_at, parts_end, spans, invalid, topic_id))
        topics_end = off
        if flexible:
            off = skip_tagged(frame, off)
    except (WalkError, UnicodeDecodeError, IndexError, struct.error) as e:
        raise CodecError(f"malformed Produce v{version} request: {e or 'buffer ends early'}") from e
    if off != len(frame):
        raise CodecError(f"malformed Produce v{version} request: {len(frame) - off} trailing bytes")
    return ProduceShape(txn, acks, timeout_ms, topics, transactional, topics_at, topics_end, any_invalid)


_ACKS_TIMEOUT = struct.Struct(">hi")
_I32_AT = struct.Struct(">i").unpack_from

try:  # the same walk in C, built by pip where a compiler is found (setup.py)
    from protocol import _native
except ImportError:  # pragma: no cover - a build without a compiler: the reference alone
    _native_walk = _native_response_tags = None
else:
    _native.bind(TopicSpan, ProduceShape, UUID, check_batch)
    _native_walk = _native.walk_produce
    _native_response_tags = _native.produce_response_tags


def _inspect(header: RequestHeader, frame: memoryview) -> RequestInfo:
    shape = walk_produce_request(header, frame)
    return RequestInfo(shape.acks != 0, max(shape.timeout_ms, 0) / 1000.0, shape)


def _partition_entry(part_cls: Any, index: int, error: int, message: str | None = None) -> Any:
    return make(part_cls, index=i32_(index), error_code=ErrorCode(error), base_offset=i64_(-1), log_append_time=None,
                log_start_offset=i64_(-1), record_errors=(), error_message=message)


def _error_response(version: int, topics: list[TopicSpan], error: int) -> bytes:
    cls = response_class(0, version)
    topic_cls = nested(cls, "responses")
    part_cls = nested(topic_cls, "partition_responses")
    responses = tuple(make(topic_cls, name=t.name, topic_id=t.topic_id,
                           partition_responses=tuple(_partition_entry(part_cls, p, error) for p in t.partitions))
                      for t in topics)
    return encode(make(cls, responses=responses, throttle_time=timedelta(0)))


def _encode_array_len(n: int, flexible: bool) -> bytes:
    if flexible:
        out = io.BytesIO()
        write_unsigned_varint(out, n + 1)  # type: ignore[arg-type]  # kio: an int subclass, same bytes
        return out.getvalue()
    return struct.pack(">i", n)


def _enforce(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """Kafka's ``handleProduceRequest``: TRANSACTIONAL_ID WRITE when any partition's first batch is
    transactional (the whole request fails otherwise), then TOPIC WRITE per topic (29 on each of a
    denied topic's partitions), then each allowed partition's records must be exactly one
    magic-v2 batch (:func:`check_batch`; 87 otherwise).  Only allowed, valid partitions go
    upstream; the rest is answered by kgw and merged back in request order.  The usual request's
    path through here is also :func:`_sole_action` (the dispatcher's shortcut): keep them in step."""
    if not auth.enabled:
        return FORWARD
    shape: ProduceShape = info.decoded
    version = header.api_version
    for t in shape.topics:  # v13+: names from the ids the gateway learned (None: unknown id, 100)
        if t.topic_id is not None:
            t.name = auth.topic_name(t.topic_id)
    if shape.transactional and (
        shape.transactional_id is None
        or not auth.allowed(ResourceType.TRANSACTIONAL_ID, shape.transactional_id, AclOperation.WRITE)
    ):
        if shape.acks == 0:
            return Decision(close="transactional produce with acks=0 denied (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)")
        return Decision(respond=_error_response(version, shape.topics, TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    topics = shape.topics
    if len(topics) == 1 and topics[0].name is not None:  # the usual request: one topic, one decision
        name = topics[0].name
        if auth.allowed(ResourceType.TOPIC, name, AclOperation.WRITE, True, True, len(topics[0].partitions)):
            if not shape.any_invalid:
                return FORWARD
            allowed = {name}
        else:
            allowed = set()
    else:
        counts: dict[str, int] = {}
        unknown_ids = False
        for t in topics:
            if t.name is None:
                unknown_ids = True
            else:
                counts[t.name] = counts.get(t.name, 0) + len(t.partitions)
        allowed = auth.filter(ResourceType.TOPIC, AclOperation.WRITE, counts)
        if len(allowed) == len(counts) and not shape.any_invalid and not unknown_ids:
            return FORWARD
    # (topic position, partition position) -> (error, message) for every partition kgw answers;
    # Kafka's order: an unknown id first, then the authorization, then the records
    local: dict[tuple[int, int], tuple[int, str | None]] = {}
    for ti, t in enumerate(shape.topics):
        if t.name is None:
            for pi in range(len(t.partitions)):
                local[(ti, pi)] = (UNKNOWN_TOPIC_ID, None)
        elif t.name not in allowed:
            for pi in range(len(t.partitions)):
                local[(ti, pi)] = (TOPIC_AUTHORIZATION_FAILED, None)
        elif t.invalid:
            for pi, problem in t.invalid.items():
                local[(ti, pi)] = problem
    if shape.acks == 0 and local:
        first = next(iter(local.values()))
        return Decision(close=f"produce with acks=0 refused on {len(local)} partition(s) (error {first[0]})")
    flexible = header.flexible
    parts: list[Any] = [bytes(body[header.size : shape.topics_at])]
    kept_topics = 0
    topic_parts: list[Any] = []
    for ti, t in enumerate(shape.topics):
        keep = [pi for pi in range(len(t.partitions)) if (ti, pi) not in local]
        if not keep:
            continue
        kept_topics += 1
        if len(keep) == len(t.partitions):
            topic_parts.append(body[t.start : t.end])
            continue
        topic_parts.append(body[t.start : t.parts_at])
        topic_parts.append(_encode_array_len(len(keep), flexible))
        topic_parts.extend(body[t.spans[pi][0] : t.spans[pi][1]] for pi in keep)
        topic_parts.append(body[t.parts_end : t.end])
    if not kept_topics and shape.acks != 0:
        return Decision(respond=_merged(version, shape, local, None))
    # (acks=0 with only empty denied topics: forwarded without them, and nothing is answered)
    request = b"".join((*parts, _encode_array_len(kept_topics, flexible), *topic_parts,
                        bytes(body[shape.topics_end :])))

    def merge(buf: memoryview | bytes, off: int) -> bytes:
        return _merged(version, shape, local, decode_response(0, version, buf, off))

    return Decision(request=request, merge=merge)


def _merged(version: int, shape: ProduceShape, local: dict[Any, Any], response: Any) -> bytes:
    """The client's response: kgw's entries for ``local`` partitions and the upstream's for the
    rest, topic by topic and partition by partition in request order (upstream entries nobody
    asked for are kept at the end)."""
    cls = response_class(0, version)
    topic_cls = nested(cls, "responses")
    part_cls = nested(topic_cls, "partition_responses")
    by_id = version >= 13  # responses name topics by id from v13 on
    upstream: dict[tuple[Any, ...], list[Any]] = {}
    for entry in (response.responses if response is not None else ()):
        key = entry.topic_id if by_id else entry.name
        for p in entry.partition_responses:
            upstream.setdefault((key, p.index), []).append(p)
    out = []
    for ti, t in enumerate(shape.topics):
        entries = []
        for pi, index in enumerate(t.partitions):
            problem = local.get((ti, pi))
            if problem is not None:
                entries.append(_partition_entry(part_cls, index, problem[0], problem[1]))
            else:
                found = upstream.get((t.topic_id if by_id else t.name, index))
                if found:
                    entries.append(found.pop(0))
        out.append(make(topic_cls, name=t.name, topic_id=t.topic_id, partition_responses=tuple(entries)))
    extra = [make(topic_cls, name=key, topic_id=key, partition_responses=tuple(ps))
             for (key, _), ps in upstream.items() if ps]
    out.extend(extra)
    if response is None:
        return encode(make(cls, responses=tuple(out), throttle_time=timedelta(0)))
    return encode(replace(response, responses=tuple(out)))


def has_top_level_tags(version: int, frame: memoryview, off: int) -> bool:
    """Whether a flexible (v9+) Produce response body at ``off`` ends with tagged fields.

    Every Produce response on the request path goes through here, so the usual shape is
    walked in C (``protocol/_native.c``) where it was built; anything else, and every response
    where it was not, is walked by :func:`_walk_to_top_level_tags`, the reference, which reads
    every varint in full and names what is malformed."""
    if _native_response_tags is not None:
        usual = _native_response_tags(frame, off, version)
        if usual is not None:
            return usual
    return _walk_to_top_level_tags(version, frame, off)


def _walk_to_top_level_tags(version: int, frame: memoryview, off: int) -> bool:
    try:
        n_topics, off = uvarint(frame, off)
        for _ in range(n_topics - 1):
            if version >= 13:
                off += 16  # topic id
            else:
                n, off = uvarint(frame, off)
                off += n - 1 if n else 0
            n_parts, off = uvarint(frame, off)
            for _ in range(n_parts - 1):
                off += 4 + 2 + 8 + 8 + 8  # index, error code, base offset, log append time, log start offset
                n_errors, off = uvarint(frame, off)
                for _ in range(n_errors - 1):
                    off += 4  # batch index
                    n, off = uvarint(frame, off)
                    off += n - 1 if n else 0
                    off = skip_tagged(frame, off)
                n, off = uvarint(frame, off)  # error message
                off += n - 1 if n else 0
                off = skip_tagged(frame, off)  # current_leader lives here
            off = skip_tagged(frame, off)
        off += 4  # throttle time
        count, _ = uvarint(frame, off)
    except WalkError as e:
        raise CodecError(f"malformed Produce v{version} response: {e}") from None
    return count != 0


def _rewrite(version: int, frame: memoryview, offset: int, nodes: NodeMap) -> bytes | None:
    if version < 10 or not has_top_level_tags(version, frame, offset):
        return None
    response = decode_response(0, version, frame, offset)
    if not response.node_endpoints:
        return None
    return encode(replace(response, node_endpoints=rewrite_node_list(response.node_endpoints, nodes)))


_TOPIC, _WRITE = ResourceType.TOPIC, AclOperation.WRITE


def _sole_action(header: RequestHeader, info: RequestInfo, _state: Any = None, topic_ids: Any = None) -> Action | None:
    """The usual request (one topic, by name or, v13+, by an id the gateway learned; no
    transactional batch; every batch valid): :func:`_enforce` asks TOPIC WRITE on that topic,
    counted once per partition, and forwards the request as it is when it is allowed.  None
    for any other shape (an id not learned included: the enforcement answers it)."""
    shape: ProduceShape = info.decoded
    topics = shape.topics
    if shape.transactional or shape.any_invalid or len(topics) != 1:
        return None
    t = topics[0]
    name = t.name
    if name is None:  # v13+: by id, named as the enforcement names it (AuthHelper.topic_name)
        if topic_ids is None or t.topic_id is None:
            return None
        name = topic_ids.name_of(t.topic_id)
        if name is None:
            return None
    return literal_action(_TOPIC, name, _WRITE, len(t.partitions))


def _peek(header: RequestHeader, frame: memoryview) -> RequestInfo:
    """Without an authorizer only ``acks`` and the timeout matter; the topics are not walked
    (the broker validates what it parses, as it would without kgw)."""
    try:
        _txn, off = skip_string(frame, header.size, header.flexible)
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, off)
    except (WalkError, UnicodeDecodeError, struct.error) as e:
        raise CodecError(f"malformed Produce v{header.api_version} request: {e}") from e
    return RequestInfo(expects_response=acks != 0, broker_wait_s=max(timeout_ms, 0) / 1000.0)


SPECS = (ApiSpec(0, "Produce", _inspect, _rewrite, enforce=_enforce, peek=_peek, versions=(3, 13),
                 sole_action=_sole_action, response_tags=_native_response_tags),)
