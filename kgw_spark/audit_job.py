"""Per-minute authorization audit counts from kgw's audit topic, with Spark.

Reads the JSON audit events kgw publishes (gateway/audit_publisher.py)
*through kgw* with the ``kgw`` data source, and writes

* ``<out>/per_minute/`` -- Parquet, one row per (minute, principal, resource,
  operation) with ``allowed`` and ``denied`` counts (``minute`` is the UTC
  start of the minute of the decision time);
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
end of the run.  ``--kafka-option key=value`` passes ``kafka.*`` settings
(SASL/TLS) to the source, e.g. ``--kafka-option security.protocol=SASL_SSL``.
"""

from __future__ import annotations

import argparse
import html
import os
import sys
from pathlib import Path

from authz.audit_events import spark_schema

__all__ = ["aggregate", "run_batch", "run_stream", "write_report", "main"]

EVENT_SCHEMA = spark_schema(("ts_ms", "principal", "allowed", "operation", "resource", "api", "listener",
                             "client_address"))
KEY_COLUMNS = ["minute", "principal", "resource", "operation"]


def source_options(bootstrap: str, topic: str, kafka_options: dict[str, str] | None = None) -> dict[str, str]:
    opts = {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "startingOffsets": "earliest",
            "failOnDataLoss": "false"}
    for k, v in (kafka_options or {}).items():
        opts[k if k.startswith("kafka.") else f"kafka.{k}"] = v
    return opts


def aggregate(df):
    """Kafka rows (``value`` = audit JSON) -> per-minute allowed/denied counts."""
    from pyspark.sql import functions as F

    events = df.select(F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e")).select("e.*")
    events = events.where(F.col("ts_ms").isNotNull() & F.col("principal").isNotNull())
    return (events
            .withColumn("minute", F.date_trunc("minute", F.timestamp_millis("ts_ms")))
            .groupBy(*KEY_COLUMNS)
            .agg(F.sum(F.when(F.col("allowed"), 1).otherwise(0)).cast("long").alias("allowed"),
                 F.sum(F.when(F.col("allowed"), 0).otherwise(1)).cast("long").alias("denied")))


def _resum(df):
    from pyspark.sql import functions as F

    return df.groupBy(*KEY_COLUMNS).agg(F.sum("allowed").cast("long").alias("allowed"),
                                        F.sum("denied").cast("long").alias("denied"))


def run_batch(spark, options: dict[str, str], out: Path) -> Path:
    df = spark.read.format("kgw").options(**options).load()
    target = Path(out) / "per_minute"
    aggregate(df).orderBy(*KEY_COLUMNS).write.mode("overwrite").parquet(str(target))
    return target


def run_stream(spark, options: dict[str, str], out: Path, checkpoint: Path | None = None,
               timeout_s: float | None = None) -> Path:
    out = Path(out)
    increments = out / "_increments"
    checkpoint = checkpoint or out / "_checkpoint"

    def write_increment(batch_df, batch_id: int) -> None:
        aggregate(batch_df).write.mode("overwrite").parquet(str(increments / f"batch={batch_id}"))

    stream = spark.readStream.format("kgw").options(**options).load()
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
            .write.mode("overwrite").parquet(str(target))
    return target


# --------------------------------------------------------------------------- report (no Spark)


def _svg_bars(points: list[tuple[str, int]], width: int = 720, height: int = 220) -> str:
    if not points:
        return "<p>No denials.</p>"
    top = max(v for _, v in points) or 1
    left, bottom, pad = 48, 36, 8
    plot_w, plot_h = width - left - pad, height - bottom - pad
    bar_w = max(2.0, plot_w / len(points) - 2)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'role="img" aria-label="Denials per minute">',
             f'<line x1="{left}" y1="{pad + plot_h}" x2="{left + plot_w}" y2="{pad + plot_h}" stroke="#444"/>',
             f'<line x1="{left}" y1="{pad}" x2="{left}" y2="{pad + plot_h}" stroke="#444"/>',
             f'<text x="{left - 6}" y="{pad + 10}" text-anchor="end" font-size="11">{top}</text>',
             f'<text x="{left - 6}" y="{pad + plot_h}" text-anchor="end" font-size="11">0</text>']
    step = plot_w / len(points)
    label_every = max(1, len(points) // 8)
    for i, (label, value) in enumerate(points):
        h = plot_h * value / top
        x = left + i * step + 1
        parts.append(f'<rect x="{x:.1f}" y="{pad + plot_h - h:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
                     f'fill="#c0392b"><title>{html.escape(label)}: {value} denied</title></rect>')
        if i % label_every == 0:
            parts.append(f'<text x="{x:.1f}" y="{pad + plot_h + 14}" font-size="10">{html.escape(label[11:16])}</text>')
    parts.append("</svg>")
    return "".join(parts)


def write_report(per_minute: Path, report: Path, top_n: int = 10) -> Path:
    """``report.html`` from the Parquet output (pyarrow + pandas only)."""
    import pandas as pd
    import pyarrow.parquet as pq

    per_minute, report = Path(per_minute), Path(report)
    if per_minute.exists() and any(per_minute.glob("*.parquet")):
        df = pq.read_table(str(per_minute)).to_pandas()
    else:
        df = pd.DataFrame(columns=KEY_COLUMNS + ["allowed", "denied"])
    total_allowed, total_denied = int(df["allowed"].sum()), int(df["denied"].sum())
    if len(df):
        df["minute"] = pd.to_datetime(df["minute"], utc=True)
        series = df.groupby("minute")["denied"].sum().sort_index()
        full = pd.date_range(series.index.min(), series.index.max(), freq="min", tz="UTC")
        series = series.reindex(full, fill_value=0)
        points = [(ts.strftime("%Y-%m-%d %H:%M"), int(v)) for ts, v in series.items()]
        top = (df[df["denied"] > 0].groupby("principal")["denied"].sum().sort_values(ascending=False)
               .head(top_n))
        top_resources = (df[df["denied"] > 0].groupby(["principal", "resource", "operation"])["denied"].sum()
                         .sort_values(ascending=False).head(top_n))
        first, last = points[0][0], points[-1][0]
    else:
        points, top, top_resources, first, last = [], pd.Series(dtype="int64"), pd.Series(dtype="int64"), "-", "-"
    esc = html.escape
    rows = "".join(f"<tr><td>{esc(str(p))}</td><td>{int(n)}</td></tr>" for p, n in top.items())
    res_rows = "".join(f"<tr><td>{esc(str(p))}</td><td>{esc(str(r))}</td><td>{esc(str(o))}</td><td>{int(n)}</td></tr>"
                       for (p, r, o), n in top_resources.items())
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>kgw authorization audit</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:60em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:.25em .6em;text-align:left}}</style></head><body>
<h1>kgw authorization audit</h1>
<p>{esc(first)} &ndash; {esc(last)} UTC: <b>{total_allowed}</b> allowed, <b>{total_denied}</b> denied decisions.</p>
<h2>Denials per minute</h2>
{_svg_bars(points)}
<h2>Top denied principals</h2>
<table><tr><th>principal</th><th>denied</th></tr>{rows or '<tr><td colspan="2">none</td></tr>'}</table>
<h2>Top denied (principal, resource, operation)</h2>
<table><tr><th>principal</th><th>resource</th><th>operation</th><th>denied</th></tr>{res_rows or '<tr><td colspan="4">none</td></tr>'}</table>
</body></html>
"""
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(page, encoding="utf-8")
    return report


# --------------------------------------------------------------------------- command line


def build_spark(master: str = "local[2]"):
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master(master).appName("kgw-audit-report")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.sql.session.timeZone", "UTC")
             .getOrCreate())
    from kgw_spark.source import register

    register(spark)
    return spark


def run(spark, args) -> Path:
    kafka = dict(kv.split("=", 1) for kv in (args.kafka_option or []))
    options = source_options(args.bootstrap, args.topic, kafka)
    out = Path(args.out)
    if args.stream:
        per_minute = run_stream(spark, options, out, Path(args.checkpoint) if args.checkpoint else None)
    else:
        per_minute = run_batch(spark, options, out)
    return write_report(per_minute, out / "report.html")


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m kgw_spark.audit_job", description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", required=True, help="kgw bootstrap address (kafka.bootstrap.servers)")
    p.add_argument("--topic", default="kgw-audit", help="the audit topic (default kgw-audit)")
    p.add_argument("--out", required=True, help="output directory (per_minute/ Parquet, report.html)")
    p.add_argument("--stream", action="store_true", help="resumable streaming run (Trigger.AvailableNow)")
    p.add_argument("--checkpoint", help="checkpoint directory (default <out>/_checkpoint)")
    p.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    p.add_argument("--kafka-option", action="append", metavar="KEY=VALUE",
                   help="a kafka.* client setting for the source, e.g. security.protocol=SASL_SSL")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    spark = build_spark(args.master)
    try:
        report = run(spark, args)
    finally:
        spark.stop()
    print(f"per-minute counts: {Path(args.out) / 'per_minute'}")
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
