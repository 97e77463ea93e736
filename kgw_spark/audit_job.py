"""Per-minute authorization audit counts from kgw's audit topic, with Spark.

Reads the JSON audit events kgw publishes (gateway/process/audit_publisher.py)
*through kgw* with the ``kgw`` data source, and writes

* ``<out>/per_minute/`` -- Parquet, partitioned ``date=YYYY-MM-DD/gateway=<cluster id>``, one
  row per (minute, principal, resource, operation, ...) with ``allowed`` and ``denied`` counts
  (``minute`` is the UTC start of the minute of the decision time);
* ``<out>/changes/`` -- Parquet, every change of security state (ACLs, configs, SCRAM
  credentials, quotas): when, who, from where, exactly what;
* ``<out>/chains.json``, ``<out>/reconciliation.json`` -- the chains' verification and the
  trail reconciled with the gateways' counters (kgw_spark/trail.py; ``--checkpoints`` from
  ``kgw audit checkpoints``, ``--metrics`` each gateway's /metrics);
* ``<out>/report.html`` -- a self-contained page (kgw_spark/report.py): denials over time per
  principal and per resource, failed logins per address, first appearances, the changes, top
  talkers, the chains' status and the reconciliation.

Modes::

    # one-off batch over everything in the topic
    python -m kgw_spark.audit_job --bootstrap kgw:9092 --topic kgw-audit --out /data/audit

    # streaming, resumable: each run reads only what arrived since the last
    # (Trigger.AvailableNow; the checkpoint is kept in <out>/_checkpoint)
    python -m kgw_spark.audit_job --bootstrap kgw:9092 --topic kgw-audit --out /data/audit --stream

In streaming mode each micro-batch's partial counts are written to
``<out>/_increments/batch=<id>`` (overwritten when Spark replays a batch, so
a replay never double counts) and ``per_minute`` is rebuilt from them at the
end of the run.  Against a secured listener give the job's client settings as Kafka's tools
take them, ``--command-config client.properties`` (``security.protocol``, ``sasl.mechanism``,
``sasl.jaas.config``, ``ssl.truststore.location`` as a PEM file), and/or ``--kafka-option
key=value``.  Before Spark starts, the job checks that it can describe the audit topic
through kgw with them and, if not, exits 2 with one line saying why.  The data source runs
Python on the executors: with a cluster master, kgw must be installed there too.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from authz.audit_events import spark_schema
from kgw_spark.report import CHANGE_COLUMNS, KEY_COLUMNS, PARTITION_COLUMNS, nice_ticks, write_report
from kgw_spark.trail import examine, read_metrics, reconcile

__all__ = ["aggregate", "changes", "run_batch", "run_stream", "write_report", "nice_ticks", "main"]

EVENT_SCHEMA = spark_schema(("ts_ms", "event", "principal", "allowed", "operation", "resource", "api", "listener",
                             "client_address", "client_id", "gateway", "change"))


def source_options(bootstrap: str, topic: str, kafka_options: dict[str, str] | None = None) -> dict[str, str]:
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "failOnDataLoss": "false"}
    for k, v in (kafka_options or {}).items():
        opts[k if k.startswith("kafka.") else f"kafka.{k}"] = v
    return opts


#: the OCSF attributes the job reads (``audit.format: ocsf``, authz/audit_ocsf.py)
OCSF_SCHEMA = ("time long, status_id int, actor struct<user:struct<uid:string>, app_name:string>, "
               "user struct<uid:string>, api struct<operation:string>, resources array<struct<uid:string>>, "
               "src_endpoint struct<ip:string>, dst_endpoint struct<svc_name:string>, message string, "
               "unmapped struct<event:string, operation:string, gateway:string>")


def _events(df, event_format: str = "kgw"):
    """The audit events of Kafka rows, as the kgw format's columns whatever the format."""
    from pyspark.sql import functions as F

    value = F.col("value").cast("string")
    if event_format != "ocsf":
        return df.select(F.from_json(value, EVENT_SCHEMA).alias("e")).select("e.*")
    o = df.select(F.from_json(value, OCSF_SCHEMA).alias("o")).select("o.*")
    return o.select(
        F.col("time").alias("ts_ms"), F.col("unmapped.event").alias("event"),
        F.coalesce(F.col("actor.user.uid"), F.col("user.uid")).alias("principal"),
        (F.col("status_id") == 1).alias("allowed"), F.col("unmapped.operation").alias("operation"),
        F.col("resources").getItem(0).getField("uid").alias("resource"), F.col("api.operation").alias("api"),
        F.col("dst_endpoint.svc_name").alias("listener"), F.col("src_endpoint.ip").alias("client_address"),
        F.col("actor.app_name").alias("client_id"), F.col("unmapped.gateway").alias("gateway"),
        F.when(F.col("unmapped.event") == "change", F.col("message")).alias("change"))


def _decisions(df, event_format: str):
    """The events that are decisions, logins or changes (not the trail's own ``dropped``
    records); a login that named no user has the principal ``-``."""
    from pyspark.sql import functions as F

    events = _events(df, event_format)
    principal = F.when(F.col("principal").isNull() | (F.col("principal") == ""), F.lit("-")) \
        .otherwise(F.col("principal"))
    return (events.where(F.col("ts_ms").isNotNull() & (F.coalesce(F.col("event"), F.lit("")) != "dropped"))
            .withColumn("principal", principal))


def changes(df, event_format: str = "kgw"):
    """Kafka rows -> the security-state changes (who changed what, when, exactly)."""
    from pyspark.sql import functions as F

    return _decisions(df, event_format).where(F.col("event") == "change").select(*CHANGE_COLUMNS)


def aggregate(df, event_format: str = "kgw"):
    """Kafka rows (``value`` = audit JSON, kgw or OCSF) -> per-minute allowed/denied counts."""
    from pyspark.sql import functions as F

    events = _decisions(df, event_format)
    return _dated(events
                  .withColumn("minute", F.date_trunc("minute", F.timestamp_millis("ts_ms")))
                  .withColumn("gateway", F.coalesce(F.col("gateway"), F.lit("-")))
                  .groupBy(*KEY_COLUMNS)
                  .agg(F.sum(F.when(F.col("allowed"), 1).otherwise(0)).cast("long").alias("allowed"),
                       F.sum(F.when(F.col("allowed"), 0).otherwise(1)).cast("long").alias("denied")))


def _dated(df):
    from pyspark.sql import functions as F

    return df.withColumn("date", F.date_format("minute", "yyyy-MM-dd"))


def _resum(df):
    from pyspark.sql import functions as F

    return _dated(df.groupBy(*KEY_COLUMNS).agg(F.sum("allowed").cast("long").alias("allowed"),
                                               F.sum("denied").cast("long").alias("denied")))


def run_batch(spark, options: dict[str, str], out: Path, source: str = "kgw", event_format: str = "kgw") -> Path:
    """``source``: ``kgw`` (this package's data source, Python on the executors) or ``kafka``
    (Spark's own connector, JVM only: what a cluster without kgw installed runs)."""
    df = spark.read.format(source).options(**options).load().cache()
    try:
        target = Path(out) / "per_minute"
        aggregate(df, event_format).orderBy(*KEY_COLUMNS).write.mode("overwrite") \
            .partitionBy(*PARTITION_COLUMNS).parquet(str(target))
        changes(df, event_format).orderBy("ts_ms").write.mode("overwrite").parquet(str(Path(out) / "changes"))
    finally:
        df.unpersist()
    return target


def run_stream(spark, options: dict[str, str], out: Path, checkpoint: Path | None = None,
               timeout_s: float | None = None, source: str = "kgw", event_format: str = "kgw") -> Path:
    out = Path(out)
    increments, changed = out / "_increments", out / "_changes"
    checkpoint = checkpoint or out / "_checkpoint"

    def write_increment(batch_df, batch_id: int) -> None:
        batch_df.persist()
        try:
            aggregate(batch_df, event_format).write.mode("overwrite").parquet(str(increments / f"batch={batch_id}"))
            changes(batch_df, event_format).write.mode("overwrite").parquet(str(changed / f"batch={batch_id}"))
        finally:
            batch_df.unpersist()

    stream = spark.readStream.format(source).options(**options).load()
    query = (stream.writeStream.foreachBatch(write_increment)
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination(timeout_s)
    if query.isActive:
        query.stop()
        raise TimeoutError(f"audit stream did not finish within {timeout_s}s")
    if query.exception() is not None:
        raise query.exception()
    target = out / "per_minute"
    if increments.exists() and any(increments.glob("batch=*")):
        # Read the increments with their schema (batch dirs may be empty).
        _resum(spark.read.parquet(str(increments))).orderBy(*KEY_COLUMNS) \
            .write.mode("overwrite").partitionBy(*PARTITION_COLUMNS).parquet(str(target))
    if changed.exists() and any(changed.glob("batch=*")):
        spark.read.parquet(str(changed)).select(*CHANGE_COLUMNS).orderBy("ts_ms") \
            .write.mode("overwrite").parquet(str(out / "changes"))
    return target


def check_trail(spark, options: dict[str, str], out: Path, source: str = "kgw", metrics: list[str] | None = None,
                checkpoints: dict[str, dict[str, str]] | None = None) -> tuple[dict, list[dict]]:
    """Verify the chains and reconcile the trail with the gateways' counters (kgw_spark/trail.py):
    the gateways are scraped first, then every record is read once, in order, on the driver.
    Writes ``chains.json`` and ``reconciliation.json`` beside the report."""
    scrapes = [read_metrics(where) for where in metrics or []]
    rows = (spark.read.format(source).options(**options).load()
            .select("partition", "offset", "value").orderBy("partition", "offset").toLocalIterator())
    trail, tallies = examine(((int(r["partition"]), int(r["offset"]), bytes(r["value"] or b"")) for r in rows),
                             checkpoints or {})
    reconciliation = reconcile(scrapes, tallies)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "chains.json").write_text(json.dumps(trail, indent=2, sort_keys=True))
    (out / "reconciliation.json").write_text(json.dumps(reconciliation, indent=2, sort_keys=True))
    return trail, reconciliation


# --------------------------------------------------------------------------- command line


def build_spark(master: str | None = "local[2]", jars: list[str] | None = None, conf: dict[str, str] | None = None):
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    if master:  # else spark-submit's --master (or Spark's default, local[*])
        builder = builder.master(master)
    builder = (builder.appName("kgw-audit-report")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.session.timeZone", "UTC"))
    if jars:  # Spark's Kafka connector for --source kafka: shipped to the executors by Spark
        builder = builder.config("spark.jars", ",".join(jars))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    from kgw_spark.source import register

    register(spark)
    return spark


def read_properties(path: Path) -> dict[str, str]:
    """A Java client properties file (Kafka's ``--command-config``): ``key=value`` (or ``key: value``)
    lines, ``#``/``!`` comments, a trailing backslash continues a line."""
    props: dict[str, str] = {}
    pending = ""
    for raw in Path(path).read_text().splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if cut < 0:
            raise ValueError(f"{path}: not a key=value line: {line[:40]!r}")
        props[line[:cut].strip()] = line[cut + 1:].strip()
    return props


def kafka_options(args) -> dict[str, str]:
    """The client settings of ``--command-config`` then ``--kafka-option`` (later wins)."""
    kafka = read_properties(Path(args.command_config)) if args.command_config else {}
    for kv in args.kafka_option or []:
        key, sep, value = kv.partition("=")
        if not sep:
            raise ValueError(f"--kafka-option {kv!r}: expected KEY=VALUE")
        kafka[key] = value
    return kafka


class _LastConnectionError(logging.Handler):
    """kafka-python retries a refused connection or login until its timeout and then says only
    "Unable to bootstrap": keep the last reason it logged."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.refused: str | None = None  # the first refused login: the cause, whatever followed
        self.other: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "AuthenticationFailed" in message or "Authentication failed" in message:
            self.refused = self.refused or message
        elif not message.startswith("Bootstrap failed"):  # the timeout itself, said again
            self.other = message

    @property
    def last(self) -> str | None:
        return self.refused or self.other


def check_access(options: dict[str, str], timeout_s: float = 10.0) -> str | None:
    """Before Spark starts: can the job's principal reach the audit topic through kgw with these
    settings?  None if so, else one line saying why not (what Spark would bury in a Py4J trace)."""
    from kgw_spark.kafka_access import Offsets
    from kgw_spark.options import parse_options

    topic = options.get("subscribe", "?")
    where = f"audit topic '{topic}' through {options.get('kafka.bootstrap.servers')}"
    offsets = None
    errors = _LastConnectionError()
    kafka_log = logging.getLogger("kafka")
    kafka_log.addHandler(errors)
    try:
        opts = parse_options(options, streaming=False)
        offsets = Offsets({**opts.client, "bootstrap_timeout_ms": int(timeout_s * 1000),
                           "request_timeout_ms": int(timeout_s * 1000)}, timeout_s=timeout_s)
        partitions = offsets.topic_partitions(opts)
    except Exception as e:  # noqa: BLE001 - every cause becomes the one line
        reason = str(e) or type(e).__name__
        if errors.last:
            reason = f"{errors.last} (then: {reason})"
        elif type(e).__name__ in ("NoBrokersAvailable", "KafkaTimeoutError", "KafkaConnectionError"):
            reason += (" (is the address right, and do the security settings match the listener: "
                       "security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.location?)")
        return f"cannot read the {where}: {' '.join(reason.split())}"
    finally:
        kafka_log.removeHandler(errors)
        if offsets is not None:
            offsets.close()
    if not partitions:
        return f"cannot read the {where}: the topic does not exist (yet): is audit.publish on, with this topic?"
    return None


def run(spark, args, options: dict[str, str] | None = None) -> Path:
    options = options or source_options(args.bootstrap, args.topic, kafka_options(args))
    out = Path(args.out)
    checkpoints = json.loads(Path(args.checkpoints).read_text()) if args.checkpoints else None
    trail = reconciliation = None
    if args.verify:  # first: the gateways' counters are scraped before the job's own reads add events
        trail, reconciliation = check_trail(spark, options, out, args.source, args.metrics, checkpoints)
    if args.stream:
        per_minute = run_stream(spark, options, out, Path(args.checkpoint) if args.checkpoint else None,
                                source=args.source, event_format=args.format)
    else:
        per_minute = run_batch(spark, options, out, source=args.source, event_format=args.format)
    return write_report(per_minute, out / "report.html", changes=out / "changes", trail=trail,
                        reconciliation=reconciliation)


def _setting(text: str) -> str:
    if "=" not in text or text.startswith("="):
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return text


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="python -m kgw_spark.audit_job", description=__doc__.split("\n\n")[0],
        epilog="The kgw data source runs Python on the executors: with a cluster master, kgw (this package "
        "and kafka-python) must be installed there too, e.g. pip install 'kgw[spark]' on every node.")
    p.add_argument("--bootstrap", required=True, help="kgw bootstrap address (kafka.bootstrap.servers)")
    p.add_argument("--topic", default="kgw-audit", help="the audit topic (default kgw-audit)")
    p.add_argument("--out", required=True, help="output directory (per_minute/ Parquet, report.html)")
    p.add_argument("--stream", action="store_true", help="resumable streaming run (Trigger.AvailableNow)")
    p.add_argument("--checkpoint", help="checkpoint directory (default <out>/_checkpoint)")
    p.add_argument("--master", help="Spark master: spark://host:7077 for a standalone cluster, yarn, k8s://...; "
                   "default: spark-submit's --master, or local[*] when run with python -m")
    p.add_argument("--source", choices=["kgw", "kafka"], default="kgw",
                   help="kgw: this package's data source (kgw installed on every executor); kafka: Spark's own "
                   "connector (give its jars with --jars, or spark-submit --packages)")
    p.add_argument("--format", choices=["kgw", "ocsf"], default="kgw",
                   help="the audit events' schema, as the gateway's audit.format (default kgw)")
    p.add_argument("--no-verify", dest="verify", action="store_false",
                   help="skip the chains' verification and the reconciliation (they read the whole topic on the "
                   "driver)")
    p.add_argument("--checkpoints", metavar="FILE",
                   help="the chains' checkpoints as `kgw audit checkpoints --config kgw.yaml` prints them: without "
                   "them, events deleted from the end of a run cannot be proven missing")
    p.add_argument("--metrics", action="append", metavar="URL|FILE",
                   help="a gateway's /metrics (or a saved scrape), to reconcile the trail with its counters "
                   "(repeatable: one per gateway process)")
    p.add_argument("--jars", help="comma-separated jars for the session (Spark's Kafka connector and its dependencies)")
    p.add_argument("--spark-conf", action="append", metavar="KEY=VALUE", type=_setting,
                   help="a Spark setting, e.g. spark.executor.memory=512m (repeatable)")
    p.add_argument("--command-config", metavar="FILE",
                   help="client properties, as Kafka's tools take them: security.protocol=SASL_SSL, "
                   "sasl.mechanism=SCRAM-SHA-512, sasl.jaas.config=..., ssl.truststore.location=ca.pem")
    p.add_argument("--kafka-option", action="append", metavar="KEY=VALUE",
                   help="one client setting, e.g. security.protocol=SASL_SSL (after --command-config; repeatable)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        options = source_options(args.bootstrap, args.topic, kafka_options(args))
    except (OSError, ValueError) as e:
        print(f"audit_job: {e}", file=sys.stderr)
        return 2
    problem = check_access(options)
    if problem:
        print(f"audit_job: {problem}", file=sys.stderr)
        return 2
    conf = dict(item.split("=", 1) for item in args.spark_conf or [])
    spark = build_spark(args.master, args.jars.split(",") if args.jars else None, conf)
    try:
        report = run(spark, args, options)
    finally:
        spark.stop()
    print(f"per-minute counts: {Path(args.out) / 'per_minute'}")
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
