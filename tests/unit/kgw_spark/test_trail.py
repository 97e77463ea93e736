"""The audit job's own checks on the driver (kgw_spark/trail.py): the chains verified while the
events are tallied per run, and the trail reconciled with what each gateway's counters said,
every difference with its reason."""

from __future__ import annotations

import json

from prometheus_client import generate_latest

from authz.audit_chain import ChainWriter
from authz.audit_events import audit_event
from gateway.auth.failures import authentication_failure_fields
from gateway.process.audit_publisher import AuditPublisher
from kgw_spark.trail import examine, parse_metrics, reconcile


def _decision(i: int, allowed: bool) -> dict:
    return {"kgw_principal": "User:alice", "kgw_allowed": allowed, "kgw_operation": "READ",
            "kgw_host": "10.0.0.1", "kgw_resource": "Topic:LITERAL:t", "kgw_request": "Fetch",
            "kgw_client_id": "c", "kgw_correlation_id": i, "kgw_listener": "EXT", "kgw_rule": "r"}


def _trail(chain: ChainWriter, offered: list[dict]) -> list[tuple[int, int, bytes]]:
    events = [audit_event(fields, 1_800_000_000 + i, "gw") for i, fields in enumerate(offered)]
    values, head = chain.seal_batch(events)
    chain.commit(head)
    return [(0, offset, value) for offset, value in enumerate(values)]


def test_counts_reconcile_with_the_scrape_and_each_difference_is_explained():
    offered = [_decision(0, True), _decision(1, True), _decision(2, False), _decision(3, False),
               authentication_failure_fields("10.0.0.9", "TLS", "SSL", None, "handshake failed"),
               {"kgw_event": "change", "kgw_principal": "User:admin", "kgw_allowed": True, "kgw_operation": "CREATE",
                "kgw_resource": "Topic:LITERAL:t", "kgw_change": "ACL added"}]
    publisher = AuditPublisher("audit")
    for fields in offered:
        publisher.offer(fields)
    assert len(publisher._take()) == len(offered)
    publisher.offer(_decision(9, False))  # still buffered when scraped
    chain = ChainWriter("gw@h", run="r1")
    records = _trail(chain, offered)
    publisher.chain = chain
    publisher.published.inc(len(offered))
    scrape_text = publisher_text = generate_latest(publisher.registry).decode()
    # the authorizer counted 17 denials and 40 allowed; one failed login more than the trail was given
    scrape_text += ('kgw_authorizer_authorization_denied_total{listener="EXT"} 17.0\n'
                    'kgw_authorizer_authorization_allowed_total{listener="EXT"} 40.0\n'
                    'kgw_authentication_failures_total{listener="TLS",mechanism="SSL"} 2.0\n')
    scrape = parse_metrics(scrape_text, "gw:9090")
    assert scrape.heads == {("gw@h", "r1"): 6} and "kgw_audit_chain_head" in publisher_text
    # an event written after the scrape is in the topic but outside what the scrape covers
    records += [(0, 6, v) for v in chain.seal_batch([audit_event(_decision(10, False), 1_800_000_100, "gw")])[0]]

    trail, tallies = examine(records, {})
    assert trail["ok"] and trail["records"] == 7 and trail["chains"]["gw@h"]["events"] == 7
    rows = {r["quantity"]: r for r in reconcile([scrape], tallies)}
    assert rows["audit events written (seq <= head)"]["difference"] == 0
    denied = rows["denied decisions"]
    assert (denied["counter"], denied["offered"], denied["trail"], denied["difference"]) == (17, 3, 2, 15)
    assert denied["explanation"].startswith("14 decision(s) the authorizer made but Kafka does not log")
    assert "1 offered but not in the topic when scraped: 1 buffered" in denied["explanation"]
    allowed = rows["allowed decisions"]
    assert (allowed["counter"], allowed["offered"], allowed["trail"]) == (40, 2, 2)
    logins = rows["failed logins"]
    assert (logins["counter"], logins["trail"], logins["difference"]) == (2, 1, 1)
    assert logins["explanation"] == "1 counted before the audit publisher was attached"
    assert rows["security-state changes"]["explanation"] == "equal"


def test_an_edited_event_is_reported_with_its_offset_and_a_missing_scrape_is_said():
    chain = ChainWriter("gw@h", run="r1")
    records = _trail(chain, [_decision(i, i % 2 == 0) for i in range(4)])
    event = json.loads(records[2][2])
    event["allowed"] = not event["allowed"]
    records[2] = (0, 2, json.dumps(event).encode())
    trail, _tallies = examine(records, {})
    assert not trail["ok"] and trail["chains"]["gw@h"]["first_bad"] == "0:2"
    assert [f["kind"] for f in trail["findings"] if f["tampering"]] == ["edited"]
    (row,) = reconcile([parse_metrics("", "gw:9090")], {})
    assert "names no audit chain" in row["explanation"]
