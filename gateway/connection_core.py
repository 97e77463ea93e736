"""The Trio-free core of one client connection: what both I/O drivers share.

Theory of operation
-------------------
A client connection is served by one of two drivers: :class:`gateway.connection.ClientConnection`
on Trio (TLS, authentication, everything that must ``await``) or :mod:`gateway.data_plane`'s
epoll thread (plain TCP once the upstream is open).  Both move bytes; neither decides
anything.  :class:`ConnectionCore` holds what they share, and touches no event loop:

* **request order**: every request that expects a response gets a :class:`Slot` appended
  to ``pending`` in arrival order, whether kgw answers it or the upstream does; drivers
  send completed slots from the head only, so responses leave in request order;
* **dispatch**: :meth:`dispatch_sync` parses the header, routes the (api, version) through
  the registry (ApiVersions answered on the spot, unadvertised versions closed), inspects,
  enforces and either queues the frame for the upstream or queues a local answer;
  it returns :data:`SLOW` before any side effect when the request needs ``await``;
* **back-pressure**: at most ``max_in_flight`` slots outstanding (drivers stop reading);
* **deadlines**: each forwarded slot carries a ``time.monotonic()`` deadline;
  :meth:`check_timeouts` enforces the authentication and idle limits;
* **completion**: :meth:`complete_responses` pairs upstream frames with the oldest slot
  in flight, rewriting and merging them (:meth:`_complete`);
* **close reasons**: every failure is a :class:`CloseConnection` with a metric label.
"""

from __future__ import annotations

import ipaddress
import math
import struct
import time
from collections import deque
from typing import Any

from authz.authorizer import AuthorizableRequestContext, AuthorizerNotReadyError
from authz.principal import ANONYMOUS
from gateway.logs import fields
from protocol.apis.api_versions import MalformedApiVersions, request_error
from protocol.apis.base import FORWARD, ApiSpec, Decision, RefuseRequest, RequestInfo
from protocol.apis.registry import REGISTRY
from protocol.auth_helper import AuthHelper
from protocol.codecs import CodecError
from protocol.framing import NEED_DATA, FrameDecoder, FrameError
from protocol.headers import HeaderError, RequestHeader, parse_request_header, read_uvarint, response_header

__all__ = ["CloseConnection", "ConnectionCore", "SLOW", "Slot", "next_request"]

_I32 = struct.Struct(">i")

SASL_KEYS = frozenset({17, 36})

#: :meth:`ClientConnection.dispatch_sync`: this request needs the async path
SLOW = object()
#: a route's inspector slot for ApiVersions: answered in dispatch_sync from the cached table
_API_VERSIONS = object()


class CloseConnection(Exception):
    """Ends this client connection; the message says why."""

    def __init__(self, reason: str, metric: str = "protocol", *, answered: bool = False) -> None:
        super().__init__(reason)
        self.metric = metric
        #: the client was sent an answer saying why (a refused login): let it read it (see
        #: ClientConnection._let_client_close_first)
        self.answered = answered


def next_request(decoder: FrameDecoder) -> memoryview | object:
    """The next whole request frame from the client, or NEED_DATA; a bad frame closes."""
    try:
        return decoder.next_frame()
    except FrameError as e:
        raise CloseConnection(str(e), "frame") from None


class Slot:
    __slots__ = ("header", "spec", "data", "sent_at", "deadline", "merge", "large")

    def __init__(self, header: RequestHeader, spec: ApiSpec) -> None:
        self.header = header
        self.spec = spec
        self.merge = None
        #: the request was large: its merge (proportional to the request) runs on a worker thread
        self.large = False
        self.data: bytes | memoryview | None = None
        self.sent_at = 0.0
        self.deadline = math.inf


class ConnectionCore:
    """Slots, order, dispatch, deadlines and completion of one client connection (no I/O).

    ``listener`` is the :class:`gateway.listeners.Listener` the client came in on (its
    ``gateway``, ``name``, ``node_map`` and ``security_protocol`` are used).
    """

    def __init__(self, listener: Any, stream: Any, peer: tuple[str, int], node_id: int | None) -> None:
        self.listener = listener
        self.gw = listener.gateway
        self.stream = stream
        self.peer = peer
        self.node_id = node_id  # None: the bootstrap port
        self.client_id: str | None = None
        self.client_address = ipaddress.ip_address(peer[0])
        self.principal = ANONYMOUS  # replaced by authentication on TLS/SASL listeners
        self.auth = None  # ConnectionAuth, set when the connection starts
        self.pending: deque[Slot] = deque()
        self._queued: list[memoryview] = []
        self._enforce_state: dict = {}  # per-connection state of API enforcements (Fetch sessions)
        self._no_authorizer = AuthHelper(None, None, self._enforce_state, self.gw.topic_ids,
                                         self.gw.enforcement_state)
        self._routes: dict[int, object] = {}  # dispatch_sync's per-(api, version) lookups ...
        self._routes_for = None  # ... valid for this advertised-versions table
        self.in_flight: deque[Slot] = deque()  # forwarded, awaiting the upstream
        self._upstream: Any = None  # the upstream stream, set by the driver
        self.max_in_flight = self.gw.config.limits.max_in_flight_per_connection
        self._request_timeout_s = self.gw.config.upstream.request_timeout_ms / 1000.0
        self._cluster = self.gw.cluster
        self.metrics = self.gw.metrics
        self.listener_name = listener.name
        self._handoff = False  # the upstream is open and both sockets are plain TCP: go to the data plane
        #: the data plane's Lane while it serves this connection: it owns both sockets then, and
        #: the Trio driver leaves sending and flushing to it (see :attr:`on_data_plane`)
        self.lane: Any = None
        self._lane_upstream: list = []  # frames the slow path queued for the upstream while on the data plane
        #: on the data plane: request counters incremented once the request went upstream (its
        #: response is read in a later event, so it is counted before the client can see it)
        self._deferred: list | None = None
        limits = self.gw.config.limits
        self._limits = limits
        self._decoder: FrameDecoder | None = None
        #: time.monotonic() of the last bytes read from the client (idle timeout), and the
        #: moment authentication must be complete by
        self.last_read = time.monotonic()
        self._auth_deadline = self.last_read + limits.authentication_timeout_ms / 1000.0
        self._idle_s = limits.connections_max_idle_ms / 1000.0
        self._offload_request = limits.offload_request_bytes
        self._offload_produce = max(limits.offload_produce_bytes, limits.offload_request_bytes)
        self._offload_response = limits.offload_response_bytes
        #: a large upstream response taken off the decoder, to be completed on a worker thread
        self.heavy: tuple | None = None
        #: a drain began (gateway stopping): read no new request, answer what is in flight, close
        self.draining = False
        #: bytes of answers (local or upstream) not yet written to the client; above
        #: ``limits.max_unsent_bytes_per_connection`` neither driver reads the client (Kafka mutes a
        #: channel while its response is unsent), so a client that never reads costs a bounded buffer
        self.unsent = 0
        self.max_unsent = limits.max_unsent_bytes_per_connection
        #: a request :meth:`dispatch_sync` enforced whose decision must first ask the upstream
        #: (``Decision.then``): (frame, header, spec, info, body, decision)
        self._awaiting: tuple | None = None

    @property
    def on_data_plane(self) -> bool:
        """Whether the data-plane thread owns this connection's sockets now."""
        return self.lane is not None

    def _on_first_in_flight(self, slot: Slot) -> None:
        """A driver hook: ``slot`` is now the oldest request in flight (its deadline applies)."""

    def log_fields(self, header: RequestHeader | None = None) -> dict:
        return fields(
            listener=self.listener_name,
            client=f"{self.peer[0]}:{self.peer[1]}",
            client_id=self.client_id,
            correlation_id=header.correlation_id if header else None,
            api=REGISTRY[header.api_key].name if header and header.api_key in REGISTRY else None,
        )

    @property
    def authenticated(self) -> bool:
        session = self.auth.session
        return session is None or session.authenticated

    def _read_deadline(self) -> float:
        """time.monotonic() by which the client must send something: the authentication
        deadline until it has authenticated, then the idle deadline."""
        if not self.authenticated:
            return self._auth_deadline
        return self.last_read + self._idle_s

    def check_timeouts(self, now: float) -> None:
        """Raise :class:`CloseConnection` if the client took too long to authenticate, or has
        been idle (nothing in flight, nothing sent) for ``connections_max_idle_ms``.  Trio
        path and data plane alike."""
        if not self.authenticated:
            if now >= self._auth_deadline:
                raise CloseConnection(
                    f"authentication not completed within {self._limits.authentication_timeout_ms} ms "
                    "(limits.authentication_timeout_ms)", "authentication_timeout")
        elif now >= self.last_read + self._idle_s:
            if self.pending:  # waiting for answers is not idleness
                self.last_read = now
                return
            raise CloseConnection(f"idle for {self._limits.connections_max_idle_ms} ms "
                                  "(limits.connections_max_idle_ms)", "idle")

    def _new_decoder(self) -> FrameDecoder:
        """Before a SASL client has authenticated, frames are capped at Kafka's
        sasl.server.max.receive.size (512 KiB by default), not socket.request.max.bytes."""
        if self.authenticated:
            return FrameDecoder(self._limits.max_frame_bytes)
        return FrameDecoder(self._limits.sasl_max_receive_bytes, "limits.sasl_max_receive_bytes")

    def _authenticated_now(self) -> None:
        """The SASL exchange succeeded: the full frame limit applies from the next frame on."""
        if self._decoder is not None:
            self._decoder.limit = self._limits.max_frame_bytes
            self._decoder.limit_name = "socket.request.max.bytes"

    def dispatch_sync(self, frame: memoryview, to_upstream) -> object:
        """Handle a request that needs no ``await``: forwarded (its frame appended to
        ``to_upstream``) or answered from the enforcement's decision.  Returns False when
        forwarded, True when a local answer was queued (the caller flushes), or
        :data:`SLOW` before any side effect when the request needs :meth:`_on_request_slow`.
        Runs on Trio or on the data-plane thread; it must not touch Trio."""
        session = self.auth.session
        if session is not None and (session.expects_raw_token or not session.authenticated):
            return SLOW
        if len(frame) > self._offload_request and self._is_large(frame):
            return SLOW  # inspected and authorized on a worker thread (_on_request_slow)
        body = frame[4:]
        try:
            header = parse_request_header(body)
        except HeaderError:
            return SLOW
        advertised = self.gw.advertised_cached
        if advertised is None or len(self.pending) >= self.max_in_flight:
            return SLOW
        if self._upstream is None and header.api_key != 18:  # ApiVersions needs no upstream
            return SLOW
        if advertised is not self._routes_for:
            self._routes = {}
            self._routes_for = advertised
        key = header.api_key * 65536 + header.api_version  # unique for int16 versions
        route = self._routes.get(key)
        if route is None:
            route = self._routes[key] = self._route(header.api_key, header.api_version, advertised)
        if route is SLOW:
            return SLOW
        spec, counter, inspect = route
        if inspect is _API_VERSIONS:  # answered here, on whichever thread runs this: no pause
            self.client_id = header.client_id
            if self._deferred is None:
                counter.inc()
            else:
                self._deferred.append(counter)
            self.queue_answer(header, spec, self.api_versions_answer(header, body, advertised))
            return True
        self.client_id = header.client_id
        if self._deferred is None:
            counter.inc()
        else:
            self._deferred.append(counter)
        if inspect is None:
            raise self._unsupported(spec, header, advertised.get(header.api_key))
        info = self._inspected(spec, inspect, header, body)
        decision = self._enforce(spec, self._auth_helper(header), header, body, info)
        if decision.then is not None:
            # enforced, but it must ask the upstream before it decides: the driver continues it
            # on Trio (:meth:`take_awaiting`), the lane paused meanwhile
            self._awaiting = (frame, header, spec, info, body, decision)
            return SLOW
        if decision.close is not None:
            raise CloseConnection(decision.close, "denied")
        if decision.respond is not None:
            self.queue_answer(header, spec, decision.respond)
            return True
        if decision.request is not None:
            frame = self._rebuilt(body, header, decision.request)
        if info.expects_response:
            self._track(header, spec, info, decision.merge)
        to_upstream.append(frame)
        return False

    def take_awaiting(self, frame: memoryview) -> tuple | None:
        """The request :meth:`dispatch_sync` left to be continued for ``frame`` (counted and
        enforced already), or None."""
        awaiting, self._awaiting = self._awaiting, None
        if awaiting is not None and awaiting[0] is not frame:
            raise RuntimeError("a continued request is not the frame the driver passed back")
        return awaiting

    def _is_large(self, frame: memoryview) -> bool:
        """Whether a request is inspected off the shared loops (its size above the limit of
        its API; Produce has its own, larger limit)."""
        size = len(frame)
        if size <= self._offload_request:
            return False
        if size <= self._offload_produce and len(frame) >= 6 and frame[4] == 0 and frame[5] == 0:
            return False  # a Produce request (api key 0) within offload_produce_bytes
        return True

    def api_versions_answer(self, header: RequestHeader, body: memoryview, advertised) -> bytes:
        """The answer to an ApiVersions request: Kafka's INVALID_REQUEST for a KIP-511 client
        software name or version that breaks the rule, else the advertised table."""
        try:
            invalid = request_error(header.api_version, body[header.size:])
        except MalformedApiVersions as e:
            raise CloseConnection(f"malformed ApiVersions v{header.api_version} request: {e}", "decode") from None
        if invalid is not None:
            return invalid
        return self._api_versions_body(header.api_version, advertised)

    def _api_versions_body(self, version: int, advertised) -> bytes:
        """The ApiVersions answer for ``version``, built once per advertised table."""
        return self.gw.api_versions_answers.body(version, advertised, self.gw.cluster.api_versions_response)

    def _route(self, api_key: int, api_version: int, advertised) -> object:
        """What :meth:`dispatch_sync` needs of one API version: SLOW, or (spec, request
        counter, inspector), the inspector None for a version kgw does not advertise and
        :data:`_API_VERSIONS` for ApiVersions, answered on the spot."""
        spec = REGISTRY.get(api_key)
        if spec is not None and api_key == 18:
            return spec, self.metrics.request(self.listener_name, spec.name), _API_VERSIONS
        if spec is None or spec.answered_locally or api_key in SASL_KEYS:
            return SLOW
        counter = self.metrics.request(self.listener_name, spec.name)
        allowed = advertised.get(api_key)
        if allowed is None or not allowed.min <= api_version <= allowed.max:
            return spec, counter, None
        inspect = spec.peek if spec.peek is not None and self.gw.authorizer is None else spec.inspect
        return spec, counter, inspect

    def _unsupported(self, spec: ApiSpec, header: RequestHeader, allowed) -> CloseConnection:
        return CloseConnection(
            f"{spec.name} v{header.api_version} is not supported through kgw "
            f"(advertised: {f'v{allowed.min}-v{allowed.max}' if allowed else 'none'})",
            "unsupported_version",
        )

    @staticmethod
    def _inspected(spec: ApiSpec, inspect, header: RequestHeader, body: memoryview) -> RequestInfo:
        try:
            return inspect(header, body)
        except CodecError as e:
            raise CloseConnection(f"malformed {spec.name} v{header.api_version} request: {e}", "decode") from None

    @staticmethod
    def _rebuilt(body: memoryview, header: RequestHeader, request: bytes) -> memoryview:
        head = body[: header.size]
        return memoryview(_I32.pack(len(head) + len(request)) + bytes(head) + request)

    def _inspect_and_enforce(self, spec: ApiSpec, header: RequestHeader, body: memoryview,
                             auth: AuthHelper) -> tuple[RequestInfo, Decision]:
        """Runs on a worker thread for a large request (the connection's Trio task waits)."""
        inspect = spec.peek if spec.peek is not None and self.gw.authorizer is None else spec.inspect
        info = self._inspected(spec, inspect, header, body)
        return info, self._enforce(spec, auth, header, body, info)

    def _auth_helper(self, header: RequestHeader) -> AuthHelper:
        authorizer = self.gw.authorizer
        if authorizer is None:
            return self._no_authorizer
        context = AuthorizableRequestContext(
            self.listener_name, self.listener.security_protocol, self.principal, self.client_address,
            header.api_key, header.api_version, header.client_id, header.correlation_id,
        )
        return AuthHelper(authorizer, context, self._enforce_state, self.gw.topic_ids, self.gw.enforcement_state)

    def _enforce(self, spec: ApiSpec, auth: AuthHelper, header: RequestHeader, body: memoryview,
                 info: RequestInfo) -> Decision:
        if spec.enforce is None:
            if auth.enabled:
                raise CloseConnection(f"{spec.name} has no authorization mapping; refused", "unmapped_api")
            return FORWARD
        try:
            return spec.enforce(auth, header, body, info)
        except RefuseRequest as e:
            raise CloseConnection(f"{spec.name} refused: {e}", "refused") from None
        except (TypeError, AttributeError, ValueError) as e:
            # kio decodes some shapes no broker would accept (a null array where the schema has
            # none): such a request is malformed, closed as a broker closes on a parse error
            raise CloseConnection(f"malformed {spec.name} v{header.api_version} request: "
                                  f"{type(e).__name__}: {e}", "decode") from None
        except AuthorizerNotReadyError:
            raise CloseConnection("authorizer not ready", "authorizer") from None

    def queue_answer(self, header: RequestHeader | None, spec: ApiSpec | None, body: bytes) -> None:
        """A response kgw built itself takes its place in the response order.  ``header`` None:
        ``body`` is a bare frame body (a SASL token after SaslHandshake v0)."""
        slot = Slot(header, spec)
        if header is None:
            slot.data = _I32.pack(len(body)) + body
        else:
            head = response_header(header.api_key, header.flexible, header.correlation_id)
            slot.data = _I32.pack(len(head) + len(body)) + head + body
        self.unsent += len(slot.data)
        self.pending.append(slot)

    @property
    def muted(self) -> bool:
        """Whether the client must not be read: too many answers wait for it to read them."""
        return self.unsent >= self.max_unsent

    def _track(self, header: RequestHeader, spec: ApiSpec, info: RequestInfo, merge) -> Slot:
        """A forwarded request that expects a response: its place in the response order."""
        slot = Slot(header, spec)
        slot.merge = merge
        now = time.monotonic()
        slot.sent_at = now
        slot.deadline = now + self._request_timeout_s + info.broker_wait_s
        self.pending.append(slot)
        self.in_flight.append(slot)
        if len(self.in_flight) == 1:
            self._on_first_in_flight(slot)
        return slot

    def timeout_error(self, slot: Slot) -> CloseConnection:
        """The close of a connection whose oldest request the upstream did not answer in time
        (counted and, once per episode, logged by the cluster: readiness follows it)."""
        self._cluster.request_timed_out(slot.spec.name, slot.deadline - slot.sent_at)
        return CloseConnection(
            f"upstream did not answer {slot.spec.name} (correlation id "
            f"{slot.header.correlation_id}) within {slot.deadline - slot.sent_at:.1f}s",
            "timeout",
        )

    def complete_responses(self, decoder: FrameDecoder) -> bool:
        """Pair every whole upstream response in ``decoder`` with the oldest request in flight
        (a broker answers in order); True if any completed.  Trio path and data plane alike."""
        in_flight = self.in_flight
        completed = False
        while True:
            try:
                frame = decoder.next_frame()
            except FrameError as e:
                raise CloseConnection(f"bad frame from upstream: {e}", "upstream") from None
            if frame is NEED_DATA:
                if completed and self._cluster.timing_out_since is not None:
                    self._cluster.answered()
                return completed
            if not in_flight:
                raise CloseConnection("upstream sent a response nobody asked for", "upstream")
            slot = in_flight.popleft()
            if slot.large or len(frame) > self._offload_response and (
                    slot.merge is not None or (slot.spec.rewrite_response is not None and slot.spec.api_key not in (0, 1))):
                self.heavy = (slot, frame)  # the caller completes it on a worker thread, then goes on
                return completed
            self._complete(slot, frame)
            completed = True

    def _complete(self, slot: Slot, frame: memoryview) -> None:
        header = slot.header
        (correlation_id,) = _I32.unpack_from(frame, 4)
        if correlation_id != header.correlation_id:
            raise CloseConnection(
                f"upstream answered correlation id {correlation_id}, expected {header.correlation_id}", "upstream"
            )
        # Observed before the response can reach the client: whoever saw the response may
        # rely on /metrics counting it.
        self.metrics.latency(self.listener_name, slot.spec.name).observe(time.monotonic() - slot.sent_at)
        rewrite = slot.spec.rewrite_response
        if rewrite is None and slot.merge is None:
            slot.data = frame
            self.unsent += len(frame)
            return
        off = 8
        if header.flexible:
            count, off = read_uvarint(frame, off)
            for _ in range(count):
                _t, off = read_uvarint(frame, off)
                size, off = read_uvarint(frame, off)
                off += size
        try:
            body = None if rewrite is None else rewrite(header.api_version, frame, off, self.listener.node_map)
            if slot.merge is not None:  # a merge returning None leaves the response as it is
                merged = slot.merge(frame, off) if body is None else slot.merge(body, 0)
                body = merged if merged is not None else body
        except CodecError as e:
            raise CloseConnection(f"cannot rewrite upstream {slot.spec.name} response: {e}", "upstream") from None
        if body is None:
            slot.data = frame
        else:
            head = bytes(frame[4:off])
            slot.data = _I32.pack(len(head) + len(body)) + head + body
        self.unsent += len(slot.data)
