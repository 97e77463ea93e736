"""confluent-kafka (librdkafka) through the gateway: AdminClient
create_topics/list_topics/describe_cluster/list_offsets, Producer, Consumer
by assign and by subscribe, and the addresses it is shown."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from tests.support.kafka_data import (
    PARTITIONS,
    Rec,
    assert_gateway_addresses,
    assert_same_records,
    expected_end_offsets,
    expected_records,
)

pytestmark = pytest.mark.integration

COMMON = {
    "socket.timeout.ms": 10000,
    "reconnect.backoff.max.ms": 500,
    "broker.address.family": "v4",
}
# tansu stalls group joins unless the timeouts are short.
GROUP = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 1000,
    "max.poll.interval.ms": 10000,
}
T = 15  # seconds for any single admin/metadata call


def _brokers(metadata) -> list[tuple[int, str, int]]:
    return [(b.id, b.host, b.port) for b in metadata.brokers.values()]


def _poll_until(consumer: Consumer, want: int, timeout: float) -> list[Rec]:
    got: list[Rec] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            raise KafkaException(msg.error())
        got.append(Rec(msg.partition(), msg.offset(), msg.key(), msg.value()))
    return got


def test_confluent_kafka_roundtrip(gateway, tansu, topic_name):
    bootstrap = gateway.bootstrap
    expected = expected_records(topic_name, "confluent-kafka")
    tps = [TopicPartition(topic_name, p) for p in range(PARTITIONS)]

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "kgw-it-admin", **COMMON})

    # -- create the topic ---------------------------------------------------
    futures = admin.create_topics([NewTopic(topic_name, PARTITIONS, 1)], operation_timeout=10,
                                  request_timeout=T)
    assert futures[topic_name].result(timeout=T) is None

    # -- list_topics: the topic with its partitions, brokers = gateway --------
    def topic_listed():
        md = admin.list_topics(topic=topic_name, timeout=T)
        t = md.topics.get(topic_name)
        return md if t is not None and t.error is None and len(t.partitions) == PARTITIONS else None

    deadline = time.monotonic() + T
    md = topic_listed()
    while md is None and time.monotonic() < deadline:
        md = topic_listed()
    assert md is not None, f"{topic_name} never appeared in metadata with {PARTITIONS} partitions"
    assert_gateway_addresses(_brokers(md), gateway, tansu.port, "AdminClient.list_topics")
    for p in md.topics[topic_name].partitions.values():
        assert p.leader in gateway.broker_addresses, p
    assert md.controller_id in gateway.broker_addresses, md.controller_id

    # -- describe_cluster ---------------------------------------------------
    cluster = admin.describe_cluster(request_timeout=T).result(timeout=T)
    assert_gateway_addresses([(n.id, n.host, n.port) for n in cluster.nodes], gateway,
                             tansu.port, "AdminClient.describe_cluster")
    assert cluster.controller is not None and cluster.controller.id in gateway.broker_addresses

    # -- produce, one record per batch (flush after each), checking acks ------
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": "kgw-it-producer",
                         "linger.ms": 0, "acks": "all", **COMMON})
    for rec in expected:
        reports = []
        producer.produce(topic_name, key=rec.key, value=rec.value, partition=rec.partition,
                         on_delivery=lambda err, msg: reports.append((err, msg)))
        assert producer.flush(T) == 0, "producer did not deliver within the deadline"
        [(err, msg)] = reports
        assert err is None, err
        assert (msg.partition(), msg.offset(), msg.key(), msg.value()) == \
            (rec.partition, rec.offset, rec.key, rec.value)
    assert_gateway_addresses(_brokers(producer.list_topics(topic_name, timeout=T)), gateway,
                             tansu.port, "Producer metadata")

    # -- list_offsets (earliest / latest) ------------------------------------
    def offsets(spec) -> dict[int, int]:
        fs = admin.list_offsets({tp: spec for tp in tps}, request_timeout=T)
        return {tp.partition: f.result(timeout=T).offset for tp, f in fs.items()}

    assert offsets(OffsetSpec.earliest()) == {p: 0 for p in range(PARTITIONS)}
    assert offsets(OffsetSpec.latest()) == expected_end_offsets()

    # -- read back by assign (from the beginning, then from an offset) --------
    consumer = Consumer({"bootstrap.servers": bootstrap, "client.id": "kgw-it-assign",
                         "group.id": f"{topic_name}-unused", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100, **COMMON})
    try:
        consumer.assign([TopicPartition(topic_name, p, OFFSET_BEGINNING)
                         for p in range(PARTITIONS)])
        got = _poll_until(consumer, len(expected), 20)
        assert_same_records(got, expected, "Consumer.assign(OFFSET_BEGINNING)")
        for p in range(PARTITIONS):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic_name, p), timeout=T)
            assert (low, high) == (0, expected_end_offsets()[p])
        consumer.assign([TopicPartition(topic_name, 2, 1)])
        tail = _poll_until(consumer, 2, 15)
        assert_same_records(tail, [r for r in expected if r.partition == 2 and r.offset >= 1],
                            "Consumer.assign(partition 2, offset 1)")
        assert_gateway_addresses(_brokers(consumer.list_topics(topic_name, timeout=T)), gateway,
                                 tansu.port, "Consumer (assign) metadata")
    finally:
        consumer.close()

    # -- read back by subscribe (consumer group) ------------------------------
    group = f"{topic_name}-group-{uuid.uuid4().hex[:6]}"
    gconsumer = Consumer({"bootstrap.servers": bootstrap, "client.id": "kgw-it-group",
                          "group.id": group, "auto.offset.reset": "earliest",
                          "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                          **GROUP, **COMMON})
    try:
        gconsumer.subscribe([topic_name])
        got = _poll_until(gconsumer, len(expected), 45)
        assert_same_records(got, expected, f"Consumer.subscribe group {group}")
        assert {tp.partition for tp in gconsumer.assignment()} == set(range(PARTITIONS))
        committed = gconsumer.commit(asynchronous=False)
        assert {tp.partition: tp.offset for tp in committed} == expected_end_offsets()
        assert {tp.partition: tp.offset for tp in gconsumer.committed(tps, timeout=T)} == \
            expected_end_offsets()
        assert_gateway_addresses(_brokers(gconsumer.list_topics(topic_name, timeout=T)), gateway,
                                 tansu.port, "Consumer (group) metadata")
    finally:
        gconsumer.close()

    res = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)],
                                            request_timeout=T)
    listed = res[group].result(timeout=T)
    assert {tp.partition: tp.offset for tp in listed.topic_partitions
            if tp.topic == topic_name} == expected_end_offsets()


def test_confluent_kafka_list_all_topics(gateway, tansu, topic_name):
    """list_topics() with no topic: librdkafka sends Metadata with null topics
    (all topics), a different request shape from the per-topic one above."""
    admin = AdminClient({"bootstrap.servers": gateway.bootstrap, "client.id": "kgw-it-all",
                         **COMMON})
    assert admin.create_topics([NewTopic(topic_name, PARTITIONS, 1)],
                               request_timeout=T)[topic_name].result(timeout=T) is None
    for client in (admin, Producer({"bootstrap.servers": gateway.bootstrap, **COMMON})):
        md = client.list_topics(timeout=T)
        assert topic_name in md.topics, sorted(md.topics)
        assert len(md.topics[topic_name].partitions) == PARTITIONS
        assert_gateway_addresses(_brokers(md), gateway, tansu.port,
                                 f"{type(client).__name__}.list_topics() (all topics)")
