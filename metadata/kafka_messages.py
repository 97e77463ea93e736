"""What the Kafka metadata backend (:mod:`metadata.kafka_topic`) puts around librdkafka: its
settings, the format of its messages (a log message is one record batch; a snapshot is chunk
messages plus a JSON manifest), a consumer read that does not wait out its timeout, and a
rate-limited home for librdkafka's own log lines."""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metadata.record_batch import BatchFormatError, decode_batch
from metadata.records import MetadataRecord
from metadata.snapshots import decode_values
from metadata.store import MetadataLogCorruptError, MetadataLogError

__all__ = ["KafkaTopicSettings", "MetadataTopicShapeError", "SnapshotManifest", "available", "decode_message",
           "librdkafka_log"]


class _OncePerInterval(logging.Filter):
    """librdkafka retries a dead broker every few tens of milliseconds and logs each attempt:
    pass one line per (client, facility) per interval; the outage itself is reported once by
    the store (stale since ...)."""

    def __init__(self, interval_s: float = 60.0) -> None:
        super().__init__()
        self.interval_s = interval_s
        self._last: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) and len(record.args) == 3 else ("", "", "")
        key = (str(args[1]), str(args[0]))  # confluent-kafka logs ("%s [%s] %s", facility, client, text)
        now = time.monotonic()
        with self._lock:
            if now - self._last.get(key, -math.inf) < self.interval_s:
                return False
            self._last[key] = now
        return True


#: where librdkafka's own log lines go (instead of raw stderr), rate limited
librdkafka_log = logging.getLogger("kgw.metadata.librdkafka")
librdkafka_log.addFilter(_OncePerInterval())


class MetadataTopicShapeError(MetadataLogError):
    """The metadata topic exists with a shape that breaks ordering or durability."""


@dataclass(frozen=True)
class KafkaTopicSettings:
    """Where and how the shared log lives (YAML ``metadata: {backend: kafka, ...}``)."""

    client: Mapping[str, Any]
    """librdkafka settings that reach the cluster as kgw's own upstream identity
    (``bootstrap.servers``, ``security.protocol``, SASL and TLS)."""
    topic: str = "__kgw_metadata"
    snapshot_topic: str | None = None
    """Default: ``<topic>_snapshots``."""
    replication_factor: int | None = None
    """None: min(3, number of brokers)."""
    min_insync_replicas: int = 2
    write_timeout_s: float = 10.0
    load_timeout_s: float = 60.0
    instance: str = "kgw"
    """This gateway's name in the keys of its messages and in log lines."""

    @property
    def snapshots(self) -> str:
        return self.snapshot_topic or f"{self.topic}_snapshots"


@dataclass(frozen=True)
class SnapshotManifest:
    """The manifest message that ends a snapshot in the snapshot topic."""

    end_offset: int
    chunk_offsets: tuple[int, ...]
    sha256: str
    records: int
    previous: tuple[int, tuple[int, ...]] | None  # end offset and chunk offsets of the one before

    def value(self) -> bytes:
        previous = None if self.previous is None else {"end_offset": self.previous[0],
                                                       "chunk_offsets": list(self.previous[1])}
        return json.dumps({"end_offset": self.end_offset, "chunk_offsets": list(self.chunk_offsets),
                           "sha256": self.sha256, "records": self.records, "previous": previous,
                           "time_ms": int(time.time() * 1000)}).encode()

    @classmethod
    def parse(cls, value: bytes) -> SnapshotManifest | None:
        try:
            d = json.loads(value)
            previous = d.get("previous")
            return cls(int(d["end_offset"]), tuple(int(o) for o in d["chunk_offsets"]), str(d["sha256"]),
                       int(d["records"]),
                       None if previous is None else (int(previous["end_offset"]),
                                                      tuple(int(o) for o in previous["chunk_offsets"])))
        except (ValueError, KeyError, TypeError):
            return None


def available(consumer: Any, timeout_s: float, most: int = 1000) -> list[Any]:
    """The messages (and events) ready now, waiting at most ``timeout_s`` for the first:
    ``consume(n, timeout)`` alone waits out its timeout unless ``n`` messages arrive."""
    first = consumer.poll(timeout_s)
    return [] if first is None else [first, *consumer.consume(most - 1, 0)]


def decode_message(value: bytes | None, offset: int, where: str) -> tuple[MetadataRecord, ...]:
    if value is None:
        raise MetadataLogCorruptError(f"{where}: offset {offset} has a null value")
    try:
        batch = decode_batch(value, 0, 0)
    except BatchFormatError as exc:
        raise MetadataLogCorruptError(f"{where}: offset {offset}: {exc}") from exc
    if batch.size != len(value):
        raise MetadataLogCorruptError(f"{where}: offset {offset}: {len(value) - batch.size} byte(s) after the batch")
    return tuple(decode_values((v for _, v in batch.entries), f"{where} offset {offset}"))
