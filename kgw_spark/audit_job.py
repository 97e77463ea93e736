"""Per-minute authorization audit counts from kgw's audit topic, with Spark.

Reads the JSON audit events kgw publishes (gateway/process/audit_publisher.py)
*through kgw* with the ``kgw`` data source, and writes

* ``<out>/per_minute/`` -- Parquet, partitioned ``date=YYYY-MM-DD/gateway=<cluster id>``, one
  row per (minute, principal, resource, operation, ...) with ``allowed`` and ``denied`` counts
  (``minute`` is the UTC start of the minute of the decision time);
* ``<out>/report.html`` -- a self-contained page (inline SVG, no scripts,
  no Spark needed to open it): denials per minute and the top denied
  principals.

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
import html
import logging
import math
import os
import sys
from pathlib import Path

from authz.audit_events import spark_schema

__all__ = ["aggregate", "run_batch", "run_stream", "write_report", "main"]

EVENT_SCHEMA = spark_schema(("ts_ms", "event", "principal", "allowed", "operation", "resource", "api", "listener",
                             "client_address", "client_id", "gateway"))
#: what each per-minute row is counted by: the kind of event ("authorization", "authentication"
#: or "change"), who, what, with which request and client, from where
KEY_COLUMNS = ["minute", "event", "principal", "resource", "operation", "api", "listener", "client_address",
               "client_id", "gateway"]
#: the Parquet output's directories: date=YYYY-MM-DD/gateway=<the gateway's cluster id>
PARTITION_COLUMNS = ["date", "gateway"]


def source_options(bootstrap: str, topic: str, kafka_options: dict[str, str] | None = None) -> dict[str, str]:
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "failOnDataLoss": "false"}
    for k, v in (kafka_options or {}).items():
        opts[k if k.startswith("kafka.") else f"kafka.{k}"] = v
    return opts


#: the OCSF attributes the job reads (``audit.format: ocsf``, authz/audit_ocsf.py)
OCSF_SCHEMA = ("time long, status_id int, actor struct<user:struct<uid:string>, app_name:string>, "
               "user struct<uid:string>, api struct<operation:string>, resources array<struct<uid:string>>, "
               "src_endpoint struct<ip:string>, dst_endpoint struct<svc_name:string>, "
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
        F.col("actor.app_name").alias("client_id"), F.col("unmapped.gateway").alias("gateway"))


def aggregate(df, event_format: str = "kgw"):
    """Kafka rows (``value`` = audit JSON, kgw or OCSF) -> per-minute allowed/denied counts."""
    from pyspark.sql import functions as F

    events = _events(df, event_format)
    events = events.where(F.col("ts_ms").isNotNull() & F.col("principal").isNotNull())
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
    df = spark.read.format(source).options(**options).load()
    target = Path(out) / "per_minute"
    aggregate(df, event_format).orderBy(*KEY_COLUMNS).write.mode("overwrite").partitionBy(*PARTITION_COLUMNS).parquet(str(target))
    return target


def run_stream(spark, options: dict[str, str], out: Path, checkpoint: Path | None = None,
               timeout_s: float | None = None, source: str = "kgw", event_format: str = "kgw") -> Path:
    out = Path(out)
    increments = out / "_increments"
    checkpoint = checkpoint or out / "_checkpoint"

    def write_increment(batch_df, batch_id: int) -> None:
        aggregate(batch_df, event_format).write.mode("overwrite").parquet(str(increments / f"batch={batch_id}"))

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
    return target


# --------------------------------------------------------------------------- report (no Spark)

_ALLOWED_COLOUR, _DENIED_COLOUR = "#2e7d32", "#c0392b"


def nice_ticks(top: float, count: int = 4) -> list[int]:
    """Axis ticks from 0 past ``top`` in steps of 1, 2 or 5 times a power of ten."""
    if top <= 0:
        return [0, 1]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(int(math.ceil(top / step)) + 1)]


def _svg_chart(points: list[tuple[str, int, int]], width: int = 760, height: int = 260) -> str:
    """Allowed and denied decisions per minute, side by side, with a ticked y axis."""
    if not points:
        return "<p>No decisions.</p>"
    ticks = nice_ticks(max(max(a, d) for _, a, d in points))
    top = ticks[-1]
    left, bottom, pad = 56, 40, 10
    plot_w, plot_h = width - left - pad, height - bottom - pad - 18
    base = pad + 18 + plot_h
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="Allowed and denied decisions per minute" font-family="sans-serif">',
             f'<rect x="{left}" y="2" width="10" height="10" fill="{_ALLOWED_COLOUR}"/>'
             f'<text x="{left + 14}" y="11" font-size="12">allowed</text>'
             f'<rect x="{left + 80}" y="2" width="10" height="10" fill="{_DENIED_COLOUR}"/>'
             f'<text x="{left + 94}" y="11" font-size="12">denied</text>']
    for tick in ticks:
        y = base - plot_h * tick / top
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#ddd"/>'
                     f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{tick}</text>')
    parts.append(f'<line x1="{left}" y1="{base}" x2="{left + plot_w}" y2="{base}" stroke="#444"/>'
                 f'<line x1="{left}" y1="{pad + 18}" x2="{left}" y2="{base}" stroke="#444"/>'
                 f'<text x="14" y="{pad + 18 + plot_h / 2:.0f}" font-size="11" text-anchor="middle" '
                 f'transform="rotate(-90 14 {pad + 18 + plot_h / 2:.0f})">decisions per minute</text>')
    step = plot_w / len(points)
    bar_w = max(1.0, step / 2 - 1)
    label_every = max(1, len(points) // 8)
    for i, (label, allowed, denied) in enumerate(points):
        x = left + i * step + 1
        for offset, value, colour, word in ((0, allowed, _ALLOWED_COLOUR, "allowed"),
                                            (bar_w, denied, _DENIED_COLOUR, "denied")):
            h = plot_h * value / top
            parts.append(f'<rect x="{x + offset:.1f}" y="{base - h:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                         f'fill="{colour}"><title>{html.escape(label)}: {value} {word}</title></rect>')
        if i % label_every == 0:
            parts.append(f'<text x="{x:.1f}" y="{base + 14}" font-size="10">{html.escape(label[11:16])}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.0f}" y="{height - 4}" font-size="11" text-anchor="middle">'
                 f'minute (UTC)</text></svg>')
    return "".join(parts)


def _table(headers: list[str], rows: list[list], empty: str = "none") -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{esc(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body or f'<tr><td colspan={len(headers)}>{esc(empty)}</td></tr>'}</table>"


def write_report(per_minute: Path, report: Path, top_n: int = 10) -> Path:
    """``report.html`` from the Parquet output (pyarrow + pandas only): decisions over time,
    per listener and client address, failed logins, and who is denied what."""
    import pandas as pd
    import pyarrow.parquet as pq

    per_minute, report = Path(per_minute), Path(report)
    if per_minute.exists() and any(per_minute.rglob("*.parquet")):
        df = pq.read_table(str(per_minute)).to_pandas()
        for column in PARTITION_COLUMNS:  # partition columns come back as categories
            if column in df:
                df[column] = df[column].astype(str)
    else:
        df = pd.DataFrame(columns=KEY_COLUMNS + ["allowed", "denied"])
    for column in ("listener", "client_address"):
        df[column] = df[column].fillna("-") if column in df else "-"
    df["event"] = df["event"].fillna("authorization") if "event" in df else "authorization"
    logins = df[df["operation"] == "AUTHENTICATE"]
    decisions = df[(df["operation"] != "AUTHENTICATE") & (df["event"] != "change")]
    total_allowed, total_denied = int(decisions["allowed"].sum()), int(decisions["denied"].sum())
    failed_logins = int(logins["denied"].sum())
    points: list[tuple[str, int, int]] = []
    first = last = "-"
    if len(decisions):
        minutes = pd.to_datetime(decisions["minute"], utc=True)
        per = decisions.assign(minute=minutes).groupby("minute")[["allowed", "denied"]].sum().sort_index()
        full = pd.date_range(per.index.min(), per.index.max(), freq="min", tz="UTC")
        per = per.reindex(full, fill_value=0)
        points = [(ts.strftime("%Y-%m-%d %H:%M"), int(r.allowed), int(r.denied)) for ts, r in per.iterrows()]
        first, last = points[0][0], points[-1][0]

    def totals(frame, by):
        if not len(frame):
            return []
        grouped = frame.groupby(by)[["allowed", "denied"]].sum().sort_values("denied", ascending=False)
        return [[*(k if isinstance(k, tuple) else (k,)), int(r.allowed), int(r.denied)] for k, r in grouped.iterrows()]

    failed_by_host = logins.groupby("client_address")["denied"].sum() if len(logins) else {}
    by_host = [[*row, int(failed_by_host.get(row[0], 0))] for row in totals(decisions, "client_address")]
    by_host += [[h, 0, 0, int(n)] for h, n in dict(failed_by_host).items() if h not in {r[0] for r in by_host}]
    login_rows = []
    if len(logins):
        grouped = logins.groupby(["principal", "resource", "client_address", "listener"])["denied"].sum()
        login_rows = [[p, r.rsplit(":", 1)[-1], h, lst, int(n)]
                      for (p, r, h, lst), n in grouped.sort_values(ascending=False).head(top_n).items()]
    denied = decisions[decisions["denied"] > 0]
    top = [[p, int(n)] for p, n in denied.groupby("principal")["denied"].sum().sort_values(ascending=False)
           .head(top_n).items()] if len(denied) else []
    top_resources = [[p, r, o, int(n)] for (p, r, o), n in denied.groupby(["principal", "resource", "operation"])
                     ["denied"].sum().sort_values(ascending=False).head(top_n).items()] if len(denied) else []
    esc = html.escape
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>kgw authorization audit</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:60em}}table{{border-collapse:collapse;margin-bottom:1em}}
td,th{{border:1px solid #ccc;padding:.25em .6em;text-align:left}}</style></head><body>
<h1>kgw authorization audit</h1>
<p>{esc(first)} &ndash; {esc(last)} UTC: <b>{total_allowed}</b> allowed, <b>{total_denied}</b> denied decisions;
<b>{failed_logins}</b> failed logins.</p>
<h2>Allowed and denied per minute</h2>
{_svg_chart(points)}
<h2>By listener</h2>
{_table(["listener", "allowed", "denied"], totals(decisions, "listener"))}
<h2>By client address</h2>
{_table(["client address", "allowed", "denied", "failed logins"], by_host)}
<h2>Failed logins</h2>
{_table(["principal tried", "mechanism", "client address", "listener", "failures"], login_rows)}
<h2>Top denied principals</h2>
{_table(["principal", "denied"], top)}
<h2>Top denied (principal, resource, operation)</h2>
{_table(["principal", "resource", "operation", "denied"], top_resources)}
</body></html>
"""
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(page, encoding="utf-8")
    return report


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
    if args.stream:
        per_minute = run_stream(spark, options, out, Path(args.checkpoint) if args.checkpoint else None,
                                source=args.source, event_format=args.format)
    else:
        per_minute = run_batch(spark, options, out, source=args.source, event_format=args.format)
    return write_report(per_minute, out / "report.html")


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
