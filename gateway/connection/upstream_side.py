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

KIP-368: when kgw's own SASL session on the connection has a lifetime (the broker's
``connections.max.reauth.ms``, or the expiry of kgw's OAUTHBEARER token), the connection stays
on Trio and logs in again before the session ends, as a Kafka client does: at the first send
after 85-95% of the lifetime, it waits until every request already sent is answered (the
client's further requests wait meanwhile), runs SaslHandshake/SaslAuthenticate on the same
connection with the reader handing the broker's answers over, then sends on.  A failed
re-authentication closes the client connection with the reason.
"""

from __future__ import annotations

import logging
import math
import random
import time
from typing import Any

import trio

from gateway.connection.core import CloseConnection
from gateway.connection.fast_io import FastStream, fast_stream, receive, trio_deadline
from gateway.upstream.cluster import UpstreamUnavailable
from gateway.upstream.security import UpstreamSecurityError, UpstreamSession, reauthenticate, upstream_session
from protocol.framing import NEED_DATA, FrameDecoder

__all__ = ["UpstreamSide"]

_MAX_RESPONSE = (1 << 31) - 1
log = logging.getLogger("kgw.upstream")


def _reauth_time(session: UpstreamSession) -> float:
    """When to log in again: at 85-95% of the session (Kafka's clients pick the same window)."""
    assert session.lifetime_s is not None
    return session.started + session.lifetime_s * random.uniform(0.85, 0.95)


class UpstreamSide:
    """The broker connection of one client connection (see the module doc)."""

    def __init__(self) -> None:
        #: carries the deadline of the oldest request in flight while the reader waits (None
        #: on the data plane, whose lane checks deadlines itself); the connection moves it
        #: when a new oldest request is sent
        self.scope: trio.CancelScope | None = None
        #: kgw's SASL session on the connection when it has a lifetime, and when to renew it
        #: (None: it does not expire; the send path checks this one attribute)
        self.session: UpstreamSession | None = None
        self.reauth_at: float | None = None
        #: the newest request sent (with a session only): answered = nothing sent is in flight
        self.last_sent: Any = None
        self._drained: trio.Event | None = None
        self._inbox: Any = None  # while re-authenticating: where the reader puts the answers

    async def open(self, conn: Any, nursery: trio.Nursery | None) -> bool:
        """Connect ``conn``'s broker; True when the data plane will read it (both sockets plain
        TCP), else start the reader in ``nursery``."""
        try:
            stream = await conn.gw.cluster.connect(conn.node_id)
        except UpstreamUnavailable as e:
            raise CloseConnection(str(e), "upstream") from None
        session = upstream_session(stream)
        if session is not None and session.lifetime_s is not None:
            self.session, self.reauth_at = session, _reauth_time(session)
        conn._upstream = stream = fast_stream(stream)
        if (conn.gw.data_plane is not None and isinstance(stream, FastStream) and isinstance(conn.stream, FastStream)
                and not conn.on_data_plane and self.session is None):
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

    async def send_in_session(self, conn: Any, frames: list[memoryview]) -> None:
        """``send`` on a connection whose SASL session expires: logged in again first when due,
        and the newest request sent remembered (what re-authentication waits for)."""
        assert self.reauth_at is not None
        if time.monotonic() >= self.reauth_at:
            await self.reauthenticate(conn)
        await self.send(conn._upstream, frames)
        self.last_sent = conn.in_flight[-1] if conn.in_flight else None

    async def reauthenticate(self, conn: Any) -> None:
        """Log in again on the connection (see the module doc); the caller sends nothing meanwhile."""
        cluster = conn.gw.cluster
        assert self.session is not None
        if self.last_sent is not None and self.last_sent in conn.in_flight:
            self._drained = trio.Event()
            await self._drained.wait()
        send, receive = trio.open_memory_channel(math.inf)
        self._inbox = send
        where = f"broker {conn.node_id}" if conn.node_id is not None else "bootstrap"
        try:
            self.session = await reauthenticate(conn._upstream, receive.receive, cluster.security, self.session,
                                                where, cluster.connect_timeout_s)
        except UpstreamSecurityError as e:
            self._reauthentication_failed(conn, str(e))
        finally:
            self._inbox = None
        cluster.reauthentications["ok"] += 1
        lifetime = self.session.lifetime_s
        self.reauth_at = None if lifetime is None else _reauth_time(self.session)
        log.info("re-authenticated kgw's upstream session with %s on %s (session %s)", self.session.mechanism,
                 where, "without expiry" if lifetime is None else f"{lifetime:g}s")

    def _reauthentication_failed(self, conn: Any, reason: str) -> None:
        self._inbox = None
        conn.gw.cluster.reauthentications["failed"] += 1
        log.warning("kgw's upstream re-authentication failed: %s", reason)
        raise CloseConnection(f"upstream re-authentication failed: {reason}", "upstream")

    def _hand_over(self, decoder: FrameDecoder) -> None:
        while (frame := decoder.next_frame()) is not NEED_DATA:
            self._inbox.send_nowait(bytes(frame))

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
                        if self._inbox is not None:
                            self._reauthentication_failed(conn, "the broker closed the connection")
                        raise CloseConnection("upstream closed the connection", "upstream")
                    if self._inbox is not None:  # answers to kgw's re-authentication
                        self._hand_over(decoder)
                        continue
                    completed = conn.complete_responses(decoder)
                    while conn.heavy is not None:
                        await self.complete_heavy(conn)
                        conn.complete_responses(decoder)
                        completed = True
                    if completed:
                        scope.deadline = trio_deadline(in_flight[0].deadline) if in_flight else math.inf
                        if self._drained is not None and self.last_sent not in in_flight:
                            self._drained.set()
                            self._drained = None
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
