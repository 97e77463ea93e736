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
assembled in a buffer, once, pre-sized from its length prefix.

Rule 2: the decoder never buffers more than one incomplete frame, and a length
prefix above ``max_frame_bytes`` (Kafka's ``socket.request.max.bytes``) or below
zero raises :class:`FrameTooLarge` / :class:`InvalidFrame` *before* anything is
allocated for it, exactly when a broker would drop the connection.
"""

from __future__ import annotations

import struct
from typing import Final

__all__ = ["FrameDecoder", "FrameError", "FrameTooLarge", "InvalidFrame", "NEED_DATA", "frame"]

_LEN = struct.Struct(">i")


class _NeedData:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData()


class FrameError(Exception):
    """The peer sent bytes that cannot be framed; the connection must close."""


class FrameTooLarge(FrameError):
    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes (socket.request.max.bytes)")
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
        max_frame_bytes: the largest frame body accepted.
    """

    __slots__ = ("_max", "_chunk", "_pos", "_partial", "_partial_fill")

    def __init__(self, max_frame_bytes: int) -> None:
        self._max = max_frame_bytes
        self._chunk: memoryview = memoryview(b"")  # unread tail of the last chunk
        self._pos = 0
        self._partial: bytearray | None = None  # frame body being assembled
        self._partial_fill = 0

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
        return memoryview(self._partial)[self._partial_fill :]

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
            need = len(partial) - self._partial_fill
            take = need if need <= avail else avail
            fill = self._partial_fill
            partial[fill : fill + take] = chunk[pos : pos + take]
            self._partial_fill += take
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
        if size > self._max:
            raise FrameTooLarge(size, self._max)
        end = pos + 4 + size
        if end <= len(chunk):
            self._pos = end
            return chunk[pos:end]
        # Frame continues in later reads: allocate it once, at its final size.
        partial = bytearray(size + 4)
        got = len(chunk) - pos
        partial[:got] = chunk[pos:]
        self._partial = partial
        self._partial_fill = got
        self._pos = len(chunk)
        return NEED_DATA
