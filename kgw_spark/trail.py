"""The trail's own checks, run on the driver: chain verification and reconciliation with the
gateways' counters.

Theory of operation
-------------------
:func:`examine` reads every record of the audit topic once, in (partition, offset) order, and

* verifies the chains with :func:`authz.audit_chain.verify` (the checkpoints, if given, come
  from ``kgw audit checkpoints``: the job reads no metadata log itself);
* tallies, per (chain, run), the events by kind and decision, and the losses the ``dropped``
  events record.

:func:`reconcile` puts those tallies beside what each gateway said about itself when it was
scraped (``/metrics``, read *before* the topic so that the head it names is in the topic):
``kgw_audit_chain_head{chain, run}`` says which ``seq`` the scrape covers, so the events
compared are exactly the ones the counters counted.  Every difference gets its reason:

* the authorizer counts every decision; only those Kafka would log (``log_if_allowed`` /
  ``log_if_denied``: a request's named resources, not KIP-430 probes or topics filtered from a
  listing) are offered to the trail;
* of the offered, some were still buffered when scraped, some were dropped (buffer full,
  refused batch: recorded by a ``dropped`` event);
* what remains must be in the topic, and anything missing is a deletion the chain status shows.
"""

from __future__ import annotations

import json
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from authz.audit_chain import verify

__all__ = ["Scrape", "Tally", "examine", "parse_metrics", "read_metrics", "reconcile"]


@dataclass
class Scrape:
    """What one gateway process said about itself (its Prometheus text)."""

    source: str
    heads: dict[tuple[str, str], int] = field(default_factory=dict)  # (chain, run) -> seq written
    offered: Counter = field(default_factory=Counter)                  # (event, decision) -> n
    published: float = 0.0
    dropped: float = 0.0
    buffered: float = 0.0
    authorized: Counter = field(default_factory=Counter)               # decision -> n (authorizer)
    failed_logins: float = 0.0


def parse_metrics(text: str, source: str = "-") -> Scrape:
    from prometheus_client.parser import text_string_to_metric_families

    scrape = Scrape(source)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name == "kgw_audit_chain_head":
                scrape.heads[(labels["chain"], labels["run"])] = int(value)
            elif name == "kgw_audit_events_offered_total":
                scrape.offered[(labels["event"], labels["decision"])] += int(value)
            elif name == "kgw_audit_events_published_total":
                scrape.published += value
            elif name == "kgw_audit_events_dropped_total":
                scrape.dropped += value
            elif name == "kgw_audit_events_buffered":
                scrape.buffered += value
            elif name == "kgw_authorizer_authorization_allowed_total":
                scrape.authorized["allowed"] += int(value)
            elif name == "kgw_authorizer_authorization_denied_total":
                scrape.authorized["denied"] += int(value)
            elif name == "kgw_authentication_failures_total":
                scrape.failed_logins += value
    return scrape


def read_metrics(where: str, timeout_s: float = 10.0) -> Scrape:
    """A gateway's ``/metrics`` URL (or a file holding a scrape)."""
    if where.startswith(("http://", "https://")):
        with urllib.request.urlopen(where, timeout=timeout_s) as response:
            return parse_metrics(response.read().decode(), where)
    return parse_metrics(Path(where).read_text(), where)


def _kind(event: Mapping[str, Any]) -> tuple[str, str]:
    """(event kind, decision) of a kgw-format or OCSF event."""
    unmapped = event.get("unmapped") or {}
    kind = event.get("event") or unmapped.get("event") or "authorization"
    if "allowed" in event:
        allowed = bool(event["allowed"])
    else:
        allowed = event.get("status_id") == 1
    return kind, "allowed" if allowed else "denied"


@dataclass
class Tally:
    """One run's events in the topic."""

    by_seq: dict[int, tuple[str, str]] = field(default_factory=dict)  # seq -> (event, decision), markers aside
    recorded_drops: dict[int, int] = field(default_factory=dict)  # seq of a "dropped" event -> count

    def upto(self, head: int) -> tuple[Counter, int, int]:
        """Kinds, events and recorded drops among seq <= head."""
        kinds = Counter(k for s, k in self.by_seq.items() if s <= head)
        drops = sum(n for s, n in self.recorded_drops.items() if s <= head)
        return kinds, sum(kinds.values()), drops


def examine(records: Iterable[tuple[int, int, bytes]], checkpoints: Mapping[str, Mapping[str, str]]
            ) -> tuple[dict[str, Any], dict[tuple[str, str], Tally]]:
    """(the chains' verification as JSON-ready data, per-(chain, run) tallies)."""
    tallies: dict[tuple[str, str], Tally] = defaultdict(Tally)
    count = 0

    def tallied() -> Iterator[tuple[int, int, bytes]]:
        nonlocal count
        for partition, offset, value in records:
            count += 1
            try:
                event = json.loads(value)
            except ValueError:
                event = None
            if isinstance(event, dict) and isinstance(event.get("seq"), int):
                tally = tallies[(str(event.get("chain")), str(event.get("run")))]
                kind = _kind(event)
                if kind[0] == "dropped":
                    n = event.get("count", (event.get("unmapped") or {}).get("count"))
                    tally.recorded_drops[event["seq"]] = int(n or 0)
                else:
                    tally.by_seq.setdefault(event["seq"], kind)  # a duplicate (retried batch) once
            yield partition, offset, bytes(value)

    report = verify(tallied(), checkpoints)
    chains = {chain: {**summary, "first_bad": report.first_bad(chain)} for chain, summary in report.chains.items()}
    return {"ok": report.ok, "records": count, "checkpoints": bool(checkpoints), "chains": chains,
            "findings": [asdict(f) for f in report.findings]}, dict(tallies)


#: what is compared, as (label, the trail's event kind, decision)
_ROWS = (("allowed decisions", "authorization", "allowed"), ("denied decisions", "authorization", "denied"),
         ("failed logins", "authentication", "denied"), ("security-state changes", "change", "allowed"))


def reconcile(scrapes: Iterable[Scrape], tallies: Mapping[tuple[str, str], Tally]) -> list[dict[str, Any]]:
    """One row per (gateway run, quantity): the gateway's count, the events in the topic, and
    why they differ."""
    rows: list[dict[str, Any]] = []
    for scrape in scrapes:
        if not scrape.heads:
            rows.append({"gateway": scrape.source, "run": "-", "quantity": "audit events", "counter": None,
                         "offered": None, "trail": None, "difference": None,
                         "explanation": "the scrape names no audit chain: is audit.publish on?"})
            continue
        for (chain, run), head in sorted(scrape.heads.items()):
            kinds, events, drops = tallies.get((chain, run), Tally()).upto(head)
            where = f"{chain} run {run}"
            rows.append(_row(where, "audit events written (seq <= head)", scrape.published, None, events,
                             _written_reason(scrape.published, events, head)))
            for label, kind, decision in _ROWS:
                offered = scrape.offered.get((kind, decision), 0)
                if kind == "authorization":
                    counter = scrape.authorized.get(decision, 0)
                elif kind == "authentication":
                    counter = scrape.failed_logins
                else:
                    counter = offered
                trail = kinds.get((kind, decision), 0)
                rows.append(_row(where, label, counter, offered, trail,
                                 _reason(kind, counter, offered, trail, scrape, drops)))
    return rows


def _row(where: str, quantity: str, counter: float, offered: int | None, trail: int, explanation: str):
    return {"gateway": where, "quantity": quantity, "counter": int(counter),
            "offered": offered, "trail": trail, "difference": int(counter) - trail, "explanation": explanation}


def _written_reason(published: float, events: int, head: int) -> str:
    if int(published) == events:
        return f"equal: every event the gateway wrote up to seq {head} is in the topic"
    if events < published:
        return f"{int(published) - events} written event(s) missing from the topic: see the chain status"
    return "the topic holds more than the counter: the scrape raced a batch being written"


def _reason(kind: str, counter: float, offered: int, trail: int, scrape: Scrape, drops: int) -> str:
    parts = []
    unaudited = int(counter) - offered
    if unaudited > 0:
        if kind == "authorization":
            parts.append(f"{unaudited} decision(s) the authorizer made but Kafka does not log (KIP-430 "
                         "authorized-operations probes, topics filtered from a listing): never audit events")
        else:
            parts.append(f"{unaudited} counted before the audit publisher was attached")
    pending = offered - trail
    if pending > 0:
        parts.append(f"{pending} offered but not in the topic when scraped: {int(scrape.buffered)} buffered, "
                     f"{int(scrape.dropped)} dropped in all ({drops} recorded by dropped events)")
    if not parts:
        return "equal" if int(counter) == trail else "the topic holds more than was counted (the scrape raced it)"
    return "; ".join(parts)
