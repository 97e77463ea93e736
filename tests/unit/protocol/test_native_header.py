"""The request header parsed in C (protocol/_native.c ``request_header``) against the Python
reference (``parse_request_header_python``): on every header the C parse either declines (None:
the reference parses it and names what is wrong) or finds exactly what the reference finds; on
the usual headers it does not decline.  Headers of every API kgw knows and some it does not,
null, empty, long and non-ASCII client ids, tagged fields, then each truncated and damaged."""

from __future__ import annotations

import random
import struct

import pytest

from protocol import _native
from protocol.headers import (HeaderError, RequestHeader, is_flexible, parse_request_header,
                              parse_request_header_python)


def _header(rng: random.Random) -> bytes:
    api_key = rng.choice([0, 1, 3, 18, 18, 19, 36, 60, 68, 90, 999, -1])
    version = rng.choice([0, 1, 3, 4, 9, 12, 13, 40, -1])
    client_id = rng.choice([None, "", "kgw", "c" * 300, "é" * 40, b"\xff\xfe"])
    if client_id is None:
        cid = struct.pack(">h", -1)
    else:
        raw = client_id if isinstance(client_id, bytes) else client_id.encode()
        cid = struct.pack(">h", len(raw)) + raw
    tags = rng.choice([b"\x00", b"\x00", b"\x01\x00\x02ab", b"\x80\x00", b""])
    body = rng.choice([b"", b"\x00" * 7, bytes(rng.randrange(256) for _ in range(12))])
    return struct.pack(">hhi", api_key, version, rng.randrange(-(1 << 31), 1 << 31)) + cid + tags + body


def _reference(frame: memoryview):
    try:
        return parse_request_header_python(frame)
    except HeaderError as e:
        return e


def _agrees(frame: memoryview) -> bool:
    """The C parse declines or agrees; True when it parsed."""
    native = _native.request_header(frame)
    reference = _reference(frame)
    if native is None:
        return False
    assert not isinstance(reference, HeaderError), f"the C parse accepted what the reference refuses: {reference}"
    assert type(native) is RequestHeader and native == reference
    return True


def test_the_c_parse_declines_or_agrees_with_the_reference():
    rng = random.Random(7)
    parsed = 0
    for _ in range(600):
        raw = _header(rng)
        parsed += _agrees(memoryview(raw))
        for cut in range(0, len(raw), max(1, len(raw) // 12)):
            _agrees(memoryview(raw[:cut]))
        for _ in range(12):
            damaged = bytearray(raw)
            damaged[rng.randrange(len(damaged))] = rng.choice([0, 0x7F, 0x80, 0xFF, rng.randrange(256)])
            _agrees(memoryview(bytes(damaged)))
    assert parsed > 100  # the usual ones (about one in five here) were parsed in C, not all declined


@pytest.mark.parametrize("api_key, version, client_id, flexible", [
    (0, 9, "producer-1", True), (0, 8, None, False), (1, 12, "", True), (18, 3, "kgw", True), (18, 0, "x", False),
])
def test_usual_headers_are_parsed_in_c(api_key, version, client_id, flexible, monkeypatch):
    import protocol.headers as headers

    def reference(_frame):
        raise AssertionError("the usual header took the reference")

    cid = struct.pack(">h", -1) if client_id is None else struct.pack(">h", len(client_id)) + client_id.encode()
    raw = struct.pack(">hhi", api_key, version, 77) + cid + (b"\x00" if flexible else b"") + b"body"
    monkeypatch.setattr(headers, "parse_request_header_python", reference)
    header = parse_request_header(memoryview(raw))
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id, header.flexible) == (
        api_key, version, 77, client_id, flexible)
    assert raw[header.size:] == b"body"
    header.client_id = "changed"  # an ordinary instance: its slots are there and writable
    assert header.client_id == "changed" and "changed" in repr(header)


FIELDS = ("api_key", "api_version", "correlation_id", "client_id", "size", "flexible")


@pytest.mark.parametrize("kind", ["missing", "borrowed"])
def test_a_class_without_those_slots_of_its_own_is_refused_when_bound(kind):
    """The C part fills the slots it found at their offsets: a class lacking one, or holding
    another class's slot descriptors (their offsets are the other's), must be refused."""
    class Other:
        __slots__ = FIELDS

    class Missing:
        __slots__ = ("api_key",)

    elsewhere = Missing if kind == "missing" else type("Borrowed", (), {name: Other.__dict__[name] for name in FIELDS})
    try:
        with pytest.raises(TypeError, match="not an object slot"):
            _native.bind_header(elsewhere, lambda key, version: True)
    finally:  # (had it been taken, the module's own class again)
        _native.bind_header(RequestHeader, is_flexible)
    header = _native.request_header(memoryview(struct.pack(">hhih", 0, 9, 1, -1) + b"\x00"))
    assert type(header) is RequestHeader and header.size == 11
