"""The audit pipeline end to end: kgw decisions -> audit topic -> Spark job -> Parquet + HTML.

A gateway with the StandardAuthorizer publishes its audit events to a fresh
audit topic on tansu.  The test makes a known number of allowed and denied
requests (raw Metadata requests, so that each is exactly one decision):
User:ANONYMOUS may DESCRIBE topic A but not topic B.  The Spark job
(kgw_spark/audit_job.py, streaming + availableNow) reads the audit topic
*through kgw* with the ``kgw`` source; the per-minute counts in its Parquet
output must equal the requests made, and a second run resumes from the
checkpoint and adds only the new decisions.  The HTML report must name the
denied principal.  The gateway is the normal ``kgw run`` with ``audit.publish``.
"""

from __future__ import annotations

import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from gateway.upstream.cluster import KGW_CLIENT_ID
from tests.support.acls import add_acl



# --------------------------------------------------------------------------- test

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")
pytest.importorskip("pandas")
pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture(scope="module")
def spark():
    from tests.support.spark import make_spark

    session = make_spark("kgw-audit-pipeline-tests")
    try:
        yield session
    finally:
        session.stop()


def _seed(data_dir: Path, *args: str) -> None:
    add_acl(data_dir, *args)


def _audited_gateway(start_gateway, tmp_path: Path, name: str, described: str, audit: str, **audit_settings):
    """A gateway with the StandardAuthorizer publishing to ``audit``: User:ANONYMOUS may DESCRIBE
    ``described`` and READ and DESCRIBE the audit topic, nothing else."""
    data_dir = tmp_path / name / "metadata"
    _seed(data_dir, "--operation", "DESCRIBE", "--topic", described)
    for op in ("READ", "DESCRIBE"):
        _seed(data_dir, "--operation", op, "--topic", audit)
    return start_gateway({"authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer", "config": {}},
                          "audit": {"publish": True, "topic": audit, **audit_settings}}, name=name)


def _metadata_requests(bootstrap: str, plan: list[tuple[str, int]]) -> dict[str, int]:
    """Send one Metadata v12 request per (topic, expected error); returns the error codes seen."""
    import trio

    from gateway.upstream.cluster import open_upstream, parse_host_port, roundtrip
    from protocol.codecs import make, nested, request_class

    cls = request_class(3, 12)
    topic_cls = nested(cls, "topics")

    async def drive():
        host, port = parse_host_port(bootstrap)
        stream = await open_upstream(host, port, 10)
        seen = Counter()
        async with stream:
            for topic, _expected in plan:
                body = make(cls, topics=(make(topic_cls, name=topic, topic_id=None),),
                            allow_auto_topic_creation=False, include_topic_authorized_operations=False)
                response = await roundtrip(stream, 3, 12, body, 10)
                (t,) = response.topics
                seen[(topic, int(t.error_code))] += 1
        return seen

    return trio.run(drive)


def _avoid_minute_boundary() -> None:
    while not 1.0 <= time.time() % 60 <= 55.0:
        time.sleep(0.2)


def _minute(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(ts))


def _published(gw) -> float:
    text = urllib.request.urlopen(f"{gw.admin_url}/metrics", timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith("kgw_audit_events_published_total "):
            return float(line.split()[1])
    return 0.0


def _wait_published(gw, at_least: float, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while _published(gw) < at_least:
        assert time.monotonic() < deadline, f"kgw published only {_published(gw)} audit events"
        time.sleep(0.2)


def test_audit_events_to_parquet_and_report(spark, tansu, start_gateway, tmp_path):
    import pandas as pd
    import pyarrow.parquet as pq

    from kgw_spark.audit_job import run_stream, source_options, write_report
    from tests.integration.test_spark_source import create_topic

    uid = tmp_path.name[-12:].strip("_-") or "x"
    topic_a, topic_b, audit = f"audit-ok-{uid}", f"audit-denied-{uid}", f"kgw-audit-{uid}"
    for t in (topic_a, topic_b):
        create_topic(tansu.bootstrap, t, 1)
    gw = _audited_gateway(start_gateway, tmp_path, "kgw-audit", topic_a, audit, linger_ms=100)

    # -- round 1: 3 allowed, 2 denied -----------------------------------------
    _avoid_minute_boundary()
    t1 = time.time()
    seen = _metadata_requests(gw.bootstrap, [(topic_a, 0)] * 3 + [(topic_b, 29)] * 2)
    assert seen == {(topic_a, 0): 3, (topic_b, 29): 2}
    expected = Counter({(_minute(t1), f"Topic:LITERAL:{topic_a}", "allowed"): 3,
                        (_minute(t1), f"Topic:LITERAL:{topic_b}", "denied"): 2})
    _wait_published(gw, 5)

    out = tmp_path / "audit-out"
    options = source_options(gw.bootstrap, audit)

    def counts() -> Counter:
        df = pq.read_table(str(out / "per_minute")).to_pandas()
        df = df[df["resource"].isin([f"Topic:LITERAL:{topic_a}", f"Topic:LITERAL:{topic_b}"])]
        got = Counter()
        for row in df.itertuples():
            assert row.principal == "User:ANONYMOUS" and row.operation == "DESCRIBE", row
            # the request and client a decision came with stay in the output
            assert (row.event, row.api, row.client_id) == ("authorization", "Metadata", KGW_CLIENT_ID), row
            minute = pd.Timestamp(row.minute).tz_localize("UTC") if pd.Timestamp(row.minute).tzinfo is None \
                else pd.Timestamp(row.minute).tz_convert("UTC")
            for kind in ("allowed", "denied"):
                if getattr(row, kind):
                    got[(minute.strftime("%Y-%m-%d %H:%M"), row.resource, kind)] += int(getattr(row, kind))
        return got

    started = time.monotonic()
    run_stream(spark, options, out, timeout_s=180)
    first_run_s = time.monotonic() - started
    assert counts() == expected

    # -- round 2: resume from the checkpoint, only new decisions added ------------
    _avoid_minute_boundary()
    t2 = time.time()
    seen = _metadata_requests(gw.bootstrap, [(topic_b, 29)] * 4 + [(topic_a, 0)])
    assert seen == {(topic_b, 29): 4, (topic_a, 0): 1}
    expected[(_minute(t2), f"Topic:LITERAL:{topic_b}", "denied")] += 4
    expected[(_minute(t2), f"Topic:LITERAL:{topic_a}", "allowed")] += 1
    # 5 new decisions plus the allowed ones of the job's own reads of the audit topic
    _wait_published(gw, 10)
    run_stream(spark, options, out, timeout_s=180)
    assert counts() == expected
    increments = sorted(p.name for p in (out / "_increments").glob("batch=*"))
    assert len(increments) >= 2

    # -- report: opens without Spark, names the denied principal -------------------
    report = write_report(out / "per_minute", out / "report.html")
    page = report.read_text()
    assert "Top denied principals" in page and "User:ANONYMOUS" in page and "<svg" in page
    assert f"Topic:LITERAL:{topic_b}" in page
    print(f"\naudit job first run {first_run_s:.1f}s; published {_published(gw):.0f} events; "
          f"report {report} ({len(page)} bytes)")


def test_audit_job_on_a_secured_gateway_counts_failed_logins_and_renders(spark, tansu, start_gateway, tmp_path,
                                                                          capsys):
    """#15 item 9: against a SASL_SSL listener the job takes Kafka-style client properties
    (--command-config); with a wrong password it stops before Spark with one line, no trace;
    failed logins are audit events, and the report, as headless Chromium renders it, shows
    allowed and denied over time with a ticked axis, per listener and client address, and the
    failed login with the principal tried."""
    import base64

    import pyarrow.parquet as pq

    from authz.credentials import SaslMechanism, ScramCredential
    from gateway.cli.dev_certs import write_dev_certs
    from kgw_spark.audit_job import check_access, kafka_options, main, nice_ticks, parse_args, run, source_options
    from tests.integration.test_spark_source import create_topic
    from tests.support.browser import rendered_text
    from tests.support.kafka_data import authentication_error, confluent_errors
    from tests.support.ports import HOST, free_port, free_port_base

    uid = tmp_path.name[-12:].strip("_-") or "x"
    topic_a, topic_b, audit = f"sec-ok-{uid}", f"sec-denied-{uid}", f"kgw-audit-sec-{uid}"
    for t in (topic_a, topic_b):
        create_topic(tansu.bootstrap, t, 1)
    certs = write_dev_certs(tmp_path / "certs")
    name = "kgw-audit-sec"
    data_dir = tmp_path / name / "metadata"
    _seed(data_dir, "--operation", "DESCRIBE", "--topic", topic_a)
    for op in ("READ", "DESCRIBE"):
        _seed(data_dir, "--operation", op, "--topic", audit, "--principal", "User:auditor")
    auditor = ScramCredential.from_password("auditor", "auditor-pw", SaslMechanism("SCRAM-SHA-512"))
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    listeners = [
        {"name": "EXTERNAL", "security_protocol": "PLAINTEXT", "host": HOST, "port": free_port(),
         "advertised_host": HOST, "broker_port_base": free_port_base()},
        {"name": "SECURE", "security_protocol": "SASL_SSL", "host": HOST, "port": free_port(),
         "advertised_host": "localhost", "broker_port_base": free_port_base(),
         "tls": {"cert_file": str(certs["gateway.pem"]), "key_file": str(certs["gateway-key.pem"])},
         "sasl": {"mechanisms": ["SCRAM-SHA-512"]}}]
    gw = start_gateway({
        "listeners": listeners,
        "users": {"scram": [{"name": "auditor", "mechanism": "SCRAM-SHA-512", "salt": b64(auditor.salt),
                             "iterations": auditor.iterations, "stored_key": b64(auditor.stored_key),
                             "server_key": b64(auditor.server_key)}]},
        "authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer", "config": {}},
        "audit": {"publish": True, "topic": audit, "linger_ms": 100}}, name=name)
    secure = gw.listeners["SECURE"].replace(HOST, "localhost")

    # a failed login on the secured listener, 3 allowed and 2 denied decisions on the plain one
    errors = confluent_errors({"bootstrap.servers": secure, "security.protocol": "SASL_SSL",
                               "ssl.ca.location": str(certs["ca.pem"]), "sasl.mechanisms": "SCRAM-SHA-512",
                               "sasl.username": "mallory", "sasl.password": "guess"}, authentication_error)
    assert authentication_error(errors)
    assert _metadata_requests(gw.bootstrap, [(topic_a, 0)] * 3 + [(topic_b, 29)] * 2) == \
        {(topic_a, 0): 3, (topic_b, 29): 2}
    _wait_published(gw, 6)

    def properties(password: str) -> Path:
        path = tmp_path / f"client-{password}.properties"
        path.write_text("security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
                        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
                        f'    username="auditor" password="{password}";\n'
                        f"ssl.truststore.location={certs['ca.pem']}\n")
        return path

    out = tmp_path / "audit-out"
    argv = ["--bootstrap", secure, "--topic", audit, "--out", str(out)]
    # a wrong password: one line, exit 2, before any Spark
    assert main([*argv, "--command-config", str(properties("wrong"))]) == 2
    err = capsys.readouterr().err
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in err, err
    assert err.startswith(f"audit_job: cannot read the audit topic '{audit}' through {secure}: "), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and "Py4J" not in err, err

    args = parse_args([*argv, "--command-config", str(properties("auditor-pw"))])
    options = source_options(args.bootstrap, args.topic, kafka_options(args))
    assert check_access(options) is None
    report = run(spark, args, options)

    df = pq.read_table(str(out / "per_minute")).to_pandas()
    logins = df[df["operation"] == "AUTHENTICATE"].groupby(["principal", "resource", "listener", "client_address"])
    failed = {k: int(n) for k, n in logins["denied"].sum().items()}
    # mallory's attempts and the job's own wrong-password attempts (clients retry a refused login)
    assert set(failed) == {("User:mallory", "Authentication:LITERAL:SCRAM-SHA-512", "SECURE", "127.0.0.1"),
                           ("User:auditor", "Authentication:LITERAL:SCRAM-SHA-512", "SECURE", "127.0.0.1")}, failed
    decisions = df[df["operation"] != "AUTHENTICATE"]
    external = decisions[decisions["listener"] == "EXTERNAL"]
    assert (int(external["allowed"].sum()), int(external["denied"].sum())) == (3, 2)
    peak = int(decisions.groupby("minute")[["allowed", "denied"]].sum().max().max())

    seen = rendered_text(report, tmp_path)
    allowed, denied = int(decisions["allowed"].sum()), int(decisions["denied"].sum())
    assert f"{allowed} allowed, {denied} denied decisions; {sum(failed.values())} failed logins;" \
        in " ".join(seen.split()), seen
    for text in ("Allowed and denied over time", "decisions", "minute (UTC)", "By listener",
                 "By client address", "Failed logins", "principal tried", "User:mallory", "SCRAM-SHA-512",
                 "SECURE", "EXTERNAL", "127.0.0.1", "Top denied principals", "User:ANONYMOUS"):
        assert text in seen, f"{text!r} is not on the rendered report:\n{seen}"
    chart = seen[seen.index("Allowed and denied over time"):seen.index("Denials over time by principal")]
    labels = chart.split()
    assert "allowed" in labels and "denied" in labels  # the legend
    assert all(str(tick) in labels for tick in nice_ticks(peak)), (nice_ticks(peak), chart)


def test_ocsf_events_are_counted_like_kgw_ones(spark, tansu, start_gateway, tmp_path):
    """``audit.format: ocsf``: the gateway publishes OCSF API Activity events and the job, told
    ``ocsf``, counts them as it counts the kgw format's."""
    import json

    import pyarrow.parquet as pq

    from gateway.cli.audit import read_topic
    from kgw_spark.audit_job import run_batch, source_options
    from tests.integration.test_spark_source import create_topic

    uid = tmp_path.name[-12:].strip("_-") or "x"
    topic_a, topic_b, audit = f"ocsf-ok-{uid}", f"ocsf-denied-{uid}", f"kgw-audit-ocsf-{uid}"
    create_topic(tansu.bootstrap, topic_a, 1)
    gw = _audited_gateway(start_gateway, tmp_path, "kgw-audit-ocsf", topic_a, audit, linger_ms=50, format="ocsf")
    seen = _metadata_requests(gw.bootstrap, [(topic_a, 0)] * 2 + [(topic_b, 29)] * 3)
    assert seen == {(topic_a, 0): 2, (topic_b, 29): 3}
    _wait_published(gw, 5)
    values = [json.loads(v) for _p, _o, v in read_topic({"bootstrap.servers": tansu.bootstrap}, audit)]
    assert {e["class_uid"] for e in values} == {6003} and all("hash" in e for e in values)

    out = tmp_path / "ocsf-out"
    run_batch(spark, source_options(gw.bootstrap, audit), out, event_format="ocsf")
    df = pq.read_table(str(out / "per_minute")).to_pandas()
    totals = df.groupby("resource")[["allowed", "denied"]].sum()
    assert totals.loc[f"Topic:LITERAL:{topic_a}"].tolist() == [2, 0]
    assert totals.loc[f"Topic:LITERAL:{topic_b}"].tolist() == [0, 3]
    assert set(df["principal"]) >= {"User:ANONYMOUS"} and set(df["event"]) >= {"authorization"}
