"""The shared metadata backend: kgw's metadata log on a topic of the Kafka cluster behind it.

Theory of operation
-------------------
Several gateways share one state the way KRaft brokers do (KIP-801,
``docs/operations.md`` "Several gateways"): one ordered log that every instance
replays.  The log is a topic with **one partition** (one order), replication factor
``min(3, brokers)`` unless configured, ``min.insync.replicas`` 2 (capped at the
replication factor), no unclean leader election, and no time or size retention: kgw
bounds it itself, see below.  A second, compacted topic holds the snapshots.

* **One append = one Kafka message.**  Its value is one metadata record batch (the
  format of the directory backend's segments, CRC32C included), so the records of one
  CreateAcls or AlterConfigs are never split or interleaved with another gateway's;
  offsets are Kafka message offsets.  The key names the writing instance (diagnostics
  only).  Writes go through an idempotent producer with ``acks=all``, so a retry inside
  the producer never duplicates or reorders; ``append`` returns the message's offset
  once the cluster acknowledged it, or raises :class:`MetadataStoreUnavailableError`
  after ``write_timeout_s``.
* **Following.**  ``load`` reads the newest snapshot, then the log from the snapshot's
  end offset up to the log end offset it saw when it began (the instance is ready only
  once it has caught up to that point, KIP-801's "ready once the snapshot is loaded").
  Then a consumer thread follows the partition from there and hands every batch - the
  instance's own included - to the Trio loop, where ``subscribe()`` delivers it in
  offset order.  The thread checks the log end every second; when it cannot,
  :attr:`stale_since` says since when (``/readyz``, ``kgw_metadata_stale``).
* **Snapshots** (KIP-630's shape, in Kafka): the image writes one every
  ``snapshot_every_records`` records; the bytes of a snapshot file
  (:func:`metadata.snapshots.encode_snapshot`) are cut into chunk messages keyed
  ``chunk:<end>:<i>`` on the snapshot topic, followed by a ``manifest`` message (JSON:
  end offset, chunk offsets, SHA-256).  ``load`` scans the snapshot topic backwards
  for the newest manifest whose chunks are all present and intact.  After a snapshot
  the writer deletes log records below the *previous* snapshot's end offset
  (DeleteRecords) and tombstones the chunks of the snapshot before that, so the log
  and the snapshot topic stay bounded while a fallback snapshot and the log after it
  always remain (the directory backend keeps the same one-snapshot margin).

Blocking client calls (librdkafka) run in worker threads; nothing here blocks the
Trio loop.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

import trio

from metadata.kafka_messages import (
    KafkaTopicSettings,
    MetadataTopicShapeError,
    SnapshotManifest,
    available,
    decode_message,
    librdkafka_log,
)
from metadata.kafka_topic_shape import ensure_topics
from metadata.record_batch import encode_batch
from metadata.records import MetadataRecord, encode_record
from metadata.snapshots import decode_snapshot, encode_snapshot
from metadata.store import (
    CommittedBatch,
    LoadedState,
    MetadataLogCorruptError,
    MetadataLogError,
    MetadataStore,
    MetadataStoreClosedError,
    MetadataStoreUnavailableError,
    Subscription,
)

__all__ = ["KafkaMetadataStore", "KafkaTopicSettings", "MetadataTopicShapeError"]

log = logging.getLogger("kgw.metadata.kafka")

_CHUNK_BYTES = 512 * 1024
_MANIFEST_KEY = b"manifest"
#: how far back the newest manifest is looked for, in messages of the snapshot topic
_SCAN_WINDOW = 256
_LOG_END_CHECK_S = 1.0


class KafkaMetadataStore(MetadataStore):
    """:class:`~metadata.store.MetadataStore` on a one-partition Kafka topic (module docstring)."""

    shared = True

    def __init__(self, settings: KafkaTopicSettings) -> None:
        try:
            import confluent_kafka  # noqa: F401  (the optional dependency, named when missing)
        except ImportError as exc:  # pragma: no cover - depends on the installation
            raise MetadataLogError("metadata.backend kafka needs the confluent-kafka package: "
                                   "pip install 'kgw[kafka-metadata]'") from exc
        self.settings = settings
        self._state = "new"
        self._token: trio.lowlevel.TrioToken | None = None
        self._producer: Any = None
        self._admin: Any = None
        self._subscriptions: list[Subscription] = []
        self._last_offset = -1
        self._records_since_snapshot = 0
        #: manifests known to this instance, oldest first (the newest loaded, then the ones written)
        self._manifests: list[SnapshotManifest] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._stale_since: float | None = None
        self._confirmed_at = time.monotonic()
        self._log_end = 0
        self._reachable_logged = True

    # -- properties -------------------------------------------------------------------------

    @property
    def last_offset(self) -> int:
        return self._last_offset

    @property
    def records_since_snapshot(self) -> int:
        return self._records_since_snapshot

    @property
    def stale_since(self) -> float | None:
        return self._stale_since

    @property
    def log_end_offset(self) -> int:
        """The log end offset last confirmed with the cluster."""
        return self._log_end

    # -- librdkafka configuration -----------------------------------------------------------

    def _client(self, **extra: Any) -> dict[str, Any]:
        conf = dict(self.settings.client)
        conf.setdefault("client.id", f"kgw-metadata-{self.settings.instance}")
        conf.setdefault("logger", librdkafka_log)
        conf.update(extra)
        return conf

    def _consumer(self, **extra: Any) -> Any:
        from confluent_kafka import Consumer

        # assign() only: no group is joined and no offset is committed (the Python client
        # insists on a group.id nevertheless)
        return Consumer(self._client(**{"group.id": f"kgw-metadata-{self.settings.instance}",
                                        "enable.auto.commit": False, "enable.auto.offset.store": False,
                                        "auto.offset.reset": "error", "fetch.wait.max.ms": 100,
                                        "enable.partition.eof": True, **extra}))

    # -- load -----------------------------------------------------------------------------------

    async def load(self) -> LoadedState:
        if self._state != "new":
            raise MetadataStoreClosedError("load() was already called on the Kafka metadata store")
        self._token = trio.lowlevel.current_trio_token()
        state = await trio.to_thread.run_sync(self._load_blocking, abandon_on_cancel=True)
        self._state = "open"
        self._start_threads(state.last_offset + 1)  # synchronously: nothing is delivered before subscribe()
        return state

    def _load_blocking(self) -> LoadedState:
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient

        s = self.settings
        self._admin = AdminClient(self._client())
        ensure_topics(self._admin, s, self._stop)
        consumer = self._consumer()
        try:
            low, high = self._watermarks(consumer, s.topic)
            manifest, snapshot_records = self._newest_snapshot(consumer)
            start = manifest.end_offset if manifest is not None else 0
            if start < low:
                raise MetadataLogCorruptError(
                    f"metadata topic {s.topic} starts at offset {low} but the newest usable snapshot ends at "
                    f"{start}: records between them are gone (was the topic's retention changed?)")
            log_records: list[MetadataRecord] = []
            for offset, value in self._read(consumer, s.topic, start, high):
                log_records.extend(decode_message(value, offset, f"metadata topic {s.topic}"))
        finally:
            consumer.close()
        self._producer = Producer(self._client(**{
            "enable.idempotence": True, "acks": "all", "linger.ms": 0,
            "message.timeout.ms": int(s.write_timeout_s * 1000), "max.in.flight.requests.per.connection": 5}))
        self._manifests = [manifest] if manifest is not None else []
        self._records_since_snapshot = len(log_records)
        self._last_offset = high - 1
        self._log_end = high
        log.info("metadata topic %s loaded: snapshot %s (%d records), %d log records up to offset %d",
                 s.topic, f"at {start}" if manifest else "none", len(snapshot_records), len(log_records), high - 1)
        return LoadedState(tuple(snapshot_records), start, tuple(log_records), high - 1)

    def _watermarks(self, consumer: Any, topic: str) -> tuple[int, int]:
        """(log start, log end) of the topic's partition; retried while it has no leader yet
        or is not in the client's metadata yet (a topic just created: on a cluster the
        metadata reaches the brokers one by one), or the cluster is briefly unreachable, up
        to the load timeout."""
        from confluent_kafka import KafkaError, KafkaException, TopicPartition

        not_yet = {KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART,
                   KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION}

        deadline = time.monotonic() + self.settings.load_timeout_s
        while True:
            try:
                low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=5.0, cached=False)
                return int(low), int(high)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                retriable = (getattr(error, "retriable", lambda: False)() or "leader" in str(exc).lower()
                             or getattr(error, "code", lambda: None)() in not_yet)
                if not retriable or time.monotonic() > deadline:
                    raise MetadataStoreUnavailableError(f"cannot read the offsets of {topic}: {exc}") from exc
                self._stop.wait(0.2)  # a worker thread, not the Trio loop: back off before retrying

    def _read(self, consumer: Any, topic: str, start: int, end: int) -> Iterable[tuple[int, bytes | None]]:
        """(offset, value) of every message in [start, end); a compacted topic may have gaps."""
        from confluent_kafka import KafkaError, TopicPartition

        if start >= end:
            return
        consumer.assign([TopicPartition(topic, 0, start)])
        deadline = time.monotonic() + self.settings.load_timeout_s
        try:
            while True:
                for m in available(consumer, 0.5):
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            if m.offset() >= end:
                                return
                            continue
                        raise MetadataStoreUnavailableError(f"reading {topic}: {err}")
                    if m.offset() >= end:
                        return
                    yield m.offset(), m.value()
                    if m.offset() >= end - 1:
                        return
                if time.monotonic() > deadline:
                    raise MetadataStoreUnavailableError(f"reading {topic} [{start}, {end}) took longer than "
                                                        f"{self.settings.load_timeout_s:.0f}s")
        finally:
            consumer.unassign()

    def _newest_snapshot(self, consumer: Any) -> tuple[SnapshotManifest | None, list[MetadataRecord]]:

        topic = self.settings.snapshots
        low, high = self._watermarks(consumer, topic)
        end = high
        while end > low:
            begin = max(low, end - _SCAN_WINDOW)
            window = list(self._read(consumer, topic, begin, end))
            manifests = [(o, m) for o, v in window
                         for m in [SnapshotManifest.parse(v) if v is not None else None] if m is not None]
            for offset, manifest in reversed(manifests):
                records = self._snapshot_records(consumer, manifest)
                if records is not None:
                    return manifest, records
                log.warning("metadata snapshot at end offset %d (manifest at %d of %s) is incomplete or "
                            "damaged; trying an older one", manifest.end_offset, offset, topic)
            end = begin
        return None, []

    def _snapshot_records(self, consumer: Any, manifest: SnapshotManifest) -> list[MetadataRecord] | None:
        if not manifest.chunk_offsets:
            return None
        wanted = set(manifest.chunk_offsets)
        got = {o: v for o, v in self._read(consumer, self.settings.snapshots, min(wanted), max(wanted) + 1)
               if o in wanted}
        chunks = [got.get(o) for o in manifest.chunk_offsets]
        if set(got) != wanted or any(v is None for v in chunks):
            return None
        data = b"".join(c for c in chunks if c is not None)
        if hashlib.sha256(data).hexdigest() != manifest.sha256:
            return None
        try:
            return decode_snapshot(data, f"{self.settings.snapshots}@{manifest.end_offset}")
        except MetadataLogCorruptError:
            return None

    # -- following ------------------------------------------------------------------------------

    def _start_threads(self, position: int) -> None:
        follower = threading.Thread(target=self._follow, args=(position,), name="kgw-metadata-follower",
                                    daemon=True)
        poller = threading.Thread(target=self._poll_producer, name="kgw-metadata-producer", daemon=True)
        self._threads = [follower, poller]
        for t in self._threads:
            t.start()

    def _poll_producer(self) -> None:
        while not self._stop.is_set():
            self._producer.poll(0.1)

    def _follow(self, position: int) -> None:
        from confluent_kafka import KafkaError, TopicPartition

        topic = self.settings.topic
        consumer = self._consumer()
        consumer.assign([TopicPartition(topic, 0, position)])
        next_check = 0.0
        try:
            while not self._stop.is_set():
                for m in available(consumer, 0.1):
                    err = m.error()
                    if err is not None:
                        if err.code() != KafkaError._PARTITION_EOF:
                            log.debug("metadata follower: %s", err)
                        continue
                    try:
                        records = decode_message(m.value(), m.offset(), f"metadata topic {topic}")
                    except MetadataLogCorruptError as exc:  # every instance skips it alike
                        log.error("%s; skipped", exc)
                        records = ()
                    self._to_trio(self._deliver, CommittedBatch(m.offset(), records, m.offset()))
                now = time.monotonic()
                if now >= next_check:
                    next_check = now + _LOG_END_CHECK_S
                    self._check_log_end(consumer, TopicPartition(topic, 0))
        except trio.RunFinishedError:
            pass
        finally:
            consumer.close()

    def _check_log_end(self, consumer: Any, tp: Any) -> None:
        if self._admin is not None:
            self._admin.poll(0)  # serve its queued log lines (see librdkafka_log)
        try:
            _low, high = consumer.get_watermark_offsets(tp, timeout=2.0, cached=False)
        except Exception as exc:  # noqa: BLE001 - KafkaException: the cluster did not answer
            if self._stale_since is None:
                self._stale_since = time.time() - (time.monotonic() - self._confirmed_at)
                log.warning("metadata topic %s unreachable (%s): authorizing with the state as of offset %d",
                            self.settings.topic, exc, self._last_offset)
            return
        self._confirmed_at = time.monotonic()
        self._log_end = high
        if self._stale_since is not None:
            log.warning("metadata topic %s reachable again after %.1fs; catching up from offset %d to %d",
                        self.settings.topic, time.time() - self._stale_since, self._last_offset, high - 1)
            self._stale_since = None

    def _to_trio(self, fn: Any, *args: Any) -> None:
        assert self._token is not None
        trio.from_thread.run_sync(fn, *args, trio_token=self._token)

    def _deliver(self, batch: CommittedBatch) -> None:
        if batch.last_offset <= self._last_offset:
            return  # already in the loaded state
        self._last_offset = batch.last_offset
        self._records_since_snapshot += len(batch.records)
        self._subscriptions = [s for s in self._subscriptions if s._offer(batch)]

    def subscribe(self, *, max_buffered_batches: int = 1024) -> Subscription:
        self._require_open()
        subscription = Subscription(max_buffered_batches)
        self._subscriptions.append(subscription)
        return subscription

    # -- writes ---------------------------------------------------------------------------------

    def _require_open(self) -> None:
        if self._state != "open":
            raise MetadataStoreClosedError(f"the Kafka metadata store is {self._state}")

    async def _produce(self, topic: str, items: Sequence[tuple[bytes, bytes | None]]) -> list[int]:
        """Produce (key, value) messages in order; their offsets once all are acknowledged."""
        from confluent_kafka import KafkaException

        results: list[Any] = [None] * len(items)
        done = trio.Event()
        remaining = [len(items)]
        token = self._token

        def delivered(i: int, err: Any, msg: Any) -> None:  # the producer's poll thread
            results[i] = err if err is not None else msg.offset()
            remaining[0] -= 1
            if remaining[0] == 0:
                try:
                    token.run_sync_soon(done.set)  # type: ignore[union-attr]
                except trio.RunFinishedError:
                    pass

        try:
            for i, (key, value) in enumerate(items):
                self._producer.produce(topic, value=value, key=key, partition=0,
                                       on_delivery=lambda err, msg, i=i: delivered(i, err, msg))
        except (BufferError, KafkaException) as exc:
            raise MetadataStoreUnavailableError(f"metadata topic {topic}: {exc}") from exc
        with trio.move_on_after(self.settings.write_timeout_s + 5):
            await done.wait()
        if not done.is_set():
            raise MetadataStoreUnavailableError(f"metadata topic {topic}: no acknowledgement within "
                                                f"{self.settings.write_timeout_s:.0f}s")
        errors = [r for r in results if not isinstance(r, int)]
        if errors:
            raise MetadataStoreUnavailableError(f"metadata topic {topic}: {errors[0]}")
        return results

    async def append(self, records: Sequence[MetadataRecord]) -> int:
        self._require_open()
        if not records:
            raise ValueError("append() needs at least one record")
        value = bytes(encode_batch([encode_record(r) for r in records], timestamp_ms=int(time.time() * 1000)))
        (offset,) = await self._produce(self.settings.topic, [(self.settings.instance.encode(), value)])
        return offset

    async def snapshot(self, records: Iterable[MetadataRecord], *, through_offset: int | None = None) -> None:
        self._require_open()
        end = (self._last_offset if through_offset is None else through_offset) + 1
        if self._manifests and self._manifests[-1].end_offset >= end:
            return
        records = list(records)
        # encoded off the event loop: 100k ACLs take a few hundred milliseconds
        data = await trio.to_thread.run_sync(
            lambda: encode_snapshot(records, epoch=0, timestamp_ms=int(time.time() * 1000)))
        chunks = [data[i : i + _CHUNK_BYTES] for i in range(0, len(data), _CHUNK_BYTES)] or [b""]
        offsets = await self._produce(self.settings.snapshots,
                                      [(f"chunk:{end}:{i}".encode(), c) for i, c in enumerate(chunks)])
        previous = self._manifests[-1] if self._manifests else None
        manifest = SnapshotManifest(end, tuple(offsets), hashlib.sha256(data).hexdigest(),
                             len(records), None if previous is None
                             else (previous.end_offset, previous.chunk_offsets))
        await self._produce(self.settings.snapshots, [(_MANIFEST_KEY, manifest.value())])
        self._manifests.append(manifest)
        self._records_since_snapshot = 0
        log.info("metadata snapshot written to %s: end offset %d, %d bytes in %d chunk(s)",
                 self.settings.snapshots, end, len(data), len(chunks))
        if previous is not None:
            await trio.to_thread.run_sync(self._retain_from, previous, abandon_on_cancel=True)

    def _retain_from(self, previous: SnapshotManifest) -> None:
        """Delete log records below the previous snapshot's end and tombstone the chunks of the
        snapshot before it: one fallback snapshot and the log after it always remain."""
        from confluent_kafka import TopicPartition

        s = self.settings
        try:
            futures = self._admin.delete_records([TopicPartition(s.topic, 0, previous.end_offset)])
            for f in futures.values():
                f.result(timeout=s.write_timeout_s)
        except Exception as exc:  # noqa: BLE001 - retention is retried at the next snapshot
            log.warning("could not delete metadata log records below offset %d: %s", previous.end_offset, exc)
        if previous.previous is not None:
            old_end, old_chunks = previous.previous
            for i in range(len(old_chunks)):
                self._producer.produce(s.snapshots, key=f"chunk:{old_end}:{i}".encode(), value=None, partition=0)
        self._manifests = self._manifests[-2:]

    async def aclose(self) -> None:
        if self._state == "closed":
            return
        self._state = "closed"
        self._stop.set()
        threads, self._threads = self._threads, []
        for subscription in self._subscriptions:
            subscription._finish()
        self._subscriptions.clear()

        def finish() -> None:
            for t in threads:
                t.join(timeout=5)
            if self._producer is not None:
                self._producer.flush(self.settings.write_timeout_s)

        await trio.to_thread.run_sync(finish)
