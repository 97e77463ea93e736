"""Sans-IO framing of the Kafka wire protocol.

Theory of operation
-------------------
Every Kafka message, in either direction, is a 4-byte big-endian signed length
followed by that many bytes.  :class:`FrameDecoder` owns no socket: bytes go in
with :meth:`FrameDecoder.receive_data` and whole frames come out of
:meth:`FrameDecoder.next_frame`, or the sentinel :data:`NEED_DATA` when more bytes
are required (the h11 model).

Rule 1: a frame is returned *with* its 4-byte length prefix, as a ``memoryview``,
so it can be forwarded as it came; parsers look at ``frame[4:]``.
When a chunk read from the socket contains whole frames they are returned as
views into that chunk: no per-frame copy.  Only a frame split across reads is
assembled in a buffer.

Rule 2: the decoder never buffers more than one incomplete frame, and a length
prefix above ``limit`` (Kafka's ``socket.request.max.bytes``, or before SASL
authentication ``sasl.server.max.receive.size``) or below zero raises
:class:`FrameTooLarge` / :class:`InvalidFrame` *before* anything is allocated
for it, exactly when a broker would drop the connection.

Rule 3: memory follows the bytes that arrived, never the length a peer
announced.  The assembly buffer starts at most :data:`INITIAL_PARTIAL` bytes
beyond what has arrived and at least doubles when full (so a large frame is
copied O(1) times per byte); a peer announcing 100 MiB and sending 50 bytes
costs kilobytes.
"""

from __future__ import annotations

import struct
from typing import Final

__all__ = ["FrameDecoder", "FrameError", "FrameTooLarge", "InvalidFrame", "NEED_DATA", "frame", "INITIAL_PARTIAL"]

_LEN = struct.Struct(">i")
#: room for a frame being assembled beyond the bytes already received (Rule 3)
INITIAL_PARTIAL = 64 * 1024


class _NeedData:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData()


class FrameError(Exception):
    """The peer sent bytes that cannot be framed; the connection must close."""


class FrameTooLarge(FrameError):
    def __init__(self, size: int, limit: int, setting: str = "socket.request.max.bytes") -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes ({setting})")
        self.size = size
        self.limit = limit


class InvalidFrame(FrameError):
    pass


def frame(*parts: bytes | bytearray | memoryview) -> bytes:
    """Prefix the concatenation of ``parts`` with its 4-byte length."""
    body = b"".join(parts)
    return _LEN.pack(len(body)) + body


class FrameDecoder:
    """Split a byte stream into Kafka frames.

    Args:
        max_frame_bytes: the largest frame body accepted (:attr:`limit`, may be changed
            between frames, e.g. once a SASL client has authenticated).
        limit_name: the setting named when a frame exceeds the limit.
    """

    __slots__ = ("limit", "limit_name", "_chunk", "_pos", "_partial", "_partial_fill", "_partial_size")

    def __init__(self, max_frame_bytes: int, limit_name: str = "socket.request.max.bytes") -> None:
        self.limit = max_frame_bytes
        self.limit_name = limit_name
        self._chunk: memoryview = memoryview(b"")  # unread tail of the last chunk
        self._pos = 0
        self._partial: bytearray | None = None  # frame being assembled (capacity <= its size)
        self._partial_fill = 0
        self._partial_size = 0  # the whole frame's size, length prefix included

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return (len(self._chunk) - self._pos) + self._partial_fill

    @property
    def in_frame(self) -> bool:
        """True while a started frame is incomplete (used to log truncation)."""
        return self._partial is not None or (len(self._chunk) - self._pos) > 0

    def partial_space(self) -> memoryview | None:
        """The unfilled part of the frame being assembled, to receive into directly;
        None when no frame is being assembled or unread bytes are pending."""
        if self._partial is None or len(self._chunk) - self._pos:
            return None
        if self._partial_fill == len(self._partial):
            self._grow()
        return memoryview(self._partial)[self._partial_fill :]

    def _grow(self) -> None:
        """Make room in the assembly buffer: at least double it, never beyond the frame's size.
        A new buffer is allocated (views of the old one may still be held by the caller)."""
        old = self._partial
        assert old is not None
        new = bytearray(min(self._partial_size, max(2 * len(old), self._partial_fill + INITIAL_PARTIAL)))
        new[: self._partial_fill] = memoryview(old)[: self._partial_fill]
        self._partial = new

    def partial_filled(self, n: int) -> None:
        """Record ``n`` bytes written into :meth:`partial_space`."""
        self._partial_fill += n

    def receive_data(self, data: bytes) -> None:
        """Feed bytes read from the peer.  Call only after NEED_DATA."""
        rest = len(self._chunk) - self._pos
        if rest:
            # A partial length prefix (< 4 bytes) is left over: join it.
            data = bytes(self._chunk[self._pos :]) + data
        self._chunk = memoryview(data)
        self._pos = 0

    def next_frame(self) -> memoryview | _NeedData:
        """Return the next whole frame (length prefix included), or NEED_DATA.

        Raises:
            FrameTooLarge: the length prefix exceeds the limit.
            InvalidFrame: the length prefix is negative.
        """
        chunk = self._chunk
        pos = self._pos
        avail = len(chunk) - pos
        partial = self._partial
        if partial is not None:
            fill = self._partial_fill
            need = self._partial_size - fill
            take = need if need <= avail else avail
            if fill + take > len(partial):
                self._partial_fill = fill
                self._grow_to(fill + take)
                partial = self._partial
            partial[fill : fill + take] = chunk[pos : pos + take]
            self._partial_fill = fill + take
            self._pos = pos + take
            if take < need:
                return NEED_DATA
            self._partial = None
            self._partial_fill = 0
            return memoryview(partial).toreadonly()  # kio readers want read-only buffers
        if avail < 4:
            return NEED_DATA
        (size,) = _LEN.unpack_from(chunk, pos)
        if size < 0:
            raise InvalidFrame(f"negative frame length {size}")
        if size > self.limit:
            raise FrameTooLarge(size, self.limit, self.limit_name)
        end = pos + 4 + size
        if end <= len(chunk):
            self._pos = end
            return chunk[pos:end]
        # Frame continues in later reads: room for what arrived plus INITIAL_PARTIAL (Rule 3).
        got = len(chunk) - pos
        partial = bytearray(min(size + 4, got + INITIAL_PARTIAL))
        partial[:got] = chunk[pos:]
        self._partial = partial
        self._partial_fill = got
        self._partial_size = size + 4
        self._pos = len(chunk)
        return NEED_DATA

    def _grow_to(self, needed: int) -> None:
        while self._partial is not None and len(self._partial) < needed:
            self._grow()
