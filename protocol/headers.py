"""Request and response headers (request header v1/v2, response header v0/v1).

Theory of operation
-------------------
Only the header is parsed on every frame, so it is parsed by hand with
``struct`` instead of through kio's generic entity reader: four fixed fields, a
legacy nullable ``client_id`` string (legacy even in the flexible v2 header) and,
for flexible API versions, a tagged-field section that kgw skips.

Which header version a frame uses depends on whether its (api key, api version)
is *flexible*; :func:`is_flexible` answers that from kio's generated schemas and
memoises the answer.  ApiVersions responses always use response header v0, so a
client that does not yet know the broker's versions can always read them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema

__all__ = [
    "HeaderError",
    "RequestHeader",
    "is_flexible",
    "parse_request_header",
    "response_header",
    "read_uvarint",
    "API_VERSIONS_KEY",
]

API_VERSIONS_KEY = 18
_FIXED = struct.Struct(">hhih")
_CORR = struct.Struct(">i")


class HeaderError(Exception):
    """A request header that cannot be parsed; the connection must close."""


@dataclass(slots=True)  # not frozen: a frozen __init__ costs a call per field, on every request
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    size: int  # bytes of the header, so the body starts at frame[size:]
    flexible: bool


@lru_cache(maxsize=None)
def is_flexible(api_key: int, api_version: int) -> bool | None:
    """Whether (api_key, api_version) uses flexible encoding; None if kio does not know it."""
    try:
        return bool(load_request_schema(api_key, api_version).__flexible__)
    except (UnknownAPIKey, UnknownEntity):
        if api_key == API_VERSIONS_KEY and api_version > 3:
            # Newer ApiVersions than kio knows: still flexible, so the broker can
            # parse the header and answer UNSUPPORTED_VERSION (KIP-511).
            return True
        return None


def read_uvarint(buf: memoryview | bytes, off: int) -> tuple[int, int]:
    """Read an unsigned varint; return (value, new offset)."""
    result = 0
    shift = 0
    while True:
        b = buf[off]
        off += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, off
        shift += 7
        if shift > 28:
            raise HeaderError("unsigned varint longer than 5 bytes")


def parse_request_header(frame: memoryview) -> RequestHeader:
    """Parse the header at the start of a request frame body: in C (``protocol/_native.c``)
    where it was built and the header is the usual one, else by
    :func:`parse_request_header_python`, the reference, which names what is wrong.

    Raises:
        HeaderError: truncated or malformed header, or an API key / version
            kio has no schema for (the caller decides what that means).
    """
    if _native_header is not None:
        header: RequestHeader | None = _native_header(frame)
        if header is not None:
            return header
    return parse_request_header_python(frame)


def parse_request_header_python(frame: memoryview) -> RequestHeader:
    """:func:`parse_request_header` in Python: every header, the usual and the malformed.

    Raises:
        HeaderError: truncated or malformed header, or an API key / version
            kio has no schema for (the caller decides what that means).
    """
    try:
        api_key, api_version, correlation_id, cid_len = _FIXED.unpack_from(frame, 0)
    except struct.error:
        raise HeaderError(f"request header truncated: {len(frame)} bytes") from None
    off = _FIXED.size
    if cid_len < -1:
        raise HeaderError(f"invalid client id length {cid_len}")
    client_id = None
    if cid_len >= 0:
        end = off + cid_len
        if end > len(frame):
            raise HeaderError("request header truncated inside client id")
        try:
            client_id = str(frame[off:end], "utf-8")
        except UnicodeDecodeError:
            raise HeaderError("client id is not valid UTF-8") from None
        off = end
    flexible = is_flexible(api_key, api_version)
    if flexible is None:
        raise HeaderError(f"unknown api key {api_key} version {api_version}")
    if flexible and off < len(frame) and frame[off] == 0:
        off += 1  # no tagged fields: the usual case
    elif flexible:
        try:
            count, off = read_uvarint(frame, off)
            for _ in range(count):
                _tag, off = read_uvarint(frame, off)
                size, off = read_uvarint(frame, off)
                off += size
        except IndexError:
            raise HeaderError("request header truncated inside tagged fields") from None
        if off > len(frame):
            raise HeaderError("request header truncated inside tagged fields")
    return RequestHeader(api_key, api_version, correlation_id, client_id, off, bool(flexible))


try:  # the usual header parsed in C, built by pip where a compiler is found (setup.py)
    from protocol import _native
except ImportError:  # pragma: no cover - a build without a compiler: the reference alone
    _native_header = None
else:
    _native.bind_header(RequestHeader, is_flexible)
    _native_header = _native.request_header


def response_header(api_key: int, flexible: bool, correlation_id: int) -> bytes:
    """Encode the response header for a response to (api_key, flexible)."""
    if flexible and api_key != API_VERSIONS_KEY:
        return _CORR.pack(correlation_id) + b"\x00"  # v1: empty tagged fields
    return _CORR.pack(correlation_id)
