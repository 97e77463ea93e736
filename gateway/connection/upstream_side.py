"""The upstream side of a client connection on Trio: the connection to its broker, opened on
the first request to forward, the task that reads the broker's responses and lets the core
complete them, and the deadline of the oldest request in flight.

One :class:`UpstreamSide` per :class:`gateway.connection.client.ClientConnection`, which it serves by
composition: each call is given the connection, whose core state it reads and writes
(``in_flight``, ``heavy``, ``_upstream``) and which it asks to flush what completed.  It keeps
no reference to the connection (a cycle would leave every closed connection to the cycle
collector).  When both sockets are plain TCP the data
plane reads the upstream instead (:meth:`UpstreamSide.open` says so) and this side only
completes the responses too large for it.
"""

from __future__ import annotations

import math
import time
from typing import Any

import trio

from gateway.connection.core import CloseConnection
from gateway.connection.fast_io import FastStream, fast_stream, receive, trio_deadline
from gateway.upstream.cluster import UpstreamUnavailable
from protocol.framing import FrameDecoder

__all__ = ["UpstreamSide"]

_MAX_RESPONSE = (1 << 31) - 1


class UpstreamSide:
    """The broker connection of one client connection (see the module doc)."""

    def __init__(self) -> None:
        #: carries the deadline of the oldest request in flight while the reader waits (None
        #: on the data plane, whose lane checks deadlines itself); the connection moves it
        #: when a new oldest request is sent
        self.scope: trio.CancelScope | None = None

    async def open(self, conn: Any, nursery: trio.Nursery | None) -> bool:
        """Connect ``conn``'s broker; True when the data plane will read it (both sockets plain
        TCP), else start the reader in ``nursery``."""
        try:
            stream = await conn.gw.cluster.connect(conn.node_id)
        except UpstreamUnavailable as e:
            raise CloseConnection(str(e), "upstream") from None
        conn._upstream = stream = fast_stream(stream)
        if (conn.gw.data_plane is not None and isinstance(stream, FastStream) and isinstance(conn.stream, FastStream)
                and not conn.on_data_plane):
            return True
        assert nursery is not None
        nursery.start_soon(self._read, conn, stream)
        return False

    @staticmethod
    async def send(stream: Any, frames: list[memoryview]) -> None:
        data = frames[0] if len(frames) == 1 else b"".join(frames)
        try:
            await stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as e:
            raise CloseConnection(f"upstream connection lost while sending: {e}", "upstream") from None

    async def _read(self, conn: Any, stream: trio.SocketStream) -> None:
        """Pair upstream responses with requests in flight; one cancel scope carries the
        deadline of the oldest request and is replaced only when it fires."""
        decoder = FrameDecoder(_MAX_RESPONSE, trusted=True)
        in_flight = conn.in_flight
        while True:
            with trio.CancelScope(deadline=trio_deadline(in_flight[0].deadline) if in_flight else math.inf) as scope:
                self.scope = scope
                while True:
                    data = await receive(stream, decoder)
                    if not data:
                        raise CloseConnection("upstream closed the connection", "upstream")
                    completed = conn.complete_responses(decoder)
                    while conn.heavy is not None:
                        await self.complete_heavy(conn)
                        conn.complete_responses(decoder)
                        completed = True
                    if completed:
                        scope.deadline = trio_deadline(in_flight[0].deadline) if in_flight else math.inf
                        await conn._flush()
            self.scope = None
            if in_flight and time.monotonic() >= in_flight[0].deadline:
                raise conn.timeout_error(in_flight[0])

    @staticmethod
    async def complete_heavy(conn: Any) -> None:
        """Complete the large response the core set aside (``heavy``), on a worker thread."""
        slot, frame = conn.heavy
        conn.heavy = None
        await trio.to_thread.run_sync(conn._complete, slot, frame, limiter=conn.gw.heavy_work_limiter)
