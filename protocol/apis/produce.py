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
from datetime import timedelta

from kio.schema.errors import ErrorCode
from kio.serial.writers import write_unsigned_varint
from kio.static.primitive import i32 as i32_
from kio.static.primitive import i64 as i64_

from authz.acl import AclOperation, ResourceType
from protocol.auth_helper import AuthHelper
from protocol.errors import TOPIC_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED

from protocol.apis.addresses import rewrite_node_list
from protocol.apis.base import FORWARD, ApiSpec, Decision, NodeMap, RequestInfo
from protocol.codecs import CodecError, decode_response, encode, make, nested, response_class
from protocol.headers import RequestHeader
from protocol.merging import merge_in_request_order
from protocol.resources import ResourceKind
from protocol.wire import WalkError, array_len, i32, skip_bytes, skip_string, skip_tagged, uvarint

__all__ = ["SPECS", "walk_produce_request", "ProduceShape"]


class TopicSpan:
    """One topic entry of a Produce request: its name, partitions, and where its bytes are."""

    __slots__ = ("name", "partitions", "start", "end")

    def __init__(self, name: str, partitions: list[int], start: int, end: int) -> None:
        self.name = name
        self.partitions = partitions
        self.start = start
        self.end = end


class ProduceShape:
    """What the gateway needs of a Produce request, found without decoding any record batch."""

    __slots__ = ("transactional_id", "acks", "timeout_ms", "topics", "transactional", "topics_at", "topics_end")

    def __init__(self, transactional_id, acks, timeout_ms, topics, transactional, topics_at, topics_end):
        self.transactional_id = transactional_id
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.topics: list[TopicSpan] = topics
        #: some batch has the transactional attribute bit (0x10) set
        self.transactional = transactional
        #: offsets of the topic array (its length prefix) and of what follows it
        self.topics_at = topics_at
        self.topics_end = topics_end


def walk_produce_request(header: RequestHeader, frame: memoryview) -> ProduceShape:
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
        topics = []
        transactional = False
        for _ in range(max(n_topics, 0)):
            start = off
            if version >= 13:
                end = off + 16
                if end > len(frame):
                    raise WalkError("buffer ends inside a topic id")
                name = bytes(frame[off:end]).hex()
                off = end
            else:
                name, off = skip_string(frame, off, flexible)
            n_parts, off = array_len(frame, off, flexible)
            partitions = []
            for _ in range(max(n_parts, 0)):
                index, off = i32(frame, off)
                partitions.append(index)
                rec_start, rec_end, off = skip_bytes(frame, off, flexible)
                # record batch v2: attributes (int16) at byte 21; bit 4 = transactional
                if rec_end - rec_start >= 23 and frame[rec_start + 22] & 0x10:
                    transactional = True
                if flexible:
                    if frame[off] == 0:
                        off += 1
                    else:
                        off = skip_tagged(frame, off)
            if flexible:
                if frame[off] == 0:
                    off += 1
                else:
                    off = skip_tagged(frame, off)
            topics.append(TopicSpan(name, partitions, start, off))
        topics_end = off
        if flexible:
            off = skip_tagged(frame, off)
    except (WalkError, UnicodeDecodeError, IndexError, struct.error) as e:
        raise CodecError(f"malformed Produce v{version} request: {e or 'buffer ends early'}") from e
    if off != len(frame):
        raise CodecError(f"malformed Produce v{version} request: {len(frame) - off} trailing bytes")
    return ProduceShape(txn, acks, timeout_ms, topics, transactional, topics_at, topics_end)


_ACKS_TIMEOUT = struct.Struct(">hi")


def _inspect(header: RequestHeader, frame: memoryview) -> RequestInfo:
    shape = walk_produce_request(header, frame)
    resources: dict[tuple[str, str], int] = {}
    for topic in shape.topics:
        key = (ResourceKind.TOPIC, topic.name)
        resources[key] = resources.get(key, 0) + len(topic.partitions)
    if shape.transactional_id is not None:
        resources[(ResourceKind.TRANSACTIONAL_ID, shape.transactional_id)] = 1
    return RequestInfo(
        resources=resources,
        expects_response=shape.acks != 0,
        broker_wait_s=max(shape.timeout_ms, 0) / 1000.0,
        decoded=shape,
    )


def _partition_errors(version: int, topics: list[TopicSpan], error: int) -> list:
    cls = response_class(0, version)
    topic_cls = nested(cls, "responses")
    part_cls = nested(topic_cls, "partition_responses")
    return [
        topic_cls(name=t.name, partition_responses=tuple(
            make(part_cls, index=i32_(p), error_code=ErrorCode(error), base_offset=i64_(-1), log_append_time=None,
                 log_start_offset=i64_(-1), record_errors=(), error_message=None)
            for p in t.partitions))
        for t in topics
    ]


def _error_response(version: int, topics: list[TopicSpan], error: int) -> bytes:
    cls = response_class(0, version)
    return encode(make(cls, responses=tuple(_partition_errors(version, topics, error)), throttle_time=timedelta(0)))


def _encode_array_len(n: int, flexible: bool) -> bytes:
    if flexible:
        out = io.BytesIO()
        write_unsigned_varint(out, n + 1)
        return out.getvalue()
    return struct.pack(">i", n)


def _enforce(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """Fact sheet §1.1 Produce: transactional id WRITE (whole request), then TOPIC WRITE per topic."""
    if not auth.enabled:
        return FORWARD
    shape: ProduceShape = info.decoded
    version = header.api_version
    if shape.transactional and (
        shape.transactional_id is None
        or not auth.allowed(ResourceType.TRANSACTIONAL_ID, shape.transactional_id, AclOperation.WRITE)
    ):
        if shape.acks == 0:
            return Decision(close="transactional produce with acks=0 denied (TRANSACTIONAL_ID_AUTHORIZATION_FAILED)")
        return Decision(respond=_error_response(version, shape.topics, TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    counts: dict[str, int] = {}
    for t in shape.topics:
        counts[t.name] = counts.get(t.name, 0) + len(t.partitions)
    allowed = auth.filter(ResourceType.TOPIC, AclOperation.WRITE, counts)
    if len(allowed) == len(counts):
        return FORWARD
    denied = [t for t in shape.topics if t.name not in allowed]
    if shape.acks == 0:
        return Decision(close=f"produce with acks=0 denied on {len(denied)} topic(s) (TOPIC_AUTHORIZATION_FAILED)")
    if not allowed:
        return Decision(respond=_error_response(version, shape.topics, TOPIC_AUTHORIZATION_FAILED))
    kept = [t for t in shape.topics if t.name in allowed]
    request = b"".join((
        bytes(body[header.size : shape.topics_at]),
        _encode_array_len(len(kept), header.flexible),
        *(body[t.start : t.end] for t in kept),
        bytes(body[shape.topics_end :]),
    ))

    def merge(buf, off: int) -> bytes:
        response = decode_response(0, version, buf, off)
        denied_entries = iter(_partition_errors(version, denied, TOPIC_AUTHORIZATION_FAILED))
        merged = merge_in_request_order(
            shape.topics, response.responses,
            denied_entry=lambda t: None if t.name in allowed else next(denied_entries),
            same=lambda e, t: e.name == t.name)
        return encode(replace(response, responses=merged))

    return Decision(request=request, merge=merge)


def has_top_level_tags(version: int, frame: memoryview, off: int) -> bool:
    """Whether a flexible (v9+) Produce response body at ``off`` ends with tagged fields."""
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


def _peek(header: RequestHeader, frame: memoryview) -> RequestInfo:
    """Without an authorizer only ``acks`` and the timeout matter; the topics are not walked
    (the broker validates what it parses, as it would without kgw)."""
    try:
        _txn, off = skip_string(frame, header.size, header.flexible)
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(frame, off)
    except (WalkError, UnicodeDecodeError, struct.error) as e:
        raise CodecError(f"malformed Produce v{header.api_version} request: {e}") from e
    return RequestInfo(expects_response=acks != 0, broker_wait_s=max(timeout_ms, 0) / 1000.0)


SPECS = (ApiSpec(0, "Produce", _inspect, _rewrite, enforce=_enforce, peek=_peek, versions=(3, 12)),)
