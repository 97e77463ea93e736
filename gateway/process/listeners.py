"""Listeners: a bootstrap port plus one port per upstream broker, each serving client connections.

Theory of operation
-------------------
A :class:`Listener` is one configured listener (name, security protocol, bind
and advertised addresses).  It opens its bootstrap socket when the gateway
starts it, and a node socket (its :class:`ListenerNodeMap`) for every upstream
broker the cluster table reports, including brokers that appear later.  Node
sockets are bound synchronously when a node is first seen, so a rewritten
Metadata response never advertises a port that is not yet listening.

Every accepted connection runs in the listener's handler nursery inside a
guard that logs and swallows any exception: one connection's failure never
reaches another connection or the gateway (unlike ``trio.serve_listeners``'s
default).  Only the accept errors that mean "out of resources" are retried.

Addresses, port per broker: node N is served at bind port ``broker_port_base + N``
and advertised as ``advertised_host:advertised_broker_port_base + N``.  The mapping
is a pure function of (listener, node id) — no counter, no discovery order — so every
kgw instance and every restart hand out the same addresses, node ids need not be
contiguous, and a broker that appears later gets its port when it is first seen.  A
node id whose port would exceed 65535 cannot be exposed; it is logged and left out of
broker lists.  (Kroxylicious has the same port-per-broker strategy; TLS SNI host
names would need TLS on every listener and wildcard DNS.)
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import math
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

import trio

from gateway.connection.client import ClientConnection
from gateway.auth.authentication import ListenerSecurity
from gateway.connection.data_plane import on_trio_thread
from gateway.connection.fast_io import close_stream
from gateway.logs import fields
from protocol.proxy_protocol import ProxyHeaderError, ProxyHeaderReader


__all__ = ["Listener", "ListenerNodeMap"]

log = logging.getLogger("kgw.listener")
#: an episode of failed accepts (out of descriptors) ends after this long without one: one
#: WARNING per episode, however often the limit is hit and left within it
SHORTAGE_EPISODE_S = 10.0
_ACCEPT_CAPACITY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}
#: connections taken from the backlog per wakeup of the accept loop.  One per wakeup meant one
#: per pass of Trio's scheduler: with 500 busy connections on the loop (TLS, or the data plane
#: off) a pass takes ~10 ms, and a connection queued behind 500 others waited 6 s.
_ACCEPT_BURST = 64


def resolve_host_limits(overrides: Mapping[str, int]) -> dict[str, int]:
    """``limits.max_connections_per_ip_overrides`` by client IP address: a host name counts
    for every address it resolves to now (as Kafka resolves its overrides at start-up).
    :raises OSError: a name that does not resolve."""
    limits: dict[str, int] = {}
    for host, count in overrides.items():
        try:
            limits[str(ipaddress.ip_address(host))] = count
            continue
        except ValueError:
            pass
        for *_, sockaddr in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM):
            limits[str(sockaddr[0])] = count
    return limits


def accept_waiting(sock: socket.socket, limit: int) -> list[tuple[socket.socket, Any]]:
    """Up to ``limit`` connections already waiting on the non-blocking listening ``sock``,
    without waiting for more (the capacity errors of accept() are raised after the first)."""
    accepted: list[tuple[socket.socket, Any]] = []
    while len(accepted) < limit:
        try:
            accepted.append(sock.accept())
        except (BlockingIOError, InterruptedError):
            break
        except OSError:
            if accepted:  # serve these; the next wakeup meets the error again
                break
            raise
    return accepted


class CreationRate:
    """At most ``rate`` new connections per second per key: a token bucket holding one second's
    worth (Kafka's KIP-612 connection rate quotas: per IP over all listeners, and per listener).
    Bounded: when more than :attr:`MAX_KEYS` keys are tracked, the full (idle) buckets go."""

    MAX_KEYS = 100_000

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._buckets: dict[Any, list[float]] = {}

    def take(self, key: Any, now: float) -> float:
        """0.0 if a connection for ``key`` may be created now (and counts it), else the seconds
        until one may."""
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self.MAX_KEYS:
                self._prune(now)
            bucket = self._buckets[key] = [float(self.rate), now]
        tokens = min(float(self.rate), bucket[0] + (now - bucket[1]) * self.rate)
        bucket[1] = now
        if tokens < 1.0:
            bucket[0] = tokens
            return (1.0 - tokens) / self.rate
        bucket[0] = tokens - 1.0
        return 0.0

    def _prune(self, now: float) -> None:
        for key, (tokens, at) in list(self._buckets.items()):
            if tokens + (now - at) * self.rate >= self.rate:
                del self._buckets[key]


#: connections over their connection_creation_rate quota held at once at most (more are closed at
#: once), and for at most this long
_MAX_HELD = 1000
_MAX_HOLD_MS = 10_000


def _bind(host: str, port: int, reuse_port: bool = False) -> trio.socket.SocketType:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:  # several worker processes accept on this port; the kernel spreads connections
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return trio.socket.from_stdlib_socket(sock)


class Listener:
    def __init__(self, gateway: Any, config) -> None:  # gateway: gateway.process.server.Gateway
        self.gateway = gateway
        self.config = config
        self.name: str = config.name
        self.security_protocol: str = str(config.security_protocol)
        self.node_map = ListenerNodeMap(self)
        self.security = ListenerSecurity(self, gateway.config.users, gateway.auth_failures)
        self.bound_port: int | None = None
        self._node_ports: dict[int, int] = {}
        self._node_ports_lock = threading.Lock()
        #: node id -> why it has no gateway port on this listener (not ready while any is here)
        self.unexposed: dict[int, str] = {}
        self._nursery: trio.Nursery | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._connections = 0
        self._refused_hosts: set[str] = set()  # hosts refused for max_connections_per_ip (logged once)
        self._held = 0  # connections over a connection_creation_rate quota, held before their close
        self._throttled_hosts: set[str] = set()  # hosts over their connection rate now (logged once)
        self._accept_scopes: list[trio.CancelScope] = []  # one per accepting socket (stop_accepting)
        self._accepting = True
        #: dynamic (DescribeConfigs/AlterConfigs may change it at run time)
        self.max_connections: int = config.max_connections
        rate = gateway.config.limits.max_connection_creation_rate
        #: limits.max_connection_creation_rate: accepting waits beyond it
        self._creation_rate = CreationRate(rate) if rate else None
        proxy = config.proxy_protocol
        #: PROXY protocol: the networks balancers connect from (None: no header accepted)
        self.proxy_networks = None if proxy is None else tuple(ipaddress.ip_network(n) for n in proxy.trusted_networks)
        self._untrusted_hosts: set[str] = set()  # refused as not a trusted balancer (logged once)


    def has_node_port(self, node_id: int) -> bool:
        if self.config.sni is not None:  # the listener's one port serves every known broker
            return node_id in self.gateway.cluster.nodes
        return node_id in self._node_ports

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Open the bootstrap socket and node sockets; report started once accepting."""
        try:
            sock = _bind(self.config.host, self.config.port, self.gateway.reuse_port)
        except OSError as e:
            raise OSError(e.errno, f"listener {self.name} cannot bind {self.config.host}:{self.config.port}: "
                                   f"{e.strerror or e}") from None
        self.bound_port = sock.getsockname()[1]
        async with trio.open_nursery() as nursery:
            self._token = trio.lowlevel.current_trio_token()
            self._nursery = nursery
            nursery.start_soon(self._accept_loop, sock, None)
            self.gateway.cluster.subscribe(self._open_node_port)
            if self.unexposed:  # a broker known at start-up has no gateway port: refuse to start
                raise OSError("; ".join(self.unexposed.values()))
            task_status.started(self.bound_port)

    def _open_node_port(self, node_id: int) -> None:
        # Trio and the data-plane thread may both learn a new broker: one of them binds.
        if self.config.sni is not None:
            return  # SNI routing: the listener's one port serves this broker too
        with self._node_ports_lock:
            if node_id in self._node_ports or self._nursery is None:
                return
            port = self.config.node_bind_port(node_id)
            if port is None:
                self._unexposed(node_id, f"listener {self.name} cannot expose upstream broker {node_id}: port "
                                         f"{self.config.broker_port_base}+{node_id} is out of range (broker_port_base)")
                return
            try:
                sock = _bind(self.config.host, port, self.gateway.reuse_port)
            except OSError as e:
                self._unexposed(node_id, f"listener {self.name} cannot bind {self.config.host}:{port} for upstream "
                                         f"broker {node_id}: {e.strerror or e}")
                return
            self.unexposed.pop(node_id, None)
            self._node_ports[node_id] = port
        log.info("listener %s serves upstream broker %d at %s:%d", self.name, node_id, self.config.host, port)
        # Bound and listening now, so the response that revealed the broker may advertise it;
        # accepting starts on Trio (this may run on the data-plane thread, see gateway/connection/data_plane.py).
        if on_trio_thread():
            self._nursery.start_soon(self._accept_loop, sock, node_id)
        else:
            self._token.run_sync_soon(self._nursery.start_soon, self._accept_loop, sock, node_id)

    def _unexposed(self, node_id: int, reason: str) -> None:
        """A broker without a gateway port on this listener: clients cannot reach it through kgw, so
        the gateway is not ready (``/readyz``), and at start-up it refuses to start."""
        self.unexposed[node_id] = reason
        log.error("%s", reason)

    def stop_accepting(self) -> None:
        """Close every listening socket of this listener (a drain begins); open connections stay."""
        self._accepting = False
        for scope in self._accept_scopes:
            scope.cancel()

    async def _accept_loop(self, sock: trio.socket.SocketType, node_id: int | None) -> None:
        if not self._accepting:
            sock.close()
            return
        scope = trio.CancelScope()
        self._accept_scopes.append(scope)
        # the same listening socket as a plain non-blocking one, to take what else is waiting
        backlog = socket.fromfd(sock.fileno(), sock.family, sock.type)
        backlog.setblocking(False)
        failures = 0  # in this episode of running out of descriptors (or memory)
        last_failure = -math.inf
        with sock, backlog, scope:
            while True:
                try:
                    accepted = [await sock.accept(), *accept_waiting(backlog, _ACCEPT_BURST - 1)]
                except OSError as e:
                    if e.errno not in _ACCEPT_CAPACITY_ERRNOS:
                        raise
                    now = time.monotonic()
                    if now - last_failure >= SHORTAGE_EPISODE_S:  # once per episode, not per attempt
                        log.warning("listener %s cannot accept: %s; new connections wait in the backlog and kgw "
                                    "retries with a back-off (raise the open-file limit, `ulimit -n`, or lower "
                                    "limits.max_connections)", self.name, e.strerror or e)
                    failures += 1
                    last_failure = now
                    self.gateway.metrics.errors.labels(self.name, "-", "accept_out_of_resources").inc()
                    await trio.sleep(min(0.01 * 2 ** min(failures, 7), 1.0))
                    continue
                if failures and time.monotonic() - last_failure >= SHORTAGE_EPISODE_S:
                    log.info("listener %s accepts again (%d accept(s) failed for want of descriptors)",
                             self.name, failures)
                    failures = 0
                for conn, addr in accepted:
                    if self._creation_rate is not None:  # Kafka's acceptor waits, it refuses nobody
                        while (wait := self._creation_rate.take(None, trio.current_time())) > 0:
                            await trio.sleep(wait)
                    await self._admit(conn, addr, node_id)

    async def _admit(self, conn, addr, node_id: int | None) -> None:
        """Serve an accepted connection, or close it at once past a connection limit."""
        if not isinstance(conn, trio.socket.SocketType):
            conn = trio.socket.from_stdlib_socket(conn)
        stream = trio.SocketStream(conn)
        if self._connections >= self.max_connections:
            log.warning("listener %s is at its limit of %d connections; refusing %s",
                        self.name, self.max_connections, addr[0])
            self.gateway.metrics.errors.labels(self.name, "-", "connection_limit").inc()
            await close_stream(stream)
            return
        if self.proxy_networks is not None:
            if not self._trusted_balancer(addr[0]):
                self.gateway.metrics.errors.labels(self.name, "-", "proxy_untrusted").inc()
                if addr[0] not in self._untrusted_hosts and len(self._untrusted_hosts) < CreationRate.MAX_KEYS:
                    self._untrusted_hosts.add(addr[0])
                    log.warning("listener %s takes connections only from its PROXY protocol balancers "
                                "(proxy_protocol.trusted_networks); closing one from %s", self.name, addr[0])
                await close_stream(stream)
                return
            self._connections += 1  # the client's own address (and its limits) come with the header
            assert self._nursery is not None
            self._nursery.start_soon(self._handle_proxied, stream, addr, node_id)
            return
        if not await self._host_admitted(stream, addr[0]):
            return
        # counted now, not when the task first runs: the next one of this burst sees it
        self._connections += 1
        assert self._nursery is not None
        self._nursery.start_soon(self._handle, stream, addr, node_id)

    def _trusted_balancer(self, host: str) -> bool:
        try:
            address = ipaddress.ip_address(host)
        except ValueError:
            return False
        mapped = getattr(address, "ipv4_mapped", None)
        return any(address in network or (mapped is not None and mapped in network)
                   for network in self.proxy_networks or ())

    async def _handle_proxied(self, stream: trio.SocketStream, addr, node_id: int | None) -> None:
        """A connection from a trusted balancer: its PROXY protocol header first (within the
        authentication deadline, byte-exact: what follows stays unread), then the client's own
        address is the peer everywhere, per-host limits included."""
        reader = ProxyHeaderReader()
        try:
            with trio.fail_after(self.gateway.config.limits.authentication_timeout_ms / 1000):
                while wanted := reader.wanted():
                    reader.feed(await stream.receive_some(wanted))
        except (ProxyHeaderError, trio.TooSlowError, trio.BrokenResourceError, OSError) as e:
            reason = str(e) or "no PROXY protocol header within limits.authentication_timeout_ms"
            self.gateway.metrics.errors.labels(self.name, "-", "proxy_header").inc()
            log.info("closing connection from balancer %s: %s", addr[0], reason, extra=fields(listener=self.name))
            self._connections -= 1
            await close_stream(stream)
            return
        assert reader.result is not None
        source = reader.result.source or (addr[0], addr[1])  # LOCAL: the balancer's own connection
        if not await self._host_admitted(stream, source[0]):
            self._connections -= 1
            return
        await self._handle(stream, source, node_id)

    async def _host_admitted(self, stream: trio.SocketStream, host: str) -> bool:
        """Per-host connection rate and count: True and counted, or the stream closed."""
        per_host = self.gateway.connections_per_host
        rates = self.gateway.connection_rates_per_host
        if rates is not None and rates.take(host, trio.current_time()) > 0:
            # KIP-612's per-IP connection rate quota: closed at once, logged once per burst
            self.gateway.metrics.errors.labels(self.name, "-", "connection_rate_per_ip").inc()
            if host not in self._throttled_hosts:
                if len(self._throttled_hosts) >= CreationRate.MAX_KEYS:
                    self._throttled_hosts.clear()
                self._throttled_hosts.add(host)
                log.warning("client host %s opens connections faster than %d per second "
                            "(limits.max_connection_creation_rate_per_ip); closing the excess", host, rates.rate)
            await close_stream(stream)
            return False
        self._throttled_hosts.discard(host)
        hold_ms = self.gateway.quotas.connection_throttle_ms(host)
        if hold_ms > 0:
            # a connection_creation_rate client quota (KIP-612, `kafka-configs --entity-type ips`):
            # as a broker does, the connection is held unread for the throttle time, then closed
            self.gateway.metrics.errors.labels(self.name, "-", "connection_quota_per_ip").inc()
            if self._held < _MAX_HELD and self._nursery is not None:
                self._held += 1
                self._nursery.start_soon(self._close_after, stream, min(hold_ms, _MAX_HOLD_MS) / 1000.0)
            else:
                await close_stream(stream)
            return False
        if per_host.get(host, 0) >= self.gateway.connection_limit_of(host):
            # logged at most once per refused burst: the count says how many
            self.gateway.metrics.errors.labels(self.name, "-", "connection_limit_per_ip").inc()
            if host not in self._refused_hosts:
                self._refused_hosts.add(host)
                log.warning("client host %s holds %d connections (limits.max_connections_per_ip%s); "
                            "refusing more", host, per_host.get(host, 0),
                            "_overrides" if host in self.gateway.connection_limits_per_host else "")
            await close_stream(stream)
            return False
        per_host[host] = per_host.get(host, 0) + 1
        return True

    async def _close_after(self, stream: trio.SocketStream, seconds: float) -> None:
        try:
            await trio.sleep(seconds)
        finally:
            self._held -= 1
            await close_stream(stream)

    async def _handle(self, stream: trio.SocketStream, addr, node_id: int | None) -> None:
        series = self.gateway.metrics.listener(self.name)
        series.connections.inc()
        active = series.active
        active.inc()
        peer = (addr[0], addr[1])
        try:  # (trio.SocketStream has set TCP_NODELAY)
            conn = ClientConnection(self, stream, peer, node_id)
            self.gateway.connections.add(conn)
            try:
                await conn.run()
            finally:
                self.gateway.connection_closed(conn)
        except Exception:
            log.exception("client connection failed", extra=fields(listener=self.name, client=f"{peer[0]}:{peer[1]}"))
        finally:
            self._connections -= 1
            per_host = self.gateway.connections_per_host
            left = per_host.get(peer[0], 1) - 1
            if left > 0:
                per_host[peer[0]] = left
            else:
                per_host.pop(peer[0], None)
                self._refused_hosts.discard(peer[0])
            active.dec()
            await close_stream(stream)


# The mapping itself is ``ListenerConfig.node_bind_port`` / ``node_advertised_address``
# (configs/gateway_config.py), so the YAML model and the gateway cannot disagree.


class ListenerNodeMap:
    """The :class:`protocol.apis.base.NodeMap` of one listener."""

    def __init__(self, listener: Listener) -> None:
        self._listener = listener

    def learn(self, node_id: int, host: str, port: int, rack: str | None) -> None:
        self._listener.gateway.cluster.learn(node_id, host, port, rack)

    def advertise(self, node_id: int) -> tuple[str, int] | None:
        if not self._listener.has_node_port(node_id):
            return None
        address = self._listener.config.node_advertised_address(node_id)
        return None if address is None else (address.host, address.port)
