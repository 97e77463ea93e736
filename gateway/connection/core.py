"""The event-loop-free core of one client connection: what both I/O drivers share.

Theory of operation
-------------------
A client connection is served by one of two drivers: :class:`gateway.connection.client.ClientConnection`
on Trio (TLS, authentication, everything that must ``await``) or :mod:`gateway.connection.data_plane`'s
epoll thread (plain TCP once the upstream is open).  Both move bytes; neither decides
anything.  :class:`ConnectionCore` holds what they share, and touches no event loop:

* **request order**: every request that expects a response gets a :class:`Slot` appended
  to ``pending`` in arrival order, whether kgw answers it or the upstream does; drivers
  send completed slots from the head only, so responses leave in request order;
* **dispatch**: :meth:`ConnectionCore.dispatch` parses the header, routes the (api, version)
  through the registry (ApiVersions answered on the spot, unadvertised versions closed),
  gates requests before login, inspects, enforces and either queues the frame for the
  upstream or queues a local answer.  Where it must wait for something (the upstream's
  versions, a local answer, a question to the upstream, a worker thread, room, the upstream
  connection, a login step) it returns an :class:`Await` saying what, with the continuation:
  the drivers only perform those and move bytes, so a request is classified and enforced in
  this one place;
* **back-pressure**: at most ``max_in_flight`` slots outstanding (drivers stop reading);
* **deadlines**: each forwarded slot carries a ``time.monotonic()`` deadline;
  :meth:`check_timeouts` enforces the authentication and idle limits;
* **completion**: :meth:`complete_responses` pairs upstream frames with the oldest slot
  in flight, rewriting and merging them (:meth:`_complete`);
* **close reasons**: every failure is a :class:`CloseConnection` with a metric label.
"""

from __future__ import annotations

import functools
import ipaddress
import math
import struct
import time
from collections import deque
from typing import Any

from authz.acl import AclOperation, ResourceType
from authz.authorizer import AuthorizableRequestContext, AuthorizerNotReadyError, DecisionMemo
from authz.principal import ANONYMOUS
from gateway.logs import fields
from gateway.auth.sasl import SaslState, SaslStateError
from protocol.apis.api_versions import MalformedApiVersions, client_software, request_error
from protocol.apis.base import FORWARD, ApiSpec, Decision, RefuseRequest, RequestInfo
from protocol.apis.registry import REGISTRY
from protocol.auth_helper import AuthHelper, literal_actions
from protocol.codecs import CodecError
from protocol.framing import NEED_DATA, FrameDecoder, FrameError
from protocol.headers import HeaderError, RequestHeader, parse_request_header, read_uvarint, response_header
from protocol.throttle import with_throttle_time

__all__ = ["Await", "CloseConnection", "ConnectionCore", "NeedLocalAnswer", "NeedLogin", "NeedRawToken", "NeedSpace",
           "NeedThrottle", "NeedUpstream", "NeedUpstreamAnswer", "NeedVersions", "NeedWorker", "Slot", "next_request"]

_I32 = struct.Struct(">i")

#: a client host's address, parsed once for the many connections it opens (immutable values)
_client_address = functools.lru_cache(maxsize=4096)(ipaddress.ip_address)

SASL_KEYS = frozenset({17, 36})

#: route kinds (:meth:`ConnectionCore._route`)
_UNKNOWN = "unknown api"
_API_VERSIONS = "ApiVersions"
_SASL = "SASL"
_PENDING = "versions not known yet"
_UNSUPPORTED = "version not advertised"
_LOCAL = "answered by kgw"
_FORWARDED = "forwarded"


class Await:
    """What a driver must await before the core can go on with a request: the driver
    performs it and calls ``then(result, to_upstream)``, which returns the next outcome
    (False, True or another Await).  The kinds below are all a driver has to know."""

    __slots__ = ("then",)

    def __init__(self, then) -> None:
        self.then = then


class NeedVersions(Await):
    """The upstream's API versions (``Gateway.advertised_versions()``); ``then`` takes the table."""

    __slots__ = ()


class NeedUpstream(Await):
    """The connection to the upstream broker, opened (what is queued for it sent first)."""

    __slots__ = ()


class NeedSpace(Await):
    """Room in the response queue: fewer than ``max_in_flight`` requests outstanding."""

    __slots__ = ()


class NeedWorker(Await):
    """``job()`` run on a worker thread (a large request's inspection): ``then`` takes its result."""

    __slots__ = ("job",)

    def __init__(self, job, then) -> None:
        super().__init__(then)
        self.job = job


class NeedLocalAnswer(Await):
    """``await spec.answer(services, auth, header, info)`` (the APIs kgw answers itself), with
    what is queued for the upstream sent first; an exception it raises becomes
    :meth:`ConnectionCore.answer_refused`; ``then`` takes the answer."""

    __slots__ = ("spec", "auth", "header", "info")

    def __init__(self, spec: ApiSpec, auth: AuthHelper, header: RequestHeader, info: RequestInfo, then) -> None:
        super().__init__(then)
        self.spec, self.auth, self.header, self.info = spec, auth, header, info


class NeedUpstreamAnswer(Await):
    """``await question(services)``: a decision that must ask the upstream first
    (``Decision.then``), within the request timeout; ``then`` takes the decision it makes."""

    __slots__ = ("spec", "question")

    def __init__(self, spec: ApiSpec, question, then) -> None:
        super().__init__(then)
        self.spec, self.question = spec, question


class NeedThrottle(Await):
    """The client is over a quota (KIP-219): read and dispatch nothing more of it until
    ``until`` (``time.monotonic()``), what is queued for the upstream sent first; ``then``
    dispatches the request that waited."""

    __slots__ = ("until",)

    def __init__(self, until: float, then) -> None:
        super().__init__(then)
        self.until = until


class NeedLogin(Await):
    """A SaslHandshake or SaslAuthenticate: the driver's SASL step answers it (a password hash
    on a worker thread, Kafka's delay before a refusal); nothing follows."""

    __slots__ = ("session", "header", "spec", "body")

    def __init__(self, session, header: RequestHeader, spec: ApiSpec, body: memoryview) -> None:
        super().__init__(None)
        self.session, self.header, self.spec, self.body = session, header, spec, body


class NeedRawToken(Await):
    """A bare SASL token after SaslHandshake v0, for the driver's SASL step; nothing follows."""

    __slots__ = ("session", "token")

    def __init__(self, session, token: bytes) -> None:
        super().__init__(None)
        self.session, self.token = session, token


class CloseConnection(Exception):
    """Ends this client connection; the message says why."""

    def __init__(self, reason: str, metric: str = "protocol", *, answered: bool = False) -> None:
        super().__init__(reason)
        self.metric = metric
        #: the client was sent an answer saying why (a refused login): the driver half-closes
        #: and lets it read that answer before closing (``fast_io.half_close``)
        self.answered = answered


def next_request(decoder: FrameDecoder) -> memoryview | object:
    """The next whole request frame from the client, or NEED_DATA; a bad frame closes."""
    try:
        return decoder.next_frame()
    except FrameError as e:
        raise CloseConnection(str(e), "frame") from None


class Slot:
    __slots__ = ("header", "spec", "data", "sent_at", "deadline", "merge", "large", "quota", "busy", "throttle")

    def __init__(self, header: RequestHeader, spec: ApiSpec, merge: Any = None, sent_at: float = 0.0,
                 deadline: float = math.inf) -> None:
        self.header = header
        self.spec = spec
        self.merge = merge
        #: the connection's quotas when some client quota is set (then ``busy``: seconds kgw
        #: spent dispatching it, ``throttle``: ms the request itself put the client over a quota)
        self.quota = None
        #: the request was large: its merge (proportional to the request) runs on a worker thread
        self.large = False
        self.data: bytes | memoryview | None = None
        self.sent_at = sent_at
        self.deadline = deadline


def _again(fn: Any, *args: Any) -> Any:
    """The continuation of a step that only waited (for room, for the upstream connection):
    ``fn(*args, to_upstream)`` again, the awaited result ignored.  (Built here, not as a
    lambda in ``fn``: a closure there would make its variables cells on every call.)"""
    return lambda _result, to_upstream: fn(*args, to_upstream)


class ConnectionCore:
    """Slots, order, dispatch, deadlines and completion of one client connection (no I/O).

    ``listener`` is the :class:`gateway.process.listeners.Listener` the client came in on (its
    ``gateway``, ``name``, ``node_map`` and ``security_protocol`` are used).
    """

    def __init__(self, listener: Any, stream: Any, peer: tuple[str, int], node_id: int | None) -> None:
        self.listener = listener
        self.gw = listener.gateway
        self.stream = stream
        self.peer = peer
        self.node_id = node_id  # None: the bootstrap port
        self.client_id: str | None = None
        self.client_address = _client_address(peer[0])
        self.principal = ANONYMOUS  # replaced by authentication on TLS/SASL listeners
        self.auth = None  # ConnectionAuth, set when the connection starts
        self.pending: deque[Slot] = deque()
        self._queued: list[memoryview] = []
        self._enforce_state: dict = {}  # per-connection state of API enforcements (Fetch sessions)
        #: the connection's request context, copied for each request that needs it (:meth:`_auth_helper`),
        #: and the authorizer's memo of what it allowed this context (both made again when the principal changes)
        self._context: AuthorizableRequestContext | None = None
        self._memo: DecisionMemo | None = None
        self._no_authorizer = AuthHelper(None, None, self._enforce_state, self.gw.topic_ids,
                                         self.gw.enforcement_state, self.gw.change_log)
        self._routes: dict[int, object] = {}  # dispatch's per-(api, version) lookups ...
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
        limits = self.gw.config.limits
        self._limits = limits
        self._decoder: FrameDecoder | None = None
        #: time.monotonic() of the last bytes read from the client (idle timeout), and the
        #: moment authentication must be complete by
        self.last_read = time.monotonic()
        self._auth_deadline = self.last_read + limits.authentication_timeout_ms / 1000.0
        self.idle_s = limits.connections_max_idle_ms / 1000.0
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
        #: client quotas (gateway/connection/quotas.py): the image's quota map (empty: nothing is
        #: measured), this connection's resolved quotas, and until when it is throttled
        self._quotas = self.gw.quotas
        self._quota_map = self._quotas.image.quotas if self._quotas.image is not None else {}
        self.quota = None
        self.throttled_until = 0.0
        self._dispatch_started = 0.0

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
        return self.last_read + self.idle_s

    def check_timeouts(self, now: float) -> None:
        """Raise :class:`CloseConnection` if the client took too long to authenticate, or has
        been idle (nothing in flight, nothing sent) for ``connections_max_idle_ms``.  Trio
        path and data plane alike."""
        if not self.authenticated:
            if now >= self._auth_deadline:
                raise CloseConnection(
                    f"authentication not completed within {self._limits.authentication_timeout_ms} ms "
                    "(limits.authentication_timeout_ms)", "authentication_timeout")
        elif now >= self.last_read + self.idle_s:
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

    # ------------------------------------------------------------------ dispatch
    #
    # One dispatcher for both drivers.  :meth:`dispatch` classifies and enforces a request
    # synchronously and returns False (forwarded: the frame is in ``to_upstream``), True (an
    # answer was queued: the driver flushes) or an :class:`Await` naming what the driver must
    # await first; the driver performs it and calls ``step.then(result, to_upstream)``, which
    # returns the next outcome.  Every decision is taken here, once; the drivers only do I/O.

    def dispatch(self, frame: memoryview, to_upstream: list) -> bool | Await:
        """Handle one request frame (Trio or the data-plane thread; touches no event loop)."""
        if self._quota_map:  # some client quota is set: throttled and measured
            return self._dispatch_quoted(frame, to_upstream)
        return self._dispatch(frame, to_upstream)

    def _dispatch_quoted(self, frame: memoryview, to_upstream: list) -> bool | Await:
        """:meth:`dispatch` under client quotas: nothing is read while the connection is
        throttled, and the time spent dispatching is measured (for :meth:`_track`)."""
        if self.throttled_until:
            if time.monotonic() < self.throttled_until:  # both drivers go on reading the upstream's answers
                return NeedThrottle(self.throttled_until, lambda _r, out: self._dispatch_quoted(frame, out))
            self.throttled_until = 0.0
        self._dispatch_started = time.perf_counter()
        try:
            return self._dispatch(frame, to_upstream)
        finally:
            self._dispatch_started = 0.0

    def _measure(self, slot: Slot, size: int) -> None:
        """Give a forwarded request's slot the connection's quotas and the time kgw spent
        dispatching it (0 when it went on after an await: only kgw's own work counts), and
        record its bytes (``size``: the frame's); over a quota, the connection is throttled
        from the next request on."""
        quota = self.quota = self._quotas.for_connection(self.principal.name, self.client_id, self.quota)
        if quota.produce or quota.fetch or quota.request:
            started = self._dispatch_started
            slot.quota = quota
            slot.busy = time.perf_counter() - started if started else 0.0
            # the request's bytes as Kafka counts them: without the size prefix
            slot.throttle = throttle = quota.on_request(slot.header.api_key, size - 4)
            if throttle:
                self.throttled_until = max(self.throttled_until, time.monotonic() + throttle / 1000.0)

    def _dispatch(self, frame: memoryview, to_upstream: list) -> bool | Await:
        session = self.auth.session
        if session is not None and session.expects_raw_token:
            return NeedRawToken(session, bytes(frame[4:]))
        body = frame[4:]
        try:
            header = parse_request_header(body)
        except HeaderError as e:
            raise CloseConnection(f"unparseable request header: {e}", "header") from None
        advertised = self.gw.advertised_cached
        if advertised is not self._routes_for:
            self._routes = {}
            self._routes_for = advertised
        key = header.api_key * 65536 + header.api_version  # unique for int16 versions
        route = self._routes.get(key)
        if route is None:
            route = self._routes[key] = self._route(header.api_key, header.api_version, advertised)
        kind, spec, counter, inspect, sole = route
        self.client_id = header.client_id
        if kind is _UNKNOWN:
            raise CloseConnection(f"unknown api key {header.api_key}", "unknown_api")
        lane = self.lane
        if lane is None:
            counter.inc()
        else:  # on the data plane: counted once written, before the client can see the answer
            lane.deferred.append(counter)
        if session is not None and session.expires_at is not None and header.api_key not in (17, 36) and (
                session.expired(time.monotonic())):
            raise CloseConnection(f"SASL session of {session.principal} expired: it did not re-authenticate "
                                  f"(KIP-368) within its session lifetime of {session.lifetime_ms} ms",
                                  "authentication")
        if session is not None and not session.authenticated:
            try:
                session.gate(header.api_key)
            except SaslStateError as e:
                raise CloseConnection(f"request before SASL authentication completed: {e}",
                                      "unauthenticated") from None
            if header.api_key == 18:  # named in authentication failures
                session.client_software = client_software(header.api_version, body[header.size:])
        if kind is _SASL:
            return NeedLogin(session, header, spec, body)
        if advertised is None:  # the upstream's versions are not known yet
            return self._need_versions(frame, header, spec, body)
        if kind is not _FORWARDED or (len(frame) > self._offload_request and self._is_large(frame)):
            return self._dispatch_known(frame, header, spec, body, advertised, to_upstream, route)
        # The common case, in line (every call saved here is saved on every request): a
        # forwarded request, inspected and enforced on this thread.
        info = self._inspected(spec, inspect, header, body)
        memo = self._memo
        if (sole is not None and memo is not None and self._context.principal is self.principal
                and (action := sole(header, info, self._enforce_state, self.gw.topic_ids)) is not None
                and memo.allows(action, None if lane is None else lane.deferred)):
            decision = FORWARD  # the usual request's whole enforcement, an allowance the memo holds
        else:
            decision = self._enforce(spec, self._auth_helper(header), header, body, info)
        if decision is not FORWARD or self._upstream is None:
            return self._decided(header, spec, info, body, frame, decision, to_upstream, False)
        if info.expects_response:
            if len(self.pending) >= self.max_in_flight and lane is None:
                return self._forward(header, spec, info, frame, None, False, to_upstream)  # awaits space
            self._track(header, spec, info, None, len(frame))
        to_upstream.append(frame)
        return False

    # (The continuations are built in methods of their own: a closure in dispatch or
    # _dispatch_known would turn the variables it captures into cells on every request.)

    def _need_versions(self, frame: memoryview, header: RequestHeader, spec: ApiSpec, body: memoryview) -> Await:
        def known(advertised: Any, to_upstream: list) -> bool | Await:
            route = self._route(header.api_key, header.api_version, advertised)
            return self._dispatch_known(frame, header, spec, body, advertised, to_upstream, route)

        return NeedVersions(known)

    def _dispatch_known(self, frame: memoryview, header: RequestHeader, spec: ApiSpec, body: memoryview,
                        advertised, to_upstream: list, route: tuple) -> bool | Await:
        kind = route[0]
        if kind is _API_VERSIONS:  # any version, answered from the table (KIP-511)
            return self._answer(header, spec, self.api_versions_answer(header, body, advertised))
        if kind is _UNSUPPORTED:
            raise self._unsupported(spec, header, advertised.get(header.api_key))
        auth = self._auth_helper(header, kind is _LOCAL)
        large = len(frame) > self._offload_request and self._is_large(frame)
        if large:  # inspected (and authorized) on a worker thread, off the shared loops
            return self._offloaded(kind is _LOCAL, frame, header, spec, body, auth)
        if kind is _LOCAL:
            info = self._inspected(spec, spec.inspect, header, body)
            return self._local_answer(frame, header, spec, body, auth, info, False)
        info = self._inspected(spec, route[3], header, body)
        return self._decided(header, spec, info, body, frame, self._enforce(spec, auth, header, body, info),
                             to_upstream, False)

    def _offloaded(self, local: bool, frame: memoryview, header: RequestHeader, spec: ApiSpec, body: memoryview,
                   auth: AuthHelper) -> NeedWorker:
        if local:
            return NeedWorker(lambda: self._inspected(spec, spec.inspect, header, body),
                              lambda info, _out: self._local_answer(frame, header, spec, body, auth, info, True))
        return NeedWorker(lambda: self._inspect_and_enforce(spec, header, body, auth),
                          lambda done, out: self._decided(header, spec, done[0], body, frame, done[1], out, True))

    def _local_answer(self, frame: memoryview, header: RequestHeader, spec: ApiSpec, body: memoryview,
                      auth: AuthHelper, info: RequestInfo, large: bool) -> NeedLocalAnswer:
        """An API kgw answers itself: the driver awaits its answer, bytes or a decision (part
        answered here, part forwarded: the config APIs)."""
        def answered(answer: Any, to_upstream: list) -> bool | Await:
            if isinstance(answer, Decision):
                return self._decided(header, spec, info, body, frame, answer, to_upstream, large)
            return self._answer(header, spec, answer)

        return NeedLocalAnswer(spec, auth, header, info, answered)

    def _decided(self, header: RequestHeader, spec: ApiSpec, info: RequestInfo, body: memoryview,
                 frame: memoryview, decision: Decision, to_upstream: list, large: bool) -> bool | Await:
        """Carry out an enforcement's decision."""
        if decision.then is not None:  # it must ask the upstream before it decides
            return self._ask_upstream(header, spec, info, body, frame, decision, large)
        if decision.close is not None:
            raise CloseConnection(decision.close, "denied")
        if decision.respond is not None:
            return self._answer(header, spec, decision.respond)
        if decision.request is not None:
            frame = self._rebuilt(body, header, decision.request)
        return self._forward(header, spec, info, frame, decision.merge, large, to_upstream)

    def _ask_upstream(self, header: RequestHeader, spec: ApiSpec, info: RequestInfo, body: memoryview,
                      frame: memoryview, decision: Decision, large: bool) -> NeedUpstreamAnswer:
        assert decision.then is not None
        return NeedUpstreamAnswer(spec, decision.then, lambda decided, out: self._decided(
            header, spec, info, body, frame, decided, out, large))

    def _forward(self, header: RequestHeader, spec: ApiSpec, info: RequestInfo, frame: memoryview, merge,
                 large: bool, to_upstream: list) -> bool | Await:
        if self._upstream is None:
            return NeedUpstream(_again(self._forward, header, spec, info, frame, merge, large))
        if info.expects_response:
            if len(self.pending) >= self.max_in_flight and self.lane is None:
                return NeedSpace(_again(self._forward, header, spec, info, frame, merge, large))
            self._track(header, spec, info, merge, len(frame), large and merge is not None)
        to_upstream.append(frame)
        return False

    def _answer(self, header: RequestHeader, spec: ApiSpec, body: bytes) -> bool | Await:
        """Queue an answer kgw built, once there is room for it (``max_in_flight``)."""
        if len(self.pending) >= self.max_in_flight and self.lane is None:
            return NeedSpace(_again(self._answer_into, header, spec, body))
        self.queue_answer(header, spec, body)
        return True

    def _answer_into(self, header: RequestHeader, spec: ApiSpec, body: bytes, _to_upstream: list) -> bool | Await:
        return self._answer(header, spec, body)

    @staticmethod
    def answer_refused(spec: ApiSpec, header: RequestHeader, error: Exception) -> CloseConnection:
        """The close for a local answer that raised (:class:`RefuseRequest`, or a null where the
        schema has none: see :meth:`_enforce`)."""
        if isinstance(error, RefuseRequest):
            return CloseConnection(f"{spec.name} refused: {error}", "refused")
        return CloseConnection(f"malformed {spec.name} v{header.api_version} request: "
                               f"{type(error).__name__}: {error}", "decode")

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

    def _route(self, api_key: int, api_version: int, advertised) -> tuple:
        """What :meth:`dispatch` needs of one (api, version), remembered per advertised table:
        (kind, spec, request counter, inspector, sole action).  A forwarded API is inspected with
        its cheap ``peek`` when nothing is authorized, and its usual request's sole action
        (:attr:`ApiSpec.sole_action`) is looked up in the decision memo when something is."""
        spec = REGISTRY.get(api_key)
        if spec is None:
            return _UNKNOWN, None, None, None, None
        counter = self.metrics.request(self.listener_name, spec.name)
        if api_key == 18:
            return _API_VERSIONS, spec, counter, None, None
        if api_key in SASL_KEYS:
            return _SASL, spec, counter, None, None
        if advertised is None:
            return _PENDING, spec, counter, None, None  # decided once the table is known
        allowed = advertised.get(api_key)
        if allowed is None or not allowed.min <= api_version <= allowed.max:
            return _UNSUPPORTED, spec, counter, None, None
        if spec.answered_locally:
            return _LOCAL, spec, counter, spec.inspect, None
        if self.gw.authorizer is None:
            return _FORWARDED, spec, counter, spec.peek if spec.peek is not None else spec.inspect, None
        return _FORWARDED, spec, counter, spec.inspect, spec.sole_action

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

    def _auth_helper(self, header: RequestHeader, local: bool = False) -> AuthHelper:
        """The request's authorization view (``local``: an API kgw answers, which always gets
        the request context: a change it makes is recorded with who made it)."""
        authorizer = self.gw.authorizer
        if authorizer is None and not local:
            return self._no_authorizer
        base = self._context
        if base is None or base.principal is not self.principal:  # (authentication sets the principal)
            base = self._context = AuthorizableRequestContext(
                self.listener_name, self.listener.security_protocol, self.principal, self.client_address,
                header.api_key, header.api_version, header.client_id, header.correlation_id,
            )
            self._memo = authorizer.decision_memo(base) if authorizer is not None else None
        # the request's own context is made from base and header when first asked for
        return AuthHelper(authorizer, None, self._enforce_state, self.gw.topic_ids, self.gw.enforcement_state,
                          self.gw.change_log, base, header, self._memo)

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

    def _track(self, header: RequestHeader, spec: ApiSpec, info: RequestInfo, merge, size: int,
               large: bool = False) -> Slot:
        """A forwarded request of ``size`` bytes that expects a response: its place in the
        response order (``large``: its merge runs off the shared loops too)."""
        now = time.monotonic()
        slot = Slot(header, spec, merge, now, now + self._request_timeout_s + info.broker_wait_s)
        if self._quota_map:
            self._measure(slot, size)
        if large:
            slot.large = True
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
        (a broker answers in order); True if any completed.  Trio path and data plane alike: in C
        where it was built (``_plane_steps.complete_responses``, which the data plane calls
        directly), :meth:`complete_responses_python` otherwise, its reference."""
        if _pairing is not None:
            return _pairing(self, decoder)
        return self.complete_responses_python(decoder)

    def complete_responses_python(self, decoder: FrameDecoder) -> bool:
        """:meth:`complete_responses` in Python: the reference of the C pairing, which completes
        a response needing nothing but its bytes itself (the plain case of :meth:`_complete`) and
        hands any other to :meth:`_complete`."""
        in_flight = self.in_flight
        completed = False
        while True:
            try:
                frame = decoder.next_frame()
            except FrameError as e:
                raise CloseConnection(f"bad frame from upstream: {e}", "upstream") from None
            if frame is NEED_DATA:
                break
            if not in_flight:
                raise CloseConnection("upstream sent a response nobody asked for", "upstream")
            slot = in_flight.popleft()
            if slot.large or len(frame) > self._offload_response and (
                    slot.merge is not None or (slot.spec.rewrite_response is not None and slot.spec.api_key not in (0, 1))):
                self.heavy = (slot, frame)  # the caller completes it on a worker thread, then goes on
                return completed
            self._complete(slot, frame)
            completed = True
            if not decoder.buffered:  # nothing more was read: no frame to look for
                break
        if completed and self._cluster.timing_out_since is not None:
            self._cluster.answered()
        return completed

    def open_stream(self, head: memoryview, left: int, splice_min: int) -> Any | None:
        """The oldest request's response, of which ``head`` arrived and ``left`` bytes are still to
        come, to be passed on while it arrives (a walker of ``spec.stream_response``), or None
        when it must be completed whole: its API has no walker, it is merged, counted against
        a quota, or answers a large request, or earlier answers still wait to be written."""
        slot = self.in_flight[0] if self.in_flight else None
        if (slot is None or slot.spec.stream_response is None or slot.merge is not None or slot.quota is not None
                or slot.large or not self.pending or self.pending[0] is not slot or len(head) < 8):
            return None
        self._check_correlation(slot, head)
        now = time.monotonic()
        self.metrics.latency(self.listener_name, slot.spec.name).observe(now - slot.sent_at)
        slot.deadline = now + self._request_timeout_s  # now: for the rest of the response
        return slot.spec.stream_response(slot.header.api_version, head, left, self.listener.node_map, splice_min)

    def stream_progress(self) -> None:
        """The upstream sent more of the response being passed on: its deadline moves."""
        self.in_flight[0].deadline = time.monotonic() + self._request_timeout_s

    def stream_done(self) -> None:
        """The response being passed on has gone whole to the client."""
        self.in_flight.popleft()
        self.pending.popleft()
        if self._cluster.timing_out_since is not None:
            self._cluster.answered()

    def _check_correlation(self, slot: Slot, frame: memoryview) -> None:
        (correlation_id,) = _I32.unpack_from(frame, 4)
        if correlation_id != slot.header.correlation_id:
            raise CloseConnection(
                f"upstream answered correlation id {correlation_id}, expected {slot.header.correlation_id}", "upstream"
            )

    def _complete(self, slot: Slot, frame: memoryview) -> None:
        header = slot.header
        self._check_correlation(slot, frame)
        # Observed before the response can reach the client: whoever saw the response may
        # rely on /metrics counting it.
        self.metrics.latency(self.listener_name, slot.spec.name).observe(time.monotonic() - slot.sent_at)
        rewrite = slot.spec.rewrite_response
        if rewrite is None and slot.merge is None:
            slot.data = frame
            if slot.quota is not None:
                self._throttle(slot)
            self.unsent += len(slot.data)
            return
        off = 8
        if header.flexible and frame[8] == 0:
            off = 9  # no tagged fields in the response header: the usual case
        elif header.flexible:
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
        if slot.quota is not None:
            self._throttle(slot)
        self.unsent += len(slot.data)

    def _throttle(self, slot: Slot) -> None:
        """Record a completed request against its quotas; over one, the response carries the
        throttle time and the connection is read no more until it has passed (KIP-219)."""
        header = slot.header
        throttle_ms = max(slot.throttle, slot.quota.on_response(header.api_key, len(slot.data) - 4, slot.busy))
        if throttle_ms > 0:
            try:
                slot.data = with_throttle_time(header.api_key, header.api_version, header.flexible, slot.data,
                                               throttle_ms)
            except CodecError:  # a response kio cannot re-encode goes as it is: the mute below still holds
                pass
            self.throttled_until = max(self.throttled_until, time.monotonic() + throttle_ms / 1000.0)


#: the pairing in C (gateway/connection/_plane_steps.c), or None where it was not built
_pairing: Any
try:
    from gateway.connection import _plane_steps
except ImportError:  # pragma: no cover - a build without a compiler: the reference alone
    _pairing = None
else:
    _plane_steps.configure_core(NEED_DATA, FrameError, CloseConnection, CodecError)  # (the handlers' too)
    _plane_steps.configure_decoder(FrameDecoder)  # (the reads take its to_come from its fields)
    _pairing = _plane_steps.complete_responses
    # The data plane's express dispatch of the usual Produce request (_plane_steps.c's express:
    # what _dispatch does with it, on the decision memo's word or without an authorizer), with
    # protocol's C walks; left unconfigured (every request dispatched here) where they were not built.
    try:
        from protocol import _native
    except ImportError:  # pragma: no cover
        pass
    else:
        _plane_steps.configure_express(_native.request_header, _native.produce_sole, _FORWARDED,
                                       REGISTRY[0].sole_action, REGISTRY[0].peek, literal_actions(),
                                       ResourceType.TOPIC, AclOperation.WRITE, Slot, SaslState.COMPLETE)
    # The StandardAuthorizer's decision memo asked and counted there, as its allows and inc do
    # (the audit logger's level read from its cache where it is a logging.Logger, whose
    # isEnabledFor C mirrors).
    import logging

    from authz.audit import audit_logger
    from authz.metrics import SAMPLE_WINDOW_S, AuthorizerMetrics
    from authz.standard_authorizer import StandardDecisionMemo

    _plane_steps.configure_memo(StandardDecisionMemo, AuthorizerMetrics, logging.Logger, audit_logger,
                                time.monotonic, SAMPLE_WINDOW_S)
