"""The default inspection: decode the whole request with kio.

Used for every API without a module of its own.  Decoding in full also
validates the request: a body that does not match its schema is refused before
it reaches the broker.
"""

from __future__ import annotations

from protocol.apis.base import RequestInfo
from protocol.codecs import decode_request
from protocol.headers import RequestHeader

__all__ = ["inspect_decoded"]


def inspect_decoded(header: RequestHeader, frame: memoryview) -> RequestInfo:
    request = decode_request(header.api_key, header.api_version, frame, header.size)
    return RequestInfo(decoded=request)
