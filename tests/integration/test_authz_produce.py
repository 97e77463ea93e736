"""Produce through kgw with one of two topics allowed: the allowed half is really written
upstream, the denied half gets TOPIC_AUTHORIZATION_FAILED and never reaches the broker."""

from __future__ import annotations

import datetime as dt
import io
from datetime import timedelta

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.schema.produce.v9 import request as produce9
from kio.static.primitive import i8, i16, i32, i64

from tests.support.raw_kafka import call
from tests.support.acls import seed_acls

pytestmark = pytest.mark.integration

AUTHORIZER = {"authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer"}}


def _batch(value: bytes) -> bytes:
    out = io.BytesIO()
    write_new_batch(out, NewRecordBatch(
        producer_id=i64(-1), producer_epoch=i16(-1), base_sequence=i32(-1), attributes=i16(0),
        records=(Record(attributes=i8(0), timestamp=dt.datetime.now(dt.timezone.utc), offset=i64(0),
                        key=b"k", value=value, headers=()),)))
    return out.getvalue()


def _upstream_values(tansu, topic: str) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=tansu.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=3000, request_timeout_ms=15000)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        return [m.value for m in consumer]
    finally:
        consumer.close()


def test_produce_to_an_allowed_and_a_denied_topic(start_gateway, tmp_path, tansu, topic_name):
    allowed, denied = f"{topic_name}-ok", f"{topic_name}-no"
    admin = KafkaAdminClient(bootstrap_servers=tansu.bootstrap, request_timeout_ms=15000)
    try:
        admin.create_topics([NewTopic(allowed, 1, 1), NewTopic(denied, 1, 1)])
    finally:
        admin.close()
    seed_acls(tmp_path / "produce" / "metadata", ["--topic", allowed, "--operation", "WRITE"],
              ["--topic", denied, "--operation", "DESCRIBE"])
    gw = start_gateway(AUTHORIZER, name="produce")

    request = produce9.ProduceRequest(transactional_id=None, acks=i16(-1), timeout=timedelta(seconds=10), topic_data=(
        produce9.TopicProduceData(name=denied, partition_data=(
            produce9.PartitionProduceData(index=i32(0), records=_batch(b"must not arrive")),)),
        produce9.TopicProduceData(name=allowed, partition_data=(
            produce9.PartitionProduceData(index=i32(0), records=_batch(b"written through kgw")),)),
    ))
    response = call(gw.broker_addresses[111], 0, 9, request)
    errors = {t.name: [p.error_code for p in t.partition_responses] for t in response.responses}
    assert [t.name for t in response.responses] == [denied, allowed]  # request order
    assert errors == {denied: [29], allowed: [0]}
    assert _upstream_values(tansu, allowed) == [b"written through kgw"]
    assert _upstream_values(tansu, denied) == []
