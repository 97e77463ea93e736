"""The audit report: one self-contained HTML page (inline SVG, no scripts, no Spark needed to
open it) from the job's outputs, with pyarrow and pandas only.

What it answers, in order: how many decisions and failed logins, and is the trail intact; when
were requests denied, to whom and on what (each on its own axis, so 7 denials are not lost
next to 150 allowed a minute); which addresses failed to log in, when; which principals and
addresses appeared for the first time; every change of security state; who talks most; and
whether the trail adds up to the gateways' own counters (with the reason for each difference).

A principal of ``-`` is a login that named no user (a failed TLS handshake, or a refusal
before a user name was given).
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Any

__all__ = ["CHANGE_COLUMNS", "KEY_COLUMNS", "PARTITION_COLUMNS", "nice_ticks", "write_report"]

# The job's outputs (kgw_spark/audit_job.py writes them, this module reads them):
#: what each per-minute row is counted by: the kind of event ("authorization", "authentication"
#: or "change"), who, what, with which request and client, from where
KEY_COLUMNS = ["minute", "event", "principal", "resource", "operation", "api", "listener", "client_address",
               "client_id", "gateway"]
#: the Parquet output's directories: date=YYYY-MM-DD/gateway=<the gateway's cluster id>
PARTITION_COLUMNS = ["date", "gateway"]
#: the columns of the ``changes`` output: every change of security state, one row each
CHANGE_COLUMNS = ["ts_ms", "principal", "operation", "resource", "change", "listener", "client_address", "api",
                  "client_id", "gateway"]

_ALLOWED_COLOUR, _DENIED_COLOUR = "#2e7d32", "#c0392b"
#: colours of a stacked chart's series (the last one: "other")
_PALETTE = ("#c0392b", "#1f77b4", "#ff7f0e", "#9467bd", "#8c564b", "#17becf", "#7f7f7f")
#: series a stacked chart shows before the rest becomes "other"
_SERIES = 6
#: a principal or address first seen this close to the end of the data is marked new
_NEW_WITHIN = "24h"
NO_PRINCIPAL = "-"


def nice_ticks(top: float, count: int = 4) -> list[int]:
    """Axis ticks from 0 past ``top`` in steps of 1, 2 or 5 times a power of ten."""
    if top <= 0:
        return [0, 1]
    raw = top / count
    magnitude = 10 ** math.floor(math.log10(raw)) if raw >= 1 else 1
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(int(math.ceil(top / step)) + 1)]


def _bar_chart(labels: list[str], series: list[tuple[str, str, list[int]]], *, stacked: bool, y_label: str,
               x_label: str, aria: str, width: int = 760, height: int = 260) -> str:
    """Bars per time bucket: ``series`` = (name, colour, values); side by side or stacked, with
    a ticked y axis and a legend naming each series with its total."""
    if not labels or not series:
        return "<p>None.</p>"
    if stacked:
        peak = max(sum(values[i] for _n, _c, values in series) for i in range(len(labels)))
    else:
        peak = max(max(values) for _n, _c, values in series)
    ticks = nice_ticks(peak)
    top = ticks[-1]
    rows = (len(series) + 1) // 2
    left, bottom, pad, legend = 56, 40, 10, 16 * rows
    plot_w, plot_h = width - left - pad, height - bottom - pad - legend
    base = pad + legend + plot_h
    esc = html.escape
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{esc(aria)}" font-family="sans-serif">']
    for i, (name, colour, values) in enumerate(series):
        x, y = left + (i % 2) * 350, 2 + 16 * (i // 2)
        shown = name if len(name) <= 44 else name[:43] + "\u2026"
        parts.append(f'<rect x="{x}" y="{y}" width="10" height="10" fill="{colour}"/>'
                     f'<text x="{x + 14}" y="{y + 9}" font-size="12">{esc(shown)} ({sum(values)})'
                     f'<title>{esc(name)}</title></text>')
    for tick in ticks:
        y = base - plot_h * tick / top
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#ddd"/>'
                     f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{tick}</text>')
    mid = pad + legend + plot_h / 2
    parts.append(f'<line x1="{left}" y1="{base}" x2="{left + plot_w}" y2="{base}" stroke="#444"/>'
                 f'<line x1="{left}" y1="{pad + legend}" x2="{left}" y2="{base}" stroke="#444"/>'
                 f'<text x="14" y="{mid:.0f}" font-size="11" text-anchor="middle" '
                 f'transform="rotate(-90 14 {mid:.0f})">{esc(y_label)}</text>')
    step = plot_w / len(labels)
    bar_w = max(1.0, (step - 2) if stacked else step / len(series) - 1)
    label_every = max(1, len(labels) // 8)
    for i, label in enumerate(labels):
        x = left + i * step + 1
        stack = 0.0
        for k, (name, colour, values) in enumerate(series):
            value = values[i]
            if not value:
                continue
            h = plot_h * value / top
            bx = x if stacked else x + k * bar_w
            by = base - stack - h
            if stacked:
                stack += h
            parts.append(f'<rect x="{bx:.1f}" y="{by:.1f}" width="{bar_w:.1f}" height="{h:.1f}" fill="{colour}">'
                         f'<title>{esc(label)}: {value} {esc(name)}</title></rect>')
        if i % label_every == 0:
            parts.append(f'<text x="{x:.1f}" y="{base + 14}" font-size="10">{esc(label[-5:])}</text>')
    parts.append(f'<text x="{left + plot_w / 2:.0f}" y="{height - 4}" font-size="11" text-anchor="middle">'
                 f'{esc(x_label)}</text></svg>')
    return "".join(parts)


def _hbar_chart(rows: list[tuple[str, int, int]], aria: str, width: int = 760) -> str:
    """Horizontal bars, allowed then denied, one row per name."""
    if not rows:
        return "<p>None.</p>"
    left, row_h = 230, 20
    top = max(a + d for _n, a, d in rows) or 1
    plot_w = width - left - 80
    esc = html.escape
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{row_h * len(rows) + 8}" '
             f'role="img" aria-label="{esc(aria)}" font-family="sans-serif">']
    for i, (name, allowed, denied) in enumerate(rows):
        y = 4 + i * row_h
        wa, wd = plot_w * allowed / top, plot_w * denied / top
        parts.append(f'<text x="{left - 6}" y="{y + 13}" text-anchor="end" font-size="11">{esc(name[:34])}</text>'
                     f'<rect x="{left}" y="{y + 2}" width="{wa:.1f}" height="{row_h - 6}" fill="{_ALLOWED_COLOUR}">'
                     f'<title>{esc(name)}: {allowed} allowed</title></rect>'
                     f'<rect x="{left + wa:.1f}" y="{y + 2}" width="{wd:.1f}" height="{row_h - 6}" '
                     f'fill="{_DENIED_COLOUR}"><title>{esc(name)}: {denied} denied</title></rect>'
                     f'<text x="{left + wa + wd + 6:.1f}" y="{y + 13}" font-size="11">{allowed + denied}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _table(headers: list[str], rows: list[list], empty: str = "none") -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{esc('' if c is None else str(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body or f'<tr><td colspan={len(headers)}>{esc(empty)}</td></tr>'}</table>"


def _read_parquet(path: Path | None, columns: list[str]):
    import pandas as pd
    import pyarrow.parquet as pq

    if path is None or not Path(path).exists() or not any(Path(path).rglob("*.parquet")):
        return pd.DataFrame(columns=columns)
    df = pq.read_table(str(path)).to_pandas()
    for column in PARTITION_COLUMNS:  # partition columns come back as categories
        if column in df:
            df[column] = df[column].astype(str)
    return df


def _buckets(minutes) -> tuple[str, str, str]:
    """(pandas frequency, label format, axis name) for the span of ``minutes``."""
    span = (minutes.max() - minutes.min()).total_seconds() if len(minutes) else 0
    if span <= 6 * 3600:
        return "min", "%Y-%m-%d %H:%M", "minute (UTC)"
    if span <= 7 * 86400:
        return "h", "%Y-%m-%d %H:00", "hour (UTC)"
    return "D", "%Y-%m-%d", "day (UTC)"


class _Timeline:
    """The report's one time axis: every bucket from the first event to the last."""

    def __init__(self, frame) -> None:
        import pandas as pd

        minutes = pd.to_datetime(frame["minute"], utc=True) if len(frame) else pd.Series([], dtype="datetime64[ns, UTC]")
        self.freq, self.fmt, self.axis = _buckets(minutes)
        if len(minutes):
            self.index = pd.date_range(minutes.min().floor(self.freq), minutes.max().floor(self.freq),
                                       freq=self.freq, tz="UTC")
        else:
            self.index = pd.DatetimeIndex([], tz="UTC")
        self.labels = [ts.strftime(self.fmt) for ts in self.index]

    def per_bucket(self, frame, value: str) -> list[int]:
        import pandas as pd

        if not len(frame) or not len(self.index):
            return [0] * len(self.index)
        buckets = pd.to_datetime(frame["minute"], utc=True).dt.floor(self.freq)
        summed = frame.assign(bucket=buckets).groupby("bucket")[value].sum()
        return [int(v) for v in summed.reindex(self.index, fill_value=0)]

    def series(self, frame, by: str, value: str) -> list[tuple[str, str, list[int]]]:
        """The largest ``_SERIES`` values of ``by`` as their own series, the rest as "other"."""
        frame = frame[frame[value] > 0]
        if not len(frame):
            return []
        order = frame.groupby(by)[value].sum().sort_values(ascending=False, kind="stable")
        shown = list(order.index[:_SERIES])
        out = [(str(name), _PALETTE[i], self.per_bucket(frame[frame[by] == name], value))
               for i, name in enumerate(shown)]
        rest = frame[~frame[by].isin(shown)]
        if len(rest):
            out.append((f"other ({len(order) - len(shown)})", _PALETTE[-1], self.per_bucket(rest, value)))
        return out


def _first_seen(by: str, decisions, logins, end) -> tuple[list[list], bool]:
    """Rows (first seen, "new"?, name, last seen, allowed, denied, failed logins), newest first,
    and whether there was a baseline: "new" marks a name first seen in the last ``_NEW_WITHIN``
    of data that reaches further back than that."""
    import pandas as pd

    seen = pd.concat([decisions, logins])
    if not len(seen):
        return [], False
    minutes = pd.to_datetime(seen["minute"], utc=True)
    spans = seen.assign(minute=minutes).groupby(by)["minute"].agg(["min", "max"])
    allowed = decisions.groupby(by)["allowed"].sum() if len(decisions) else pd.Series(dtype="int64")
    denied = decisions.groupby(by)["denied"].sum() if len(decisions) else pd.Series(dtype="int64")
    failed = logins.groupby(by)["denied"].sum() if len(logins) else pd.Series(dtype="int64")
    cutoff = end - pd.Timedelta(_NEW_WITHIN)
    baseline = bool(minutes.min() < cutoff)
    rows = []
    for name, r in spans.sort_values("min", ascending=False, kind="stable").iterrows():
        rows.append([r["min"].strftime("%Y-%m-%d %H:%M"), "new" if baseline and r["min"] >= cutoff else "",
                     name, r["max"].strftime("%Y-%m-%d %H:%M"), int(allowed.get(name, 0)), int(denied.get(name, 0)),
                     int(failed.get(name, 0))])
    return rows, baseline


def _first_seen_table(by: str, heading: str, decisions, logins, end) -> str:
    rows, baseline = _first_seen(by, decisions, logins, end)
    note = "" if baseline or not rows else (
        f"<p>The data covers less than {_NEW_WITHIN}: no baseline to call anything new.</p>")
    return note + _table(["first seen", "", heading, "last seen", "allowed", "denied", "failed logins"], rows)


def write_report(per_minute: Path, report: Path, top_n: int = 10, changes: Path | None = None,
                 trail: dict[str, Any] | None = None, reconciliation: list[dict[str, Any]] | None = None) -> Path:
    """``report.html`` from the Parquet outputs (``per_minute``, ``changes``) and, if given, the
    chains' verification and the reconciliation with the gateways' counters
    (:mod:`kgw_spark.trail`)."""
    import pandas as pd

    report = Path(report)
    df = _read_parquet(per_minute, KEY_COLUMNS + ["allowed", "denied"])
    for column in ("listener", "client_address", "principal"):
        df[column] = df[column].fillna(NO_PRINCIPAL) if column in df else NO_PRINCIPAL
    df["event"] = df["event"].fillna("authorization") if "event" in df else "authorization"
    logins = df[(df["operation"] == "AUTHENTICATE") | (df["event"] == "authentication")]
    decisions = df[(df["event"] == "authorization") & (df["operation"] != "AUTHENTICATE")]
    total_allowed, total_denied = int(decisions["allowed"].sum()), int(decisions["denied"].sum())
    failed_logins = int(logins["denied"].sum())
    seen = pd.concat([decisions, logins])
    timeline = _Timeline(seen)
    first = timeline.labels[0] if timeline.labels else "-"
    last = timeline.labels[-1] if timeline.labels else "-"
    end = pd.to_datetime(seen["minute"], utc=True).max() if len(seen) else pd.Timestamp.now(tz="UTC")

    def totals(frame, by):
        if not len(frame):
            return []
        grouped = frame.groupby(by)[["allowed", "denied"]].sum().sort_values("denied", ascending=False, kind="stable")
        return [[*(k if isinstance(k, tuple) else (k,)), int(r.allowed), int(r.denied)] for k, r in grouped.iterrows()]

    failed_by_host = logins.groupby("client_address")["denied"].sum() if len(logins) else {}
    by_host = [[*row, int(failed_by_host.get(row[0], 0))] for row in totals(decisions, "client_address")]
    by_host += [[h, 0, 0, int(n)] for h, n in dict(failed_by_host).items() if h not in {r[0] for r in by_host}]
    login_rows = []
    if len(logins):
        grouped = logins.groupby(["principal", "resource", "client_address", "listener"])["denied"].sum()
        login_rows = [[p, r.rsplit(":", 1)[-1], h, lst, int(n)]
                      for (p, r, h, lst), n in grouped.sort_values(ascending=False, kind="stable").head(top_n).items()]
    denied = decisions[decisions["denied"] > 0]
    top = [[p, int(n)] for p, n in denied.groupby("principal")["denied"].sum()
           .sort_values(ascending=False, kind="stable").head(top_n).items()] if len(denied) else []
    top_resources = [[p, r, o, int(n)] for (p, r, o), n in denied.groupby(["principal", "resource", "operation"])
                     ["denied"].sum().sort_values(ascending=False, kind="stable").head(top_n).items()] \
        if len(denied) else []
    talkers = []
    if len(decisions):
        per = decisions.groupby("principal")[["allowed", "denied"]].sum()
        per = per.assign(total=per["allowed"] + per["denied"]).sort_values("total", ascending=False, kind="stable")
        talkers = [(str(p), int(r.allowed), int(r.denied)) for p, r in per.head(top_n).iterrows()]

    grouped_chart = _bar_chart(timeline.labels, [
        ("allowed", _ALLOWED_COLOUR, timeline.per_bucket(decisions, "allowed")),
        ("denied", _DENIED_COLOUR, timeline.per_bucket(decisions, "denied"))] if len(decisions) else [],
        stacked=False, y_label="decisions", x_label=timeline.axis, aria="Allowed and denied decisions over time")

    def denial_chart(by: str, what: str) -> str:
        return _bar_chart(timeline.labels, timeline.series(decisions, by, "denied"), stacked=True,
                          y_label="denied", x_label=timeline.axis, aria=f"Denials over time by {what}")

    failed_chart = _bar_chart(timeline.labels, timeline.series(logins, "client_address", "denied"), stacked=True,
                              y_label="failed logins", x_label=timeline.axis,
                              aria="Failed logins over time by client address")
    change_rows = _change_rows(changes)
    esc = html.escape
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>kgw authorization audit</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:60em}}table{{border-collapse:collapse;margin-bottom:1em}}
td,th{{border:1px solid #ccc;padding:.25em .6em;text-align:left}}.bad{{color:#c0392b;font-weight:bold}}</style>
</head><body>
<h1>kgw authorization audit</h1>
<p>{esc(first)} &ndash; {esc(last)} UTC: <b>{total_allowed}</b> allowed, <b>{total_denied}</b> denied decisions;
<b>{failed_logins}</b> failed logins; <b>{len(change_rows)}</b> security-state changes.</p>
{_trail_summary(trail)}
<h2>Allowed and denied over time</h2>
{grouped_chart}
<h2>Denials over time by principal</h2>
{denial_chart("principal", "principal")}
<h2>Denials over time by resource</h2>
{denial_chart("resource", "resource")}
<h2>Failed logins over time by client address</h2>
{failed_chart}
<h2>Failed logins</h2>
<p>A principal of <code>{NO_PRINCIPAL}</code>: no user name was given (a failed TLS handshake).</p>
{_table(["principal tried", "mechanism", "client address", "listener", "failures"], login_rows)}
<h2>Security-state changes</h2>
{_table(["time (UTC)", "principal", "operation", "resource", "change", "client address", "listener"],
        change_rows)}
<h2>Principals by first appearance</h2>
{_first_seen_table("principal", "principal", decisions, logins, end)}
<h2>Client addresses by first appearance</h2>
{_first_seen_table("client_address", "client address", decisions, logins, end)}
<h2>Top talkers</h2>
{_hbar_chart(talkers, "Decisions by principal")}
{_table(["principal", "allowed", "denied"], [list(t) for t in talkers])}
<h2>By listener</h2>
{_table(["listener", "allowed", "denied"], totals(decisions, "listener"))}
<h2>By client address</h2>
{_table(["client address", "allowed", "denied", "failed logins"], by_host)}
<h2>Top denied principals</h2>
{_table(["principal", "denied"], top)}
<h2>Top denied (principal, resource, operation)</h2>
{_table(["principal", "resource", "operation", "denied"], top_resources)}
<h2>Audit chains</h2>
{_chains(trail)}
<h2>Reconciliation with the gateways' counters</h2>
{_reconciliation(reconciliation)}
</body></html>
"""
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(page, encoding="utf-8")
    return report


def _change_rows(changes: Path | None) -> list[list]:
    import pandas as pd

    frame = _read_parquet(changes, CHANGE_COLUMNS)
    if not len(frame):
        return []
    frame = frame.sort_values("ts_ms", kind="stable")
    return [[pd.Timestamp(int(r.ts_ms), unit="ms", tz="UTC").strftime("%Y-%m-%d %H:%M:%S"),
             r.principal or NO_PRINCIPAL, r.operation, r.resource, r.change, r.client_address or "-",
             r.listener or "-"] for r in frame.itertuples()]


def _trail_summary(trail: dict[str, Any] | None) -> str:
    if trail is None:
        return "<p>Audit chains: not verified in this run.</p>"
    if trail["ok"]:
        return f"<p>Audit chains: <b>intact</b> ({len(trail['chains'])} chain(s), {trail['records']} records).</p>"
    return f'<p class="bad">Audit chains: TAMPERED ({len(trail["chains"])} chain(s)); see "Audit chains".</p>'


def _chains(trail: dict[str, Any] | None) -> str:
    if trail is None:
        return "<p>Not verified (run the job with the topic readable from the driver).</p>"
    rows = [[chain, s["events"], s["runs"], "TAMPERED" if s.get("first_bad") else "intact", s.get("first_bad") or "-"]
            for chain, s in sorted(trail["chains"].items())]
    findings = [["tampering" if f["tampering"] else "for the record", f["chain"], f["kind"], f.get("where") or "-",
                 f["detail"]] for f in trail["findings"]]
    note = "" if trail["checkpoints"] else (
        "<p>No checkpoints were given (<code>kgw audit checkpoints</code>, then <code>--checkpoints</code>): "
        "events deleted from the end of a run cannot be proven missing.</p>")
    return (_table(["chain", "events", "runs", "status", "first bad offset"], rows) + note
            + _table(["finding", "chain", "kind", "where", "detail"], findings))


def _reconciliation(rows: list[dict[str, Any]] | None) -> str:
    if not rows:
        return "<p>No gateway counters given (<code>--metrics</code> with each gateway's /metrics URL).</p>"
    return ("<p><i>counter</i>: the gateway's own count when scraped (the authorizer's decisions, failed logins); "
            "<i>offered</i>: of those, the events given to the audit trail; <i>in the trail</i>: the events of that "
            "run in the topic up to the head the scrape named.</p>"
            + _table(["gateway run", "quantity", "counter", "offered", "in the trail", "difference", "why"],
                     [[r["gateway"], r["quantity"], r["counter"], "-" if r["offered"] is None else r["offered"],
                       r["trail"], r["difference"], r["explanation"]] for r in rows]))
