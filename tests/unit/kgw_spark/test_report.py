"""The audit report's page from Parquet written here (no Spark): denials on their own axis per
principal and per resource with each series' total, failed logins per address with the
user-less TLS failure shown as ``-``, first appearances marked new only against a baseline,
the changes, and the chains' status."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from kgw_spark.report import write_report  # noqa: E402

T0 = pd.Timestamp("2026-11-20 08:00", tz="UTC")


def _row(minutes: float, principal: str, resource: str, address: str, allowed: int, denied: int,
         event: str = "authorization", operation: str = "READ") -> dict:
    minute = T0 + pd.Timedelta(minutes=minutes)
    return {"minute": minute, "event": event, "principal": principal, "resource": resource, "operation": operation,
            "api": "Fetch", "listener": "EXT", "client_address": address, "client_id": "c", "gateway": "gw",
            "allowed": allowed, "denied": denied, "date": minute.strftime("%Y-%m-%d")}


def _parquet(directory: Path, rows: list[dict]) -> Path:
    directory.mkdir(parents=True)
    pq.write_table(pa.Table.from_pandas(pd.DataFrame(rows), preserve_index=False), directory / "part.parquet")
    return directory


def _legend(page: str, aria: str) -> dict[str, int]:
    chart = page[page.index(f'aria-label="{aria}"'):]
    chart = chart[:chart.index("</svg>")]
    return {name: int(n) for name, n in re.findall(r'font-size="12">([^<]+) \((\d+)\)<title>', chart)}


def test_the_report_answers_who_was_denied_what_when_and_who_is_new(tmp_path):
    rows = [_row(m, "User:alice", "Topic:LITERAL:a", "10.0.0.1", 150, 0) for m in range(0, 3)]
    rows += [_row(60 * 30 + m, "User:alice", "Topic:LITERAL:a", "10.0.0.1", 150, 0) for m in range(3)]
    rows += [_row(60 * 30 + 1, "User:bob", "Topic:LITERAL:b", "10.0.0.2", 0, 4),
             _row(60 * 30 + 2, "User:bob", "Topic:LITERAL:c", "10.0.0.2", 0, 3),
             _row(60 * 30 + 2, "-", "Authentication:LITERAL:SSL", "10.0.0.9", 0, 2, "authentication", "AUTHENTICATE"),
             _row(60 * 30 + 2, "User:mallory", "Authentication:LITERAL:PLAIN", "10.0.0.9", 0, 1, "authentication",
                  "AUTHENTICATE")]
    changes = _parquet(tmp_path / "changes", [{
        "ts_ms": int((T0 + pd.Timedelta(hours=30)).timestamp() * 1000), "principal": "User:admin",
        "operation": "CREATE", "resource": "Topic:LITERAL:b", "change": "ACL added: User:bob DENY READ",
        "listener": "EXT", "client_address": "10.0.0.3", "api": "CreateAcls", "client_id": "admin", "gateway": "gw"}])
    trail = {"ok": False, "records": 9, "checkpoints": True,
             "chains": {"gw@h": {"events": 9, "runs": 1, "first_bad": "0:4"}},
             "findings": [{"chain": "gw@h", "kind": "edited", "where": "0:4", "detail": "hash mismatch",
                           "tampering": True}]}
    page = write_report(_parquet(tmp_path / "per_minute", rows), tmp_path / "report.html", changes=changes,
                        trail=trail).read_text()

    assert "<b>900</b> allowed, <b>7</b> denied decisions;\n<b>3</b> failed logins; <b>1</b> security-state" in page
    # 7 denials have an axis of their own, by principal and by resource, each with its total
    assert _legend(page, "Denials over time by principal") == {"User:bob": 7}
    assert _legend(page, "Denials over time by resource") == {"Topic:LITERAL:b": 4, "Topic:LITERAL:c": 3}
    assert _legend(page, "Failed logins over time by client address") == {"10.0.0.9": 3}
    # a day and a half of data: hourly buckets, and those first seen in its last day are new
    assert "hour (UTC)" in page
    principals = page[page.index("Principals by first appearance"):page.index("Client addresses by first")]
    assert re.search(r"<td>new</td><td>User:bob</td>", principals)
    assert re.search(r"<td></td><td>User:alice</td>", principals)
    assert "<td>-</td><td>SSL</td><td>10.0.0.9</td>" in page  # the TLS failure named no user
    assert "<td>User:admin</td><td>CREATE</td><td>Topic:LITERAL:b</td><td>ACL added: User:bob DENY READ</td>" in page
    assert 'class="bad">Audit chains: TAMPERED' in page and "<td>gw@h</td><td>9</td><td>1</td><td>TAMPERED</td>" in page
    assert "No gateway counters given" in page
