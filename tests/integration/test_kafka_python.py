"""kafka-python (3.x) through the gateway: admin, producer, consumer (assign +
seek and a consumer group), offsets, and the addresses it is shown."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic, OffsetSpec

from tests.support.kafka_data import (
    PARTITIONS,
    Rec,
    assert_gateway_addresses,
    assert_same_records,
    expected_end_offsets,
    expected_records,
)

pytestmark = pytest.mark.integration

CLIENT_TIMEOUTS = dict(request_timeout_ms=15000,
                       reconnect_backoff_max_ms=500, retry_backoff_ms=100)
# tansu stalls group joins unless the timeouts are short.
GROUP_TIMEOUTS = dict(session_timeout_ms=6000, heartbeat_interval_ms=1000,
                      max_poll_interval_ms=10000)


def _addresses(client_or_cluster) -> list[tuple[int, str, int]]:
    """Brokers in a kafka-python client's (or ClusterMetadata's) metadata."""
    cluster = getattr(client_or_cluster, "cluster", client_or_cluster)
    return [(b.node_id, b.host, b.port) for b in cluster.brokers()]


def _poll_until(consumer: KafkaConsumer, want: int, timeout: float) -> list[Rec]:
    got: list[Rec] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        for _tp, records in consumer.poll(timeout_ms=500).items():
            got += [Rec(r.partition, r.offset, r.key, r.value) for r in records]
    return got


def test_kafka_python_roundtrip(gateway, tansu, topic_name):
    bootstrap = gateway.bootstrap
    expected = expected_records(topic_name, "kafka-python")
    tps = [TopicPartition(topic_name, p) for p in range(PARTITIONS)]

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="kgw-it-admin",
                             **CLIENT_TIMEOUTS)
    try:
        # -- create the topic through the gateway --------------------------
        created = admin.create_topics([NewTopic(topic_name, PARTITIONS, 1)],
                                      timeout_ms=10000)
        [t] = created["topics"]
        assert (t["name"], t["error_code"]) == (topic_name, 0), created

        # -- cluster description shows only gateway addresses --------------
        cluster = admin.describe_cluster()
        assert_gateway_addresses(
            [(b["broker_id"], b["host"], b["port"]) for b in cluster["brokers"]],
            gateway, tansu.port, "KafkaAdminClient.describe_cluster")
        assert cluster["controller_id"] in gateway.broker_addresses, cluster

        [desc] = admin.describe_topics([topic_name])
        assert desc["error_code"] == 0, desc
        assert sorted(p["partition_index"] for p in desc["partitions"]) == list(range(PARTITIONS))
        for p in desc["partitions"]:
            assert p["leader_id"] in gateway.broker_addresses, desc

        # -- produce keyed records, one per batch, checking each ack -------
        producer = KafkaProducer(bootstrap_servers=bootstrap, client_id="kgw-it-producer",
                                 linger_ms=0, acks="all", **CLIENT_TIMEOUTS)
        try:
            for rec in expected:
                md = producer.send(topic_name, key=rec.key, value=rec.value,
                                   partition=rec.partition).get(timeout=15)
                assert (md.partition, md.offset) == (rec.partition, rec.offset), (md, rec)
            producer.flush(timeout=15)
            assert_gateway_addresses(_addresses(producer._metadata), gateway, tansu.port,
                                     "KafkaProducer metadata")
        finally:
            producer.close(timeout=5)

        # -- ListOffsets via admin ------------------------------------------
        earliest = admin.list_partition_offsets({tp: OffsetSpec.EARLIEST for tp in tps})
        latest = admin.list_partition_offsets({tp: OffsetSpec.LATEST for tp in tps})
        assert {tp.partition: o.offset for tp, o in earliest.items()} == \
            {p: 0 for p in range(PARTITIONS)}
        assert {tp.partition: o.offset for tp, o in latest.items()} == expected_end_offsets()

        # -- read back by assign + seek -------------------------------------
        consumer = KafkaConsumer(bootstrap_servers=bootstrap, client_id="kgw-it-assign",
                                 enable_auto_commit=False, fetch_max_wait_ms=100,
                                 **CLIENT_TIMEOUTS)
        try:
            consumer.assign(tps)
            assert {tp.partition: o for tp, o in consumer.beginning_offsets(tps).items()} == \
                {p: 0 for p in range(PARTITIONS)}
            assert {tp.partition: o for tp, o in consumer.end_offsets(tps).items()} == \
                expected_end_offsets()
            consumer.seek_to_beginning()
            got = _poll_until(consumer, len(expected), 20)
            assert_same_records(got, expected, "KafkaConsumer assign + seek_to_beginning")

            # seek into the middle of one partition: exactly the tail comes back
            consumer.assign([tps[1]])
            consumer.seek(tps[1], 1)
            tail = _poll_until(consumer, 2, 15)
            assert_same_records(tail, [r for r in expected if r.partition == 1 and r.offset >= 1],
                                "KafkaConsumer seek(partition 1, offset 1)")
            assert_gateway_addresses(_addresses(consumer._client),
                                     gateway, tansu.port, "KafkaConsumer (assign) metadata")
        finally:
            consumer.close()

        # -- read back by a consumer group ----------------------------------
        group = f"{topic_name}-group-{uuid.uuid4().hex[:6]}"
        gconsumer = KafkaConsumer(topic_name, bootstrap_servers=bootstrap, group_id=group,
                                  client_id="kgw-it-group", auto_offset_reset="earliest",
                                  enable_auto_commit=False, fetch_max_wait_ms=100,
                                  **GROUP_TIMEOUTS, **CLIENT_TIMEOUTS)
        try:
            got = _poll_until(gconsumer, len(expected), 45)
            assert_same_records(got, expected, f"KafkaConsumer group {group}")
            assert {tp.partition for tp in gconsumer.assignment()} == set(range(PARTITIONS))
            gconsumer.commit()
            committed = {tp.partition: gconsumer.committed(tp) for tp in tps}
            assert committed == expected_end_offsets()
            assert_gateway_addresses(_addresses(gconsumer._client), gateway, tansu.port,
                                     "KafkaConsumer (group) metadata")
        finally:
            gconsumer.close()

        offsets = admin.list_group_offsets({group: None})[group]
        assert {tp.partition: o.offset for tp, o in offsets.items() if tp.topic == topic_name} \
            == expected_end_offsets()
        assert_gateway_addresses(_addresses(admin._client), gateway, tansu.port,
                                 "KafkaAdminClient metadata")
    finally:
        admin.close()
