"""A Spark data source for Kafka through kgw (Spark's Python Data Source API).

Usage (batch and streaming; the only change from Spark's built-in Kafka
source is the format name)::

    from kgw_spark.source import register
    register(spark)
    df = (spark.read.format("kgw")
          .option("kafka.bootstrap.servers", "kgw:9092")
          .option("subscribe", "orders")
          .load())

Theory of operation
-------------------
* Options follow Spark's Kafka source (``spark-sql-kafka-0-10``), matched
  case-insensitively: exactly one of ``subscribe`` / ``subscribePattern`` /
  ``assign``; ``startingOffsets`` / ``endingOffsets`` as ``earliest``,
  ``latest`` or JSON ``{"topic": {"0": 23, "1": -2}}`` (-2 earliest,
  -1 latest); ``maxOffsetsPerTrigger``; ``failOnDataLoss``;
  ``includeHeaders``; ``kafka.*`` client settings (see
  :func:`client_config`; SASL via ``kafka.sasl.jaas.config`` and TLS via PEM
  files).  The schema is Spark's: ``key``, ``value``, ``topic``,
  ``partition``, ``offset``, ``timestamp``, ``timestampType`` (+ ``headers``).
* The driver plans offset ranges; each Spark task reads one
  ``[start, end)`` range of one partition with its own consumer (assign,
  seek, poll until the position reaches ``end``), as the JVM connector does.
* "latest" is the **high watermark of a Fetch response**, not ListOffsets:
  some brokers (tansu) answer ListOffsets(latest) with the last batch's base
  offset + 1.  The high watermark is the offset a reader can really reach,
  so planned ranges are always complete.  "earliest" is ListOffsets(earliest).
* Authorization failures are never an empty result: a topic whose metadata
  or fetch answers TOPIC_AUTHORIZATION_FAILED fails the query with
  :class:`KgwSourceError` naming the topic and the error.
* Streaming offsets are the JSON of Spark's Kafka source
  (``{"topic": {"partition": offset}}``), checkpointed by Spark; a restarted
  query resumes from its checkpoint.  ``Trigger.AvailableNow`` is supported
  (the target is fixed when the query starts, then read in
  ``maxOffsetsPerTrigger``-sized batches if set).
"""

from __future__ import annotations
import logging
from collections.abc import Mapping
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from kgw_spark.kafka_access import KafkaRange, Offsets, _decode, _encode, _ranges, _resolve, read_range
from kgw_spark.options import KgwSourceError, SourceOptions, _bool, _opts, parse_options

__all__ = ["KgwDataSource", "SCHEMA", "register"]

log = logging.getLogger("kgw.spark")


SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp, timestampType int")


HEADERS_FIELD = ", headers array<struct<key: string, value: binary>>"




def register(spark) -> None:
    """Register the source under the short name ``kgw``."""
    spark.dataSource.register(KgwDataSource)


class KgwBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts

    def partitions(self):
        opts = self.opts
        oracle = Offsets(opts.client)
        try:
            tps = oracle.topic_partitions(opts)
            earliest = oracle.earliest(tps)
            latest_fn = lambda: oracle.latest(tps, earliest)  # noqa: E731
            start = _resolve(opts.starting, tps, earliest, latest_fn, "startingOffsets", opts.fail_on_data_loss)
            end = _resolve(opts.ending, tps, earliest, latest_fn, "endingOffsets", opts.fail_on_data_loss)
        finally:
            oracle.close()
        for tp in tps:
            if end[tp] < start[tp]:
                raise KgwSourceError(f"{tp[0]}-{tp[1]}: endingOffsets {end[tp]} is before startingOffsets "
                                     f"{start[tp]}")
        return _ranges(opts, start, end)

    def read(self, partition: KafkaRange):
        return read_range(partition)


class KgwStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self._oracle = Offsets(opts.client)
        self._target: dict[tuple[str, int], int] | None = None  # Trigger.AvailableNow
        self._last_latest: dict | None = None

    # offsets ---------------------------------------------------------------
    def _snapshot(self) -> tuple[list[tuple[str, int]], dict, dict]:
        tps = self._oracle.topic_partitions(self.opts)
        earliest = self._oracle.earliest(tps)
        return tps, earliest, self._oracle.latest(tps, earliest)

    def initialOffset(self) -> dict:
        opts = self.opts
        tps = self._oracle.topic_partitions(opts)
        earliest = self._oracle.earliest(tps)
        start = _resolve(opts.starting, tps, earliest, lambda: self._oracle.latest(tps, earliest),
                         "startingOffsets", opts.fail_on_data_loss)
        return _encode(start)

    def prepareForTriggerAvailableNow(self) -> None:
        _tps, _e, latest = self._snapshot()
        self._target = latest

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = _decode(start)
        if self._target is not None:
            latest = dict(self._target)
            earliest = {}
        else:
            _tps, earliest, latest = self._snapshot()
        self._last_latest = _encode(latest)
        # Partitions that appeared after the query started are read from earliest.
        for tp in latest:
            if tp not in begin:
                begin[tp] = earliest.get(tp, 0) if earliest else 0
        for tp, off in list(begin.items()):
            if tp not in latest:
                self._data_loss(f"partition {tp[0]}-{tp[1]} is gone (it was at offset {off})")
                continue
            if latest[tp] < off:
                self._data_loss(f"{tp[0]}-{tp[1]}: offset went back from {off} to {latest[tp]}")
        end = {tp: max(latest[tp], begin.get(tp, 0)) for tp in latest}
        if isinstance(limit, ReadMaxRows):
            end = _rate_limit(begin, end, int(limit.max_rows))
        return _encode(end)

    def reportLatestOffset(self):
        return self._last_latest

    def _data_loss(self, msg: str) -> None:
        if self.opts.fail_on_data_loss:
            raise KgwSourceError(f"data loss: {msg}; set failOnDataLoss=false to continue")
        log.warning("kgw source: %s", msg)

    def partitions(self, start: dict, end: dict):
        begin, stop = _decode(start), _decode(end)
        return _ranges(self.opts, begin, stop)

    def read(self, partition: KafkaRange):
        return read_range(partition)

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        self._oracle.close()


def _rate_limit(begin: Mapping, end: Mapping, limit: int) -> dict:
    """Spark's maxOffsetsPerTrigger: share ``limit`` in proportion to each
    partition's lag, and always make progress when there is data."""
    lags = {tp: end[tp] - begin.get(tp, 0) for tp in end}
    total = sum(v for v in lags.values() if v > 0)
    if total <= limit:
        return dict(end)
    out = {}
    for tp, lag in lags.items():
        share = int(lag * limit / total) if lag > 0 else 0
        out[tp] = begin.get(tp, 0) + share
    if all(out[tp] == begin.get(tp, 0) for tp in out):
        tp = max(lags, key=lambda k: lags[k])
        out[tp] += 1
    return out


class KgwDataSource(DataSource):
    """``spark.read.format("kgw")`` / ``spark.readStream.format("kgw")``."""

    @classmethod
    def name(cls) -> str:
        return "kgw"

    def schema(self) -> str:
        include = _bool(_opts(self.options).get("includeheaders"), False)
        return SCHEMA + (HEADERS_FIELD if include else "")

    def reader(self, schema):
        return KgwBatchReader(parse_options(self.options, streaming=False))

    def streamReader(self, schema):
        return KgwStreamReader(parse_options(self.options, streaming=True))
