"""One client connection: read requests, forward or answer them, return responses in order.

Theory of operation
-------------------
Each accepted socket gets one :class:`ClientConnection` and one nursery.  The
connection is routed to exactly one upstream broker: the bootstrap servers for
a listener's bootstrap port, node N for the port that stands for node N.  The
upstream connection is opened lazily, on the first request that must be
forwarded, and dies with the client connection.

Tasks in the nursery:

* the *client reader* (the body of :meth:`ClientConnection.run`) frames the
  incoming bytes, parses each header, asks the API's spec to inspect the
  request, and either answers it locally or forwards the frame bytes as they
  came (correlation ids are unchanged: the upstream connection is ours alone);
* the *upstream reader* frames upstream responses, pairs each with the oldest
  request in flight (a broker answers in order), rewrites it if the API says so,
  and completes its slot.

Data plane: when the upstream connection opens and both sockets are plain TCP,
the client reader returns and :meth:`_serve_in_data_plane` hands the
connection to :mod:`gateway.data_plane` (one epoll thread for all such
connections), which calls :meth:`dispatch_sync` and :meth:`_complete` itself;
the Trio task then only runs the requests that need ``await`` (the lane pauses
meanwhile, and ``_flush``/``_send_upstream`` leave the I/O to it) and closes the
sockets when the lane ends.  Slot deadlines use ``time.monotonic()`` because
that thread cannot read Trio's clock.

Ordering: every request that expects a response gets a :class:`Slot` appended
to ``pending`` in arrival order, whether kgw answers it or the upstream does.
:meth:`_flush` sends completed slots from the head only, so responses leave in
request order even when a locally answered request overtakes upstream ones.
Only one task sends to the client at a time (``_sending``); a second caller
returns at once and the active sender picks its slot up.

Failure containment: any protocol error, upstream failure or timeout raises
:class:`CloseConnection`, which is logged once with the connection's fields and
ends this connection only.  Every upstream request has a deadline (the
gateway's request timeout plus the time the broker may hold it on purpose, such
as a Fetch max wait); past it the client connection is closed, never left hanging.
"""

from __future__ import annotations

import logging
import math
import socket
import struct
import time


import trio

from protocol.apis.api_versions import client_software
from protocol.apis.base import ApiSpec, Decision, RefuseRequest, RequestInfo
from protocol.apis.registry import REGISTRY
from protocol.framing import NEED_DATA, FrameDecoder
from protocol.headers import HeaderError, RequestHeader, parse_request_header
from gateway.authentication import AuthenticationFailed
from gateway.fast_io import FastStream, fast_stream
from gateway.sasl import SaslStateError
from gateway.tls import release_tls_stream
from gateway.upstream import UpstreamUnavailable, open_upstream
from gateway.connection_core import CloseConnection, ConnectionCore, SLOW, Slot, SASL_KEYS, next_request
from gateway.connection_handoff import DataPlaneHandoff
from gateway.connection_sasl import SaslSteps

__all__ = ["ClientConnection", "CloseConnection", "SLOW"]

log = logging.getLogger("kgw.connection")
_I32 = struct.Struct(">i")
_RECV = 256 * 1024
#: how long a refused login's connection waits for the client to close first
_LINGER_AFTER_REFUSAL_S = 1.0
_RECV_INTO_MIN = 64 * 1024
_MAX_RESPONSE = (1 << 31) - 1


async def _receive(stream: trio.SocketStream, decoder: FrameDecoder) -> bytes | memoryview:
    """Read the next bytes into ``decoder``; returns what was read (empty at EOF).

    While a large frame is being assembled, bytes are received straight into
    its buffer (``recv_into``), so a multi-megabyte Produce request or Fetch
    response is copied once, from the kernel, instead of chunk by chunk.
    """
    space = decoder.partial_space()
    if space is not None and len(space) >= _RECV_INTO_MIN and isinstance(stream, FastStream):
        n = await stream.receive_into(space)
        decoder.partial_filled(n)
        return space[:n]
    data = await stream.receive_some(_RECV)
    if data:
        decoder.receive_data(data)
    return data


def _trio_deadline(monotonic_deadline: float) -> float:
    """A ``time.monotonic()`` deadline on Trio's clock (slot deadlines use the former:
    the data-plane thread cannot read Trio's clock)."""
    if monotonic_deadline == math.inf:
        return math.inf
    return trio.current_time() + (monotonic_deadline - time.monotonic())


class ClientConnection(DataPlaneHandoff, SaslSteps, ConnectionCore):
    """The Trio driver of one client connection (see the module doc)."""

    def __init__(self, listener, stream: trio.SocketStream, peer: tuple[str, int], node_id: int | None):
        super().__init__(listener, stream, peer, node_id)
        self._sending = False
        self._space = trio.Event()
        self._upstream_scope: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        self._read_scope: trio.CancelScope | None = None
        self._answered: trio.Event | None = None  # set by _flush while draining

    # ------------------------------------------------------------------ entry
    async def run(self) -> None:
        if self.gw.draining:
            return  # accepted just as the gateway began to stop
        try:
            with trio.fail_at(_trio_deadline(self._auth_deadline)):
                self.stream, self.auth = await self.listener.security.accept(self.stream, self.peer[0])
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
        self.stream = fast_stream(self.stream)
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                try:
                    decoder = await self._read_client()
                    if decoder is not None:
                        await self._serve_in_data_plane(decoder)
                finally:
                    # Cancel the upstream reader from here, before an exception leaves this
                    # block: cancelled later by the nursery itself, its Cancelled's traceback
                    # would reach the frame holding the nursery's exception group (a cycle
                    # keeping the connection until a full collection).
                    nursery.cancel_scope.cancel()
            if self.draining:
                await self._half_close()
        except* CloseConnection as group:
            if self._closing(group.exceptions):
                await self._let_client_close_first()
        except* (trio.BrokenResourceError, trio.ClosedResourceError):
            log.debug("client connection broken", extra=self.log_fields())
        finally:
            release_tls_stream(self.stream)
            if self._upstream is not None:
                release_tls_stream(self._upstream)  # kgw's own TLS towards the broker, if any
                await trio.aclose_forcefully(self._upstream)

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

    async def _half_close(self) -> None:
        """Drained: end our side (FIN) and discard what the client still sends until it closes
        (at most a second), so the answers already sent are not lost to a reset, as they would
        be if the socket were closed with unread requests in it."""
        raw = getattr(getattr(self.stream, "stream", self.stream), "socket", None)
        if raw is None:  # TLS: the close_notify of aclose() ends the stream
            return
        try:
            raw.shutdown(socket.SHUT_WR)
            with trio.move_on_after(1.0):
                while await self.stream.receive_some(_RECV):
                    pass
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async def _let_client_close_first(self) -> None:
        """After a refused login (answered): give the client up to a second to read the refusal
        and close first, discarding whatever it sends.  Closing at once puts the end of the
        stream right behind the answer, and kafka-python 3.0 drops an answer it reads together
        with the end of the stream: it reported "socket disconnected" instead of the SASL error
        (seen in CI).  Nothing more is read as a request; the wait holds no thread."""
        with trio.move_on_after(_LINGER_AFTER_REFUSAL_S):
            try:
                while await self.stream.receive_some(_RECV):
                    pass
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass

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
        bytes_in = self.metrics.bytes_in.labels(self.listener_name)
        to_upstream = self._queued  # frames to forward, sent together once a chunk is parsed
        while True:
            if self.draining:
                await self._until_answered()
                return None
            with trio.move_on_at(_trio_deadline(self._read_deadline())) as timer:
                self._read_scope = timer
                data = await _receive(self.stream, decoder)
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
        outcome = self.dispatch_sync(frame, to_upstream)
        if outcome is SLOW:
            await self._on_request_slow(frame, to_upstream)
        elif outcome:
            await self._flush()

    async def _on_request_slow(self, frame: memoryview, to_upstream: list[memoryview]) -> None:
        awaiting = self.take_awaiting(frame)
        if awaiting is not None:  # enforced by dispatch_sync; its decision asks the upstream first
            _frame, header, spec, info, body, decision = awaiting
            await self._apply_decision(header, spec, info, body, frame, decision, to_upstream)
            return
        body = frame[4:]
        session = self.auth.session
        if session is not None and session.expects_raw_token:
            await self._raw_sasl_token(session, bytes(body))
            return
        try:
            header = parse_request_header(body)
        except HeaderError as e:
            raise CloseConnection(f"unparseable request header: {e}", "header") from None
        self.client_id = header.client_id
        spec = REGISTRY.get(header.api_key)
        if spec is None:
            raise CloseConnection(f"unknown api key {header.api_key}", "unknown_api")
        self.metrics.request(self.listener_name, spec.name).inc()
        if session is not None and not session.authenticated:
            try:
                session.gate(header.api_key)
            except SaslStateError as e:
                raise CloseConnection(f"request before SASL authentication completed: {e}", "unauthenticated") from None
        if header.api_key in SASL_KEYS:
            await self._sasl(session, header, spec, body)
            return
        if header.api_key == 18:
            if session is not None and not session.authenticated:  # named in authentication failures
                session.client_software = client_software(header.api_version, body[header.size:])
            # ApiVersions is answered even for versions kgw does not know (KIP-511).
            await self._answer_api_versions(header, spec, body)
            return
        advertised = self.gw.advertised_cached or await self._advertised()
        allowed = advertised.get(header.api_key)
        if allowed is None or not allowed.min <= header.api_version <= allowed.max:
            raise self._unsupported(spec, header, allowed)
        auth = self._auth_helper(header)
        if not spec.answered_locally and self._is_large(frame):
            # the whole inspection and authorization of a large request on a worker thread
            info, decision = await trio.to_thread.run_sync(
                self._inspect_and_enforce, spec, header, body, auth, limiter=self.gw.heavy_work_limiter)
            await self._apply_decision(header, spec, info, body, frame, decision, to_upstream)
            return
        if self._is_large(frame):
            info = await trio.to_thread.run_sync(self._inspected, spec, spec.inspect, header, body,
                                                 limiter=self.gw.heavy_work_limiter)
        else:
            info = self._inspected(spec, spec.inspect, header, body)
        if spec.answered_locally:
            if to_upstream:  # earlier requests must not wait behind a slow local answer
                await self._send_upstream(to_upstream)
                to_upstream.clear()
            try:
                answer = await spec.answer(self.gw, auth, header, info)
            except RefuseRequest as e:
                raise CloseConnection(f"{spec.name} refused: {e}", "refused") from None
            except (TypeError, AttributeError) as e:  # a null where the schema has none: see _enforce
                raise CloseConnection(f"malformed {spec.name} v{header.api_version} request: "
                                      f"{type(e).__name__}: {e}", "decode") from None
            if not isinstance(answer, Decision):
                await self._answer_locally(header, spec, answer)
                return
            decision = answer  # part answered here, part forwarded (e.g. config APIs)
        else:
            decision = self._enforce(spec, auth, header, body, info)
        await self._apply_decision(header, spec, info, body, frame, decision, to_upstream)


    async def _apply_decision(self, header: RequestHeader, spec: ApiSpec, info: RequestInfo, body: memoryview,
                              frame: memoryview, decision: Decision, to_upstream: list) -> None:
        if decision.then is not None:
            if to_upstream:  # earlier requests must not wait behind the question to the upstream
                await self._send_upstream(to_upstream)
                to_upstream.clear()
            decision = await self._settled(spec, header, decision)
        if decision.close is not None:
            raise CloseConnection(decision.close, "denied")
        if decision.respond is not None:
            await self._answer_locally(header, spec, decision.respond)
            return
        large = self._is_large(frame)
        if decision.request is not None:
            frame = self._rebuilt(body, header, decision.request)
        await self._forward(header, spec, info, frame, to_upstream, decision.merge, large)

    async def _settled(self, spec: ApiSpec, header: RequestHeader, decision: Decision) -> Decision:
        """Ask the upstream what ``decision.then`` needs and return the decision it makes.  No
        answer in time, or none at all, closes the connection: nothing is forwarded on a guess."""
        try:
            with trio.fail_after(self._request_timeout_s):
                decided = await decision.then(self.gw)
        except trio.TooSlowError:
            raise CloseConnection(f"{spec.name}: the upstream did not answer kgw's own question within "
                                  f"{self._request_timeout_s:g}s; nothing forwarded", "upstream") from None
        except UpstreamUnavailable as e:
            raise CloseConnection(f"{spec.name}: {e}; nothing forwarded", "upstream") from None
        except RefuseRequest as e:
            raise CloseConnection(f"{spec.name} refused: {e}", "refused") from None
        if decided.then is not None:
            raise RuntimeError(f"{spec.name}: a decision made after asking the upstream asks again")
        return decided

    async def _advertised(self):
        try:
            return await self.gw.advertised_versions()
        except UpstreamUnavailable as e:
            raise CloseConnection(str(e), "upstream") from None

    async def _answer_api_versions(self, header: RequestHeader, spec: ApiSpec, body: memoryview) -> None:
        advertised = await self._advertised()
        await self._answer_locally(header, spec, self.api_versions_answer(header, body, advertised))


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
    async def _forward(
        self, header: RequestHeader, spec: ApiSpec, info: RequestInfo, frame: memoryview, to_upstream: list,
        merge=None, large: bool = False,
    ) -> None:
        if self._upstream is None:
            if to_upstream:
                await self._send_upstream(to_upstream)
                to_upstream.clear()
            await self._connect_upstream()
        if info.expects_response:
            await self._wait_for_space()
            self._track(header, spec, info, merge).large = large and merge is not None
        to_upstream.append(frame)


    def _on_first_in_flight(self, slot: Slot) -> None:
        if self._upstream_scope is not None:
            self._upstream_scope.deadline = _trio_deadline(slot.deadline)

    async def _send_upstream(self, frames: list[memoryview]) -> None:
        if self.on_data_plane:  # a slow request on the data plane: the lane sends when it resumes
            self._lane_upstream.extend(frames)
            return
        assert self._upstream is not None
        data = frames[0] if len(frames) == 1 else b"".join(frames)
        try:
            await self._upstream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as e:
            raise CloseConnection(f"upstream connection lost while sending: {e}", "upstream") from None

    async def _connect_upstream(self) -> None:
        cluster = self.gw.cluster
        try:
            if self.node_id is None:
                stream = await cluster.connect_bootstrap()
            else:
                node = cluster.nodes.get(self.node_id)
                if node is None:
                    raise UpstreamUnavailable(f"upstream broker {self.node_id} is unknown")
                stream = await open_upstream(node.host, node.port, cluster.connect_timeout_s, cluster.security)
        except UpstreamUnavailable as e:
            raise CloseConnection(str(e), "upstream") from None
        self._upstream = stream = fast_stream(stream)
        if (self.gw.data_plane is not None and isinstance(stream, FastStream) and isinstance(self.stream, FastStream)
                and not self.on_data_plane):
            self._handoff = True  # _read_client returns after this request; the data plane reads the upstream
            return
        assert self._nursery is not None
        self._nursery.start_soon(self._read_upstream, stream)

    async def _read_upstream(self, stream: trio.SocketStream) -> None:
        """Pair upstream responses with requests in flight; one cancel scope carries the
        deadline of the oldest request and is replaced only when it fires."""
        decoder = FrameDecoder(_MAX_RESPONSE, trusted=True)
        in_flight = self.in_flight
        while True:
            with trio.CancelScope(deadline=_trio_deadline(in_flight[0].deadline) if in_flight else math.inf) as scope:
                self._upstream_scope = scope
                while True:
                    data = await _receive(stream, decoder)
                    if not data:
                        raise CloseConnection("upstream closed the connection", "upstream")
                    completed = self.complete_responses(decoder)
                    while self.heavy is not None:
                        await self.complete_heavy()
                        self.complete_responses(decoder)
                        completed = True
                    if completed:
                        scope.deadline = _trio_deadline(in_flight[0].deadline) if in_flight else math.inf
                        await self._flush()
            self._upstream_scope = None
            if in_flight and time.monotonic() >= in_flight[0].deadline:
                raise self.timeout_error(in_flight[0])

    async def complete_heavy(self) -> None:
        """Complete the large response :meth:`complete_responses` set aside, on a worker thread."""
        slot, frame = self.heavy
        self.heavy = None
        await trio.to_thread.run_sync(self._complete, slot, frame, limiter=self.gw.heavy_work_limiter)


    # ------------------------------------------------------------- responses
    async def _flush(self) -> None:
        """Send completed responses from the head of the queue, in request order."""
        if self._sending or self.on_data_plane:  # on the data plane the lane sends
            return
        self._sending = True
        pending = self.pending
        bytes_out = self.metrics.bytes_out.labels(self.listener_name)
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
