"""The ``kgw`` Spark data source (kgw_spark/source.py) through a real kgw.

Records are produced straight to tansu in multi-record batches (linger), so
tansu's ListOffsets(latest) quirk -- last batch's base offset + 1 -- would
lose records if the source trusted it; the source uses the Fetch high
watermark instead, and every test asserts that *every* produced record is
read.

* batch read (subscribe, option names in odd case) returns exactly the
  produced records with Spark's Kafka schema;
* assign + JSON starting/ending offsets select exactly that range;
* a streaming availableNow query (maxOffsetsPerTrigger, parquet file sink)
  reads everything, and after more records are produced the restarted query
  resumes from its checkpoint and appends only the new ones;
* SASL principals: one with READ reads, one without READ gets a failed
  query naming the topic and TOPIC_AUTHORIZATION_FAILED (batch and streaming).

One SparkSession (local[2]) per module.
"""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")
pytest.importorskip("pandas")

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from authz.credentials import SaslMechanism, ScramCredential
from tests.support.cluster import TANSU_NODE_ID, gateway_env  # noqa: E402
from tests.support.ports import HOST, free_port, free_port_base  # noqa: E402
from tests.support.spark import make_spark  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.spark]

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 3


# --------------------------------------------------------------------------- helpers




@pytest.fixture(scope="module")
def spark():
    session = make_spark("kgw-spark-source-tests")
    try:
        yield session
    finally:
        session.stop()


def create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    futures[topic].result(timeout=30)


def produce(bootstrap: str, topic: str, n: int, first: int = 0) -> set[tuple]:
    """``n`` records round-robin over the partitions, several per batch.
    Returns {(partition, offset, key, value)} from the delivery reports."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 4,
                         "enable.idempotence": False, "acks": "all"})
    delivered: set[tuple] = set()
    errors: list = []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(err)
        else:
            delivered.add((msg.partition(), msg.offset(), msg.key(), msg.value()))

    for i in range(first, first + n):
        producer.produce(topic, key=f"k-{i}".encode(), value=f"v-{i}".encode(), partition=i % PARTITIONS,
                         on_delivery=on_delivery)
    assert producer.flush(30) == 0
    assert not errors, errors
    assert len(delivered) == n
    return delivered


def rows(df) -> set[tuple]:
    return {(r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in df.collect()}


def seed_acl(data_dir: Path, principal: str, *args: str) -> None:
    cmd = [sys.executable, "-m", "gateway.cli", "acls", "add", "--data-dir", str(data_dir),
           "--principal", principal, *args]
    done = subprocess.run(cmd, env=gateway_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def scram_user(name: str, password: str) -> dict:
    c = ScramCredential.from_password(name, password, SaslMechanism("SCRAM-SHA-256"))
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return {"name": c.name, "mechanism": "SCRAM-SHA-256", "salt": b64(c.salt), "iterations": c.iterations,
            "stored_key": b64(c.stored_key), "server_key": b64(c.server_key)}


def sasl_gateway_extra() -> dict:
    """A gateway with a SASL_PLAINTEXT listener (alice, mallory) and the StandardAuthorizer."""
    def listener(name, protocol, **more):
        return {"name": name, "security_protocol": protocol, "host": HOST, "port": free_port(),
                "advertised_host": HOST, "broker_port_base": free_port_base((TANSU_NODE_ID,)), **more}

    return {
        "listeners": [listener("EXTERNAL", "PLAINTEXT"),
                      listener("SASL", "SASL_PLAINTEXT", sasl={"mechanisms": ["SCRAM-SHA-256"]})],
        "users": {"scram": [scram_user("alice", "alice-secret"), scram_user("mallory", "mallory-secret")]},
        "authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer", "config": {}},
    }


def sasl_options(bootstrap: str, user: str, password: str) -> dict:
    return {
        "kafka.bootstrap.servers": bootstrap,
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "SCRAM-SHA-256",
        "kafka.sasl.jaas.config": ("org.apache.kafka.common.security.scram.ScramLoginModule required "
                                   f'username="{user}" password="{password}";'),
    }


# --------------------------------------------------------------------------- tests


def test_batch_read_matches_produced(spark, gateway, tansu, topic_name):
    create_topic(tansu.bootstrap, topic_name)
    produced = produce(tansu.bootstrap, topic_name, 30)

    df = (spark.read.format("kgw")
          .option("KAFKA.BOOTSTRAP.SERVERS", gateway.bootstrap)   # case-insensitive names
          .option("Subscribe", topic_name)
          .load())
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
        ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int")]
    got = df.collect()
    assert {(r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in got} == produced
    assert len(got) == len(produced)
    assert {r.topic for r in got} == {topic_name}
    assert {r.timestampType for r in got} == {0}
    assert all(r.timestamp is not None for r in got)

    # subscribePattern selects the same topic.
    by_pattern = (spark.read.format("kgw").option("kafka.bootstrap.servers", gateway.bootstrap)
                  .option("subscribePattern", topic_name.replace("-", ".") + "$").load())
    assert rows(by_pattern) == produced


def test_batch_assign_and_json_offsets(spark, gateway, tansu, topic_name):
    create_topic(tansu.bootstrap, topic_name)
    produced = produce(tansu.bootstrap, topic_name, 30)  # 10 per partition
    df = (spark.read.format("kgw").option("kafka.bootstrap.servers", gateway.bootstrap)
          .option("assign", f'{{"{topic_name}": [0, 2]}}')
          .option("startingOffsets", f'{{"{topic_name}": {{"0": 3, "2": -2}}}}')
          .option("endingOffsets", f'{{"{topic_name}": {{"0": 7, "2": -1}}}}')
          .load())
    expected = {r for r in produced if (r[0] == 0 and 3 <= r[1] < 7) or r[0] == 2}
    assert rows(df) == expected


def test_streaming_available_now_resumes_from_checkpoint(spark, gateway, tansu, topic_name, tmp_path):
    create_topic(tansu.bootstrap, topic_name)
    first = produce(tansu.bootstrap, topic_name, 24)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run_query():
        stream = (spark.readStream.format("kgw")
                  .option("kafka.bootstrap.servers", gateway.bootstrap)
                  .option("subscribe", topic_name)
                  .option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "10")
                  .load())
        query = (stream.writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert not query.isActive, "availableNow query did not finish"
        assert query.exception() is None, query.exception()
        return query

    q1 = run_query()
    assert len(q1.recentProgress) >= 3  # 24 records at <= 10 per trigger
    assert all(p["numInputRows"] <= 10 for p in q1.recentProgress)
    after_first = spark.read.parquet(str(out))
    assert rows(after_first) == first and after_first.count() == 24

    second = produce(tansu.bootstrap, topic_name, 9, first=24)
    q2 = run_query()
    assert sum(p["numInputRows"] for p in q2.recentProgress) == 9  # only the new records
    after_second = spark.read.parquet(str(out))
    assert after_second.count() == 33  # no duplicates
    assert rows(after_second) == first | second


def test_principal_without_read_fails_query_naming_topic(spark, tansu, start_gateway, topic_name, tmp_path):
    create_topic(tansu.bootstrap, topic_name)
    produced = produce(tansu.bootstrap, topic_name, 6)
    name = "kgw-sasl"
    data_dir = tmp_path / name / "metadata"
    seed_acl(data_dir, "User:alice", "--operation", "READ", "--topic", topic_name)
    seed_acl(data_dir, "User:alice", "--operation", "DESCRIBE", "--topic", topic_name)
    seed_acl(data_dir, "User:mallory", "--operation", "DESCRIBE", "--topic", topic_name)  # no READ
    gw = start_gateway(sasl_gateway_extra(), name=name)
    sasl_bootstrap = gw.listeners["SASL"]

    alice = spark.read.format("kgw").options(**sasl_options(sasl_bootstrap, "alice", "alice-secret"))
    assert rows(alice.option("subscribe", topic_name).load()) == produced

    mallory = sasl_options(sasl_bootstrap, "mallory", "mallory-secret")
    with pytest.raises(Exception) as failed:
        spark.read.format("kgw").options(**mallory).option("subscribe", topic_name).load().collect()
    message = str(failed.value)
    assert topic_name in message and "TOPIC_AUTHORIZATION_FAILED" in message, message

    stream = (spark.readStream.format("kgw").options(**mallory).option("subscribe", topic_name)
              .option("startingOffsets", "earliest").load())
    query = (stream.writeStream.format("parquet").option("path", str(tmp_path / "m-out"))
             .option("checkpointLocation", str(tmp_path / "m-ckpt")).trigger(availableNow=True).start())
    with pytest.raises(Exception) as stream_failed:
        query.awaitTermination(120)
    message = str(stream_failed.value)
    assert topic_name in message and "TOPIC_AUTHORIZATION_FAILED" in message, message
