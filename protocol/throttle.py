"""Setting a response's ``throttle_time_ms`` (KIP-219), sans-IO.

A response frame (size prefix, response header, body) gets the larger of its own throttle
time and the gateway's.  A Fetch response (v1+) carries it as the body's first field: the
four bytes are patched in a copy, the records are not decoded.  Any other response is
decoded and re-encoded with the field replaced (they are small).  A response version without
the field is returned as it is: the gateway's mute of the connection still applies.
"""

from __future__ import annotations

import dataclasses
import struct
from datetime import timedelta

from protocol.codecs import decode_response, encode
from protocol.headers import read_uvarint

__all__ = ["with_throttle_time"]

_I32 = struct.Struct(">i")
FETCH = 1


def _body_offset(frame: bytes | memoryview, flexible: bool) -> int:
    off = 8  # size, correlation id
    if flexible:
        count, off = read_uvarint(frame, off)
        for _ in range(count):
            _tag, off = read_uvarint(frame, off)
            size, off = read_uvarint(frame, off)
            off += size
    return off


def with_throttle_time(api_key: int, api_version: int, flexible: bool, frame: bytes | bytearray | memoryview,
                       throttle_ms: int) -> bytes | bytearray | memoryview:
    """``frame`` with ``throttle_time_ms`` at least ``throttle_ms``."""
    view = memoryview(frame)
    off = _body_offset(view, flexible)
    if api_key == FETCH:
        if api_version < 1:
            return frame
        (current,) = _I32.unpack_from(frame, off)
        if current >= throttle_ms:
            return frame
        patched = bytearray(frame)
        _I32.pack_into(patched, off, min(throttle_ms, 2**31 - 1))
        return patched
    response = decode_response(api_key, api_version, view, off)
    current = getattr(response, "throttle_time", None)
    if not isinstance(current, timedelta):
        return frame
    if current >= timedelta(milliseconds=throttle_ms):
        return frame
    body = encode(dataclasses.replace(response, throttle_time=timedelta(milliseconds=throttle_ms)))
    head = bytes(frame[4:off])
    return _I32.pack(len(head) + len(body)) + head + body
