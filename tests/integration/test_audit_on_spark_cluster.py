"""The audit job on a Spark standalone cluster (a master and two workers from the installed PySpark
distribution, tests/support/spark_cluster.py): ``spark-submit --master spark://...
kgw_spark/audit_job.py --source kafka`` reads the audit topic *through kgw* as an authorized principal with
Spark's own Kafka connector (its jars shipped by Spark to the executors, which run no Python),
and its per-minute counts equal the decisions made."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from protocol.codecs import make, nested, request_class
from tests.support.acls import add_acl
from tests.support.cluster import gateway_env
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


def _published(gw) -> float:
    text = urllib.request.urlopen(f"{gw.admin_url}/metrics", timeout=5).read().decode()
    return next((float(line.split()[1]) for line in text.splitlines()
                 if line.startswith("kgw_audit_events_published_total ")), 0.0)


def test_the_audit_job_runs_on_a_standalone_cluster_with_sparks_kafka_source(tansu, start_gateway, tmp_path):
    import pyarrow.parquet as pq

    from tests.integration.test_spark_source import create_topic
    from tests.support.spark import connector_jars
    from tests.support.spark_cluster import start_spark_cluster

    uid = uuid.uuid4().hex[:8]
    allowed_topic, denied_topic, audit = f"cl-ok-{uid}", f"cl-denied-{uid}", f"kgw-audit-cl-{uid}"
    create_topic(tansu.bootstrap, allowed_topic, 1)
    name = f"kgw-cl-{uid}"
    data_dir = tmp_path / name / "metadata"
    add_acl(data_dir, "--operation", "DESCRIBE", "--topic", allowed_topic)
    for op in ("READ", "DESCRIBE"):  # the job's principal may read the audit topic, nothing else
        add_acl(data_dir, "--operation", op, "--topic", audit)
    gw = start_gateway({"authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer", "config": {}},
                        "audit": {"publish": True, "topic": audit, "linger_ms": 50}}, name=name)
    _metadata(gw.bootstrap, allowed_topic, 4, 0)
    _metadata(gw.bootstrap, denied_topic, 3, 29)
    deadline = time.monotonic() + 30
    while _published(gw) < 7:
        assert time.monotonic() < deadline, "the audit events were not published"
        time.sleep(0.2)  # polling a counter

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
             "--bootstrap", gw.bootstrap, "--topic", audit, "--out", str(out), "--source", "kafka"],
            env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
        applications = cluster.status().get("completedapps", []) + cluster.status().get("activeapps", [])
        assert any(app.get("name") == "kgw-audit-report" for app in applications), applications
    finally:
        cluster.stop()
    df = pq.read_table(str(out / "per_minute")).to_pandas()
    ours = df[df["resource"].isin([f"Topic:LITERAL:{allowed_topic}", f"Topic:LITERAL:{denied_topic}"])]
    totals = ours.groupby("resource")[["allowed", "denied"]].sum()
    assert totals.loc[f"Topic:LITERAL:{allowed_topic}"].tolist() == [4, 0]
    assert totals.loc[f"Topic:LITERAL:{denied_topic}"].tolist() == [0, 3]
    assert (out / "report.html").exists()
    # Parquet partitioned by date and gateway (the events' "gateway": the gateway's cluster id)
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert any((out / "per_minute").glob(f"date=*/gateway={gw.config.get('cluster_id', 'kgw')}/*.parquet"))
    assert {p.name for p in (out / "per_minute").glob("date=*")} <= {f"date={today}", f"date={_yesterday()}"}
