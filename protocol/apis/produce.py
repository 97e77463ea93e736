"""Produce (0): walked, never decoded; record batches stay opaque bytes.

Theory of operation
-------------------
A Produce request is mostly record batches.  :func:`inspect_produce` walks the
frame with length prefixes only: it reads the transactional id, ``acks``, the
timeout and each topic's name and partition count, and jumps over every
``records`` field by its length.  Nothing is copied.  ``acks=0`` means the
broker sends no response, so the gateway must not wait for one.

Responses from v10 on may carry ``node_endpoints`` (KIP-951: where the new
leader of a partition is).  Produce responses hold no records, so they are
decoded with kio; only when endpoints are present is the body re-encoded with
gateway addresses.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from protocol.apis.addresses import rewrite_node_list
from protocol.apis.base import ApiSpec, NodeMap, RequestInfo
from protocol.codecs import CodecError, decode_response, encode
from protocol.headers import RequestHeader
from protocol.resources import ResourceKind
from protocol.wire import WalkError, array_len, i16, i32, skip_bytes, skip_string, skip_tagged

__all__ = ["SPECS", "walk_produce_request", "ProduceShape"]


class ProduceShape:
    """What the gateway needs of a Produce request: ids, acks, topics and their partition counts."""

    __slots__ = ("transactional_id", "acks", "timeout_ms", "topics")

    def __init__(self, transactional_id, acks, timeout_ms, topics):
        self.transactional_id = transactional_id
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.topics: list[tuple[str, int]] = topics  # (topic name or topic-id hex, partition count)


def walk_produce_request(header: RequestHeader, frame: memoryview) -> ProduceShape:
    flexible = header.flexible
    version = header.api_version
    try:
        off = header.size
        txn, off = skip_string(frame, off, flexible)
        acks, off = i16(frame, off)
        timeout_ms, off = i32(frame, off)
        n_topics, off = array_len(frame, off, flexible)
        topics = []
        for _ in range(max(n_topics, 0)):
            if version >= 13:
                end = off + 16
                if end > len(frame):
                    raise WalkError("buffer ends inside a topic id")
                name = bytes(frame[off:end]).hex()
                off = end
            else:
                name, off = skip_string(frame, off, flexible)
            n_parts, off = array_len(frame, off, flexible)
            for _ in range(max(n_parts, 0)):
                off += 4  # partition index
                _s, _e, off = skip_bytes(frame, off, flexible)
                if flexible:
                    off = skip_tagged(frame, off)
            if flexible:
                off = skip_tagged(frame, off)
            topics.append((name, max(n_parts, 0)))
        if flexible:
            off = skip_tagged(frame, off)
    except (WalkError, UnicodeDecodeError) as e:
        raise CodecError(f"malformed Produce v{version} request: {e}") from e
    if off != len(frame):
        raise CodecError(f"malformed Produce v{version} request: {len(frame) - off} trailing bytes")
    return ProduceShape(txn, acks, timeout_ms, topics)


def _inspect(header: RequestHeader, frame: memoryview) -> RequestInfo:
    shape = walk_produce_request(header, frame)
    resources: Counter[tuple[str, str]] = Counter()
    for name, partitions in shape.topics:
        resources[(ResourceKind.TOPIC, name)] += partitions
    if shape.transactional_id is not None:
        resources[(ResourceKind.TRANSACTIONAL_ID, shape.transactional_id)] += 1
    return RequestInfo(
        resources=dict(resources),
        expects_response=shape.acks != 0,
        broker_wait_s=max(shape.timeout_ms, 0) / 1000.0,
        decoded=shape,
    )


def _rewrite(version: int, frame: memoryview, offset: int, nodes: NodeMap) -> bytes | None:
    if version < 10:
        return None
    response = decode_response(0, version, frame, offset)
    if not response.node_endpoints:
        return None
    return encode(replace(response, node_endpoints=rewrite_node_list(response.node_endpoints, nodes)))


SPECS = (ApiSpec(0, "Produce", _inspect, _rewrite),)
