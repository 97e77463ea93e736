"""kgw in front of a 3-node Apache Kafka KRaft cluster: every broker discovered and served at a
gateway address, replication factor 3 with acks=all, and the KIP-951 leader endpoints of a
NOT_LEADER answer rewritten after a real leader change."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kio.static.primitive import i32

from protocol.codecs import make, nested, request_class
from tests.support.kafka import run_tool
from tests.support.kio_samples import record_batch
from tests.support.raw_kafka import RawConnection

pytestmark = pytest.mark.kafka_cluster

T = 30
COMMON = {"socket.timeout.ms": 10000, "broker.address.family": "v4", "reconnect.backoff.max.ms": 500}


def _leader(admin: AdminClient, topic: str) -> tuple[int, list[int]]:
    """Partition 0's leader and replicas, once the metadata has them (a new topic's may lag)."""
    deadline = time.monotonic() + T
    while True:
        part = admin.list_topics(topic=topic, timeout=T).topics[topic].partitions.get(0)
        if part is not None and part.leader >= 0:
            return part.leader, list(part.replicas)
        assert time.monotonic() < deadline, f"{topic} has no leader"


def _leaders(admin: AdminClient, topic: str, count: int) -> dict[int, int]:
    """Every partition's leader, once the metadata has one for all `count` of them."""
    deadline = time.monotonic() + T
    while True:
        parts = admin.list_topics(topic=topic, timeout=T).topics[topic].partitions
        leaders = {i: p.leader for i, p in parts.items()}
        if len(leaders) == count and min(leaders.values()) >= 0:
            return leaders
        assert time.monotonic() < deadline, f"{topic} has partitions without a leader: {leaders}"


def move_leader(cluster, direct: AdminClient, topic: str, work) -> int:
    """Make another replica partition 0's leader, with Kafka's own tools straight at the
    cluster (reassignment with it first, then a preferred election); returns the new leader."""
    old, replicas = _leader(direct, topic)
    new = next(r for r in replicas if r != old)
    plan = work / f"reassign-{topic}.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [new] + [r for r in replicas if r != new]}]}))
    done = run_tool("org.apache.kafka.tools.reassign.ReassignPartitionsCommand", "--bootstrap-server",
                    cluster.bootstrap, "--reassignment-json-file", str(plan), "--execute", work=work)
    assert done.returncode == 0, done.stderr
    deadline = time.monotonic() + T
    while True:
        done = run_tool("org.apache.kafka.tools.LeaderElectionCommand", "--bootstrap-server", cluster.bootstrap,
                        "--election-type", "preferred", "--topic", topic, "--partition", "0", work=work)
        if _leader(direct, topic)[0] == new:
            return new
        assert time.monotonic() < deadline, f"leader did not move to {new}: {done.stdout} {done.stderr}"


def test_three_brokers_behind_kgw_replication_factor_three(kafka_cluster, kafka_gateway, topic_name):
    gw = kafka_gateway(upstream=kafka_cluster)
    admin = AdminClient({"bootstrap.servers": gw.bootstrap, **COMMON})
    md = admin.list_topics(timeout=T)
    assert {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()} == gw.broker_addresses  # all three, kgw's
    admin.create_topics([NewTopic(topic_name, 3, 3)], operation_timeout=15)[topic_name].result(timeout=T)
    producer = Producer({"bootstrap.servers": gw.bootstrap, "acks": "all", "enable.idempotence": True, **COMMON})
    for i in range(30):
        producer.produce(topic_name, f"v{i}".encode(), partition=i % 3)
    assert producer.flush(T) == 0
    consumer = Consumer({"bootstrap.servers": gw.bootstrap, "group.id": f"g-{topic_name}",
                         "auto.offset.reset": "earliest", **COMMON})
    consumer.subscribe([topic_name])
    got = set()
    deadline = time.monotonic() + T
    while len(got) < 30 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.add(msg.value())
    consumer.close()
    assert got == {f"v{i}".encode() for i in range(30)}
    partitions = admin.list_topics(topic=topic_name, timeout=T).topics[topic_name].partitions.values()
    assert {len(p.replicas) for p in partitions} == {3}
    assert {p.leader for p in partitions} <= set(gw.broker_addresses)


def test_kip951_leader_endpoint_after_a_leader_change_is_a_gateway_address(kafka_cluster, kafka_gateway, topic_name,
                                                                         tmp_path):
    gw = kafka_gateway(upstream=kafka_cluster)
    direct = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap, **COMMON})
    direct.create_topics([NewTopic(topic_name, 1, 3)], operation_timeout=15)[topic_name].result(timeout=T)
    old, _replicas = _leader(direct, topic_name)
    new = move_leader(kafka_cluster, direct, topic_name, tmp_path)
    # a client that still thinks `old` leads: Produce v12 to old's gateway port
    cls = request_class(0, 12)
    tcls = nested(cls, "topic_data")
    body = make(cls, transactional_id=None, acks=-1, timeout=timedelta(seconds=10), topic_data=(
        make(tcls, name=topic_name, partition_data=(make(nested(tcls, "partition_data"), index=i32(0),
                                                         records=record_batch(b"x")),)),))
    with RawConnection(gw.broker_addresses[old]) as conn:
        response = conn.call(0, 12, body)
    (part,) = response.responses[0].partition_responses
    assert part.error_code == 6, part  # NOT_LEADER_OR_FOLLOWER
    assert part.current_leader.leader_id == new
    endpoints = {e.node_id: f"{e.host}:{e.port}" for e in response.node_endpoints}
    assert endpoints == {new: gw.broker_addresses[new]}, endpoints  # kgw's address, never Kafka's
    upstream_ports = {str(n.port) for n in kafka_cluster.nodes}
    assert not any(a.rsplit(":", 1)[1] in upstream_ports for a in endpoints.values())


def test_a_broker_killed_and_restarted_loses_no_acknowledged_record(kafka_cluster, kafka_gateway, topic_name):
    """Six partitions over three nodes, acks=all, min.insync.replicas=2, an idempotent producer
    through kgw: one broker is SIGKILLed and restarted mid-stream. Clients see only retriable
    errors and recover; every acknowledged record is read back; kgw serves another connection
    (metadata) throughout."""
    import threading

    gw = kafka_gateway(upstream=kafka_cluster)
    admin = AdminClient({"bootstrap.servers": gw.bootstrap, **COMMON})
    admin.create_topics([NewTopic(topic_name, 6, 3, config={"min.insync.replicas": "2"})],
                        operation_timeout=15)[topic_name].result(timeout=T)
    assert set(_leaders(admin, topic_name, 6).values()) == set(kafka_cluster.node_ids)  # spread
    acked: list[bytes] = []
    fatal: list[str] = []

    def delivered(err, msg):
        if err is None:
            acked.append(msg.value())
        elif not err.retriable():
            fatal.append(str(err))

    producer = Producer({"bootstrap.servers": gw.bootstrap, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 60000, "retry.backoff.ms": 100, **COMMON})
    stop = threading.Event()

    def gateway_answers() -> bool:
        """A fresh connection to kgw's bootstrap port gets its Metadata, whichever node is down."""
        cls = request_class(3, 12)
        with RawConnection(gw.bootstrap) as conn:
            response = conn.call(3, 12, make(cls, topics=None, allow_auto_topic_creation=False,
                                             include_topic_authorized_operations=False))
        return len(response.brokers) >= 2

    def produce():
        i = 0
        while not stop.is_set():
            producer.produce(topic_name, f"r{i}".encode(), on_delivery=delivered)
            producer.poll(0.01)
            i += 1
        producer.flush(60)

    thread = threading.Thread(target=produce)
    thread.start()
    try:
        deadline = time.monotonic() + T
        while len(acked) < 200:  # the stream is flowing before the kill
            assert time.monotonic() < deadline and thread.is_alive()
            assert gateway_answers()  # kgw answers another connection meanwhile
        victim = 3
        kafka_cluster.kill(victim)
        before_restart = len(acked)
        deadline = time.monotonic() + 60
        while len(acked) < before_restart + 200:  # still acknowledged with one node down (ISR 2 of 3)
            assert time.monotonic() < deadline, f"no progress with node {victim} down: {fatal}"
            assert gateway_answers()
        kafka_cluster.restart(victim)
        after = len(acked)
        deadline = time.monotonic() + 60
        while len(acked) < after + 200:
            assert time.monotonic() < deadline, f"no progress after node {victim} came back: {fatal}"
            assert gateway_answers()
    finally:
        stop.set()
        thread.join(90)
    assert fatal == []
    consumer = Consumer({"bootstrap.servers": gw.bootstrap, "group.id": f"g-{topic_name}", "auto.offset.reset": "earliest",
                         **COMMON})
    consumer.subscribe([topic_name])
    seen: set[bytes] = set()
    deadline = time.monotonic() + 60
    want = set(acked)
    while not want <= seen and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            seen.add(msg.value())
    consumer.close()
    assert want <= seen, f"{len(want - seen)} acknowledged record(s) missing"
    assert len(want) > 600
