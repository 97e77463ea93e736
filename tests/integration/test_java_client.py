"""The Apache Kafka Java client through the gateway: kafka-clients 3.x in front of tansu and,
with 3.x and 4.x, in front of Apache Kafka.

tests/integration/java/KgwClientCheck.java is compiled once per session with javac against
the 3.x kafka-clients (deploy/kafka-clients/pom.xml) and against the Kafka jars (4.x,
deploy/kafka/pom.xml) `make setup` resolved from the Maven registry, run against the gateway,
and its JSON-lines output is asserted on here."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from tests.support.java import client_check_command, java_tools, kafka_classpath
from tests.support.kafka_data import (
    PARTITIONS,
    PER_PARTITION,
    Rec,
    assert_gateway_addresses,
    assert_same_records,
    expected_end_offsets,
    expected_records,
)
from tests.support.processes import run_tool

pytestmark = [
    pytest.mark.integration,
    pytest.mark.java,
    pytest.mark.skipif(java_tools() is None, reason="javac/java not on PATH"),
]

JAVA_DIR = Path(__file__).parent / "java"




@pytest.fixture(scope="session")
def java_check(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """KgwClientCheck on kafka-clients 3.x."""
    return client_check_command(tmp_path_factory.mktemp("java-classes"), kafka_classpath())


def _nodes(objs) -> list[tuple[int, str, int]]:
    return [(o["id"], o["host"], o["port"]) for o in objs]


def test_java_client_roundtrip(gateway, tansu, topic_name, java_check):
    _roundtrip(java_check, gateway, tansu.port, topic_name)


@pytest.mark.kafka
@pytest.mark.parametrize("client", ["3.x", "4.x"])
def test_java_client_roundtrip_in_front_of_apache_kafka(kafka, kafka_gateway, topic_name, client, request):
    java = request.getfixturevalue("java_check" if client == "3.x" else "java4_check")
    _roundtrip(java, kafka_gateway(), kafka.nodes[0].port, topic_name)


def _roundtrip(java_check: list[str], gateway, upstream_port: int, topic_name: str) -> None:
    group = f"{topic_name}-group-{uuid.uuid4().hex[:6]}"
    cp = run_tool([*java_check, gateway.bootstrap, topic_name, group, str(PARTITIONS),
                   str(PER_PARTITION)], timeout=170, check=False)
    stdout = cp.stdout.decode("utf-8", "replace")
    stderr = cp.stderr.decode("utf-8", "replace")
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    context = (f"\n--- java stdout ---\n{stdout[-6000:]}"
               f"\n--- java stderr (tail) ---\n{stderr[-6000:]}")
    errors = [e for e in events if e["event"] == "error"]
    assert not errors and cp.returncode == 0, f"java client failed: {errors}{context}"
    assert events[-1]["event"] == "done", context

    def one(event: str, **match):
        found = [e for e in events if e["event"] == event
                 and all(e.get(k) == v for k, v in match.items())]
        assert len(found) == 1, f"expected one {event} {match} event, got {found}{context}"
        return found[0]

    expected = expected_records(topic_name, "java")

    assert one("created")["topic"] == topic_name

    # -- addresses: describeCluster, describeTopics, producer/consumer metadata
    cluster = one("cluster")
    assert_gateway_addresses(_nodes(cluster["nodes"]), gateway, upstream_port,
                             "Admin.describeCluster nodes")
    assert_gateway_addresses(_nodes([cluster["controller"]]), gateway, upstream_port,
                             "Admin.describeCluster controller")
    topic = one("topic")
    assert topic["name"] == topic_name
    assert sorted(p["partition"] for p in topic["partitions"]) == list(range(PARTITIONS))
    assert_gateway_addresses(_nodes([p["leader"] for p in topic["partitions"]]), gateway,
                             upstream_port, "Admin.describeTopics leaders")
    assert_gateway_addresses(_nodes([r for p in topic["partitions"] for r in p["replicas"]]),
                             gateway, upstream_port, "Admin.describeTopics replicas")
    for via in ("producer", "consumer"):
        assert_gateway_addresses(_nodes(one("leaders", via=via)["nodes"]), gateway, upstream_port,
                                 f"Kafka{via.title()}.partitionsFor leaders")

    # -- produce acks: exact partition/offset for every keyed record ----------
    produced = [Rec(e["partition"], e["offset"], e["key"].encode(), e["value"].encode())
                for e in events if e["event"] == "produced"]
    assert produced == expected, f"produce acks differ{context}"

    # -- listOffsets ------------------------------------------------------------
    def offsets(spec: str) -> dict[int, int]:
        return {int(p): o for p, o in one("offsets", spec=spec)["offsets"].items()}

    assert offsets("earliest") == {p: 0 for p in range(PARTITIONS)}
    assert offsets("latest") == expected_end_offsets()
    co = one("consumer_offsets")
    assert {int(p): o for p, o in co["beginning"].items()} == {p: 0 for p in range(PARTITIONS)}
    assert {int(p): o for p, o in co["end"].items()} == expected_end_offsets()

    # -- records read back --------------------------------------------------------
    def records(via: str) -> list[Rec]:
        return [Rec(e["partition"], e["offset"], e["key"].encode(), e["value"].encode())
                for e in events if e["event"] == "record" and e["via"] == via]

    assert_same_records(records("assign"), expected, "KafkaConsumer assign + seekToBeginning")
    last = PARTITIONS - 1
    assert_same_records(records("seek"),
                        [r for r in expected if r.partition == last and r.offset >= 1],
                        f"KafkaConsumer seek(partition {last}, offset 1)")
    assert_same_records(records("group"), expected, f"KafkaConsumer group {group}")

    g = one("group")
    assert g["assignment"] == list(range(PARTITIONS))
    assert {int(p): o for p, o in g["committed"].items()} == expected_end_offsets()
