"""Publishing authorization audit events to a topic on the upstream cluster.

Theory of operation
-------------------
The authorizer's decision point (``authz.audit.log_decision``) hands each
decision's fields -- the ``extra`` dict of the audit log line, ``kgw_principal``,
``kgw_allowed`` … -- to :meth:`AuditPublisher.offer`.  ``offer`` runs on the
request's hot path, so it only stamps the time and appends the dict to a
bounded deque: O(1), no I/O, no JSON, never blocks, safe from any thread.
When the buffer holds ``max_buffered`` events the new event is dropped and
``kgw_audit_events_dropped_total{reason="buffer_full"}`` counts it.

:meth:`AuditPublisher.run` is a background task: every ``linger_s`` it takes
up to ``batch_max_events`` events, encodes them as JSON record values (key =
principal, record timestamp = decision time) in one record batch v2 (kio's
writer) and sends one Produce request (acks=all) to the partition leader
over its own upstream connection, with ``request_timeout_s``.  Failures
(broker unreachable, timeout, leader moved, topic missing) keep the batch and
retry with exponential backoff up to ``backoff_max_s``; while that goes on
the buffer fills and further events are dropped and counted -- clients are
never slowed or failed.  A batch the cluster rejects for good (e.g.
TOPIC_AUTHORIZATION_FAILED for kgw's own upstream principal, record too
large) is dropped and counted with ``reason="rejected"``.  The topic is
created (``partitions``, replication factor ``replication_factor``) when
missing, if ``create_topic``.

Event JSON (one object per record; ``time`` is ISO-8601 UTC with
milliseconds, ``ts_ms`` the same as epoch milliseconds)::

    {"time": "2025-01-01T12:00:00.123Z", "ts_ms": 1735732800123,
     "principal": "User:alice", "allowed": false, "decision": "DENIED",
     "operation": "READ", "resource": "Topic:LITERAL:orders",
     "resource_type": "Topic", "pattern_type": "LITERAL", "resource_name": "orders",
     "listener": "EXTERNAL", "client_address": "10.1.2.3", "api": "Fetch",
     "client_id": "c1", "correlation_id": 7, "rule": "DefaultDeny", "gateway": "kgw"}

Tamper evidence (``authz/audit_chain.py``): with a chain attached (:meth:`attach_chain`,
once the metadata log is loaded, so that a restart resumes from the chain's last checkpoint),
each batch is sealed once, when it is taken: its events get ``chain``, ``run``, ``seq``,
``prev_hash`` and ``hash``, and the head moves only when the batch is written (a batch
refused for good leaves the head where it was).  Events dropped before they were numbered
(buffer full, batch refused) are recorded by a ``"event": "dropped"`` event leading the next
batch.  Every ``checkpoint_interval_s``, and when the publisher stops, the head is written to
the metadata log.  Until a chain is attached, nothing is published (events wait, bounded).

:class:`AuditLogHandler` is the alternative hook: a ``logging.Handler`` for
the ``kgw.authorizer`` logger that offers every record carrying the
``kgw_*`` attributes.  It only sees the decisions the logger's level lets
through (denied at INFO, allowed at DEBUG), which is why the decision-point
hook is the one the gateway uses.
"""

from __future__ import annotations

import collections
import datetime as _dt
import io
import json
import logging
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import trio
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.static.primitive import i8, i16, i32, i64
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from authz.audit_chain import ChainWriter
from authz.audit_events import audit_event
from authz.audit_ocsf import to_ocsf
from gateway.upstream.cluster import UpstreamCluster, UpstreamUnavailable, open_upstream, roundtrip
from gateway.upstream.security import session_ending
from protocol.apis.api_versions import KIO_VERSIONS
from protocol.codecs import CodecError, make, nested, request_class

__all__ = ["AuditPublisher", "AuditLogHandler", "encode_batch"]

log = logging.getLogger("kgw.audit.publisher")

_UTC = _dt.timezone.utc

PRODUCE, METADATA, CREATE_TOPICS = 0, 3, 19
# Produce v13 / Metadata v13 address topics by id only; stay below.
_MAX_VERSION = {PRODUCE: 12, METADATA: 12, CREATE_TOPICS: 7}
# Errors after which the same batch is retried (after a metadata refresh).
_RETRIABLE = {3, 5, 6, 7, 13, 14, 15, 19, 20, 56}  # unknown topic, leader n/a, not leader, timeout, network, coordinator, replicas, storage
_TOPIC_AUTHORIZATION_FAILED = 29
#: after creating the audit topic, how long missing leaders are expected rather than warned about
_SETTLE_S = 30.0


class _Retry(Exception):
    pass


class _Rejected(Exception):
    pass


def encode_batch(events: list[tuple[float, Mapping[str, Any]]], gateway: str | None = None) -> bytes:
    """One record batch v2 (no compression, no producer id) of JSON values."""
    built = [audit_event(fields, ts, gateway) for ts, fields in events]
    return encode_events(built, [json.dumps(e, separators=(",", ":"), default=str).encode() for e in built])


def encode_events(events: list[dict[str, Any]], values: list[bytes]) -> bytes:
    """One record batch v2 of these (kgw-format) events' record values, in whatever format
    ``values`` hold (key = the principal, timestamp = the event's time)."""
    records = []
    for i, (event, value) in enumerate(zip(events, values)):
        principal = event.get("principal")
        records.append(Record(
            attributes=i8(0),
            timestamp=_dt.datetime.fromtimestamp(event["ts_ms"] / 1000, tz=_UTC),
            offset=i64(i),
            key=principal.encode() if isinstance(principal, str) else None,
            value=value,
            headers=(),
        ))
    buf = io.BytesIO()
    write_new_batch(buf, NewRecordBatch(producer_id=i64(-1), producer_epoch=i16(-1), base_sequence=i32(-1),
                                        records=tuple(records), attributes=i16(0)))
    return buf.getvalue()


class AuditPublisher:
    """Bounded, non-blocking buffer of audit events plus the task that produces them."""

    def __init__(
        self,
        topic: str = "kgw-audit",
        *,
        max_buffered: int = 10000,
        batch_max_events: int = 500,
        linger_s: float = 0.2,
        request_timeout_s: float = 5.0,
        backoff_initial_s: float = 0.2,
        backoff_max_s: float = 5.0,
        create_topic: bool = True,
        partitions: int = 1,
        replication_factor: int = -1,
        gateway_name: str | None = None,
        registry: CollectorRegistry | None = None,
        clock=time.time,
        chained: bool = False,
        checkpoint_interval_s: float = 10.0,
        event_format: str = "kgw",
    ) -> None:
        if max_buffered < 1 or batch_max_events < 1:
            raise ValueError("max_buffered and batch_max_events must be positive")
        self.topic = topic
        self.max_buffered = max_buffered
        self.batch_max_events = batch_max_events
        self.linger_s = linger_s
        self.request_timeout_s = request_timeout_s
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.create_topic = create_topic
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.gateway_name = gateway_name
        self._clock = clock
        #: "kgw" (authz/audit_events.py) or "ocsf" (authz/audit_ocsf.py)
        self.event_format = event_format
        #: tamper evidence: nothing is published until :meth:`attach_chain` when ``chained``
        self.chained = chained
        self.chain: ChainWriter | None = None
        self._write_checkpoint: Any = None
        self.checkpoint_interval_s = checkpoint_interval_s
        self._unrecorded = 0  # events dropped since the last sealed batch (a "dropped" event says so)
        self._buffer: collections.deque[tuple[float, Mapping[str, Any]]] = collections.deque()
        self._lock = threading.Lock()  # only for the capacity check + append pair
        #: (event kind, allowed) -> events offered: what the audit trail was given, published or not
        self._offered: collections.Counter[tuple[str, bool]] = collections.Counter()
        self._conns: dict[int, trio.SocketStream] = {}
        self._leaders: dict[int, int] = {}   # partition -> leader node id
        self._next_partition = 0
        #: when this publisher created the topic: until _SETTLE_S later, "no leader yet" is expected
        self._created_at: float | None = None
        r = registry if registry is not None else CollectorRegistry()
        self.registry = r
        self.dropped = Counter("kgw_audit_events_dropped", "Audit events not published",
                               ["reason"], registry=r)
        self._dropped_full = self.dropped.labels("buffer_full")
        self._dropped_rejected = self.dropped.labels("rejected")
        self.published = Counter("kgw_audit_events_published", "Audit events written to the audit topic",
                                 registry=r)
        self.publish_errors = Counter("kgw_audit_publish_errors", "Failed audit Produce attempts (retried)",
                                      registry=r)
        self.buffered = Gauge("kgw_audit_events_buffered", "Audit events waiting to be published", registry=r)
        self.buffered.set_function(lambda: len(self._buffer))
        r.register(_PublisherCollector(self))

    # -- the hot path -----------------------------------------------------------

    def offer(self, fields: Mapping[str, Any]) -> bool:
        """Queue one decision; False (and counted) if the buffer is full.  Never blocks on I/O."""
        with self._lock:
            self._offered[(fields.get("kgw_event", "authorization"), bool(fields.get("kgw_allowed")))] += 1
            if len(self._buffer) >= self.max_buffered:
                full = True
                self._unrecorded += 1
            else:
                self._buffer.append((self._clock(), fields))
                full = False
        if full:
            self._dropped_full.inc()
            return False
        return True

    __call__ = offer

    def pending(self) -> int:
        return len(self._buffer)

    def handler(self, level: int = logging.NOTSET) -> "AuditLogHandler":
        return AuditLogHandler(self, level)

    # -- the background task -----------------------------------------------------

    def attach_chain(self, chain: ChainWriter, write_checkpoint: Any) -> None:
        """Start sealing with ``chain``; ``write_checkpoint(Checkpoint)`` (async) records a head."""
        self.chain = chain
        self._write_checkpoint = write_checkpoint
        log.info("audit chain %s: run %s%s", chain.chain, chain.run,
                 f" resumes from run {chain.resume.run} at seq {chain.resume.seq}" if chain.resume else " starts")

    def _seal(self, batch: list[tuple[float, Mapping[str, Any]]]) -> tuple[bytes, int, Any]:
        """The record batch to publish for ``batch``, its event count and the chain head it
        leads to (None without a chain)."""
        events = [audit_event(fields, ts, self.gateway_name) for ts, fields in batch]
        if self.chain is None:
            return encode_events(events, [json.dumps(self._formatted(e), separators=(",", ":"), default=str).encode()
                                          for e in events]), len(events), None
        with self._lock:
            dropped, self._unrecorded = self._unrecorded, 0
        if dropped:
            now = self._clock()
            marker = audit_event({"kgw_event": "dropped"}, now, self.gateway_name)
            marker = {k: marker[k] for k in ("time", "ts_ms", "event", "gateway") if k in marker}
            marker.update(count=dropped, reason="events offered but not published (buffer full or refused)")
            events.insert(0, marker)
        values, head = self.chain.seal_batch([self._formatted(e) for e in events])
        return encode_events(events, values), len(events), (head, dropped)

    def _formatted(self, event: dict[str, Any]) -> dict[str, Any]:
        return to_ocsf(event) if self.event_format == "ocsf" else event

    async def _checkpoint(self) -> None:
        chain = self.chain
        if chain is None or self._write_checkpoint is None:
            return
        checkpoint = chain.checkpoint(int(self._clock() * 1000))
        if checkpoint is None:
            return
        try:
            await self._write_checkpoint(checkpoint)
        except Exception as e:  # noqa: BLE001 - the metadata log may be down; publishing goes on
            log.warning("audit chain %s: checkpoint at seq %d not written (%s); tried again later",
                        chain.chain, checkpoint.seq, e)
            return
        chain.checkpointed(checkpoint)

    def _take(self) -> list[tuple[float, Mapping[str, Any]]]:
        out = []
        buf = self._buffer
        while buf and len(out) < self.batch_max_events:
            out.append(buf.popleft())
        return out

    async def run(self, cluster: UpstreamCluster, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Publish until cancelled."""
        task_status.started()
        batch: list = []
        sealed: tuple[bytes, int, Any] | None = None
        backoff = self.backoff_initial_s
        last_warning = 0.0
        next_checkpoint = trio.current_time() + self.checkpoint_interval_s
        try:
            while True:
                if not batch:
                    await trio.sleep(self.linger_s)
                    if trio.current_time() >= next_checkpoint:
                        next_checkpoint = trio.current_time() + self.checkpoint_interval_s
                        await self._checkpoint()
                    if self.chained and self.chain is None:
                        continue  # not before the chain's resume point is known
                    batch = self._take()
                    if not batch:
                        continue
                    sealed = self._seal(batch)
                assert sealed is not None
                try:
                    with trio.fail_after(self.request_timeout_s):
                        await self._publish(cluster, sealed[0])
                except _Rejected as e:
                    self._dropped_rejected.inc(len(batch))
                    log.warning("audit topic %s rejected %d events: %s", self.topic, len(batch), e)
                    if sealed[2] is not None:  # never written: recorded as dropped by the next batch
                        with self._lock:
                            self._unrecorded += len(batch) + sealed[2][1]
                    batch = []
                    await self._close_all()
                    await trio.sleep(backoff)
                    backoff = min(backoff * 2, self.backoff_max_s)
                except (_Retry, UpstreamUnavailable, trio.TooSlowError, OSError, CodecError,
                        trio.BrokenResourceError, trio.ClosedResourceError) as e:
                    now = time.monotonic()
                    if isinstance(e, _Retry) and self._created_at is not None and now - self._created_at < _SETTLE_S:
                        # the topic was just created here: its leaders appear a moment later
                        log.debug("audit topic %s settling after its creation: %s", self.topic, e)
                    else:
                        self.publish_errors.inc()
                        if now - last_warning > 30:
                            last_warning = now
                            log.warning("publishing %d audit events to %s failed (%s); retrying, %d buffered",
                                        len(batch), self.topic, e or type(e).__name__, len(self._buffer))
                    await self._close_all()
                    await trio.sleep(backoff)
                    backoff = min(backoff * 2, self.backoff_max_s)
                else:
                    self.published.inc(len(batch))
                    if sealed[2] is not None and self.chain is not None:
                        self.chain.commit(sealed[2][0])
                    batch = []
                    backoff = self.backoff_initial_s
        finally:
            with trio.CancelScope(shield=True):
                await self._close_all()
                with trio.move_on_after(2):  # the head at a graceful stop
                    await self._checkpoint()

    # -- produce -----------------------------------------------------------------

    async def _close_all(self) -> None:
        conns, self._conns = self._conns, {}
        self._leaders = {}
        for stream in conns.values():
            with trio.move_on_after(1):
                await stream.aclose()

    @staticmethod
    def _version(versions, api_key: int) -> int:
        upstream = versions.get(api_key)
        if upstream is None:
            raise UpstreamUnavailable(f"upstream does not support API {api_key}")
        top = min(KIO_VERSIONS[api_key].max, upstream.max, _MAX_VERSION[api_key])
        if top < max(KIO_VERSIONS[api_key].min, upstream.min):
            raise UpstreamUnavailable(f"no common version for API {api_key}")
        return top

    async def _bootstrap_roundtrip(self, cluster: UpstreamCluster, api_key: int, version: int, body):
        stream = await cluster.connect_bootstrap()
        async with stream:
            return await roundtrip(stream, api_key, version, body, self.request_timeout_s)

    async def _refresh_leaders(self, cluster: UpstreamCluster, versions) -> None:
        version = self._version(versions, METADATA)
        cls = request_class(METADATA, version)
        topic_cls = nested(cls, "topics")
        body = make(cls, topics=(make(topic_cls, name=self.topic, topic_id=None),),
                    allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                    include_topic_authorized_operations=False)
        response = await self._bootstrap_roundtrip(cluster, METADATA, version, body)
        for broker in response.brokers:
            cluster.learn(broker.node_id, broker.host, broker.port, broker.rack)
        topic = next((t for t in response.topics if t.name == self.topic), None)
        code = int(topic.error_code) if topic is not None else 3
        if code == 3 and self.create_topic:
            await self._create_topic(cluster, versions)
            raise _Retry(f"created audit topic {self.topic}")
        if code == _TOPIC_AUTHORIZATION_FAILED:
            raise _Rejected(f"kgw's upstream principal may not describe {self.topic} (TOPIC_AUTHORIZATION_FAILED)")
        if code:
            raise _Retry(f"metadata for {self.topic}: error {code}")
        self._leaders = {int(p.partition_index): int(p.leader_id) for p in topic.partitions if p.leader_id >= 0}
        if not self._leaders:
            raise _Retry(f"no leader for any partition of {self.topic}")

    async def _create_topic(self, cluster: UpstreamCluster, versions) -> None:
        version = self._version(versions, CREATE_TOPICS)
        cls = request_class(CREATE_TOPICS, version)
        topic_cls = nested(cls, "topics")
        body = make(cls, topics=(make(topic_cls, name=self.topic, num_partitions=i32(self.partitions),
                                      replication_factor=i16(self.replication_factor), assignments=(),
                                      configs=()),),
                    timeout=timedelta(seconds=self.request_timeout_s), validate_only=False)
        response = await self._bootstrap_roundtrip(cluster, CREATE_TOPICS, version, body)
        for t in response.topics:
            if t.error_code not in (0, 36):  # 36 TOPIC_ALREADY_EXISTS
                if t.error_code in (29, 31):  # topic / cluster authorization failed
                    raise _Rejected(f"creating {self.topic} failed with error {t.error_code}")
                raise _Retry(f"creating {self.topic} failed with error {t.error_code}")
        log.info("created audit topic %s", self.topic)
        self._created_at = time.monotonic()

    async def _leader_stream(self, cluster: UpstreamCluster, node_id: int) -> trio.SocketStream:
        stream = self._conns.get(node_id)
        if stream is not None and session_ending(stream):  # kgw's SASL session ends (KIP-368)
            del self._conns[node_id]
            await trio.aclose_forcefully(stream)
            stream = None
        if stream is None:
            node = cluster.nodes.get(node_id)
            if node is None:
                raise _Retry(f"leader {node_id} of {self.topic} is not a known broker")
            stream = self._conns[node_id] = await open_upstream(node.host, node.port, cluster.connect_timeout_s,
                                                                cluster.security)
        return stream

    async def _publish(self, cluster: UpstreamCluster, records: bytes) -> None:
        versions = await cluster.ensure_versions()
        if not self._leaders:
            await self._refresh_leaders(cluster, versions)
        partitions = sorted(self._leaders)
        partition = partitions[self._next_partition % len(partitions)]
        self._next_partition += 1
        leader = self._leaders[partition]
        version = self._version(versions, PRODUCE)
        cls = request_class(PRODUCE, version)
        topic_cls = nested(cls, "topic_data")
        part_cls = nested(topic_cls, "partition_data")
        body = make(cls, transactional_id=None, acks=i16(-1),
                    timeout=timedelta(seconds=max(1.0, self.request_timeout_s - 1)),
                    topic_data=(make(topic_cls, name=self.topic,
                                     partition_data=(make(part_cls, index=i32(partition), records=records),)),))
        stream = await self._leader_stream(cluster, leader)
        try:
            response = await roundtrip(stream, PRODUCE, version, body, self.request_timeout_s)
        except BaseException:
            self._conns.pop(leader, None)
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await stream.aclose()
            raise
        for topic in response.responses:
            for p in topic.partition_responses:
                code = int(p.error_code)
                if code == 0:
                    continue
                self._leaders = {}
                if code in _RETRIABLE:
                    raise _Retry(f"Produce to {self.topic}-{partition}: error {code}")
                raise _Rejected(f"Produce to {self.topic}-{partition}: error {code} "
                                f"{getattr(p, 'error_message', '') or ''}".strip())


class _PublisherCollector:
    """The trail's own counts, read when scraped: ``kgw_audit_events_offered_total{event,
    decision}`` (what the gateway gave the trail: with ``dropped`` and ``buffered``, what the
    published count must add up to) and ``kgw_audit_chain_head{chain, run}`` (the last ``seq``
    written: a reader of the topic knows which events the scraped counters cover)."""

    def __init__(self, publisher: AuditPublisher) -> None:
        self.publisher = publisher

    def collect(self):
        publisher = self.publisher
        offered = CounterMetricFamily("kgw_audit_events_offered", "Audit events offered to the publisher, by "
                                      "kind (authorization, authentication, change) and decision", labels=["event",
                                                                                                       "decision"])
        with publisher._lock:
            counts = sorted(publisher._offered.items())
        for (event, allowed), n in counts:
            offered.add_metric([event, "allowed" if allowed else "denied"], n)
        yield offered
        head = GaugeMetricFamily("kgw_audit_chain_head", "The seq of the last audit event this process wrote to "
                                 "the topic, per chain and run", labels=["chain", "run"])
        chain = publisher.chain
        if chain is not None:
            head.add_metric([chain.chain, chain.run], chain.seq)
        yield head


class AuditLogHandler(logging.Handler):
    """A ``logging.Handler`` for ``kgw.authorizer`` that offers decisions to a publisher.

    Sees only what the logger's level lets through; prefer the decision-point
    hook (``StandardAuthorizer.add_audit_sink``)."""

    _FIELDS = ("kgw_principal", "kgw_allowed", "kgw_operation", "kgw_host", "kgw_resource", "kgw_request",
               "kgw_client_id", "kgw_correlation_id", "kgw_listener", "kgw_rule")

    def __init__(self, publisher: AuditPublisher, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.publisher = publisher

    def emit(self, record: logging.LogRecord) -> None:
        if not hasattr(record, "kgw_principal"):
            return
        self.publisher.offer({k: getattr(record, k, None) for k in self._FIELDS})
