"""Handing a Trio connection to the data plane (:mod:`gateway.connection.data_plane`) and serving what the
lane sends back: what the core asked to await for a request (an :class:`~gateway.connection.core.Await`:
a local answer, a question to the upstream, a login step...) and its *heavy* responses run on
the connection's Trio task while the lane is paused, then the lane resumes with what they
produced.  The connection's state is touched by
one thread at a time.  The Trio driver calls :func:`serve_in_data_plane` with itself; the
lane it creates refers to the connection, never the other way once it is released."""

from __future__ import annotations

import logging
import math

import trio

from gateway.connection.core import CloseConnection
from gateway.connection.lane import Lane
from gateway.connection.fast_io import FastStream
from protocol.framing import FrameDecoder

__all__ = ["serve_in_data_plane"]

log = logging.getLogger("kgw.connection")


async def serve_in_data_plane(conn, decoder: FrameDecoder) -> None:
    """Let the data-plane thread serve this connection; run its slow requests here.

    Returns at end of stream; raises :class:`CloseConnection` (or BrokenResourceError for
    a client that went away) like the Trio path, so :meth:`run` logs and counts the same way.
    """
    dp = conn.gw.data_plane
    send, receive = trio.open_memory_channel(math.inf)
    token = trio.lowlevel.current_trio_token()

    def post(message: tuple) -> None:  # called on the data-plane thread
        try:
            token.run_sync_soon(send.send_nowait, message)
        except trio.RunFinishedError:
            pass

    frames = list(conn._queued)
    conn._queued.clear()
    assert isinstance(conn.stream, FastStream) and isinstance(conn._upstream, FastStream)
    lane = Lane(conn, conn.stream.fileno(), conn._upstream.fileno(), decoder, frames, post)
    conn.lane = lane
    released = False
    dp.adopt(lane)
    try:
        async for message in receive:
            kind = message[0]
            if kind == "await":  # what the core asked for on the data plane: performed here
                to_upstream: list = []
                try:
                    await conn.perform(message[1], to_upstream)
                except CloseConnection:
                    dp.release(lane, flush=True)  # e.g. a failed SASL answer goes out first
                    await _until_released(receive)
                    released = True
                    raise
                frames = lane.awaited_upstream + to_upstream
                lane.awaited_upstream = []
                dp.resume(lane, frames)
                continue
            if kind == "heavy":  # a large upstream response: completed here, the lane paused
                while conn.heavy is not None:
                    await conn.complete_heavy()
                    conn.complete_responses(lane.udec)
                dp.resume(lane, [])
                continue
            released = True
            if kind == "closed":
                try:
                    raise message[1]
                finally:
                    del message  # the frame must not hold the exception its traceback holds
            if kind == "broken":
                raise trio.BrokenResourceError("client connection broken")
            if kind == "eof" and message[1]:
                log.info("client closed the connection in the middle of a request (%d bytes buffered)",
                         message[1], extra=conn.log_fields())
            return
    finally:
        if not released and dp.running:
            dp.release(lane, flush=False)
            with trio.CancelScope(shield=True):
                with trio.move_on_after(2):
                    await _until_released(receive)
        # The lane points at this connection; this connection must not point back, or each
        # closed connection would wait for the cycle collector (memory growing with churn).
        conn.lane = None


async def _until_released(receive) -> None:
    async for message in receive:
        if message[0] not in ("await", "heavy"):
            return
