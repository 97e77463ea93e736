"""Socket I/O without a scheduler round trip per successful call.

Theory of operation
-------------------
Trio's socket methods checkpoint on every call: even a ``send`` that completes
at once yields to the run loop, which costs a pass through the scheduler and
an ``epoll_wait``.  A proxy does four such calls per request (receive from the
client, send upstream, receive the answer, send it back), so on small requests
those passes are most of what a gateway adds to latency.

:class:`FastStream` calls the non-blocking socket directly (``os.read``,
``os.readv``, ``os.write`` on its file descriptor) and parks in
``trio.lowlevel.wait_readable`` / ``wait_writable`` only when the kernel says
it would block, which is also where cancellation and deadlines are delivered.
So that a connection whose socket always has data cannot starve the others,
every ``_FAIRNESS`` calls that did not park, it yields with a checkpoint.  After
a read that drained the socket (returned less than asked) the next read waits
for readiness first: in request/response traffic that saves a read that would
only fail with EAGAIN.

Only plain TCP streams use it; TLS streams keep Trio's ``SSLStream``.
"""

from __future__ import annotations

import math
import os
import socket
import time

import trio

from protocol.framing import FrameDecoder

__all__ = ["FastStream", "close_stream", "discard_until_closed", "fast_stream", "half_close", "receive", "trio_deadline"]

_RECV = 256 * 1024
_RECV_INTO_MIN = 64 * 1024

_FAIRNESS = 16


class FastStream:
    __slots__ = ("stream", "_fd", "_unparked", "_drained")

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self._fd = stream.socket.fileno()
        self._unparked = 0
        #: the last read returned less than asked: the socket is most likely empty now, so the
        #: next read waits for readiness first instead of making a read that fails with EAGAIN
        self._drained = False

    def fileno(self) -> int:
        return self._fd

    async def _fair(self) -> None:
        self._unparked += 1
        if self._unparked >= _FAIRNESS:
            self._unparked = 0
            await trio.lowlevel.checkpoint()

    async def _read(self, read, want: int):
        """Call ``read()`` (a non-blocking read returning bytes or a count) until it succeeds."""
        if self._drained:
            self._unparked = 0
            await trio.lowlevel.wait_readable(self._fd)
        while True:
            try:
                got = read()
            except BlockingIOError:
                self._unparked = 0
                await trio.lowlevel.wait_readable(self._fd)
                continue
            except OSError as e:
                raise trio.BrokenResourceError(e) from e
            size = got if isinstance(got, int) else len(got)
            self._drained = 0 < size < want
            await self._fair()
            return got

    async def receive_some(self, max_bytes: int) -> bytes:
        return await self._read(lambda: os.read(self._fd, max_bytes), max_bytes)

    async def receive_into(self, buffer: memoryview) -> int:
        return await self._read(lambda: os.readv(self._fd, (buffer,)), len(buffer))

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view:
            try:
                sent = os.write(self._fd, view)
            except BlockingIOError:
                self._unparked = 0
                await trio.lowlevel.wait_writable(self._fd)
                continue
            except OSError as e:
                raise trio.BrokenResourceError(e) from e
            view = view[sent:]
        await self._fair()

    async def aclose(self) -> None:
        await self.stream.aclose()


async def close_stream(stream: trio.abc.Stream) -> None:
    """Close a connection's stream for good, as ``trio.aclose_forcefully`` does, without its
    cost where nothing is left to say: a plain TCP stream's socket is closed at once
    (``aclose_forcefully`` is a cancel scope and a checkpoint made to raise Cancelled, several
    times the close itself, paid twice by every connection); a TLS stream is closed forcefully."""
    plain = stream.stream if type(stream) is FastStream else stream
    if type(plain) is trio.SocketStream:
        plain.socket.close()
    else:
        await trio.aclose_forcefully(stream)


def fast_stream(stream: trio.abc.Stream):
    """A :class:`FastStream` for a plain TCP stream; any other stream unchanged."""
    return FastStream(stream) if isinstance(stream, trio.SocketStream) else stream


async def receive(stream, decoder: FrameDecoder) -> bytes | memoryview:
    """Read the next bytes into ``decoder``; returns what was read (empty at EOF).

    While a large frame is being assembled, bytes are received straight into its buffer
    (``recv_into``), so a multi-megabyte Produce request or Fetch response is copied once,
    from the kernel, instead of chunk by chunk."""
    space = decoder.partial_space()
    if space is not None and len(space) >= _RECV_INTO_MIN and isinstance(stream, FastStream):
        n = await stream.receive_into(space)
        decoder.partial_filled(n)
        return space[:n]
    data = await stream.receive_some(_RECV)
    if data:
        decoder.receive_data(data)
    return data


def trio_deadline(monotonic_deadline: float) -> float:
    """A ``time.monotonic()`` deadline on Trio's clock (slot deadlines use the former: the
    data-plane thread cannot read Trio's clock)."""
    if monotonic_deadline == math.inf:
        return math.inf
    return trio.current_time() + (monotonic_deadline - time.monotonic())


async def discard_until_closed(stream, seconds: float) -> None:
    """Read and drop what the peer still sends until it closes, at most ``seconds``."""
    with trio.move_on_after(seconds):
        try:
            while await stream.receive_some(_RECV):
                pass
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass


async def half_close(stream) -> None:
    """End our side (FIN) and drop what the peer still sends until it closes (at most a
    second), so what was sent is not lost to a reset, as it would be if the socket were
    closed with unread bytes in it.  TLS: nothing here (``aclose``'s close_notify ends it)."""
    raw = getattr(getattr(stream, "stream", stream), "socket", None)
    if raw is None:
        return
    try:
        raw.shutdown(socket.SHUT_WR)
    except OSError:
        return
    await discard_until_closed(stream, 1.0)
