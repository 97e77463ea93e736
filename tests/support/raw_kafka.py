"""Raw Kafka requests over a plain socket, for tests that need exact API versions.

Headers are chosen the way a client would (request header v1/v2 by the version's
flexibility; ApiVersions responses always use response header v0).
"""

from __future__ import annotations

import socket
import struct

from gateway.upstream.cluster import encode_request
from protocol.codecs import decode_response, make, request_class

T = 15

__all__ = ["RawConnection", "call"]


def _body_offset(api_key: int, version: int) -> int:
    return 5 if request_class(api_key, version).__flexible__ and api_key != 18 else 4


class RawConnection:
    """One connection; requests get increasing correlation ids, each checked on the response."""

    def __init__(self, address: str, timeout: float = T, *, source: str | None = None) -> None:
        """``source``: the local address to connect from (any of 127/8 on Linux's loopback), as
        different client hosts would."""
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawConnection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(data)} of {n} bytes")
            data += chunk
        return data

    def call_bytes(self, api_key: int, version: int, body, correlation_id: int | None = None) -> bytes:
        """Send one request; return the response body undecoded (kio cannot decode every
        answer Kafka gives, e.g. the -1 timestamps of a refused delegation token)."""
        self.correlation_id = correlation_id if correlation_id is not None else self.correlation_id + 1
        self.sock.sendall(encode_request(api_key, version, self.correlation_id, body))
        (size,) = struct.unpack(">i", self._read(4))
        frame = self._read(size)
        assert struct.unpack_from(">i", frame)[0] == self.correlation_id
        return frame[_body_offset(api_key, version):]

    def call_raw(self, api_key: int, version: int, body, correlation_id: int | None = None):
        """Send one request; return (response body bytes, decoded response)."""
        raw = self.call_bytes(api_key, version, body, correlation_id)
        return raw, decode_response(api_key, version, raw, 0)

    def call(self, api_key: int, version: int, body, correlation_id: int | None = None):
        return self.call_raw(api_key, version, body, correlation_id)[1]

    def sasl_plain(self, user: str, password: str) -> "RawConnection":
        """Log in with SaslHandshake v1 + SaslAuthenticate v2 (PLAIN); asserts success."""
        handshake = self.call(17, 1, make(request_class(17, 1), mechanism="PLAIN"))
        assert handshake.error_code == 0, handshake
        auth = self.call(36, 2, make(request_class(36, 2), auth_bytes=f"\0{user}\0{password}".encode()))
        assert auth.error_code == 0, auth
        return self


    def sasl_oauthbearer(self, token: str) -> tuple[int, str | None]:
        """SaslHandshake v1 + SaslAuthenticate v2 with an OAUTHBEARER token (RFC 7628); on an
        error JSON from the server, the client's ^A as Kafka's client sends it.  Returns the
        final (error code, message): (0, None) when logged in."""
        handshake = self.call(17, 1, make(request_class(17, 1), mechanism="OAUTHBEARER"))
        assert handshake.error_code == 0, handshake
        auth = self.call(36, 2, make(request_class(36, 2), auth_bytes=f"n,,\x01auth=Bearer {token}\x01\x01".encode()))
        if auth.error_code == 0 and auth.auth_bytes:  # the error JSON: acknowledge, then the failure
            auth = self.call(36, 2, make(request_class(36, 2), auth_bytes=b"\x01"))
        return int(auth.error_code), auth.error_message


def call(address: str, api_key: int, version: int, body, correlation_id: int = 11):
    """One request/response on a fresh connection."""
    with RawConnection(address) as conn:
        return conn.call(api_key, version, body, correlation_id)
