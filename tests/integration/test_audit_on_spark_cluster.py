"""The audit trail end to end, as an analyst gets it: real clients through kgw (logins failing and
succeeding, allowed and denied actions, ACL changes), the audit job submitted with spark-submit
to a Spark standalone cluster (a master and two workers from the installed PySpark distribution,
tests/support/spark_cluster.py) reading the audit topic *through kgw* as an authorized principal
with Spark's own Kafka connector (its jars shipped by Spark to the executors), the chains verified
against the checkpoints ``kgw audit checkpoints`` printed, the trail reconciled with the
gateway's own counters, and the report, as headless Chromium renders it, read back and compared
with the events the topic holds."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import unicodedata
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import pytest

from gateway.cli.audit import read_topic
from protocol.codecs import make, nested, request_class
from tests.support.acls import add_acl, kgw_command
from tests.support.cluster import gateway_env
from tests.support.processes import wait_until
from tests.support.raw_kafka import RawConnection

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.spark]


def _metadata(bootstrap: str, topic: str, count: int, expected: int) -> None:
    cls = request_class(3, 12)
    body = make(cls, topics=(make(nested(cls, "topics"), name=topic, topic_id=uuid.UUID(int=0)),),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    with RawConnection(bootstrap) as conn:
        for _ in range(count):
            assert int(conn.call(3, 12, body).topics[0].error_code) == expected


def _yesterday() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime(time.time() - 86400))  # a run across midnight UTC


def _scrape(gw) -> dict[str, float]:
    """Every sample of the gateway's /metrics, summed over labels but the chain head's."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"{gw.admin_url}/metrics", timeout=5).read().decode()
    out: Counter = Counter()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name] += sample.value
    return out


def _checkpoints(gw) -> dict:
    done = subprocess.run([*kgw_command(), "audit", "checkpoints", "--config", str(gw.config_path)],
                          env=gateway_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _section(text: str, start: str, end: str) -> str:
    return text[text.index(start):text.index(end, text.index(start))]


def test_the_audit_job_on_a_standalone_cluster_reports_what_clients_did(tansu, start_gateway, tmp_path):
    import pyarrow.parquet as pq
    from confluent_kafka import Producer
    from confluent_kafka.admin import AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient
    from confluent_kafka.admin import ResourcePatternType, ResourceType

    from tests.integration.test_spark_source import create_topic, scram_user
    from tests.support.browser import rendered_text
    from tests.support.kafka_data import authentication_error, confluent_errors
    from tests.support.ports import HOST, free_port, free_port_base
    from tests.support.spark import connector_jars
    from tests.support.spark_cluster import start_spark_cluster

    uid = uuid.uuid4().hex[:8]
    allowed_topic, denied_topic, audit = f"cl-ok-{uid}", f"cl-denied-{uid}", f"kgw-audit-cl-{uid}"
    create_topic(tansu.bootstrap, allowed_topic, 1)
    create_topic(tansu.bootstrap, denied_topic, 1)
    name = f"kgw-cl-{uid}"
    data_dir = tmp_path / name / "metadata"
    add_acl(data_dir, "--operation", "DESCRIBE", "--topic", allowed_topic)
    for op in ("READ", "DESCRIBE"):  # the job's principal may read the audit topic, nothing else
        add_acl(data_dir, "--operation", op, "--topic", audit)
    for op in ("WRITE", "DESCRIBE"):
        add_acl(data_dir, "--operation", op, "--topic", allowed_topic, principal="User:alice")
    listeners = [
        {"name": "EXTERNAL", "security_protocol": "PLAINTEXT", "host": HOST, "port": free_port(),
         "advertised_host": HOST, "broker_port_base": free_port_base()},
        {"name": "SASL", "security_protocol": "SASL_PLAINTEXT", "host": HOST, "port": free_port(),
         "advertised_host": HOST, "broker_port_base": free_port_base(), "sasl": {"mechanisms": ["SCRAM-SHA-256"]}}]
    gw = start_gateway({
        "listeners": listeners,
        "users": {"scram": [scram_user("alice", "alice-pw"), scram_user("admin", "admin-pw")]},
        "authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer",
                       "config": {"super.users": "User:admin"}},
        "audit": {"publish": True, "topic": audit, "linger_ms": 50, "checkpoint_interval_ms": 200}}, name=name)
    sasl = {"bootstrap.servers": gw.listeners["SASL"], "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-256", "broker.address.family": "v4"}

    # -- what the clients do ---------------------------------------------------------------
    assert authentication_error(confluent_errors({**sasl, "sasl.username": "mallory", "sasl.password": "guess"},
                                                 authentication_error))
    # the denied message fails when its time is up; the producer then goes (no requests after)
    producer = Producer({**sasl, "sasl.username": "alice", "sasl.password": "alice-pw", "linger.ms": 0,
                         "message.timeout.ms": 3000})
    outcomes: list = []
    for i in range(3):
        producer.produce(allowed_topic, f"m{i}".encode(), on_delivery=lambda err, _m: outcomes.append(err))
    producer.produce(denied_topic, b"x", on_delivery=lambda err, _m: outcomes.append(err))
    producer.flush(30)
    assert sum(e is None for e in outcomes) == 3 and sum(e is not None for e in outcomes) == 1, outcomes
    del producer
    admin = AdminClient({**sasl, "sasl.username": "admin", "sasl.password": "admin-pw"})
    binding = AclBinding(ResourceType.TOPIC, denied_topic, ResourcePatternType.LITERAL, "User:carol", "*",
                         AclOperation.READ, AclPermissionType.ALLOW)
    admin.create_acls([binding])[binding].result(30)
    gone = AclBindingFilter(ResourceType.TOPIC, denied_topic, ResourcePatternType.LITERAL, "User:carol", "*",
                            AclOperation.ANY, AclPermissionType.ANY)
    assert len(admin.delete_acls([gone])[gone].result(30)) == 1
    del admin
    _metadata(gw.bootstrap, allowed_topic, 4, 0)
    _metadata(gw.bootstrap, denied_topic, 3, 29)

    # everything offered is written, and a checkpoint covers the head
    def settled() -> bool:
        m = _scrape(gw)
        return m["kgw_audit_events_buffered"] == 0 and m["kgw_audit_events_offered_total"] == \
            m["kgw_audit_events_published_total"] + m["kgw_audit_events_dropped_total"]
    wait_until(settled, 60, interval=0.2, message="the audit events to be written")
    head = _scrape(gw)["kgw_audit_chain_head"]
    wait_until(lambda: any(json.loads(v)["seq"] >= head for runs in _checkpoints(gw).values() for v in runs.values()),
               60, interval=0.2, message="a checkpoint of the head")
    checkpoints = tmp_path / "checkpoints.json"
    checkpoints.write_text(json.dumps(_checkpoints(gw)))

    # -- the job on the cluster ------------------------------------------------------------
    cluster = start_spark_cluster(tmp_path / "spark", workers=2)
    try:
        assert len(cluster.status()["workers"]) == 2
        out = tmp_path / "out"
        import pyspark

        submit = Path(pyspark.__file__).parent / "bin" / "spark-submit"
        env = {**gateway_env(), "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        done = subprocess.run(  # as an operator submits it: spark-submit, the job file, Spark's connector
            [str(submit), "--master", cluster.master_url, "--jars", ",".join(str(j) for j in connector_jars()),
             "--conf", "spark.executor.memory=512m", "--conf", "spark.driver.memory=512m",
             "--conf", "spark.driver.host=127.0.0.1", str(REPO / "kgw_spark" / "audit_job.py"),
             "--bootstrap", gw.bootstrap, "--topic", audit, "--out", str(out), "--source", "kafka",
             "--checkpoints", str(checkpoints), "--metrics", f"{gw.admin_url}/metrics"],
            env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
        applications = cluster.status().get("completedapps", []) + cluster.status().get("activeapps", [])
        assert any(app.get("name") == "kgw-audit-report" for app in applications), applications
    finally:
        cluster.stop()

    # -- the job's outputs against the events the topic holds --------------------------------
    events = [json.loads(v) for _p, _o, v in read_topic({"bootstrap.servers": tansu.bootstrap}, audit)]
    by_client = [e for e in events if e.get("principal") in ("User:alice", "User:mallory", "User:admin")]
    alice = Counter(e["decision"] for e in by_client if e["principal"] == "User:alice" and e["event"] == "authorization")
    mallory = sum(1 for e in by_client if e["principal"] == "User:mallory" and e["event"] == "authentication")
    changes = [e for e in by_client if e["event"] == "change"]
    assert alice["ALLOWED"] >= 1 and alice["DENIED"] >= 1 and mallory >= 1 and len(changes) == 2, by_client

    df = pq.read_table(str(out / "per_minute")).to_pandas()
    ours = df[df["resource"].isin([f"Topic:LITERAL:{allowed_topic}", f"Topic:LITERAL:{denied_topic}"])
              & (df["principal"] == "User:ANONYMOUS")]
    totals = ours.groupby("resource")[["allowed", "denied"]].sum()
    assert totals.loc[f"Topic:LITERAL:{allowed_topic}"].tolist() == [4, 0]
    assert totals.loc[f"Topic:LITERAL:{denied_topic}"].tolist() == [0, 3]
    # Parquet partitioned by date and gateway (the events' "gateway": the gateway's cluster id)
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert any((out / "per_minute").glob(f"date=*/gateway={gw.config.get('cluster_id', 'kgw')}/*.parquet"))
    assert {p.name for p in (out / "per_minute").glob("date=*")} <= {f"date={today}", f"date={_yesterday()}"}
    chains = json.loads((out / "chains.json").read_text())
    assert chains["ok"] and chains["checkpoints"] and len(chains["chains"]) == 1, chains
    assert not [f for f in chains["findings"] if f["tampering"]], chains["findings"]

    # -- the report, as a person sees it -----------------------------------------------------
    # as read: words and numbers, ligatures (the PDF's "ﬁ") as letters
    seen = " ".join(unicodedata.normalize("NFKC", rendered_text(out / "report.html", tmp_path)).split())
    assert "Audit chains: intact (1 chain(s)" in seen, seen[:600]
    talkers = _section(seen, "Top talkers", "By listener")
    table = talkers[talkers.index("principal allowed denied"):]
    assert f"User:alice {alice['ALLOWED']} {alice['DENIED']}" in table, talkers
    failed = _section(seen, "principal tried mechanism", "Security-state changes")
    assert f"User:mallory SCRAM-SHA-256 127.0.0.1 SASL {mallory}" in failed, failed
    for change in changes:
        assert change["change"][:30] in " ".join(_section(seen, "Security-state changes",
                                                          "Principals by first appearance").split()), change
    assert _section(seen, "Security-state changes", "Principals by first").count("User:admin") == 2
    by_resource = _section(seen, "Denials over time by resource", "Failed logins over time")
    assert f"Topic:LITERAL:{denied_topic} (" in by_resource
    denied_here = sum(1 for e in events if e.get("resource") == f"Topic:LITERAL:{denied_topic}"
                      and e.get("event") == "authorization" and e.get("decision") == "DENIED")
    assert re.search(rf"Topic:LITERAL:{re.escape(denied_topic)} \({denied_here}\)", by_resource), by_resource
    first = _section(seen, "Principals by first appearance", "Client addresses by first appearance")
    assert all(p in first for p in ("User:alice", "User:mallory", "User:ANONYMOUS"))
    # reconciled with the counters scraped when the job started: every event written is there,
    # and what the authorizer counted beyond the trail is explained
    reconciliation = seen[seen.index("Reconciliation with the gateway"):]
    assert "audit events written (seq <= head)" in reconciliation
    assert "equal: every event the gateway wrote up to seq" in reconciliation, reconciliation
    rows = json.loads((out / "reconciliation.json").read_text())
    for row in rows:
        if row["offered"] is not None:
            assert row["counter"] >= row["offered"] >= row["trail"], row
    denied = next(r for r in rows if r["quantity"] == "denied decisions")
    assert denied["trail"] >= 3 + alice["DENIED"] and denied["difference"] == denied["counter"] - denied["trail"]
