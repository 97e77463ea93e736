"""The PROXY protocol header reader (protocol/proxy_protocol.py): v1 and v2 as HAProxy writes
them, byte-exact reads (what follows the header is never consumed), and every malformed header
refused with its reason."""

from __future__ import annotations

import socket
import struct

import pytest

from protocol.proxy_protocol import MAX_V2_LENGTH, V2_SIGNATURE, ProxiedConnection, ProxyHeaderError, ProxyHeaderReader

AFTER = b"\x00\x00\x00\x10kafka-request..."  # the client's bytes behind the header


def _read(data: bytes, chunk: int = 1 << 16) -> tuple[ProxiedConnection, bytes]:
    """Feed ``data`` as a socket would give it (at most ``chunk`` and at most what is wanted)."""
    reader = ProxyHeaderReader()
    at = 0
    while wanted := reader.wanted():
        piece = data[at:at + min(wanted, chunk)]
        reader.feed(piece)
        at += len(piece)
    assert reader.result is not None
    return reader.result, data[at:]


def _v2(command: int, family: int, block: bytes) -> bytes:
    return V2_SIGNATURE + bytes([0x20 | command, family]) + struct.pack(">H", len(block)) + block


@pytest.mark.parametrize("chunk", [1, 3, 1 << 16])
def test_v1_tcp4_tcp6_and_unknown(chunk):
    assert _read(b"PROXY TCP4 192.0.2.7 10.0.0.1 56324 9092\r\n" + AFTER, chunk) == (
        ProxiedConnection(1, ("192.0.2.7", 56324), ("10.0.0.1", 9092)), AFTER)
    assert _read(b"PROXY TCP6 2001:db8::7 2001:db8::1 40000 9093\r\n" + AFTER, chunk) == (
        ProxiedConnection(1, ("2001:db8::7", 40000), ("2001:db8::1", 9093)), AFTER)
    assert _read(b"PROXY UNKNOWN ffff:f...f:ffff 8080 9092\r\n" + AFTER, chunk) == (ProxiedConnection(1, None), AFTER)


@pytest.mark.parametrize("chunk", [1, 5, 1 << 16])
def test_v2_ipv4_ipv6_local_unspec_and_tlvs_skipped(chunk):
    v4 = socket.inet_aton("192.0.2.7") + socket.inet_aton("10.0.0.1") + struct.pack(">HH", 56324, 9092)
    tlvs = b"\x01\x00\x02h2" + b"\x20\x00\x05\x01\x00\x00\x00\x00"  # ALPN, SSL
    assert _read(_v2(1, 0x11, v4 + tlvs) + AFTER, chunk) == (
        ProxiedConnection(2, ("192.0.2.7", 56324), ("10.0.0.1", 9092)), AFTER)
    v6 = (socket.inet_pton(socket.AF_INET6, "2001:db8::7") + socket.inet_pton(socket.AF_INET6, "::1")
          + struct.pack(">HH", 1, 2))
    assert _read(_v2(1, 0x21, v6) + AFTER, chunk)[0].source == ("2001:db8::7", 1)
    assert _read(_v2(0, 0x11, v4) + AFTER, chunk) == (ProxiedConnection(2, None), AFTER)  # LOCAL: a health check
    assert _read(_v2(1, 0x00, b"") + AFTER, chunk) == (ProxiedConnection(2, None), AFTER)  # UNSPEC
    assert _read(_v2(1, 0x31, b"\x00" * 216) + AFTER, chunk) == (ProxiedConnection(2, None), AFTER)  # UNIX


@pytest.mark.parametrize("data, reason", [
    (b"\x00\x00\x00\x10\x00\x12\x00\x04kafka...", "did not open with a PROXY protocol header"),
    (b"PROXY TCP4 192.0.2.7 10.0.0.1 56324\r\n", "malformed PROXY protocol v1 line"),
    (b"PROXY TCP4 2001:db8::7 10.0.0.1 1 2\r\n", "bad TCP4 address"),
    (b"PROXY TCP4 192.0.2.7 10.0.0.1 65536 9092\r\n", "bad port"),
    (b"PROXY TCP4 192.0.2.7 10.0.0.1 080 9092\r\n", "bad port"),
    (b"PROXY TCP4 192.0.2.7  10.0.0.1 1 2\r\n", "malformed"),
    (b"PROXY TCP4 " + b"1" * 200, "longer than 107 bytes"),
    (b"PROXY TCP4 \xff\xfe 10.0.0.1 1 2\r\n", "not ASCII"),
    (V2_SIGNATURE + b"\x11\x11\x00\x0c", "version 1"),
    (V2_SIGNATURE + b"\x22\x11\x00\x0c", "command 2"),
    (V2_SIGNATURE + b"\x21\x11" + struct.pack(">H", MAX_V2_LENGTH + 1), "more than 4096"),
    (_v2(1, 0x11, b"\x00" * 8), "too short for its family"),
])
def test_a_malformed_header_is_refused_with_its_reason(data, reason):
    reader = ProxyHeaderReader()
    with pytest.raises(ProxyHeaderError, match=reason):
        at = 0
        while wanted := reader.wanted():
            reader.feed(data[at:at + wanted])
            at += wanted


def test_the_end_of_the_connection_inside_the_header():
    reader = ProxyHeaderReader()
    reader.feed(b"PROXY TCP4 1")
    with pytest.raises(ProxyHeaderError, match="ended inside"):
        reader.feed(b"")
