"""Spark's JVM Kafka connector call sequence, with kafka-clients 3.9.1, through kgw.

tests/integration/java/KgwSparkPathCheck.java does what spark-sql-kafka-0-10
does to plan and read a batch (AdminClient describeTopics, listOffsets
earliest/latest; per partition a KafkaConsumer assign + seek + poll up to the
planned end).  It runs once against kgw and once straight against tansu; every
answer must be equal (leader/replica ids, offsets, records) and every produced
record must be read.

Records are produced one per batch (tests/support/kafka_data.py), so tansu's
ListOffsets(latest) quirk (last batch's base offset + 1) equals the true end
offset and the JVM path -- which trusts ListOffsets -- reads everything.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from confluent_kafka import Producer

from tests.support.java import compile_java, java_tools, kafka_classpath
from tests.support.processes import run_tool

pytestmark = [
    pytest.mark.integration,
    pytest.mark.java,
    pytest.mark.skipif(java_tools() is None, reason="javac/java not on PATH"),
]

JAVA_DIR = Path(__file__).parent / "java"
PARTITIONS, PER_PARTITION = 3, 4


@pytest.fixture(scope="module")
def spark_path_check(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    cp = kafka_classpath()
    out = compile_java([JAVA_DIR / "KgwSparkPathCheck.java"], tmp_path_factory.mktemp("java-spark-path"), cp)
    _javac, java = java_tools()  # type: ignore[misc]
    return [java, "-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-cp", os.pathsep.join([str(out), *map(str, cp)]), "KgwSparkPathCheck"]


def _run(cmd: list[str], bootstrap: str, via: str, topic: str) -> dict[str, dict]:
    cp = run_tool([*cmd, bootstrap, via, topic], timeout=170, check=False)
    stdout = cp.stdout.decode("utf-8", "replace")
    events = {e["event"]: e for e in (json.loads(x) for x in stdout.splitlines() if x.startswith("{"))}
    context = f"\n--- {via} stdout ---\n{stdout[-4000:]}\n--- stderr ---\n{cp.stderr.decode(errors='replace')[-4000:]}"
    assert cp.returncode == 0 and "done" in events and "error" not in events, context
    return events


def test_jvm_connector_sequence_same_through_kgw(gateway, tansu, topic_name, spark_path_check):
    from tests.integration.test_spark_source import create_topic

    create_topic(tansu.bootstrap, topic_name, PARTITIONS)
    producer = Producer({"bootstrap.servers": tansu.bootstrap, "linger.ms": 0, "enable.idempotence": False})
    produced = []
    for i in range(PARTITIONS * PER_PARTITION):
        producer.produce(topic_name, key=f"key-{i}", value=f"jvm:{topic_name}:value-{i}", partition=i % PARTITIONS)
        assert producer.flush(30) == 0  # one record per batch
        produced.append([i % PARTITIONS, i // PARTITIONS, f"key-{i}", f"jvm:{topic_name}:value-{i}"])

    direct = _run(spark_path_check, tansu.bootstrap, "broker", topic_name)
    through = _run(spark_path_check, gateway.bootstrap, "kgw", topic_name)

    for event in ("describe", "offsets", "records"):
        d = {k: v for k, v in direct[event].items() if k != "via"}
        k = {k: v for k, v in through[event].items() if k != "via"}
        assert k == d, f"{event} differs through kgw:\n  kgw:    {k}\n  broker: {d}"

    assert [p["partition"] for p in through["describe"]["partitions"]] == list(range(PARTITIONS))
    assert through["offsets"]["earliest"] == {str(p): 0 for p in range(PARTITIONS)}
    assert through["offsets"]["latest"] == {str(p): PER_PARTITION for p in range(PARTITIONS)}
    got = sorted(r[:4] for r in through["records"]["records"])
    assert got == sorted(produced)
    assert {r[5] for r in through["records"]["records"]} == {"CreateTime"}
