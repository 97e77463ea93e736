"""Moving a large response's record bytes from the upstream socket to the client's through a
kernel pipe (Linux ``splice``), so they never enter kgw's memory.

The data plane (:mod:`gateway.connection.data_plane`) passes a response on while it arrives
when its API has a walker (``ApiSpec.stream_response``, e.g. Fetch) and nothing must be done to
it as a whole (:meth:`ConnectionCore.open_stream`).  The walker reads the response's structure in
user space and names the record sets; the bytes of each large one are spliced upstream → pipe →
client.  Order on the client socket: the bytes the walker hands on before a record set are
written before any of the set's bytes leave the pipe, and the walker goes on only once the pipe
is empty, so what follows the set is written after it.

A pipe holds at most its capacity (1 MiB where the kernel allows it, else its default 64 KiB)
of one response's bytes, and a lane holds a pipe only while it passes a response on; the
:class:`PipePool` keeps at most ``size`` of them, so the file descriptors and pinned memory spent
on this are bounded whatever the clients do.  A response that finds no free pipe is read and
written as before.
"""

from __future__ import annotations

import fcntl
import os
import socket
from typing import Any

__all__ = ["PipePool", "Splicing", "SPLICE"]

#: splice(2) is there (Linux; Python 3.10+)
SPLICE = hasattr(os, "splice")
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
_PIPE_BYTES = 1 << 20
_FLAGS = getattr(os, "SPLICE_F_MOVE", 1) | getattr(os, "SPLICE_F_NONBLOCK", 2)


class PipePool:
    """At most ``size`` pipes, each ``(read fd, write fd, capacity)``, reused while empty."""

    def __init__(self, size: int) -> None:
        self.size = size if SPLICE else 0
        self._free: list[tuple[int, int, int]] = []
        #: pipes open (free or lent); tests and the end of the data plane look at it
        self.open = 0

    def acquire(self) -> tuple[int, int, int] | None:
        if self._free:
            return self._free.pop()
        if self.open >= self.size:
            return None
        r, w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            capacity = fcntl.fcntl(w, _F_SETPIPE_SZ, _PIPE_BYTES)
        except OSError:  # over the user's pipe-buffer allowance: the kernel's default size
            capacity = fcntl.fcntl(w, getattr(fcntl, "F_GETPIPE_SZ", 1032))
        self.open += 1
        return r, w, capacity

    def release(self, pipe: tuple[int, int, int]) -> None:
        """Give back an empty pipe (one that may still hold bytes is :meth:`discard`-ed)."""
        self._free.append(pipe)

    def discard(self, pipe: tuple[int, int, int]) -> None:
        os.close(pipe[0])
        os.close(pipe[1])
        self.open -= 1

    def close(self) -> None:
        while self._free:
            self.discard(self._free.pop())


class Splicing:
    """A response a lane is passing on: its walker, its pipe and the bytes in flight through it."""

    __slots__ = ("walker", "pipe", "capacity", "moving", "in_pipe", "need", "low_water", "_upstream", "client_at")

    def __init__(self, walker: Any, pipe: tuple[int, int, int], upstream: Any, now: float) -> None:
        self.walker = walker
        #: when the client was last seen taking bytes of it (checked every tick)
        self.client_at = now
        self._upstream = upstream  # the upstream socket object
        self.pipe = pipe
        self.capacity = pipe[2]
        #: bytes of the current record set still to splice into the pipe
        self.moving = 0
        #: bytes in the pipe, not yet spliced to the client
        self.in_pipe = 0
        #: the walker asked for more bytes of the response
        self.need = False
        #: the upstream socket's SO_RCVLOWAT (1: the kernel's default)
        self.low_water = 1

    def wake_at(self, size: int) -> None:
        """Have epoll report the upstream readable only once ``size`` bytes are there (SO_RCVLOWAT;
        or the peer closed): a record set arriving in small segments wakes the loop fewer times."""
        if size != self.low_water:
            try:
                self._upstream.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, size)
            except OSError:
                return
            self.low_water = size


def splice(src: int, dst: int, count: int) -> int:
    """``os.splice`` without blocking: bytes moved, or -1 if either side would block."""
    try:
        return os.splice(src, dst, count, flags=_FLAGS)
    except BlockingIOError:
        return -1
