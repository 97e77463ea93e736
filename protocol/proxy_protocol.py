"""The PROXY protocol header (HAProxy's specification, versions 1 and 2), sans-IO.

A load balancer in front of kgw opens each connection with one header naming the client's
address.  :class:`ProxyHeaderReader` says how many bytes it wants next (exactly: it never
asks for a byte past the header, so what follows, a Kafka request or a TLS ClientHello, stays
in the socket for whoever reads next), is fed them, and ends with a :class:`ProxiedConnection`
or raises :class:`ProxyHeaderError` naming what is wrong.

* v2: the 12-byte signature, version 2 and a command (LOCAL: the balancer's own connection,
  a health check; PROXY), an address family (TCP over IPv4 or IPv6; UNSPEC, UDP and UNIX
  sockets are taken as LOCAL, as the specification allows), a length of at most
  :data:`MAX_V2_LENGTH`, the addresses and ports, then TLVs, which kgw skips.
* v1: ``PROXY TCP4|TCP6 <source> <destination> <source port> <destination port>\\r\\n`` or
  ``PROXY UNKNOWN...\\r\\n`` (LOCAL), at most 107 bytes; addresses of the family named, ports
  0-65535, single spaces.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

__all__ = ["MAX_V2_LENGTH", "ProxiedConnection", "ProxyHeaderError", "ProxyHeaderReader", "V2_SIGNATURE"]

V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V1_MAX = 107
#: the longest address-and-TLV block kgw reads (the specification's own example TLVs fit many times)
MAX_V2_LENGTH = 4096
_FAMILIES = {0x11: (ipaddress.IPv4Address, 4), 0x21: (ipaddress.IPv6Address, 16)}


class ProxyHeaderError(ValueError):
    """Not a valid PROXY protocol header; the message says why (safe to log)."""


@dataclass(frozen=True, slots=True)
class ProxiedConnection:
    version: int
    #: the client's (address, port); None for LOCAL (the balancer speaks for itself)
    source: tuple[str, int] | None
    destination: tuple[str, int] | None = None


class ProxyHeaderReader:
    """Reads one header: ``while (n := reader.wanted()): reader.feed(up_to_n_bytes)``."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._total: int | None = None  # v2: the header's length once its fixed part is in
        self.result: ProxiedConnection | None = None

    def wanted(self) -> int:
        """How many bytes to read next (0: done, see ``result``)."""
        if self.result is not None:
            return 0
        have = len(self._buffer)
        if have < 12:
            return 12 - have  # a v1 header is at least 15 bytes: no over-read
        if self._buffer[:12] == V2_SIGNATURE:
            if have < 16:
                return 16 - have
            assert self._total is not None
            return self._total - have
        return 1  # v1: byte by byte up to its CRLF (at most 107 bytes)

    def feed(self, data: bytes) -> None:
        if not data:
            raise ProxyHeaderError("the connection ended inside the PROXY protocol header")
        if len(data) > self.wanted():
            raise ValueError("fed more than wanted()")
        self._buffer += data
        buffer = self._buffer
        have = len(buffer)
        if have < 12:
            return
        if buffer[:12] == V2_SIGNATURE:
            if have == 16 and self._total is None:
                version, command = buffer[12] >> 4, buffer[12] & 0x0F
                if version != 2:
                    raise ProxyHeaderError(f"PROXY protocol v2 signature with version {version}")
                if command not in (0, 1):
                    raise ProxyHeaderError(f"PROXY protocol v2 command {command} is neither LOCAL nor PROXY")
                (length,) = struct.unpack_from(">H", buffer, 14)
                if length > MAX_V2_LENGTH:
                    raise ProxyHeaderError(f"PROXY protocol v2 header of {length} bytes, more than {MAX_V2_LENGTH}")
                self._total = 16 + length
            if self._total is not None and have == self._total:
                self.result = _v2(bytes(buffer))
            return
        if have == 12 and not buffer.startswith(b"PROXY "):
            raise ProxyHeaderError("the connection did not open with a PROXY protocol header")
        if buffer.endswith(b"\r\n"):
            self.result = _v1(bytes(buffer[:-2]))
        elif have >= V1_MAX:
            raise ProxyHeaderError(f"PROXY protocol v1 line longer than {V1_MAX} bytes")


def _v2(header: bytes) -> ProxiedConnection:
    command, family = header[12] & 0x0F, header[13]
    if command == 0 or family not in _FAMILIES:  # LOCAL, or no TCP addresses: the real endpoints
        return ProxiedConnection(2, None)
    cls, size = _FAMILIES[family]
    block = header[16:]
    if len(block) < 2 * size + 4:
        raise ProxyHeaderError(f"PROXY protocol v2 address block of {len(block)} bytes, too short for its family")
    source, destination = cls(block[:size]), cls(block[size:2 * size])
    source_port, destination_port = struct.unpack_from(">HH", block, 2 * size)
    return ProxiedConnection(2, (str(source), source_port), (str(destination), destination_port))


def _v1(line: bytes) -> ProxiedConnection:
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError:
        raise ProxyHeaderError("PROXY protocol v1 line is not ASCII") from None
    parts = text.split(" ")
    if len(parts) >= 2 and parts[1] == "UNKNOWN":
        return ProxiedConnection(1, None)
    if len(parts) != 6 or parts[1] not in ("TCP4", "TCP6"):
        raise ProxyHeaderError(f"malformed PROXY protocol v1 line {text[:V1_MAX]!r}")
    cls = ipaddress.IPv4Address if parts[1] == "TCP4" else ipaddress.IPv6Address
    try:
        source, destination = cls(parts[2]), cls(parts[3])
        ports = [int(p) for p in parts[4:6] if p.isdigit() and (p == "0" or not p.startswith("0"))]
    except ValueError:
        raise ProxyHeaderError(f"PROXY protocol v1 line with a bad {parts[1]} address: {text!r}") from None
    if len(ports) != 2 or not all(0 <= p <= 65535 for p in ports):
        raise ProxyHeaderError(f"PROXY protocol v1 line with a bad port: {text!r}")
    return ProxiedConnection(1, (str(source), ports[0]), (str(destination), ports[1]))
