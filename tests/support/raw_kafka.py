"""One raw Kafka request/response on a fresh socket, for tests that need exact versions."""

from __future__ import annotations

import io
import socket
import struct

from kio.schema.request_header.v2.header import RequestHeader as H2
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from protocol.codecs import decode_response, encode

T = 15


def call(bootstrap: str, api_key: int, version: int, body, correlation_id: int = 11):
    """One request/response on a fresh connection (flexible header v2, response header v1)."""
    host, port = bootstrap.rsplit(":", 1)
    out = io.BytesIO()
    entity_writer(H2)(out, H2(request_api_key=i16(api_key), request_api_version=i16(version),
                              correlation_id=i32(correlation_id), client_id="kgw-it"))
    out.write(encode(body))
    payload = out.getvalue()
    with socket.create_connection((host, int(port)), timeout=T) as s:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        size = struct.unpack(">i", _read(s, 4))[0]
        data = _read(s, size)
    assert struct.unpack(">i", data[:4])[0] == correlation_id
    return decode_response(api_key, version, data, 5)  # correlation id + empty tagged fields


def _read(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf
