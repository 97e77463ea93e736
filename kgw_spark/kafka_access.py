"""Reading Kafka through kgw for the data source: offsets (earliest, latest, by timestamp),
offset ranges per partition and reading one range, with authorization failures turned
into a clear error naming the topic.
"""

from __future__ import annotations

import logging
import datetime as _dt
import re
import time
from collections.abc import Iterator, Mapping
from typing import Any
from pyspark.sql.datasource import InputPartition
from kgw_spark.options import KgwSourceError, SourceOptions

log = logging.getLogger("kgw.spark")
#: ListOffsets timestamps of the earliest and the latest offset
EARLIEST, LATEST = -2, -1

_TOPIC_AUTHORIZATION_FAILED = 29


_UTC = _dt.timezone.utc


def _auth_error(topic: str, where: str) -> KgwSourceError:
    return KgwSourceError(
        f"Not authorized to read topic '{topic}': TOPIC_AUTHORIZATION_FAILED (error "
        f"{_TOPIC_AUTHORIZATION_FAILED}) in {where}. Grant the job's principal DESCRIBE and READ "
        f"on topic '{topic}'.")


def _is_auth_error(exc: BaseException) -> bool:
    from kafka import errors as Errors

    return isinstance(exc, (Errors.TopicAuthorizationFailedError,)) or \
        getattr(exc, "errno", None) == _TOPIC_AUTHORIZATION_FAILED


class Offsets:
    """Driver-side questions to the cluster: partitions, earliest, latest."""

    def __init__(self, client: Mapping[str, Any], timeout_s: float = 30.0) -> None:
        self.client = dict(client)
        self.timeout_s = timeout_s
        self._admin = None

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def _admin_client(self):
        if self._admin is None:
            from kafka.admin import KafkaAdminClient

            allowed = set(KafkaAdminClient.DEFAULT_CONFIG)
            self._admin = KafkaAdminClient(**{k: v for k, v in self.client.items() if k in allowed})
        return self._admin

    def _consumer(self, **extra):
        from kafka import KafkaConsumer

        conf = dict(self.client)
        conf.update(group_id=None, enable_auto_commit=False, auto_offset_reset="earliest")
        conf.update(extra)
        return KafkaConsumer(**conf)

    def topic_partitions(self, opts: SourceOptions) -> list[tuple[str, int]]:
        """The partitions the options select; raises on an unauthorized topic."""
        if opts.strategy == "assign":
            return sorted(set(opts.assigned))
        admin = self._admin_client()
        if opts.strategy == "subscribe":
            described = admin.describe_topics(list(opts.topics))
        else:
            regex = re.compile(opts.pattern or "")
            names = [t for t in admin.list_topics() if regex.fullmatch(t)]
            described = admin.describe_topics(names) if names else []
        out = []
        for topic in described:
            name = topic.get("topic") or topic.get("name")
            code = topic.get("error_code", 0)
            if code == _TOPIC_AUTHORIZATION_FAILED:
                raise _auth_error(name, "Metadata")
            if code == 3:  # UNKNOWN_TOPIC_OR_PARTITION: nothing to read (yet)
                continue
            if code:
                raise KgwSourceError(f"Metadata for topic '{name}' failed with error {code}")
            for p in topic.get("partitions", ()):
                out.append((name, int(p.get("partition") if "partition" in p else p.get("partition_index"))))
        return sorted(out)

    def earliest(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        if not tps:
            return {}
        from kafka import TopicPartition

        consumer = self._consumer()
        try:
            got = consumer.beginning_offsets([TopicPartition(t, p) for t, p in tps],
                                             timeout_ms=int(self.timeout_s * 1000))
        except Exception as exc:
            self._raise_named(exc, tps, "ListOffsets")
            raise
        finally:
            consumer.close()
        return {(tp.topic, tp.partition): int(o) for tp, o in got.items()}

    def latest(self, tps: list[tuple[str, int]], earliest: Mapping[tuple[str, int], int] | None = None
               ) -> dict[tuple[str, int], int]:
        """The high watermark of each partition, from Fetch responses.

        Fetches at each partition's earliest offset with tiny fetch sizes and
        reads the ``high_watermark`` field; ListOffsets(latest) is not used."""
        if not tps:
            return {}
        from kafka import TopicPartition

        earliest = dict(earliest) if earliest is not None else self.earliest(tps)
        consumer = self._consumer(max_partition_fetch_bytes=1, fetch_max_bytes=1, fetch_max_wait_ms=10,
                                  max_poll_records=1)
        try:
            parts = [TopicPartition(t, p) for t, p in tps]
            consumer.assign(parts)
            for tp in parts:
                consumer.seek(tp, earliest[(tp.topic, tp.partition)])
            deadline = time.monotonic() + self.timeout_s
            pending = set(parts)
            while pending:
                if time.monotonic() > deadline:
                    raise KgwSourceError("no Fetch response (high watermark) within "
                                         f"{self.timeout_s:g}s for {sorted(map(tuple, pending))}")
                try:
                    consumer.poll(timeout_ms=100, max_records=1)
                except Exception as exc:
                    self._raise_named(exc, tps, "Fetch")
                    raise
                for tp in list(pending):
                    hw = consumer.highwater(tp)
                    if hw is not None:
                        pending.discard(tp)
                        consumer.pause(tp)
            return {(tp.topic, tp.partition): int(consumer.highwater(tp)) for tp in parts}
        finally:
            consumer.close()

    @staticmethod
    def _raise_named(exc: BaseException, tps, where: str) -> None:
        if _is_auth_error(exc):
            topics = sorted({t for t, _ in tps})
            named = set()
            for arg in exc.args:
                if isinstance(arg, (set, frozenset, list, tuple)):
                    named |= {str(t) for t in arg}
            raise _auth_error(", ".join(sorted(named & set(topics)) or topics), where) from exc


class KafkaRange(InputPartition):
    """``[start, end)`` of one topic partition (picklable, sent to executors)."""

    def __init__(self, topic: str, partition: int, start: int, end: int, client: Mapping[str, Any],
                 fail_on_data_loss: bool, include_headers: bool, poll_timeout_s: float) -> None:
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end
        self.client = dict(client)
        self.fail_on_data_loss = fail_on_data_loss
        self.include_headers = include_headers
        self.poll_timeout_s = poll_timeout_s


def read_range(r: KafkaRange) -> Iterator[tuple]:
    """Assign, seek, poll until the position reaches ``r.end`` (executor side)."""
    if r.end <= r.start:
        return
    from kafka import KafkaConsumer, TopicPartition

    conf = dict(r.client)
    conf.update(group_id=None, enable_auto_commit=False, auto_offset_reset="earliest")
    consumer = KafkaConsumer(**conf)
    tp = TopicPartition(r.topic, r.partition)
    where = f"{r.topic}-{r.partition}"
    try:
        consumer.assign([tp])
        start = r.start
        try:
            earliest = consumer.beginning_offsets([tp])[tp]
        except Exception as exc:
            if _is_auth_error(exc):
                raise _auth_error(r.topic, "ListOffsets") from exc
            raise
        if earliest > start:
            msg = (f"data loss: {where} offsets {start}..{earliest - 1} are no longer available "
                   f"(log start offset is {earliest}); set failOnDataLoss=false to skip them")
            if r.fail_on_data_loss:
                raise KgwSourceError(msg)
            log.warning("kgw source: %s", msg)
            start = earliest
            if start >= r.end:
                return
        consumer.seek(tp, start)
        last_progress = time.monotonic()
        while True:
            try:
                batch = consumer.poll(timeout_ms=500)
            except Exception as exc:
                if _is_auth_error(exc):
                    raise _auth_error(r.topic, "Fetch") from exc
                raise
            records = batch.get(tp, ())
            for rec in records:
                if rec.offset >= r.end:
                    return
                ts = _dt.datetime.fromtimestamp(rec.timestamp / 1000.0, tz=_UTC) if rec.timestamp is not None \
                    and rec.timestamp >= 0 else None
                row = (rec.key, rec.value, r.topic, r.partition, rec.offset, ts, int(rec.timestamp_type or 0))
                if r.include_headers:
                    row += ([(k, v) for k, v in (rec.headers or [])],)
                yield row
            if records:
                last_progress = time.monotonic()
            if consumer.position(tp) >= r.end:
                return
            if time.monotonic() - last_progress > r.poll_timeout_s:
                msg = (f"{where}: no records between offset {consumer.position(tp)} and {r.end} after "
                       f"{r.poll_timeout_s:g}s (kafkaConsumer.pollTimeoutMs)")
                if r.fail_on_data_loss:
                    raise KgwSourceError(msg)
                log.warning("kgw source: %s", msg)
                return
    finally:
        consumer.close()


def _ranges(opts: SourceOptions, start: Mapping[tuple[str, int], int], end: Mapping[tuple[str, int], int]
            ) -> list[KafkaRange]:
    out = []
    for tp in sorted(end):
        s, e = start.get(tp, 0), end[tp]
        if e > s:
            out.append(KafkaRange(tp[0], tp[1], s, e, opts.client, opts.fail_on_data_loss, opts.include_headers,
                                  opts.poll_timeout_s))
    return out


def _resolve(spec: Any, tps: list[tuple[str, int]], earliest: Mapping, latest_fn, name: str,
             fail_on_data_loss: bool) -> dict[tuple[str, int], int]:
    """Turn earliest/latest/JSON into concrete offsets for ``tps``."""
    latest: dict | None = None

    def get_latest():
        nonlocal latest
        if latest is None:
            latest = latest_fn()
        return latest

    out = {}
    if spec == "earliest":
        return {tp: earliest[tp] for tp in tps}
    if spec == "latest":
        return {tp: get_latest()[tp] for tp in tps}
    for topic, parts in spec.items():
        for p in parts:
            if (topic, p) not in earliest:
                raise KgwSourceError(f"option '{name}': partition {topic}-{p} is not among the "
                                     f"selected partitions {sorted(tps)}")
    for tp in tps:
        wanted = spec.get(tp[0], {}).get(tp[1])
        if wanted is None:
            if tp[0] in spec:
                raise KgwSourceError(f"option '{name}': partition {tp[0]}-{tp[1]} has no offset in {spec}")
            wanted = EARLIEST if name == "startingOffsets" else LATEST
        if wanted == EARLIEST:
            out[tp] = earliest[tp]
        elif wanted == LATEST:
            out[tp] = get_latest()[tp]
        else:
            out[tp] = wanted
    return out


def _encode(offsets: Mapping[tuple[str, int], int]) -> dict:
    out: dict[str, dict[str, int]] = {}
    for (t, p), o in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    return out


def _decode(offsets: Mapping) -> dict[tuple[str, int], int]:
    return {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}
