"""The upstream cluster: where its brokers are and which API versions it speaks.

Theory of operation
-------------------
kgw discovers brokers from upstream metadata, never from a hand-written list:
at start-up, then every ``metadata_max_age_ms``, it asks a bootstrap server
for ApiVersions and Metadata (no topics); and every broker address that passes
through a client's Metadata, FindCoordinator or DescribeCluster response
updates the same table (:meth:`UpstreamCluster.learn`).  Listeners subscribe to
new node ids so they can open the gateway port that stands for a new broker.

:func:`open_upstream` is the one place where connecting to an upstream broker
happens, with the connect timeout applied and ``OSError`` translated into
:class:`UpstreamUnavailable`.
"""

from __future__ import annotations

import io
import logging
import os
import socket
import struct
import time
from dataclasses import dataclass
from typing import Callable

import trio
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from gateway.upstream.security import UpstreamSecurityError, wrap_upstream
from protocol.apis.api_versions import KIO_VERSIONS, VersionRange
from protocol.codecs import CodecError, decode_response, encode, request_class
from protocol.framing import NEED_DATA, FrameDecoder
from protocol.headers import read_uvarint

__all__ = ["UpstreamCluster", "UpstreamNode", "UpstreamUnavailable", "open_upstream", "parse_host_port"]

log = logging.getLogger("kgw.upstream")
_I32 = struct.Struct(">i")
KGW_CLIENT_ID = "kgw"


class UpstreamUnavailable(Exception):
    pass


@dataclass(frozen=True, slots=True)
class UpstreamNode:
    node_id: int
    host: str
    port: int
    rack: str | None = None


def parse_host_port(value) -> tuple[str, int]:
    if isinstance(value, (tuple, list)):
        return str(value[0]), int(value[1])
    host, _, port = str(value).rpartition(":")
    return host.strip("[]"), int(port)


async def open_upstream(host: str, port: int, timeout_s: float, security=None) -> trio.abc.Stream:
    """Connect to an upstream broker with kgw's own identity (TLS and/or SASL from
    ``upstream`` in YAML; client credentials are never passed on)."""
    try:
        with trio.fail_after(timeout_s):
            stream = await _connect(host, port)
    except trio.TooSlowError:
        raise UpstreamUnavailable(f"connecting to {host}:{port} timed out after {timeout_s:g}s") from None
    except OSError as e:
        raise UpstreamUnavailable(f"cannot connect to {host}:{port}: {e.strerror or e}") from None
    if security is not None and str(security.security_protocol) != "PLAINTEXT":
        try:
            return await wrap_upstream(stream, host, security, timeout_s=timeout_s)
        except UpstreamSecurityError as e:
            await trio.aclose_forcefully(stream)
            log.warning("%s", e)
            raise UpstreamUnavailable(str(e)) from None
    return stream


async def _connect(host: str, port: int) -> trio.SocketStream:
    """A TCP stream to ``host``: an IP address is connected to directly, and so is a host name
    whose one address :data:`ADDRESSES` holds (resolved at most every ``ADDRESS_TTL_S``); a name
    with several addresses goes to ``trio.open_tcp_stream``, which tries them in turn (happy
    eyeballs: a nursery, a task and events, about twice a direct connect's CPU, so kept for
    where it is needed).  Either way the stream has TCP_NODELAY (``trio.SocketStream`` sets it)."""
    family = _ip_family(host)
    if family is not None:
        return await _connect_to(family, (host, port))
    addresses = await ADDRESSES.of(host, port)
    if len(addresses) != 1:
        return await trio.open_tcp_stream(host, port)
    try:
        return await _connect_to(*addresses[0])
    except BaseException:
        ADDRESSES.forget(host, port)  # the name may point elsewhere now: resolved again next time
        raise


async def _connect_to(family: int, address: tuple) -> trio.SocketStream:
    sock = trio.socket.socket(family, socket.SOCK_STREAM)
    try:
        await sock.connect(address)
    except BaseException as e:
        sock.close()
        if isinstance(e, OSError) and e.errno:  # (trio's message repeats the address the caller names)
            raise OSError(e.errno, os.strerror(e.errno)) from None
        raise
    return trio.SocketStream(sock)


#: how long an upstream host name's addresses are used before it is resolved again: the JVM's
#: default (``networkaddress.cache.ttl``), which Kafka's brokers and Java clients run with
ADDRESS_TTL_S = 30.0


class HostAddresses:
    """Upstream host names resolved once per :data:`ADDRESS_TTL_S`, not once per client
    connection (a worker thread and, for a name not in /etc/hosts, a DNS query each time, before
    every connection's first request could be forwarded).  A connect that fails forgets the
    name's addresses; failed look-ups are not kept.  At most ``limit`` names (the oldest go first);
    used on Trio's thread only."""

    def __init__(self, limit: int = 1024, clock: Callable[[], float] = time.monotonic) -> None:
        self._kept: dict[tuple[str, int], tuple[float, tuple[tuple[int, tuple], ...]]] = {}
        self._limit = limit
        self.clock = clock

    async def of(self, host: str, port: int) -> tuple[tuple[int, tuple], ...]:
        """``host``'s distinct (family, socket address) pairs, in the resolver's order."""
        key = (host, port)
        kept = self._kept.get(key)
        if kept is not None and kept[0] > self.clock():
            return kept[1]
        infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = tuple(dict.fromkeys((info[0], info[4]) for info in infos))
        self._kept.pop(key, None)
        while len(self._kept) >= self._limit:
            del self._kept[next(iter(self._kept))]
        self._kept[key] = (self.clock() + ADDRESS_TTL_S, addresses)
        return addresses

    def forget(self, host: str, port: int) -> None:
        self._kept.pop((host, port), None)


#: the process's upstream host names (every connection to an upstream broker goes through it)
ADDRESSES = HostAddresses()


def _ip_family(host: str) -> int | None:
    """AF_INET or AF_INET6 for an IP address, None for a host name (or a scoped IPv6
    address, left to the resolver)."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except OSError:
            continue
        return family
    return None


def encode_request(api_key: int, version: int, correlation_id: int, body_entity) -> bytes:
    cls = request_class(api_key, version)
    out = io.BytesIO()
    if cls.__flexible__:
        entity_writer(RequestHeaderV2)(
            out, RequestHeaderV2(request_api_key=i16(api_key), request_api_version=i16(version),
                                 correlation_id=i32(correlation_id), client_id=KGW_CLIENT_ID)
        )
    else:
        entity_writer(RequestHeaderV1)(
            out, RequestHeaderV1(request_api_key=i16(api_key), request_api_version=i16(version),
                                 correlation_id=i32(correlation_id), client_id=KGW_CLIENT_ID)
        )
    out.write(encode(body_entity))
    body = out.getvalue()
    return _I32.pack(len(body)) + body


async def roundtrip(stream: trio.SocketStream, api_key: int, version: int, body_entity, timeout_s: float):
    """Send one request kgw makes on its own behalf and decode its response."""
    await stream.send_all(encode_request(api_key, version, 1, body_entity))
    decoder = FrameDecoder(1 << 30, trusted=True)
    with trio.fail_after(timeout_s):
        while True:
            frame = decoder.next_frame()
            if frame is not NEED_DATA:
                break
            data = await stream.receive_some(65536)
            if not data:
                raise UpstreamUnavailable("upstream closed the connection")
            decoder.receive_data(data)
    off = 8  # length prefix + correlation id
    if request_class(api_key, version).__flexible__ and api_key != 18:
        count, off = read_uvarint(frame, off)
        for _ in range(count):
            _t, off = read_uvarint(frame, off)
            size, off = read_uvarint(frame, off)
            off += size
    return decode_response(api_key, version, frame, off)


class UpstreamCluster:
    """What kgw knows of the upstream cluster, shared by all listeners and connections."""

    def __init__(self, bootstrap_servers, connect_timeout_s: float, request_timeout_s: float, security=None) -> None:
        self.bootstrap = [parse_host_port(b) for b in bootstrap_servers]
        #: the ``upstream`` YAML section (protocol, TLS, SASL) kgw connects with
        self.security = security
        self.connect_timeout_s = connect_timeout_s
        self.request_timeout_s = request_timeout_s
        self.nodes: dict[int, UpstreamNode] = {}
        self.versions: dict[int, VersionRange] | None = None
        self.api_versions_response = None
        self.cluster_id: str | None = None
        self._subscribers: list[Callable[[int], None]] = []
        self._refresh_lock = trio.Lock()
        #: None until the first refresh; False from a failed refresh until the next success
        self.reachable: bool | None = None
        self.unreachable_since: float | None = None  # time.time() of the first failure in a row
        #: why the last refresh failed (shown by /readyz); None while reachable
        self.last_error: str | None = None
        #: client requests the upstream did not answer within their deadline (kgw_upstream_request_timeouts_total)
        self.request_timeouts = 0
        #: KIP-368 re-authentications of kgw's own sessions on client connections, by result
        #: (kgw_upstream_reauthentications_total)
        self.reauthentications = {"ok": 0, "failed": 0}
        #: time.time() of the first timeout since answers last came in time; None while they do
        self.timing_out_since: float | None = None
        #: an episode ends with an answer this long (monotonic seconds) after its last timeout
        self.quiet_s = 2 * request_timeout_s
        self._last_timeout = 0.0

    def request_timed_out(self, what: str, after_s: float) -> None:
        """A forwarded request was not answered in time (its connection is closed).  The first
        of an episode is a WARNING; readiness reports the upstream not ready until answers come
        in time again (:meth:`answered`).  Called from the loop and the data-plane thread."""
        self.request_timeouts += 1
        self._last_timeout = time.monotonic()
        if self.timing_out_since is None:
            self.timing_out_since = time.time()
            log.warning("upstream did not answer %s within %.1fs (upstream.request_timeout_ms): kgw closes such "
                        "client connections and reports the upstream not ready until it answers in time again",
                        what, after_s)

    def answered(self) -> None:
        """An upstream response arrived in time; ends a timeout episode once no timeout came for
        :attr:`quiet_s` (one WARNING per episode, not per flap)."""
        since = self.timing_out_since
        if since is not None and time.monotonic() - self._last_timeout >= self.quiet_s:
            self.timing_out_since = None
            log.warning("upstream answers in time again after %.1fs (%d request timeouts so far)",
                        time.time() - since, self.request_timeouts)

    def subscribe(self, callback: Callable[[int], None]) -> None:
        """``callback(node_id)`` is called for every node id, once when it is first seen."""
        self._subscribers.append(callback)
        for node_id in list(self.nodes):
            callback(node_id)

    def learn(self, node_id: int, host: str, port: int, rack: str | None = None) -> None:
        node = UpstreamNode(node_id, host, port, rack)
        old = self.nodes.get(node_id)
        if old == node:
            return
        self.nodes[node_id] = node
        if old is None:
            log.info("discovered upstream broker %d at %s:%d", node_id, host, port)
            for callback in self._subscribers:
                callback(node_id)
        else:
            log.info("upstream broker %d moved from %s:%d to %s:%d", node_id, old.host, old.port, host, port)

    async def connect_bootstrap(self) -> trio.SocketStream:
        errors = []
        for host, port in self.bootstrap:
            try:
                return await open_upstream(host, port, self.connect_timeout_s, self.security)
            except UpstreamUnavailable as e:
                errors.append(str(e))
        raise UpstreamUnavailable("; ".join(errors))

    async def connect(self, node_id: int | None) -> trio.SocketStream:
        """A connection to upstream broker ``node_id`` (None: any bootstrap server), kgw's own
        security and connect timeout applied; :class:`UpstreamUnavailable` when there is none."""
        if node_id is None:
            return await self.connect_bootstrap()
        node = self.nodes.get(node_id)
        if node is None:
            raise UpstreamUnavailable(f"upstream broker {node_id} is unknown")
        return await open_upstream(node.host, node.port, self.connect_timeout_s, self.security)

    async def refresh(self) -> None:
        """Ask a bootstrap server for its API versions and brokers."""
        async with self._refresh_lock:
            stream = await self.connect_bootstrap()
            async with stream:
                response = await roundtrip(stream, 18, 0, request_class(18, 0)(), self.request_timeout_s)
                if response.error_code != 0:
                    raise UpstreamUnavailable(f"upstream ApiVersions failed with error {response.error_code}")
                versions = {k.api_key: VersionRange(k.min_version, k.max_version) for k in response.api_keys}
                # Ask again at the highest version both sides know, for the feature fields.
                top = min(KIO_VERSIONS[18].max, versions.get(18, VersionRange(0, 0)).max)
                if top > 0:
                    cls = request_class(18, top)
                    kw = {}
                    if "client_software_name" in cls.__dataclass_fields__:
                        kw = {"client_software_name": "kgw", "client_software_version": "0.1.0"}
                    response = await roundtrip(stream, 18, top, cls(**kw), self.request_timeout_s)
                self.versions = versions
                self.api_versions_response = response
                await self._refresh_metadata(stream, versions)

    async def _refresh_metadata(self, stream, versions) -> None:
        upstream = versions.get(3)
        if upstream is None:
            raise UpstreamUnavailable("upstream does not support Metadata")
        version = min(KIO_VERSIONS[3].max, upstream.max)
        cls = request_class(3, version)
        kw = {"topics": ()}
        fields = cls.__dataclass_fields__
        if "allow_auto_topic_creation" in fields:
            kw["allow_auto_topic_creation"] = False
        for name in ("include_cluster_authorized_operations", "include_topic_authorized_operations"):
            if name in fields:
                kw[name] = False
        response = await roundtrip(stream, 3, version, cls(**kw), self.request_timeout_s)
        if getattr(response, "cluster_id", None):
            self.cluster_id = response.cluster_id
        for broker in response.brokers:
            self.learn(broker.node_id, broker.host, broker.port, broker.rack)

    async def refresh_forever(self, interval_s: float, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Refresh until cancelled; report started after the first success (or first failure)."""
        started = False
        while True:
            try:
                await self.refresh()
            except (UpstreamUnavailable, CodecError, trio.TooSlowError, OSError) as e:
                if self.reachable is not False:  # the transition is logged once, not every retry
                    self.unreachable_since = time.time()
                    log.warning("upstream cluster unreachable: %s (kgw retries every %.0fs; "
                                "clients get errors meanwhile)", e, min(interval_s, 2.0))
                else:
                    log.debug("upstream cluster still unreachable: %s", e)
                self.reachable = False
                self.last_error = str(e) or type(e).__name__
                delay = min(interval_s, 2.0)
            else:
                if self.reachable is False:
                    log.warning("upstream cluster reachable again after %.1fs",
                                time.time() - (self.unreachable_since or time.time()))
                self.reachable = True
                self.unreachable_since = None
                self.last_error = None
                delay = interval_s
            if not started:
                started = True
                task_status.started()
            await trio.sleep(delay)

    async def ensure_versions(self) -> dict[int, VersionRange]:
        if self.versions is None:
            try:
                await self.refresh()
            except (UpstreamUnavailable, CodecError, trio.TooSlowError, OSError) as e:
                raise UpstreamUnavailable(f"upstream API versions unknown: {e}") from None
        assert self.versions is not None
        return self.versions
