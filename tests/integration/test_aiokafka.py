"""aiokafka through the gateway: admin, AIOKafkaProducer, AIOKafkaConsumer
(assign + seek and a consumer group), offsets and the addresses it is shown.

aiokafka runs on asyncio; the test is a plain sync test that drives it with
``asyncio.run`` (pytest-trio leaves sync tests alone)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.support.kafka_data import (
    PARTITIONS,
    Rec,
    assert_gateway_addresses,
    assert_same_records,
    expected_end_offsets,
    expected_records,
)

pytestmark = pytest.mark.integration

COMMON = dict(request_timeout_ms=15000, retry_backoff_ms=100)
# tansu stalls group joins unless the timeouts are short.
GROUP = dict(session_timeout_ms=6000, heartbeat_interval_ms=1000,
             max_poll_interval_ms=10000, rebalance_timeout_ms=10000)


def _addresses(client) -> list[tuple[int, str, int]]:
    return [(b.nodeId, b.host, b.port) for b in client.cluster.brokers()]


async def _read(consumer: AIOKafkaConsumer, want: int, timeout: float) -> list[Rec]:
    got: list[Rec] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        batches = await consumer.getmany(timeout_ms=500)
        for records in batches.values():
            got += [Rec(r.partition, r.offset, r.key, r.value) for r in records]
    return got


async def _scenario(gateway, upstream_port: int, topic: str) -> None:
    bootstrap = gateway.bootstrap
    expected = expected_records(topic, "aiokafka")
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, client_id="kgw-it-admin",
                                **COMMON)
    await admin.start()
    try:
        resp = await admin.create_topics([NewTopic(topic, PARTITIONS, 1)], timeout_ms=10000)
        errors = {t[0]: t[1] for t in resp.topic_errors}
        assert errors == {topic: 0}, resp

        cluster = await admin.describe_cluster()
        assert_gateway_addresses([(b["node_id"], b["host"], b["port"]) for b in cluster["brokers"]],
                                 gateway, upstream_port, "AIOKafkaAdminClient.describe_cluster")
        assert cluster["controller_id"] in gateway.broker_addresses, cluster

        # -- produce one record per batch, awaiting each ack ------------------
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id="kgw-it-producer",
                                    linger_ms=0, acks="all", **COMMON)
        await producer.start()
        try:
            for rec in expected:
                md = await producer.send_and_wait(topic, key=rec.key, value=rec.value,
                                                  partition=rec.partition)
                assert (md.partition, md.offset) == (rec.partition, rec.offset), (md, rec)
            assert_gateway_addresses(_addresses(producer.client), gateway, upstream_port,
                                     "AIOKafkaProducer metadata")
        finally:
            await producer.stop()

        # -- assign + seek ----------------------------------------------------
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, client_id="kgw-it-assign",
                                    enable_auto_commit=False, fetch_max_wait_ms=100, **COMMON)
        await consumer.start()
        try:
            consumer.assign(tps)
            assert {tp.partition: o for tp, o in (await consumer.beginning_offsets(tps)).items()} \
                == {p: 0 for p in range(PARTITIONS)}
            assert {tp.partition: o for tp, o in (await consumer.end_offsets(tps)).items()} \
                == expected_end_offsets()
            await consumer.seek_to_beginning(*tps)
            got = await _read(consumer, len(expected), 20)
            assert_same_records(got, expected, "AIOKafkaConsumer assign + seek_to_beginning")

            consumer.seek(tps[0], 2)
            consumer.pause(tps[1], tps[2])
            tail = await _read(consumer, 1, 15)
            assert_same_records(tail, [r for r in expected if r.partition == 0 and r.offset >= 2],
                                "AIOKafkaConsumer seek(partition 0, offset 2)")
            assert_gateway_addresses(_addresses(consumer._client), gateway, upstream_port,
                                     "AIOKafkaConsumer (assign) metadata")
        finally:
            await consumer.stop()

        # -- consumer group ---------------------------------------------------
        group = f"{topic}-group-{uuid.uuid4().hex[:6]}"
        gconsumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                     client_id="kgw-it-group", auto_offset_reset="earliest",
                                     enable_auto_commit=False, fetch_max_wait_ms=100,
                                     **GROUP, **COMMON)
        await gconsumer.start()
        try:
            got = await _read(gconsumer, len(expected), 45)
            assert_same_records(got, expected, f"AIOKafkaConsumer group {group}")
            assert {tp.partition for tp in gconsumer.assignment()} == set(range(PARTITIONS))
            await gconsumer.commit()
            assert {tp.partition: await gconsumer.committed(tp) for tp in tps} == \
                expected_end_offsets()
            assert_gateway_addresses(_addresses(gconsumer._client), gateway, upstream_port,
                                     "AIOKafkaConsumer (group) metadata")
        finally:
            await gconsumer.stop()

        # Explicit partitions: tansu answers OffsetFetch with null topics (all
        # partitions of the group) with a response aiokafka cannot decode.
        offsets = await admin.list_consumer_group_offsets(group, partitions=tps)
        assert {tp.partition: o.offset for tp, o in offsets.items() if tp.topic == topic} == \
            expected_end_offsets()
    finally:
        await admin.close()


def test_aiokafka_roundtrip(gateway, tansu, topic_name):
    asyncio.run(asyncio.wait_for(_scenario(gateway, tansu.port, topic_name), timeout=150))
