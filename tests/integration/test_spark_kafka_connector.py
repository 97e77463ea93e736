"""Spark's own Kafka source and sink (spark-sql-kafka-0-10, the release of the pinned PySpark,
resolved by `make setup`) through kgw in front of Apache Kafka with the StandardAuthorizer:
a batch read of known records, a streaming query resumed from its checkpoint after more
records, a topic without READ failing with TOPIC_AUTHORIZATION_FAILED, and df.write."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.acls import seed_acls
from tests.support.spark import make_spark

pytestmark = [pytest.mark.spark, pytest.mark.kafka]

REPO = Path(__file__).resolve().parents[2]
T = 30
COMMON = {"broker.address.family": "v4", "socket.timeout.ms": 10000}


@pytest.fixture(scope="module")
def spark():
    session = make_spark("kgw-spark-kafka-connector")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def gw(_kafka_session, tmp_path_factory):
    from tests.support.cluster import base_gateway_config, launch_gateway

    work = tmp_path_factory.mktemp("kgw-spark")
    seed_acls(work / "metadata", ["--operation", "ALL", "--topic", "spark-ok", "--prefixed"],
              ["--operation", "DESCRIBE", "--topic", "spark-no", "--prefixed"],
              ["--operation", "READ", "--group", "*"])
    config = base_gateway_config(_kafka_session.bootstrap, work / "metadata", _kafka_session.node_ids)
    config["authorizer"] = {"class_name": "authz.standard_authorizer:StandardAuthorizer"}
    gateway = launch_gateway("kgw-spark", config, work, node_ids=_kafka_session.node_ids)
    try:
        yield gateway
    finally:
        gateway.stop()


def _topic(kafka, name: str, values: list[bytes]) -> None:
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap, **COMMON})  # kept alive until the result
    admin.create_topics([NewTopic(name, 2, 1)], operation_timeout=10)[name].result(timeout=T)
    _produce(kafka.bootstrap, name, values)


def _produce(bootstrap: str, name: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, **COMMON})
    for v in values:
        producer.produce(name, v)
    assert producer.flush(T) == 0


def test_batch_read_through_kgw(spark, gw, _kafka_session, topic_name):
    topic = f"spark-ok-batch-{topic_name[-8:]}"
    values = [f"b{i}".encode() for i in range(20)]
    _topic(_kafka_session, topic, values)
    df = (spark.read.format("kafka").option("kafka.bootstrap.servers", gw.bootstrap).option("subscribe", topic)
          .option("startingOffsets", "earliest").option("endingOffsets", "latest").load())
    assert sorted(bytes(r.value) for r in df.select("value").collect()) == sorted(values)


def test_streaming_query_resumes_from_its_checkpoint(spark, gw, _kafka_session, topic_name, tmp_path):
    topic = f"spark-ok-stream-{topic_name[-8:]}"
    _topic(_kafka_session, topic, [f"s{i}".encode() for i in range(10)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run_once():
        stream = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", gw.bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest").load()
                  .selectExpr("CAST(value AS STRING) AS value"))
        query = (stream.writeStream.format("json").option("path", str(out))
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()

    run_once()
    assert sorted(r.value for r in spark.read.json(str(out)).collect()) == sorted(f"s{i}" for i in range(10))
    _produce(_kafka_session.bootstrap, topic, [f"s{i}".encode() for i in range(10, 15)])
    run_once()  # resumes after the offsets in the checkpoint: each record once
    assert sorted(r.value for r in spark.read.json(str(out)).collect()) == sorted(f"s{i}" for i in range(15))


def test_a_topic_without_read_fails_with_topic_authorization_failed(spark, gw, _kafka_session, topic_name):
    topic = f"spark-no-{topic_name[-8:]}"
    _topic(_kafka_session, topic, [b"secret"])
    with pytest.raises(Exception) as failure:
        (spark.read.format("kafka").option("kafka.bootstrap.servers", gw.bootstrap).option("subscribe", topic)
         .option("startingOffsets", "earliest").option("endingOffsets", "latest").load().collect())
    text = str(failure.value)
    assert "TopicAuthorizationException" in text or "TOPIC_AUTHORIZATION_FAILED" in text, text[-3000:]


def test_dataframe_write_through_kgw(spark, gw, _kafka_session, topic_name):
    topic = f"spark-ok-write-{topic_name[-8:]}"
    _topic(_kafka_session, topic, [])
    rows = [(f"k{i}", f"w{i}") for i in range(12)]
    (spark.createDataFrame(rows, "key STRING, value STRING").write.format("kafka")
     .option("kafka.bootstrap.servers", gw.bootstrap).option("topic", topic).save())
    consumer = Consumer({"bootstrap.servers": _kafka_session.bootstrap, "group.id": f"g-{topic}",
                         "auto.offset.reset": "earliest", **COMMON})
    consumer.subscribe([topic])
    got = set()
    deadline = time.monotonic() + T
    while len(got) < 12 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.add((msg.key().decode(), msg.value().decode()))
    consumer.close()
    assert got == set(rows)
