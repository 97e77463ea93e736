"""Sans-IO framing of the Kafka wire protocol.

Theory of operation
-------------------
Every Kafka message, in either direction, is a 4-byte big-endian signed length
followed by that many bytes.  :class:`FrameDecoder` owns no socket: bytes go in
with :meth:`FrameDecoder.receive_data` (or straight into :meth:`partial_space`)
and whole frames come out of :meth:`FrameDecoder.next_frame`, or the sentinel
:data:`NEED_DATA` when more bytes are required (the h11 model).

Rule 1: a frame is returned *with* its 4-byte length prefix, as a ``memoryview``,
so it can be forwarded as it came; parsers look at ``frame[4:]``.
When a chunk read from the socket contains whole frames they are returned as
views into that chunk: no per-frame copy.  Only a frame split across reads is
assembled.

Rule 2: the decoder never buffers more than one incomplete frame, and a length
prefix above ``limit`` (Kafka's ``socket.request.max.bytes``, or before SASL
authentication ``sasl.server.max.receive.size``) or below zero raises
:class:`FrameTooLarge` / :class:`InvalidFrame` *before* anything is allocated
for it, exactly when a broker would drop the connection.

Rule 3: a frame split across reads is copied once, whoever sends it, and memory
follows what the peer is trusted with:

* a *client* (``trusted=False``) is not trusted with memory: its frame is kept as
  the chunks that arrived (views of the received bytes, nothing allocated from the
  announced length) until no more than :data:`CLIENT_IN_PLACE` (1 MiB, the largest
  read the drivers make for it anyway) of it is still to come and at least a
  quarter of it arrived; then it is allocated at its size, what arrived is copied
  in once and the rest is received straight into it, as an upstream frame is.  A
  client announcing 100 MiB and sending 50 bytes costs 50 bytes; a frame in
  progress never costs more than what arrived of it plus 1 MiB, nor more than
  four times what arrived;
* the *upstream* broker (``trusted=True``) answers what kgw asked for: its frame
  is allocated once at its announced size (up to :data:`TRUSTED_PREALLOCATION`,
  beyond which a broken broker's announcement gets the client's treatment) and
  received straight into it (:meth:`partial_space`), so a Fetch response of
  16 MiB costs one allocation and no copy beyond the kernel's.

:attr:`FrameDecoder.allocated` and :attr:`FrameDecoder.copied` count the bytes
the decoder allocated and copied for frames split across reads: the tests hold
them to a small constant of the frame size (issue: a doubling buffer had made
consuming through kgw 4.4 times as costly).
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

__all__ = ["FrameDecoder", "FrameDecoderPython", "FrameError", "FrameTooLarge", "InvalidFrame", "NEED_DATA", "frame",
           "INITIAL_PARTIAL", "CLIENT_IN_PLACE"]

_LEN = struct.Struct(">i")
#: kept for the configuration's sake: room beyond the bytes received (no longer used)
INITIAL_PARTIAL = 64 * 1024
#: the largest frame a trusted peer gets allocated at its announced size (Rule 3)
TRUSTED_PREALLOCATION = 256 * 1024 * 1024
#: a client's frame is allocated at its size once no more than this of it is still to come
#: and at least a quarter of it arrived (Rule 3): what it costs beyond the bytes that arrived
#: is bounded by one of the drivers' reads and by three times those bytes
CLIENT_IN_PLACE = 1024 * 1024


def _client_in_place(size: int, arrived: int) -> bool:
    """Whether a client's frame of ``size`` bytes, ``arrived`` of them so far, is allocated now."""
    return size - arrived <= CLIENT_IN_PLACE and size <= 4 * arrived


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


class _FrameCursorPython:
    """The cursor every frame goes through (the chunk last received, the position in it, the
    bytes of a split frame assembled so far, the limit): :meth:`next_frame` and
    :meth:`receive_data` of the usual case, whole frames in the chunk.  The reference of
    ``protocol/_native.c``'s ``FrameCursor``, which :class:`FrameDecoder` is built on where it
    was compiled; both call the decoder's own methods for everything else."""

    __slots__ = ("_chunk", "_pos", "_fill", "limit", "deferred")

    _chunk: memoryview
    _pos: int
    _fill: int
    limit: int
    deferred: bool

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return (len(self._chunk) - self._pos) + self._fill

    def receive_data(self, data: bytes) -> None:
        """Feed bytes read from the peer.  Call only after NEED_DATA, or when nothing is
        :attr:`buffered` (NEED_DATA is then all :meth:`next_frame` could say)."""
        if self.deferred:
            self.materialize()
        rest = len(self._chunk) - self._pos
        if rest:
            # A partial length prefix (< 4 bytes) is left over: it starts a frame of its own.
            self._start_partial(bytes(self._chunk[self._pos :]), None)
        self._chunk = memoryview(data)
        self._pos = 0

    def next_frame(self) -> "memoryview | _NeedData":
        """Return the next whole frame (length prefix included), or NEED_DATA.

        Raises:
            FrameTooLarge: the length prefix exceeds the limit.
            InvalidFrame: the length prefix is negative.
        """
        if self._fill:
            return self._continue()
        chunk = self._chunk
        pos = self._pos
        avail = len(chunk) - pos
        if avail < 4:
            return NEED_DATA
        (size,) = _LEN.unpack_from(chunk, pos)
        if size < 0 or size > self.limit:
            self._check(size)
        end = pos + 4 + size
        if end <= len(chunk):
            self._pos = end
            return chunk[pos:end]
        self._start_partial(chunk[pos:], size + 4)
        self._pos = len(chunk)
        return NEED_DATA

    if TYPE_CHECKING:  # the decoder's (_Decoder), called for what is not the usual case
        def materialize(self) -> None: ...
        def _start_partial(self, head: memoryview | bytes, size: int | None) -> None: ...
        def _check(self, size: int) -> None: ...
        def _continue(self) -> "memoryview | _NeedData": ...


def _frame_buffer_python(parts: list[bytes | memoryview], size: int) -> bytearray:
    """A frame's buffer of ``size`` bytes starting with ``parts``, one after the other (the rest
    is received into it before the frame is returned)."""
    if sum(len(part) for part in parts) > size:
        raise ValueError("frame_buffer: the parts exceed the size")
    buffer = bytearray(size)
    at = 0
    for part in parts:
        buffer[at : at + len(part)] = part
        at += len(part)
    return buffer


try:  # the cursor in C, built by pip where a compiler is found (setup.py)
    from protocol import _native
except ImportError:  # pragma: no cover - a build without a compiler: the reference alone
    _Cursor: type = _FrameCursorPython
    _frame_buffer = _frame_buffer_python
else:
    _native.bind_framing(NEED_DATA)
    _Cursor = _native.FrameCursor
    #: the same, without writing the rest first (bytearray(size) zeroes it)
    _frame_buffer = _native.frame_buffer

_MIXIN_SLOTS: tuple[str, ...] = ()
_DECODER_SLOTS = ("limit_name", "trusted", "_parts", "_buffer", "_size", "allocated", "copied", "defer_from")


class _Decoder:
    """What :class:`FrameDecoder` adds to its cursor: frames split across reads (Rule 3),
    limits (Rule 2), deferred frames."""

    __slots__ = _MIXIN_SLOTS  # (none: the concrete classes hold them)

    if TYPE_CHECKING:  # the cursor's, which every decoder class also derives from
        _chunk: memoryview
        _pos: int
        _fill: int
        limit: int
        deferred: bool
        limit_name: str
        trusted: bool
        _parts: list[bytes | memoryview]
        _buffer: bytearray | None
        _size: int
        allocated: int
        copied: int
        defer_from: int

        @property
        def buffered(self) -> int: ...
        def next_frame(self) -> "memoryview | _NeedData": ...
        def receive_data(self, data: bytes) -> None: ...

    def __init__(self, max_frame_bytes: int, limit_name: str = "socket.request.max.bytes", *,
                 trusted: bool = False) -> None:
        self.limit = max_frame_bytes
        self.limit_name = limit_name
        self.trusted = trusted
        self._chunk: memoryview = memoryview(b"")  # unread tail of the last chunk
        self._pos = 0
        #: a frame being assembled from an untrusted peer: the views of what arrived
        self._parts: list[bytes | memoryview] = []
        #: a frame being assembled from a trusted peer: allocated at its size
        self._buffer: bytearray | None = None
        self._fill = 0  # bytes of the frame being assembled received so far
        self._size = 0  # the whole frame's size, length prefix included
        #: bytes allocated and copied for frames split across reads (tests count them)
        self.allocated = 0
        self.copied = 0
        #: a trusted peer's frame with at least this many bytes still to come is not allocated
        #: at once but held back (:attr:`deferred`), for the caller to take (:meth:`take_deferred`)
        #: or let be (it is then allocated as usual); 0: never
        self.defer_from = 0
        self.deferred = False

    @property
    def to_come(self) -> int:
        """Bytes of the frame being assembled still to arrive (0: none is, or its length prefix
        itself is incomplete)."""
        return self._size - self._fill if self._size else 0

    @property
    def in_frame(self) -> bool:
        """True while a started frame is incomplete (used to log truncation)."""
        return self._fill > 0 or (len(self._chunk) - self._pos) > 0

    def partial_space(self) -> memoryview | None:
        """The unfilled part of the frame being assembled in place (a trusted peer's, or a
        client's nearly whole: Rule 3), to receive into directly; None otherwise (nothing
        being assembled, unread bytes pending, or a client's frame kept as its chunks)."""
        if self.deferred:
            self.materialize()
        if self._buffer is None or len(self._chunk) - self._pos:
            return None
        return memoryview(self._buffer)[self._fill :]

    def partial_filled(self, n: int) -> None:
        """Record ``n`` bytes written into :meth:`partial_space`."""
        self._fill += n

    # ------------------------------------------------------------ assembling
    def _check(self, size: int) -> None:
        if size < 0:
            raise InvalidFrame(f"negative frame length {size}")
        if size > self.limit:
            raise FrameTooLarge(size, self.limit, self.limit_name)

    def _start_partial(self, head: memoryview | bytes, size: int | None) -> None:
        """A frame continues beyond this chunk: ``head`` is what arrived of it; ``size`` its
        whole size, None while even its length prefix is incomplete."""
        self._size = size or 0
        self._fill = len(head)
        if size is not None and self.trusted and size <= TRUSTED_PREALLOCATION:
            if self.defer_from and size - len(head) >= self.defer_from:
                self._parts = [head]  # a view: nothing allocated or copied until materialize()
                self.deferred = True
                return
            self._in_place([head])
            return
        self._parts = [head]
        if size is not None and _client_in_place(size, len(head)):
            self._in_place(self._parts)

    def _in_place(self, parts: list[bytes | memoryview]) -> None:
        """Allocate the frame being assembled at its size, ``parts`` (what arrived of it) copied
        in: the rest is received into it."""
        self._buffer = _frame_buffer(parts, self._size)
        self._parts = []
        self.allocated += self._size
        self.copied += self._fill

    def deferred_frame(self) -> tuple[memoryview, int]:
        """The frame held back (:attr:`deferred`): what arrived of it (length prefix included)
        and how many of its bytes are still to come."""
        assert self.deferred
        return memoryview(self._parts[0]), self.to_come

    def take_deferred(self) -> None:
        """The caller reads the rest of the frame held back itself: the decoder forgets it."""
        assert self.deferred
        self._parts, self._fill, self._size, self.deferred = [], 0, 0, False

    def materialize(self) -> None:
        """Treat the frame held back as any other: allocated at its size, received into."""
        assert self.deferred
        self.deferred = False
        self._in_place(self._parts)

    def _continue(self) -> memoryview | _NeedData:
        """Take what this chunk holds of the frame being assembled; the frame once whole."""
        chunk, pos = self._chunk, self._pos
        avail = len(chunk) - pos
        if not self._size:  # the length prefix itself was split: complete it first
            prefix = b"".join(self._parts) + bytes(chunk[pos : pos + 4 - self._fill])
            taken = len(prefix) - self._fill
            self._pos = pos + taken
            if len(prefix) < 4:
                self._parts, self._fill = [prefix], len(prefix)
                return NEED_DATA
            (size,) = _LEN.unpack_from(prefix, 0)
            self._parts, self._fill = [], 0
            try:
                self._check(size)
            except FrameError:
                self._chunk, self._pos = memoryview(b""), 0
                raise
            self._start_partial(prefix, size + 4)
            return self._continue()
        need = self._size - self._fill
        take = need if need <= avail else avail
        if take:
            if self._buffer is not None:
                self._buffer[self._fill : self._fill + take] = chunk[pos : pos + take]
                self.copied += take
            else:
                self._parts.append(chunk[pos : pos + take])
            self._fill += take
            self._pos = pos + take
        if take < need:
            if self._buffer is None and not self.deferred and _client_in_place(self._size, self._fill):
                self._in_place(self._parts)  # a client's frame nearly whole
            return NEED_DATA
        frame: bytes | bytearray
        if self._buffer is not None:
            frame = self._buffer
            self._buffer = None
        else:
            frame = b"".join(self._parts)
            self._parts = []
            self.allocated += len(frame)
            self.copied += len(frame)
        self._fill = self._size = 0
        return memoryview(frame).toreadonly()  # kio readers want read-only buffers


class FrameDecoder(_Decoder, _Cursor):  # type: ignore[misc]
    """Split a byte stream into Kafka frames (its cursor in C where that was built).

    Args:
        max_frame_bytes: the largest frame body accepted (:attr:`limit`, may be changed
            between frames, e.g. once a SASL client has authenticated).
        limit_name: the setting named when a frame exceeds the limit.
        trusted: the peer is the upstream broker: a frame split across reads is allocated
            at its announced size and received into directly (Rule 3).
    """

    __slots__ = _DECODER_SLOTS


class FrameDecoderPython(_Decoder, _FrameCursorPython):
    """:class:`FrameDecoder` on the Python cursor, the reference (the tests run both)."""

    __slots__ = _DECODER_SLOTS
