"""The Trio driver of one client connection: it moves bytes and performs what the core asks.

Each accepted socket gets one :class:`ClientConnection` and one nursery, routed to one
upstream broker (the bootstrap servers for a listener's bootstrap port, node N for the port
that stands for node N), whose connection is opened on the first request to forward.  The
*client reader* (:meth:`ClientConnection.run`) frames requests and hands each to the core's
one dispatcher (:meth:`~gateway.connection.core.ConnectionCore.dispatch`), performing the
:class:`~gateway.connection.core.Await` it may return (:meth:`ClientConnection.perform`);
the *upstream reader* frames responses and lets the core complete them.  Responses leave
from the head of ``pending`` only (:meth:`_flush`, one sender at a time), so in request
order, local answers included.

When the upstream opens and both sockets are plain TCP, the connection moves to the data
plane (:mod:`gateway.connection.handoff`); the Trio task then only performs what the lane
cannot and closes the sockets at the end.  Any failure is a :class:`CloseConnection`,
logged once and ending this connection only; every forwarded request has a deadline.
"""

from __future__ import annotations

import logging
import time
from contextlib import nullcontext

import trio

from protocol.apis.base import ApiSpec, RefuseRequest
from protocol.framing import NEED_DATA, FrameDecoder
from protocol.headers import RequestHeader
from gateway.auth.authentication import AuthenticationFailed
from gateway.connection.fast_io import (close_stream, discard_until_closed, fast_stream, half_close, receive,
                                        trio_deadline)
from gateway.auth.tls import release_tls_stream, sni_node_id
from gateway.upstream.cluster import UpstreamUnavailable
from gateway.connection.upstream_queries import settle
from gateway.connection.core import (
    Await, CloseConnection, ConnectionCore, NeedLocalAnswer, NeedLogin, NeedRawToken, NeedSpace, NeedThrottle,
    NeedUpstream, NeedUpstreamAnswer, NeedVersions, NeedWorker, Slot, next_request,
)
from gateway.connection.handoff import serve_in_data_plane
from gateway.connection.upstream_side import UpstreamSide
from gateway.connection import sasl_steps

__all__ = ["ClientConnection", "CloseConnection"]

log = logging.getLogger("kgw.connection")
#: how long a refused login's connection waits for the client to close first
_LINGER_AFTER_REFUSAL_S = 1.0


class ClientConnection(ConnectionCore):
    """The Trio driver of one client connection (see the module doc)."""

    def __init__(self, listener, stream: trio.SocketStream, peer: tuple[str, int], node_id: int | None):
        super().__init__(listener, stream, peer, node_id)
        self._sending = False
        self._space = trio.Event()
        #: the connection to the upstream broker, its reader and its deadline
        self.upstream_side = UpstreamSide()
        self._nursery: trio.Nursery | None = None
        self._read_scope: trio.CancelScope | None = None
        self._answered: trio.Event | None = None  # set by _flush while draining

    # ------------------------------------------------------------------ entry
    async def run(self) -> None:
        if self.gw.draining:
            return  # accepted just as the gateway began to stop
        security = self.listener.security
        # a TLS handshake is held to the authentication deadline; without one nothing is awaited
        timer = nullcontext() if security.ssl_context is None else trio.fail_at(trio_deadline(self._auth_deadline))
        try:
            with timer:
                self.stream, self.auth = await security.accept(self.stream, self.peer[0])
        except AuthenticationFailed:
            return  # logged and counted by the listener's security
        except trio.TooSlowError:
            self.metrics.errors.labels(self.listener_name, "-", "authentication_timeout").inc()
            log.info("closing client connection: TLS handshake not finished within %d ms "
                     "(limits.authentication_timeout_ms)", self._limits.authentication_timeout_ms,
                     extra=self.log_fields())
            return
        if self.auth.principal is not None:
            self.principal = self.auth.principal
        if self.listener.security.sni is not None:  # one port: the TLS server name chose the broker
            self.node_id = sni_node_id(self.stream)
        self.stream = fast_stream(self.stream)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                try:
                    decoder = await self._read_client()
                    if decoder is not None:
                        await serve_in_data_plane(self, decoder)
                finally:
                    # Cancel the upstream reader from here, before an exception leaves this
                    # block: cancelled later by the nursery itself, its Cancelled's traceback
                    # would reach the frame holding the nursery's exception group (a cycle
                    # keeping the connection until a full collection).
                    nursery.cancel_scope.cancel()
            if self.draining:
                await half_close(self.stream)
        except* CloseConnection as group:
            if self._closing(group.exceptions):
                # after a refused login: the client reads the answer and closes first (kafka-python
                # drops an answer it reads together with the end of the stream); nothing more is read
                await discard_until_closed(self.stream, _LINGER_AFTER_REFUSAL_S)
        except* (trio.BrokenResourceError, trio.ClosedResourceError):
            log.debug("client connection broken", extra=self.log_fields())
        finally:
            release_tls_stream(self.stream)
            if self._upstream is not None:
                release_tls_stream(self._upstream)  # kgw's own TLS towards the broker, if any
                await close_stream(self._upstream)

    def _closing(self, reasons) -> bool:
        """Count and log why the connection closes; True when the client was answered first.
        (Not inline in ``run``'s handler: a loop variable left in that frame would hold an
        exception whose traceback holds the frame, keeping the connection for the collector.)"""
        for reason in reasons:
            self.metrics.errors.labels(self.listener_name, "-", reason.metric).inc()
            log.info("closing client connection: %s", reason, extra=self.log_fields())
        return any(reason.answered for reason in reasons)

    # ----------------------------------------------------------- client side
    def begin_drain(self) -> None:
        """The gateway is stopping: read no new request; once every request read so far is
        answered the connection closes (on the data plane, the lane does the same)."""
        self.draining = True
        if self.on_data_plane and self.gw.data_plane is not None:
            self.gw.data_plane.drain(self.lane)
        elif self._read_scope is not None:
            self._read_scope.cancel()

    async def _until_answered(self) -> None:
        """Draining on Trio: send what was accepted for the upstream, wait for every answer."""
        if self._queued:
            await self._send_upstream(self._queued)
            self._queued.clear()
        while self.pending:
            self._answered = trio.Event()
            await self._answered.wait()

    async def _read_client(self) -> FrameDecoder | None:
        """Serve requests on Trio; returns the decoder when the connection moves to the data plane."""
        decoder = self._decoder = self._new_decoder()
        bytes_in = self.metrics.listener(self.listener_name).bytes_in
        to_upstream = self._queued  # frames to forward, sent together once a chunk is parsed
        while True:
            if self.draining:
                await self._until_answered()
                return None
            with trio.move_on_at(trio_deadline(self._read_deadline())) as timer:
                self._read_scope = timer
                data = await receive(self.stream, decoder)
            self._read_scope = None
            if timer.cancelled_caught:
                if not self.draining:
                    self.check_timeouts(time.monotonic())
                continue
            self.last_read = time.monotonic()
            if not data:
                if decoder.in_frame:
                    log.info("client closed the connection in the middle of a request (%d bytes buffered)",
                             decoder.buffered, extra=self.log_fields())
                return
            bytes_in.inc(len(data))
            while not self.draining and (frame := next_request(decoder)) is not NEED_DATA:
                await self._on_request(frame, to_upstream)
                if self._handoff:
                    return decoder  # frames still buffered are the data plane's now
                while self.muted and not self.draining:  # answers wait for the client to read them:
                    await self._wait_until_sent()  # take no further request, buffered or not
            if to_upstream:
                await self._send_upstream(to_upstream)
                to_upstream.clear()

    async def _on_request(self, frame: memoryview, to_upstream: list[memoryview]) -> None:
        outcome = self.dispatch(frame, to_upstream)
        if outcome is True:
            await self._flush()
        elif outcome is not False:
            await self.perform(outcome, to_upstream)

    async def perform(self, step: Await, to_upstream: list) -> None:
        """Do what the core asked for (:class:`~gateway.connection.core.Await`) and hand it the
        result, until the request is forwarded or answered.  I/O only: every decision is the
        core's.  Also runs a data-plane lane's awaits (gateway/connection/handoff.py)."""
        outcome: bool | Await = step
        while isinstance(outcome, Await):
            step = outcome
            if isinstance(step, NeedLogin):
                await sasl_steps.login(self, step.session, step.header, step.spec, step.body)
                return
            if isinstance(step, NeedRawToken):
                await sasl_steps.raw_token(self, step.session, step.token)
                return
            if isinstance(step, (NeedUpstream, NeedLocalAnswer, NeedUpstreamAnswer, NeedThrottle)) and to_upstream:
                await self._send_upstream(to_upstream)  # earlier requests must not wait behind this one
                to_upstream.clear()
            if isinstance(step, NeedVersions):
                result = await self._advertised()
            elif isinstance(step, NeedWorker):
                result = await trio.to_thread.run_sync(step.job, limiter=self.gw.heavy_work_limiter)
            elif isinstance(step, NeedLocalAnswer):
                try:
                    result = await step.spec.answer(self.gw, step.auth, step.header, step.info)
                except (RefuseRequest, TypeError, AttributeError) as e:
                    raise self.answer_refused(step.spec, step.header, e) from None
            elif isinstance(step, NeedUpstreamAnswer):
                result = await settle(step.question, self.gw, self._request_timeout_s, step.spec.name)
            elif isinstance(step, NeedSpace):
                result = await self._wait_for_space()
            elif isinstance(step, NeedUpstream):
                result = await self._connect_upstream()
            elif isinstance(step, NeedThrottle):  # over a quota: nothing read until it has passed
                result = await trio.sleep_until(trio_deadline(step.until))
            else:
                raise RuntimeError(f"the connection core asked for {type(step).__name__}, which no driver performs")
            outcome = step.then(result, to_upstream)
        if outcome:
            await self._flush()

    async def _advertised(self):
        try:
            return await self.gw.advertised_versions()
        except UpstreamUnavailable as e:
            raise CloseConnection(str(e), "upstream") from None

    async def _answer_locally(self, header: RequestHeader, spec: ApiSpec, body: bytes) -> None:
        await self._wait_for_space()
        self.queue_answer(header, spec, body)
        await self._flush()

    async def _wait_until_sent(self) -> None:
        """Wait until some of what waits for the client has been written (``_flush`` sets
        ``_space``); what is queued for the upstream goes first, its answers may be what is
        needed.  The idle deadline does not run meanwhile: answers are pending."""
        if self._queued:
            await self._send_upstream(self._queued)
            self._queued.clear()
        self._space = trio.Event()
        await self._flush()
        if self.muted:
            await self._space.wait()

    async def _wait_for_space(self) -> None:
        """Back-pressure: at most ``max_in_flight_per_connection`` responses outstanding.
        (On the data plane a slow request only starts when there is space.)"""
        while len(self.pending) >= self.max_in_flight and not self.on_data_plane:
            if self._queued:  # requests still waiting to be sent can't be answered: send them first
                await self._send_upstream(self._queued)
                self._queued.clear()
            self._space = trio.Event()
            await self._space.wait()

    # ---------------------------------------------------------- upstream side
    def _on_first_in_flight(self, slot: Slot) -> None:
        scope = self.upstream_side.scope  # (read here: called for every request sent alone)
        if scope is not None:
            scope.deadline = trio_deadline(slot.deadline)

    async def _send_upstream(self, frames: list[memoryview]) -> None:
        if self.on_data_plane:  # on the data plane the lane sends, when it resumes
            self.lane.awaited_upstream.extend(frames)
        else:
            assert self._upstream is not None
            side = self.upstream_side
            if side.reauth_at is not None:  # kgw's session upstream expires (KIP-368)
                await side.send_in_session(self, frames)
            else:
                await side.send(self._upstream, frames)

    async def _connect_upstream(self) -> None:
        self._handoff = await self.upstream_side.open(self, self._nursery)

    async def complete_heavy(self) -> None:
        await self.upstream_side.complete_heavy(self)

    # ------------------------------------------------------------- responses
    async def _flush(self) -> None:
        """Send completed responses from the head of the queue, in request order."""
        if self._sending or self.on_data_plane:  # on the data plane the lane sends
            return
        self._sending = True
        pending = self.pending
        bytes_out = self.metrics.listener(self.listener_name).bytes_out
        try:
            while pending and pending[0].data is not None:
                batch = []
                while pending and pending[0].data is not None:
                    batch.append(pending.popleft().data)
                self._space.set()
                data = batch[0] if len(batch) == 1 else b"".join(batch)
                await self.stream.send_all(data)
                bytes_out.inc(len(data))
                self.unsent -= len(data)
                self._space.set()
        finally:
            self._sending = False
            if self._answered is not None and not pending:
                self._answered.set()


try:  # the express dispatch calls the first-in-flight hooks only where they do something
    from gateway.connection import _plane_steps
except ImportError:  # pragma: no cover - a build without a compiler: the reference alone
    pass
else:
    _plane_steps.configure_hooks(ConnectionCore._on_first_in_flight, ClientConnection._on_first_in_flight)
