"""A real client consuming large record sets through kgw: librdkafka (confluent-kafka) gets every
record byte for byte while kgw splices the Fetch responses' record sets socket to socket
(gateway/connection/splicing.py), counted by kgw_bytes_spliced_total."""

from __future__ import annotations

import hashlib
import re
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.processes import wait_until

pytestmark = pytest.mark.integration

RECORDS = 48
SIZE = 256 * 1024


def _spliced(admin_url: str) -> float:
    with urllib.request.urlopen(admin_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(float(v) for v in re.findall(r'^kgw_bytes_spliced_total\{[^}]*\} (\S+)$', text, re.M))


def _value(i: int) -> bytes:
    """256 KiB that differ per record and per position (a swapped or shifted slice shows)."""
    seed = hashlib.sha256(f"splice-{i}".encode()).digest()
    return (seed * (SIZE // len(seed) + 1))[:SIZE - 4] + i.to_bytes(4, "big")


def test_librdkafka_consumes_large_record_sets_spliced_byte_for_byte(start_gateway, topic_name):
    gw = start_gateway(name="splicing")
    common = {"bootstrap.servers": gw.bootstrap, "broker.address.family": "v4"}
    admin = AdminClient(common)
    for f in admin.create_topics([NewTopic(topic_name, 1, 1)], operation_timeout=10).values():
        f.result(timeout=15)
    producer = Producer({**common, "message.max.bytes": 2 * SIZE, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(topic_name, _value(i), key=str(i).encode())
    assert producer.flush(30) == 0
    before = _spliced(gw.admin_url)

    consumer = Consumer({**common, "group.id": f"{topic_name}-g", "enable.auto.commit": False,
                         "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20,
                         "fetch.wait.max.ms": 100})
    try:
        consumer.assign([TopicPartition(topic_name, 0, 0)])
        got: list = []

        def all_consumed() -> bool:
            msg = consumer.poll(0.5)
            if msg is not None:
                if msg.error():
                    raise KafkaException(msg.error())
                got.append(msg)
            return len(got) >= RECORDS

        wait_until(all_consumed, 60, interval=0, message=f"{RECORDS} records consumed")
    finally:
        consumer.close()
    assert [m.key() for m in got] == [str(i).encode() for i in range(RECORDS)]
    assert all(m.value() == _value(i) for i, m in enumerate(got))
    # most of the 12 MiB went through the pipe (byte counters are added every 100 ms)
    wait_until(lambda: _spliced(gw.admin_url) - before >= RECORDS * SIZE // 2, 10,
               message="kgw_bytes_spliced_total to count the consumed record sets")
