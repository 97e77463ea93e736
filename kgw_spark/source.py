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

import datetime as _dt
import json
import logging
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

__all__ = ["KgwDataSource", "KgwSourceError", "register", "client_config", "SCHEMA"]

log = logging.getLogger("kgw.spark")

SCHEMA = ("key binary, value binary, topic string, partition int, offset long, "
          "timestamp timestamp, timestampType int")
HEADERS_FIELD = ", headers array<struct<key: string, value: binary>>"

EARLIEST, LATEST = -2, -1
_TOPIC_AUTHORIZATION_FAILED = 29
_UTC = _dt.timezone.utc


class KgwSourceError(RuntimeError):
    """A query-failing problem (authorization, data loss, bad options)."""


def register(spark) -> None:
    """Register the source under the short name ``kgw``."""
    spark.dataSource.register(KgwDataSource)


# --------------------------------------------------------------------------- options


def _opts(options: Mapping[str, str]) -> dict[str, str]:
    """Option names lower-cased (Spark's options are case-insensitive)."""
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


def _bool(value: str | None, default: bool) -> bool:
    if value is None:
        return default
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise KgwSourceError(f"expected true or false, got {value!r}")
    return v == "true"


# Kafka (Java) client settings whose kafka-python name is not simply the
# dotted name with underscores, or which Spark's source refuses.
_REFUSED = {
    "group.id": "the source does not use consumer groups (Spark ignores/overrides kafka.group.id)",
    "auto.offset.reset": "set startingOffsets instead",
    "key.deserializer": "keys are always returned as bytes; cast or deserialize in the query",
    "value.deserializer": "values are always returned as bytes; cast or deserialize in the query",
    "enable.auto.commit": "the source does not commit offsets to Kafka",
    "interceptor.classes": "consumer interceptors are not supported",
}
_JAAS_PAIR = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def _known_python_keys() -> set[str]:
    from kafka import KafkaConsumer

    return set(KafkaConsumer.DEFAULT_CONFIG)


def client_config(options: Mapping[str, str]) -> dict[str, Any]:
    """kafka-python keyword arguments from the ``kafka.``-prefixed options.

    * ``kafka.bootstrap.servers`` (required), and any setting whose
      kafka-python name is the Java name with ``_`` for ``.``
      (``kafka.security.protocol``, ``kafka.sasl.mechanism``,
      ``kafka.client.id``, ``kafka.request.timeout.ms``, ``kafka.isolation.level``,
      ``kafka.ssl.cafile`` …).
    * ``kafka.sasl.jaas.config``: ``username="…" password="…"`` of a
      PlainLoginModule / ScramLoginModule line.
    * TLS as the Java client spells it, with PEM files:
      ``kafka.ssl.truststore.location`` (CA bundle), ``kafka.ssl.keystore.location``
      (client certificate chain + key, or ``kafka.ssl.keystore.key`` file),
      ``kafka.ssl.key.password``, ``kafka.ssl.endpoint.identification.algorithm=""``
      (no host name check).  JKS/PKCS12 stores are refused with a message.
    * Other Java-only settings are ignored (logged), as unknown settings are by
      the Java client.
    """
    opts = _opts(options)
    known = _known_python_keys()
    conf: dict[str, Any] = {}
    from kafka import KafkaConsumer

    defaults = KafkaConsumer.DEFAULT_CONFIG
    kafka_opts = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
    if not kafka_opts.get("bootstrap.servers"):
        raise KgwSourceError("option 'kafka.bootstrap.servers' must be specified")
    for key, value in kafka_opts.items():
        if key in _REFUSED:
            raise KgwSourceError(f"Kafka option 'kafka.{key}' is not supported: {_REFUSED[key]}")
        if key == "bootstrap.servers":
            conf["bootstrap_servers"] = [s.strip() for s in value.split(",") if s.strip()]
        elif key == "sasl.jaas.config":
            pairs = dict(_JAAS_PAIR.findall(value))
            if "username" in pairs:
                conf["sasl_plain_username"] = pairs["username"]
            if "password" in pairs:
                conf["sasl_plain_password"] = pairs["password"]
        elif key == "ssl.truststore.location":
            conf["ssl_cafile"] = value
        elif key == "ssl.keystore.location":
            conf["ssl_certfile"] = value
        elif key == "ssl.keystore.key":
            conf["ssl_keyfile"] = value
        elif key in ("ssl.key.password", "ssl.keystore.password"):
            conf["ssl_password"] = value
        elif key == "ssl.endpoint.identification.algorithm":
            conf["ssl_check_hostname"] = bool(value.strip())
        elif key in ("ssl.truststore.type", "ssl.keystore.type"):
            if value.strip().upper() != "PEM":
                raise KgwSourceError(f"kafka.{key}={value}: only PEM files are supported by the kgw source")
        elif key.replace(".", "_") in known:
            name = key.replace(".", "_")
            default = defaults.get(name)
            if isinstance(default, bool):
                conf[name] = _bool(value, default)
            elif isinstance(default, int):
                conf[name] = int(value)
            else:
                conf[name] = value
        else:
            log.info("kgw source: ignoring Kafka option kafka.%s (no Python client equivalent)", key)
    if "ssl_cafile" in conf or "ssl_certfile" in conf:
        conf.setdefault("ssl_check_hostname", True)
    return conf


@dataclass(frozen=True)
class SourceOptions:
    strategy: str                       # subscribe | subscribepattern | assign
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()
    starting: Any = "earliest"          # "earliest" | "latest" | {topic: {p: off}}
    ending: Any = "latest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_s: float = 120.0
    client: Mapping[str, Any] = None    # type: ignore[assignment]


def _offsets_option(value: str | None, default: str, name: str, allowed: tuple[str, ...]) -> Any:
    if value is None:
        return default
    v = value.strip()
    if v.lower() in allowed:
        return v.lower()
    if v.lower() in ("earliest", "latest"):
        raise KgwSourceError(f"option '{name}' cannot be {v.lower()!r} here")
    try:
        parsed = json.loads(v)
    except ValueError:
        raise KgwSourceError(f"option '{name}': expected {' or '.join(allowed)} or JSON "
                             f'like {{"topic":{{"0":23,"1":-2}}}}, got {value!r}') from None
    if not isinstance(parsed, dict) or not all(isinstance(p, dict) for p in parsed.values()):
        raise KgwSourceError(f"option '{name}': JSON must map topic -> {{partition: offset}}")
    return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in parsed.items()}


def parse_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    opts = _opts(options)
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k, "").strip()]
    if len(given) != 1:
        raise KgwSourceError("exactly one of the options 'subscribe', 'subscribePattern' or 'assign' "
                             f"must be specified (got {given or 'none'})")
    strategy = given[0]
    kw: dict[str, Any] = {"strategy": strategy}
    if strategy == "subscribe":
        kw["topics"] = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
    elif strategy == "subscribepattern":
        kw["pattern"] = opts["subscribepattern"].strip()
    else:
        try:
            assigned = json.loads(opts["assign"])
            kw["assigned"] = tuple((t, int(p)) for t, parts in assigned.items() for p in parts)
        except (ValueError, AttributeError, TypeError):
            raise KgwSourceError(f"option 'assign': expected JSON like {{\"topicA\":[0,1]}}, "
                                 f"got {opts['assign']!r}") from None
    kw["starting"] = _offsets_option(opts.get("startingoffsets"), "latest" if streaming else "earliest",
                                     "startingOffsets", ("earliest", "latest") if streaming else ("earliest",))
    if streaming:
        if "endingoffsets" in opts:
            raise KgwSourceError("option 'endingOffsets' is for batch queries only")
    else:
        kw["ending"] = _offsets_option(opts.get("endingoffsets"), "latest", "endingOffsets", ("latest",))
    if "maxoffsetspertrigger" in opts:
        n = int(opts["maxoffsetspertrigger"])
        if n <= 0:
            raise KgwSourceError("option 'maxOffsetsPerTrigger' must be positive")
        kw["max_offsets_per_trigger"] = n
    kw["fail_on_data_loss"] = _bool(opts.get("failondataloss"), True)
    kw["include_headers"] = _bool(opts.get("includeheaders"), False)
    if "kafkaconsumer.polltimeoutms" in opts:
        kw["poll_timeout_s"] = int(opts["kafkaconsumer.polltimeoutms"]) / 1000
    kw["client"] = client_config(options)
    return SourceOptions(**kw)


# --------------------------------------------------------------------------- broker access


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


# --------------------------------------------------------------------------- reading


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
