"""kgw in front of Apache Kafka (one KRaft node, resolved by `make setup`): the client matrix,
the topic-id forms of Produce and Fetch that tansu never negotiates, DescribeTopicPartitions,
fetch sessions under a live revoke, transactions, the KIP-848 consumer protocol."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from pathlib import Path
from datetime import timedelta

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic
from confluent_kafka.admin import AclBindingFilter, ResourcePatternType, ResourceType
from kio.static.primitive import i32, i64

from protocol.codecs import make, nested, request_class
from tests.support.acls import seed_acls
from tests.support.kio_samples import record_batch
from tests.support.raw_kafka import RawConnection

pytestmark = pytest.mark.kafka

T = 20
COMMON = {"socket.timeout.ms": 10000, "broker.address.family": "v4", "reconnect.backoff.max.ms": 500}
AUTHORIZER = {"authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer"}}


def create_topic(bootstrap: str, name: str, partitions: int = 1, replication: int = 1) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **COMMON})
    admin.create_topics([NewTopic(name, partitions, replication)], operation_timeout=10)[name].result(timeout=T)


def gateway_addresses(gw) -> set[str]:
    return set(gw.broker_addresses.values()) | {gw.bootstrap}


# -- the client matrix, no authorizer -------------------------------------------------------


def _kafka_python(bootstrap: str, topic: str, values: list[bytes]) -> tuple[list[bytes], set[str]]:
    from kafka import KafkaConsumer, KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=15000)
    for v in values:
        producer.send(topic, v)
    producer.flush(T)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=10000, enable_auto_commit=False)
    got = [m.value for m in consumer][: len(values)]
    brokers = {f"{b.host}:{b.port}" for b in consumer._client.cluster.brokers()}
    consumer.close()
    return got, brokers


def _confluent(bootstrap: str, topic: str, values: list[bytes]) -> tuple[list[bytes], set[str]]:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **COMMON})
    for v in values:
        producer.produce(topic, v)
    assert producer.flush(T) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", **COMMON})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + T
    while len(got) < len(values) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.value())
    brokers = {f"{b.host}:{b.port}" for b in consumer.list_topics(timeout=T).brokers.values()}
    consumer.close()
    return got, brokers


def _aiokafka(bootstrap: str, topic: str, values: list[bytes]) -> tuple[list[bytes], set[str]]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
        await producer.start()
        try:
            for v in values:
                await producer.send_and_wait(topic, v)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                    group_id=f"g-{uuid.uuid4().hex[:6]}")
        await consumer.start()
        got = []
        try:
            while len(got) < len(values):
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), T)
                for msgs in batch.values():
                    got.extend(m.value for m in msgs)
            brokers = {f"{b.host}:{b.port}" for b in consumer._client.cluster.brokers()}
        finally:
            await consumer.stop()
        return got, brokers

    return asyncio.run(run())


def _kcat(bootstrap: str, topic: str, values: list[bytes]) -> tuple[list[bytes], set[str]]:
    x = ["-X", "broker.address.family=v4", "-m", "15"]
    done = subprocess.run(["kcat", "-b", bootstrap, *x, "-P", "-t", topic], input=b"\n".join(values) + b"\n",
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    done = subprocess.run(["kcat", "-b", bootstrap, *x, "-C", "-t", topic, "-o", "beginning", "-e", "-f", "%s\\n"],
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    listing = subprocess.run(["kcat", "-b", bootstrap, *x, "-L", "-J"], capture_output=True, timeout=60)
    import json

    brokers = {b["name"] for b in json.loads(listing.stdout)["brokers"]}
    return done.stdout.split(b"\n")[: len(values)], brokers


CLIENTS = {"kafka-python": _kafka_python, "confluent-kafka": _confluent, "aiokafka": _aiokafka, "kcat": _kcat}


@pytest.mark.parametrize("authorizer", [False, True], ids=["open", "authz"])
@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_client_roundtrip_through_kgw(kafka_gateway, topic_name, client, authorizer, tmp_path):
    if authorizer:  # exactly what the client needs: the topic, any group, nothing else
        seed_acls(tmp_path / "kgw-0" / "metadata", ["--operation", "ALL", "--topic", topic_name],
                  ["--operation", "READ", "--group", "*"], ["--operation", "DESCRIBE", "--group", "*"])
    gw = kafka_gateway(AUTHORIZER if authorizer else None)
    create_topic(gw.bootstrap, topic_name)
    values = [f"{client}-{i}".encode() for i in range(5)]
    got, brokers = CLIENTS[client](gw.bootstrap, topic_name, values)
    assert got == values
    assert brokers and brokers <= gateway_addresses(gw), brokers  # never the upstream's own address


# -- topic ids: Produce v13, Fetch v13+, DescribeTopicPartitions --------------------------------


def _topic_id(conn: RawConnection, topic: str):
    md_cls = request_class(3, 12)
    body = make(md_cls, topics=(make(nested(md_cls, "topics"), name=topic, topic_id=uuid.UUID(int=0)),),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    response = conn.call(3, 12, body)
    (t,) = response.topics
    assert t.error_code == 0, t
    return t.topic_id


def _produce_v13(conn: RawConnection, topic_id, value: bytes):
    cls = request_class(0, 13)
    tcls = nested(cls, "topic_data")
    body = make(cls, transactional_id=None, acks=-1, timeout=timedelta(seconds=10), topic_data=(
        make(tcls, topic_id=topic_id, partition_data=(make(nested(tcls, "partition_data"), index=i32(0),
                                                           records=record_batch(value)),)),))
    response = conn.call(0, 13, body)
    return response


def _fetch(conn: RawConnection, version: int, topic_id):
    cls = request_class(1, version)
    tcls = nested(cls, "topics")
    pcls = nested(tcls, "partitions")
    body = make(cls, max_wait=timedelta(milliseconds=100), min_bytes=i32(1), max_bytes=i32(1 << 20), isolation_level=0,
                session_id=i32(0), session_epoch=i32(-1), rack_id="", cluster_id=None,
                topics=(make(tcls, topic_id=topic_id, partitions=(make(pcls, partition=i32(0), fetch_offset=i64(0),
                                                                       log_start_offset=i64(-1),
                                                                       partition_max_bytes=i32(1 << 20),
                                                                       current_leader_epoch=i32(-1),
                                                                       last_fetched_epoch=i32(-1)),)),),
                forgotten_topics_data=())
    response = conn.call(1, version, body)
    return response


def test_produce_v13_and_fetch_by_topic_id_allowed_and_denied(kafka, kafka_gateway, tmp_path, topic_name):
    allowed, denied = f"{topic_name}-ok", f"{topic_name}-no"
    data = tmp_path / "kgw-0" / "metadata"
    seed_acls(data, ["--operation", "WRITE", "--topic", allowed], ["--operation", "READ", "--topic", allowed],
              ["--operation", "DESCRIBE", "--topic", "*"])
    create_topic(kafka.bootstrap, allowed)  # set-up, straight at the broker
    create_topic(kafka.bootstrap, denied)
    gw = kafka_gateway(AUTHORIZER)
    node = next(iter(gw.broker_addresses.values()))
    with RawConnection(node) as conn:
        ok_id, no_id = _topic_id(conn, allowed), _topic_id(conn, denied)  # kgw learns the ids here
        produced = _produce_v13(conn, ok_id, b"by-id")
        assert [(t.topic_id, p.error_code) for t in produced.responses for p in t.partition_responses] == [(ok_id, 0)]
        refused = _produce_v13(conn, no_id, b"never")
        assert [p.error_code for t in refused.responses for p in t.partition_responses] == [29]
        unknown = _produce_v13(conn, uuid.uuid4(), b"never")
        assert [p.error_code for t in unknown.responses for p in t.partition_responses] == [100]
        for version in (13, 16, 17, 18):
            fetched = _fetch(conn, version, ok_id)
            (part,) = fetched.responses[0].partitions
            assert part.error_code == 0 and b"by-id" in bytes(part.records or b""), (version, part)
            assert [p.error_code for p in _fetch(conn, version, no_id).responses[0].partitions] == [29]
    # what the broker wrote: the allowed record only, the denied topic untouched
    consumer = Consumer({"bootstrap.servers": gw.bootstrap, "group.id": "x", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **COMMON})
    lo, hi = consumer.get_watermark_offsets(TopicPartition(denied, 0), timeout=T)
    consumer.close()
    assert (lo, hi) == (0, 0)


def test_describe_topic_partitions_through_kgw(kafka, kafka_gateway, tmp_path, topic_name):
    visible, hidden = f"{topic_name}-v", f"{topic_name}-h"
    seed_acls(tmp_path / "kgw-0" / "metadata", ["--operation", "DESCRIBE", "--topic", visible])
    create_topic(kafka.bootstrap, visible, partitions=3)
    create_topic(kafka.bootstrap, hidden)
    gw = kafka_gateway(AUTHORIZER)
    cls = request_class(75, 0)
    with RawConnection(gw.bootstrap) as conn:
        named = make(cls, topics=(make(nested(cls, "topics"), name=visible), make(nested(cls, "topics"), name=hidden)),
                     response_partition_limit=i32(100), cursor=None)
        response = conn.call(75, 0, named)
        by_name = {t.name: t for t in response.topics}
        assert by_name[visible].error_code == 0 and len(by_name[visible].partitions) == 3
        assert by_name[hidden].error_code == 29 and by_name[hidden].topic_id in (None, uuid.UUID(int=0))  # kio: zero id = None
        everything = conn.call(75, 0, make(cls, topics=(), response_partition_limit=i32(100), cursor=None))
        names = {t.name for t in everything.topics}
        assert visible in names and hidden not in names  # all topics: the hidden one filtered out


# -- fetch sessions: a revoked READ stops the consumer at once ----------------------------------


def test_read_revoked_mid_consumption_stops_an_incremental_fetch_session(kafka_gateway, tmp_path, topic_name):
    seed_acls(tmp_path / "kgw-0" / "metadata", ["--operation", "ALL", "--topic", "*"],
              ["--operation", "ALL", "--group", "*"], ["--operation", "ALTER", "--cluster"],
              ["--operation", "DESCRIBE", "--cluster"])
    gw = kafka_gateway(AUTHORIZER)
    create_topic(gw.bootstrap, topic_name)
    producer = Producer({"bootstrap.servers": gw.bootstrap, **COMMON})
    consumer = Consumer({"bootstrap.servers": gw.bootstrap, "group.id": f"g-{topic_name}", "auto.offset.reset": "earliest",
                         "fetch.wait.max.ms": 100, **COMMON})
    consumer.subscribe([topic_name])

    def poll_value(deadline_s: float):
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            return msg
        return None

    producer.produce(topic_name, b"before")
    producer.flush(T)
    msg = poll_value(T)
    assert msg is not None and not msg.error() and msg.value() == b"before"
    # the session is established (librdkafka uses incremental fetch sessions); revoke READ
    admin = AdminClient({"bootstrap.servers": gw.bootstrap, **COMMON})
    wildcard = AclBindingFilter(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                                AclOperation.ALL, AclPermissionType.ALLOW)
    admin.delete_acls([wildcard])[wildcard].result(timeout=T)
    write = AclBinding(ResourceType.TOPIC, topic_name, ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW)
    admin.create_acls([write])[write].result(timeout=T)  # acknowledged: every later request sees it
    producer.produce(topic_name, b"after")
    producer.flush(T)
    # the next fetch is refused; a fetch the broker already held when the ACL went (fetch.wait.max.ms)
    # may still deliver what it was authorized for, as it would from Kafka itself
    delivered = []
    deadline = time.monotonic() + T
    error = None
    while error is None and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            error = msg.error()
        else:
            delivered.append(msg.value())
    assert error is not None, f"the consumer kept receiving after READ was revoked: {delivered}"
    assert error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert delivered in ([], [b"after"])
    producer.produce(topic_name, b"later")
    producer.flush(T)
    later = poll_value(3)
    consumer.close()
    assert later is None or later.error() is not None, "a record produced after the revoke was delivered"


# -- exactly once through kgw -----------------------------------------------------------------


def test_transactional_producer_and_read_committed_consumer(kafka_gateway, topic_name):
    gw = kafka_gateway()
    create_topic(gw.bootstrap, topic_name)
    producer = Producer({"bootstrap.servers": gw.bootstrap, "transactional.id": f"tx-{topic_name}", **COMMON})
    producer.init_transactions(T)
    producer.begin_transaction()
    producer.produce(topic_name, b"aborted")
    producer.abort_transaction(T)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic_name, f"committed-{i}".encode())
    producer.commit_transaction(T)
    consumer = Consumer({"bootstrap.servers": gw.bootstrap, "group.id": f"g-{topic_name}", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", **COMMON})
    consumer.subscribe([topic_name])
    got: list[bytes] = []
    deadline = time.monotonic() + T
    while len(got) < 3 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and not msg.error():
            got.append(msg.value())
    consumer.close()
    assert got == [b"committed-0", b"committed-1", b"committed-2"]


def test_kip848_consumer_group_protocol(kafka_gateway, topic_name):
    gw = kafka_gateway()
    create_topic(gw.bootstrap, topic_name, partitions=2)
    producer = Producer({"bootstrap.servers": gw.bootstrap, **COMMON})
    for i in range(4):
        producer.produce(topic_name, f"v{i}".encode(), partition=i % 2)
    producer.flush(T)
    consumer = Consumer({"bootstrap.servers": gw.bootstrap, "group.id": f"g848-{topic_name}", "group.protocol": "consumer",
                         "auto.offset.reset": "earliest", **COMMON})
    consumer.subscribe([topic_name])
    got = set()
    deadline = time.monotonic() + 30
    while len(got) < 4 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None:
            if msg.error():
                raise KafkaException(msg.error())
            got.add(msg.value())
    consumer.close()
    assert got == {b"v0", b"v1", b"v2", b"v3"}


# -- share groups (KIP-932), with the Java 4.x client --------------------------------------------


@pytest.mark.java
def test_share_group_consumes_through_kgw(kafka, kafka_gateway, topic_name, tmp_path_factory):
    import json
    import os

    from tests.support.java import compile_java, java_tools
    from tests.support.kafka import kafka_libs
    from tests.support.processes import run_tool

    jars = sorted(kafka_libs().glob("*.jar"))
    out = compile_java([Path(__file__).parent / "java" / "KgwShareCheck.java"], tmp_path_factory.mktemp("share"), jars)
    gw = kafka_gateway()
    create_topic(gw.bootstrap, topic_name, partitions=2)
    java = java_tools()[1]
    done = run_tool([java, "-XX:+UseSerialGC", "-cp", os.pathsep.join([str(out), *map(str, jars)]), "KgwShareCheck",
                     gw.bootstrap, topic_name, f"share-{topic_name}", "10"], timeout=120, check=False)
    events = [json.loads(line) for line in done.stdout.decode().splitlines() if line.startswith("{")]
    assert done.returncode == 0 and events[-1] == {"event": "done"}, (events, done.stderr.decode()[-3000:])
    assert {"event": "consumed", "count": 10} in events
