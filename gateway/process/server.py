"""The gateway: upstream cluster, authorizer, metadata log, listeners, admin endpoint.

Start-up order (KIP-504): configure the authorizer, discover the upstream (API
versions, brokers), start the admin endpoint (so ``/readyz`` can say "not
ready"), call ``authorizer.start()`` for one readiness event per listener,
load the metadata log into the image (which completes the authorizer's
initial load), and open each listener only once its event is set.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass
from typing import Any

import trio
from prometheus_client import Gauge
from prometheus_client.core import CounterMetricFamily

from authz.authorizer import AuthorizerServerInfo, Endpoint
from metadata.image import MetadataImage
from gateway.process.metadata_backend import open_metadata_store
from gateway.process.admin_http import serve_admin
from gateway.process.preflight import build_authorizer
from gateway.auth.failures import AuthFailureTracker
from gateway.connection.data_plane import DataPlane
from gateway.connection.quotas import QuotaManager
from gateway.process.dynamic_config import DynamicConfigManager
from gateway.process.listeners import CreationRate, Listener, resolve_host_limits
from gateway.process.metrics import GatewayMetrics
from gateway.auth.password_hashing import PasswordHashing
from gateway.auth.tls_reload import TlsCertificates
from gateway.upstream.cluster import UpstreamCluster
from gateway.connection.upstream_queries import UpstreamQueries
from protocol.apis.api_versions import ApiVersionsAnswers, VersionRange, advertised_versions
from protocol.apis.registry import LOCAL_KEYS, REGISTRY
from authz.credentials import CredentialStore
from protocol.topic_ids import TopicCache
from authz.audit import AUDIT_LOGGER_NAME, ChangeLog

__all__ = ["Gateway", "StartedGateway"]

log = logging.getLogger("kgw.gateway")


@dataclass(frozen=True)
class StartedGateway:
    listeners: dict[str, tuple[str, int]]  # name -> bound (host, port)
    admin: tuple[str, int] | None


class Gateway:
    def __init__(self, config, *, worker_index: int | None = None) -> None:
        #: one of ``kgw run --workers N`` (gateway/process/workers.py): listener ports are bound with
        #: SO_REUSEPORT and a directory metadata log is shared with the other workers
        self.worker_index = worker_index
        self.reuse_port = worker_index is not None
        self.config = config
        self.metrics = GatewayMetrics()
        up = config.upstream
        self.cluster = UpstreamCluster(up.bootstrap_servers, up.connect_timeout_ms / 1000, up.request_timeout_ms / 1000,
                                       security=up)
        #: kgw's own questions to the upstream before it decides for a client (Decision.then)
        self.upstream = UpstreamQueries(self.cluster)
        #: held by each AlterUserScramCredentials while it reads the credentials and writes its change
        self.scram_changes = trio.Lock()
        #: held by each AlterClientQuotas while it reads the quotas and writes its change
        self.quota_changes = trio.Lock()
        #: every change of security state made through this gateway: logged, and audited
        self.change_log = ChangeLog()
        #: enforcement state that outlives one connection (regular-expression subscriptions,
        #: streams topologies); each user bounds its own entries
        self.enforcement_state: dict = {}
        self.authorizer = self._make_authorizer(config)
        self.auth_failures = AuthFailureTracker(self.metrics.registry)
        self.image: MetadataImage | None = None
        #: client quotas (gateway/connection/quotas.py), read from the image once it is loaded
        self.quotas = QuotaManager(None, config.quotas.window_num, config.quotas.window_size_seconds,
                                   config.quotas.max_tracked, registry=self.metrics.registry)
        #: the audit publisher when audit.publish is on
        self.audit_publisher: Any = None
        #: topic names and ids learned from upstream responses (requests by topic id)
        self.topic_ids = TopicCache()
        #: stretched password hashes: the threads that verify them, each client host's turn, and
        #: the passwords verified recently (gateway/auth/password_hashing.py)
        self.password_hashing = PasswordHashing(config.limits.password_hash_threads,
                                                config.limits.password_hashes_per_host)
        self.listeners = [Listener(self, lc) for lc in config.listeners]
        #: the TLS listeners' certificates, reloaded on SIGHUP or when their files change
        self.tls = TlsCertificates(self.listeners, self.metrics.registry)
        self.dynamic_configs = DynamicConfigManager(self)
        self._ready: dict[str, bool] = {lc.name: False for lc in config.listeners}
        self._advertised: dict[int, VersionRange] | None = None
        self._advertised_for = None
        #: the epoll thread serving plain-TCP connections (gateway/connection/data_plane.py); None: all on Trio
        self.data_plane: DataPlane | None = None
        #: the worker thread that inspects, authorizes and merges large requests and responses, so
        #: one huge request never holds the loops that serve every other connection
        self.heavy_work_limiter = trio.CapacityLimiter(1)
        up = Gauge("kgw_upstream_reachable", "1 while kgw's last metadata refresh of the upstream cluster "
                   "succeeded", registry=self.metrics.registry)
        up.set_function(lambda: 0 if self.cluster.reachable is False else 1)
        since = Gauge("kgw_upstream_unreachable_since_seconds", "Unix time of the first failed refresh in "
                      "the current outage; 0 while reachable", registry=self.metrics.registry)
        since.set_function(lambda: self.cluster.unreachable_since or 0)
        stale = Gauge("kgw_metadata_stale_since_seconds", "Unix time since which the shared metadata log "
                      "could not be followed (kgw authorizes with its last state); 0 while current",
                      registry=self.metrics.registry)
        stale.set_function(lambda: (self.image.store.stale_since or 0) if self.image is not None else 0)
        offset = Gauge("kgw_metadata_applied_offset", "Offset of the last metadata log record (or, with "
                       "the kafka backend, message) applied", registry=self.metrics.registry)
        offset.set_function(lambda: self.image.offset if self.image is not None else -1)
        healthy = Gauge("kgw_metadata_store_healthy", "1 while the metadata store takes writes; 0 after a failed "
                        "write (a full disk) until kgw makes it take writes again", registry=self.metrics.registry)
        healthy.set_function(lambda: 0 if self.image is not None and self.image.store.broken else 1)
        self.metrics.registry.register(_HealthCounters(self))
        #: encoded ApiVersions answers per version, valid for the advertised table they were built from
        self.api_versions_answers = ApiVersionsAnswers()
        #: every open client connection (drain) and whether a drain has begun
        self.connections: set = set()
        self.draining = False
        #: open client connections per client host, over all listeners (limits.max_connections_per_ip)
        self.connections_per_host: dict[str, int] = {}
        #: limits.max_connections_per_ip_overrides by client IP address
        self.connection_limits_per_host = resolve_host_limits(config.limits.max_connections_per_ip_overrides)
        rate = config.limits.max_connection_creation_rate_per_ip
        #: new connections per client host and second, over all listeners (KIP-612), or None
        self.connection_rates_per_host = CreationRate(rate) if rate else None

    def advertised_node_ids(self):
        """The upstream node ids this gateway stands for (gateway.process.dynamic_config.ConfigOwner)."""
        return self.cluster.nodes.keys()

    def connection_limit_of(self, host: str) -> int:
        """The connections client host ``host`` may hold (Kafka's max.connections.per.ip, with
        its overrides)."""
        return self.connection_limits_per_host.get(host, self.config.limits.max_connections_per_ip)

    # -- protocol.services.LocalServices: what local answers (ACL, config, SCRAM APIs) use

    @property
    def broker_configs(self) -> DynamicConfigManager:
        return self.dynamic_configs

    @property
    def upstream_versions(self):
        return self.cluster.versions

    @property
    def static_scram(self):
        return CredentialStore.of(self.config.users).scram

    @staticmethod
    def _make_authorizer(config):
        return build_authorizer(config)

    def server_info(self) -> AuthorizerServerInfo:
        endpoints = tuple(
            Endpoint(lc.name, str(lc.security_protocol), lc.host, lc.port) for lc in self.config.listeners
        )
        return AuthorizerServerInfo(self.config.cluster_id, 0, endpoints, None)

    def readiness(self) -> dict[str, bool | str]:
        """Each listener, the upstream cluster, and whether every known broker has its gateway port
        on every listener: ready or not (``/readyz``)."""
        if self.draining:  # a load balancer stops sending the moment a drain begins
            return {**{name: False for name in self._ready}, "upstream": False, "broker_ports": False}
        exposed = all(not listener.unexposed for listener in self.listeners)
        upstream: bool | str = self.cluster.reachable is not False or (self.cluster.last_error or False)
        if upstream and self.cluster.timing_out_since is not None:
            upstream = time.strftime("requests time out since %Y-%m-%dT%H:%M:%SZ", time.gmtime(
                self.cluster.timing_out_since)) + f" ({self.cluster.request_timeouts} so far)"
        state = {**self._ready, "upstream": upstream, "broker_ports": exposed}
        for listener in self.listeners:
            oauth = listener.security.oauthbearer
            if oauth is not None:
                state[f"{listener.name} oauthbearer keys"] = True if oauth.keys.ready else (
                    f"none from {oauth.keys.where}: {oauth.keys.error}")
        if self.image is not None:
            store = self.image.store
            since = store.stale_since
            broken = store.broken
            if broken is not None:
                state["metadata"] = time.strftime("no writes since %Y-%m-%dT%H:%M:%SZ", time.gmtime(broken[0])) + (
                    f" ({broken[1]}); ACL, config and SCRAM changes fail, authorizing with the state as of offset "
                    f"{self.image.offset}")
            elif since is not None:
                state["metadata"] = time.strftime(
                    "stale since %Y-%m-%dT%H:%M:%SZ, authorizing with the state as of offset "
                    f"{self.image.offset}", time.gmtime(since))
            elif store.shared:
                state["metadata"] = True
        return state

    async def _resume_metadata_writes(self) -> None:
        """While the metadata store does not take writes (a failed write: a full disk, an I/O
        error), ask it to resume every second, then less often (up to 30 s) while the cause
        persists; readiness and kgw_metadata_store_healthy say so meanwhile."""
        delay = 1.0
        while True:
            await trio.sleep(delay)
            store = self.image.store if self.image is not None else None
            if store is None or store.broken is None:
                delay = 1.0
            elif await store.resume_writes():
                delay = 1.0
            else:
                delay = min(delay * 2, 30.0)

    async def drain(self, timeout_s: float) -> int:
        """Graceful stop: stop accepting, stop reading new requests, answer every request in
        flight, close each connection once it has nothing left to answer; after ``timeout_s``
        give up.  Returns the number of requests still unanswered then (also logged)."""
        self.draining = True
        for listener in self.listeners:
            listener.stop_accepting()
        for conn in list(self.connections):
            conn.begin_drain()
        with trio.move_on_after(timeout_s):
            while self.connections:
                self._drained = trio.Event()
                await self._drained.wait()
        abandoned = sum(len(conn.pending) for conn in self.connections)
        if self.connections:
            log.warning("drain timed out after %.1fs: closing %d connection(s) with %d request(s) unanswered",
                        timeout_s, len(self.connections), abandoned)
        else:
            log.info("drained: every request in flight was answered")
        return abandoned

    def connection_closed(self, conn) -> None:
        self.connections.discard(conn)
        drained = getattr(self, "_drained", None)
        if drained is not None and not self.connections:
            drained.set()

    @property
    def advertised_cached(self) -> dict[int, VersionRange] | None:
        """The advertised versions if current (a synchronous fast path for every request)."""
        return self._advertised if self._advertised_for is self.cluster.versions else None

    async def advertised_versions(self) -> dict[int, VersionRange]:
        versions = await self.cluster.ensure_versions()
        if self._advertised_for is not versions:
            self._advertised = advertised_versions(versions, LOCAL_KEYS, REGISTRY, self.authorizer is not None)
            self._advertised_for = versions
        assert self._advertised is not None
        return self._advertised

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        cfg = self.config
        async with trio.open_nursery() as nursery:
            if cfg.io.data_plane_thread:
                await nursery.start(self._run_data_plane)
            await nursery.start(self.cluster.refresh_forever, cfg.upstream.metadata_max_age_ms / 1000)
            if cfg.audit.publish:
                from gateway.process.audit_publisher import AuditPublisher

                publisher = AuditPublisher(
                    cfg.audit.topic, max_buffered=cfg.audit.max_buffered,
                    batch_max_events=cfg.audit.batch_max_events, linger_s=cfg.audit.linger_ms / 1000,
                    partitions=cfg.audit.partitions, gateway_name=cfg.cluster_id, registry=self.metrics.registry,
                    chained=True, checkpoint_interval_s=cfg.audit.checkpoint_interval_ms / 1000,
                    event_format=cfg.audit.format)
                self.audit_publisher = publisher
                self.auth_failures.audit = publisher.offer  # failed logins are audit events too
                self.change_log.add_sink(publisher.offer)  # and every change of security state
                add_sink = getattr(self.authorizer, "add_audit_sink", None)
                if add_sink is not None:
                    add_sink(publisher.offer)
                else:  # another authorizer: its audit log lines are published
                    logging.getLogger(AUDIT_LOGGER_NAME).addHandler(publisher.handler(logging.INFO))
                nursery.start_soon(publisher.run, self.cluster)
            admin = None
            if cfg.admin is not None:
                port = await nursery.start(serve_admin, cfg.admin.host, cfg.admin.port, self.metrics.registry, self.readiness)
                admin = (cfg.admin.host, port)
            store = open_metadata_store(cfg, worker_index=self.worker_index)
            nursery.start_soon(self._close_on_exit, store)
            self.image = MetadataImage(store, self.authorizer, cfg.metadata.snapshot_every_records)
            self.quotas.image = self.image
            ready_events = {}
            if self.authorizer is not None:
                if hasattr(self.authorizer, "acl_writer"):
                    self.authorizer.acl_writer = self.image.write_acls
                if hasattr(self.authorizer, "monitor"):
                    self.authorizer.monitor(self.metrics.registry)
                ready_events = {e.listener_name: ev for e, ev in self.authorizer.start(self.server_info()).items()}
            await self.image.load()
            await nursery.start(self.image.follow)
            if self.audit_publisher is not None:
                self._attach_audit_chain(self.audit_publisher, self.image)
            nursery.start_soon(self._resume_metadata_writes)
            await self.dynamic_configs.load()
            nursery.start_soon(self.tls.watch)
            for listener in self.listeners:
                oauth = listener.security.oauthbearer
                if oauth is not None:  # fetched once before the listener opens, then refreshed
                    await nursery.start(self._keep_oauthbearer_keys, listener.name, oauth.keys)
            bound = {}
            for listener in self.listeners:
                event = ready_events.get(listener.name)
                if event is not None and not event.is_set():
                    log.info("listener %s waits for the authorizer to be ready", listener.name)
                    await event.wait()
                port = await nursery.start(listener.serve)
                bound[listener.name] = (listener.config.host, port)
                self._ready[listener.name] = True
                self.metrics.ready.labels(listener.name).set(1)
                log.info("listener %s accepting on %s:%d", listener.name, listener.config.host, port)
            task_status.started(StartedGateway(bound, admin))

    def _attach_audit_chain(self, publisher: Any, image: MetadataImage) -> None:
        """The audit chain resumes from its last checkpoint in the metadata log."""
        from authz.audit_chain import CHECKPOINT_RESOURCE_TYPE, ChainWriter, latest_checkpoint
        from metadata.records import ConfigRecord

        cfg = self.config.audit
        chain_id = cfg.chain_id or f"{self.config.cluster_id}@{socket.gethostname()}"
        if self.worker_index is not None:
            chain_id += f"/worker{self.worker_index}"
        resume = latest_checkpoint(image.configs.get((CHECKPOINT_RESOURCE_TYPE, chain_id), {}))

        async def write(checkpoint) -> None:
            await image.append([ConfigRecord(resource_type=CHECKPOINT_RESOURCE_TYPE, resource_name=chain_id,
                                             name=checkpoint.run, value=checkpoint.to_value())])

        publisher.attach_chain(ChainWriter(chain_id, resume), write)

    async def _keep_oauthbearer_keys(self, listener_name: str, keys, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """A listener's OAUTHBEARER verification keys: fetched off the event loop now and every
        ``jwks_refresh_ms`` (a key id a token names but the set lacks fetches once more, in the
        login's worker thread); not ready on /readyz while there are none."""
        await trio.to_thread.run_sync(keys.fetch)
        if keys.ready:
            log.info("listener %s: OAUTHBEARER keys from %s", listener_name, keys.where)
        task_status.started()
        while True:
            await trio.sleep(keys.refresh_s if keys.ready else min(keys.refresh_s, 5.0))
            await trio.to_thread.run_sync(keys.fetch)

    async def _run_data_plane(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The data-plane thread lives as long as this task; its failure fails the gateway."""
        io = self.config.io
        plane = DataPlane(splice_min=io.splice_min_bytes, pipes=io.splice_pipes, cpus=io.data_plane_cpus)
        done = trio.Event()

        async def stop_when_cancelled() -> None:
            try:
                await done.wait()
            finally:
                plane.stop()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(stop_when_cancelled)
            self.data_plane = plane
            task_status.started()
            try:
                await trio.to_thread.run_sync(plane.run, thread_name="kgw-data-plane",
                                              limiter=trio.CapacityLimiter(1))
            finally:
                self.data_plane = None
                done.set()
            if not plane.stopping:
                raise RuntimeError("the data-plane thread stopped unexpectedly")

    async def _close_on_exit(self, store) -> None:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await self.upstream.aclose()
                await store.aclose()
                if self.authorizer is not None:
                    self.authorizer.close()


class _HealthCounters:
    """Counters kept as plain integers where they happen (the metadata image, the upstream
    cluster: layers below the metrics), exported at scrape time."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    def describe(self):
        return []

    def collect(self):
        gateway = self._gateway
        yield CounterMetricFamily("kgw_metadata_snapshot_failures", "Metadata snapshots that failed (the records "
                                  "were durable; retried with a back-off)",
                                  value=gateway.image.snapshot_failures if gateway.image is not None else 0)
        yield CounterMetricFamily("kgw_upstream_request_timeouts", "Forwarded requests the upstream did not answer "
                                  "within upstream.request_timeout_ms (their client connections were closed)",
                                  value=gateway.cluster.request_timeouts)
        reauth = CounterMetricFamily("kgw_upstream_reauthentications", "KIP-368 re-authentications of kgw's own "
                                     "SASL sessions on upstream connections, by result", labels=["result"])
        for result, count in gateway.cluster.reauthentications.items():
            reauth.add_metric([result], count)
        yield reauth


try:  # the express dispatch reads Gateway.advertised_cached from its fields
    from gateway.connection import _plane_steps
except ImportError:  # pragma: no cover - a build without a compiler
    pass
else:
    _plane_steps.configure_gateway(Gateway)
