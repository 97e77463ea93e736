"""Fetch (1): requests decoded (they are small), responses walked around their records.

Theory of operation
-------------------
A Fetch response is mostly record batches and is forwarded as the upstream's
bytes.  From v16 on it may end with ``node_endpoints`` (KIP-951) in its
top-level tagged fields, which must carry gateway addresses.  To find them,
:func:`top_level_tags_offset` walks the response skipping every ``records``
field by its length; if the tagged section is empty (the common case) the
response passes untouched.  Otherwise the body is rebuilt as the untouched
bytes up to the tagged section followed by a freshly encoded tagged section:
the record slices are never decoded or re-encoded.
"""

from __future__ import annotations

import io
from dataclasses import replace

from kio.schema.fetch.v16.response import NodeEndpoint
from kio.serial import entity_reader, entity_writer
from kio.serial.readers import read_compact_array_length
from kio.serial.writers import write_compact_array_length, write_unsigned_varint

from protocol.apis.addresses import rewrite_node_list
from protocol.apis.base import ApiSpec, NodeMap, RequestInfo
from protocol.apis.generic import inspect_decoded
from protocol.codecs import CodecError
from protocol.headers import RequestHeader
from protocol.wire import WalkError, array_len, skip_bytes, skip_tagged, uvarint

__all__ = ["SPECS", "top_level_tags_offset"]


def _inspect(header: RequestHeader, frame: memoryview) -> RequestInfo:
    info = inspect_decoded(header, frame)
    wait = info.decoded.max_wait.total_seconds()
    return replace(info, broker_wait_s=max(wait, 0.0))


def top_level_tags_offset(frame: memoryview, offset: int) -> int:
    """Offset of the top-level tagged-field section of a flexible (v12+) Fetch response body."""
    off = offset + 4 + 2 + 4  # throttle_time_ms, error_code, session_id
    n_topics, off = array_len(frame, off, True)
    for _ in range(max(n_topics, 0)):
        off += 16  # topic_id (v13+); v12 has a name instead, but v12 is never rewritten
        n_parts, off = array_len(frame, off, True)
        for _ in range(max(n_parts, 0)):
            off += 4 + 2 + 8 + 8 + 8  # index, error, high watermark, last stable, log start
            n_aborted, off = array_len(frame, off, True)
            for _ in range(max(n_aborted, 0)):
                off = skip_tagged(frame, off + 16)
            off += 4  # preferred_read_replica
            _s, _e, off = skip_bytes(frame, off, True)
            off = skip_tagged(frame, off)
        off = skip_tagged(frame, off)
    return off


_node_writer = entity_writer(NodeEndpoint)
_node_reader = entity_reader(NodeEndpoint)


def _read_node_endpoints(buf: memoryview) -> tuple[NodeEndpoint, ...]:
    reader = _node_reader
    n, off = read_compact_array_length(buf, 0)
    out = []
    for _ in range(max(n, 0)):
        node, size = reader(buf, off)
        off += size
        out.append(node)
    return tuple(out)


def _encode_tag(tag: int, value: bytes) -> bytes:
    out = io.BytesIO()
    write_unsigned_varint(out, tag)
    write_unsigned_varint(out, len(value))
    out.write(value)
    return out.getvalue()


def _rewrite(version: int, frame: memoryview, offset: int, nodes: NodeMap) -> bytes | None:
    if version < 16:
        return None
    try:
        tags_at = top_level_tags_offset(frame, offset)
        count, off = uvarint(frame, tags_at)
        if count == 0:
            return None
        fields = []
        for _ in range(count):
            tag, off = uvarint(frame, off)
            size, off = uvarint(frame, off)
            fields.append((tag, frame[off : off + size]))
            off += size
    except WalkError as e:
        raise CodecError(f"malformed Fetch v{version} response: {e}") from e
    out = io.BytesIO()
    write_unsigned_varint(out, len(fields))
    for tag, value in fields:
        if tag == 0:
            endpoints = rewrite_node_list(_read_node_endpoints(value), nodes)
            body = io.BytesIO()
            write_compact_array_length(body, len(endpoints))
            for node in endpoints:
                _node_writer(body, node)
            out.write(_encode_tag(0, body.getvalue()))
        else:
            out.write(_encode_tag(tag, bytes(value)))
    return b"".join((frame[offset:tags_at], out.getvalue()))


SPECS = (ApiSpec(1, "Fetch", _inspect, _rewrite),)
