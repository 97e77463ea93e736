"""The hostile-client fuzzer with Apache Kafka behind kgw: what the broker ends up holding.

The unit fuzzer (tests/unit/gateway/test_hostile_fuzz.py) checks every frame kgw forwards to
a sink; it cannot see what a real broker *derives* from a frame (a regex resolved, an internal
topic created, a token issued, a group joined).  Here kgw (PLAINTEXT, User:ANONYMOUS, ALL on
``ok-<run>`` topics, groups and transactional ids) stands in front of the session's open Kafka
node, which it reaches as a super user, and a bounded number of mutated requests of every
advertised API and version are sent through it.  Requests name ``ok-`` and ``no-`` resources;
beside them the broker holds a topic and a consumer group no request ever names
(``hidden-<run>``), with records and committed offsets.

The invariant, checked on every answer and on the broker's state afterwards, read as a super
user straight from the broker: a principal never observes, creates or is assigned anything
its ACLs do not allow.

* no answer carries the hidden topic's name or id, nor the hidden group's name;
* no topic or group outside ``ok-`` was created; nothing was written to the ``no-`` topic;
* no consumer or share group assigns a ``no-`` or hidden topic to anyone; no offsets were
  committed for one; no ``no-`` group exists.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.upstream.cluster import encode_request
from protocol.codecs import make, request_class
from protocol.framing import NEED_DATA, FrameDecoder
from tests.support.acls import seed_acls
from tests.support.cluster import base_gateway_config, launch_gateway
from tests.support.kio_samples import sample
from tests.support.raw_kafka import RawConnection
from tests.unit.gateway.test_hostile_fuzz import PAIRS, _OPS, _mutate, _probe, _PROBE_CORRELATION

pytestmark = pytest.mark.kafka

RUN = f"fz{uuid.uuid4().hex[:5]}"
OK, NO, HIDDEN = f"ok-{RUN}", f"no-{RUN}", f"hidden-{RUN}"
NAMES = {"topic": [f"{OK}-a", f"{NO}-b", f"{OK}-c"], "group": [f"{OK}-g", f"{NO}-g"],
         "transactional_id": [f"{OK}-t", f"{NO}-t"]}
T = 20


class World:
    """kgw in front of Kafka, the hidden resources, and what the answers showed."""

    def __init__(self, kafka, tmp_path) -> None:
        self.kafka = kafka
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        topics = [NewTopic(f"{OK}-a", 2, 1), NewTopic(f"{NO}-b", 2, 1), NewTopic(HIDDEN, 2, 1)]
        for f in admin.create_topics(topics, operation_timeout=10).values():
            f.result(timeout=T)
        producer = Producer({"bootstrap.servers": kafka.bootstrap, "broker.address.family": "v4"})
        for i in range(10):
            producer.produce(HIDDEN, f"secret-{i}".encode())
        assert producer.flush(T) == 0
        consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"{HIDDEN}-g",
                             "broker.address.family": "v4", "enable.auto.commit": False})
        consumer.commit(offsets=[TopicPartition(HIDDEN, 0, 5)], asynchronous=False)
        consumer.close()
        self.hidden_id = self._topic_id(HIDDEN)
        self.no_end = self._end_offsets(f"{NO}-b")
        work = tmp_path / "kgw"
        config = base_gateway_config(kafka.bootstrap, work / "metadata", kafka.node_ids)
        config["authorizer"] = {"class_name": "authz.standard_authorizer:StandardAuthorizer"}
        config["upstream"]["request_timeout_ms"] = 5000
        seed_acls(work / "metadata", *(["--operation", "ALL", "--prefixed", kind, OK]
                                       for kind in ("--topic", "--group", "--transactional-id")))
        self.gateway = launch_gateway("kgw-fuzz-kafka", config, work, node_ids=kafka.node_ids)
        self.leaks: list[str] = []
        self.outcomes: dict[str, int] = {}

    def _topic_id(self, name: str) -> uuid.UUID:
        cls = request_class(3, 12)
        with RawConnection(self.kafka.bootstrap) as conn:
            r = conn.call(3, 12, make(cls, topics=None, allow_auto_topic_creation=False,
                                      include_topic_authorized_operations=False))
        return next(t.topic_id for t in r.topics if t.name == name)

    def _end_offsets(self, topic: str) -> list[int]:
        consumer = Consumer({"bootstrap.servers": self.kafka.bootstrap, "group.id": f"probe-{RUN}",
                             "broker.address.family": "v4"})
        try:
            return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=T)[1] for p in (0, 1)]
        finally:
            consumer.close()

    def exchange(self, frame: bytes) -> str:
        """Send ``frame`` then a probe; every byte that comes back is searched for a leak."""
        host, port = self.gateway.bootstrap.rsplit(":", 1)
        received = bytearray()
        outcome = "hung"
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            try:
                sock.sendall(frame + _probe())
                decoder = FrameDecoder(1 << 30)
                while outcome == "hung":
                    data = sock.recv(1 << 16)
                    if not data:
                        outcome = "closed"
                        break
                    received += data
                    decoder.receive_data(data)
                    while (got := decoder.next_frame()) is not NEED_DATA:
                        if struct.unpack_from(">i", got, 4)[0] == _PROBE_CORRELATION:
                            outcome = "answered"
            except (ConnectionResetError, BrokenPipeError):
                outcome = "closed"
            except socket.timeout:
                pass
        for secret, what in ((HIDDEN.encode(), "the hidden topic's or group's name"),
                             (self.hidden_id.bytes, "the hidden topic's id")):
            if secret in received:
                self.leaks.append(f"an answer carried {what}: {bytes(frame[:40])!r}...")
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        return outcome

    def exchange_seen(self, text: bytes) -> None:
        if HIDDEN.encode() in text:
            self.leaks.append(f"an answer named the hidden topic: {text[:200]!r}")

    def broker_state_violations(self) -> list[str]:
        """What the broker holds that the principal's ACLs do not allow, read as a super user."""
        out = []
        admin = AdminClient({"bootstrap.servers": self.kafka.bootstrap})
        topics = set(admin.list_topics(timeout=T).topics)
        out += [f"topic {t} created" for t in topics if t.startswith(NO) and t != f"{NO}-b"]
        listed = admin.list_consumer_groups(request_timeout=T).result()
        names = {g.group_id for g in listed.valid}
        out += [f"group {g} exists" for g in names if g.startswith(NO)]
        if self._end_offsets(f"{NO}-b") != self.no_end:
            out.append(f"records written to {NO}-b")
        ours = [g for g in names if g.startswith(OK)]
        if ours:
            for group_id, future in admin.describe_consumer_groups(ours, request_timeout=T).items():
                try:
                    described = future.result()
                except Exception:  # noqa: BLE001 - a share or streams group, described below
                    continue
                for m in described.members:
                    for assignment in (m.assignment, getattr(m, "target_assignment", None)):
                        for tp in (assignment.topic_partitions if assignment else []):
                            if not tp.topic.startswith(OK):
                                out.append(f"group {group_id} assigns {tp.topic}-{tp.partition}")
            for group_id in ours:
                consumer = Consumer({"bootstrap.servers": self.kafka.bootstrap, "group.id": group_id,
                                     "broker.address.family": "v4"})
                try:
                    committed = consumer.committed([TopicPartition(t, p) for t in (f"{NO}-b", HIDDEN) for p in (0, 1)],
                                                   timeout=T)
                    out += [f"group {group_id} committed {tp.topic}-{tp.partition}" for tp in committed
                            if tp.offset >= 0]
                finally:
                    consumer.close()
        return out


@pytest.fixture(scope="module")
def world(_kafka_session, tmp_path_factory):
    w = World(_kafka_session, tmp_path_factory.mktemp("fuzz-kafka"))
    yield w
    w.gateway.stop()


#: requests aimed at what the broker derives, beside the sampled ones
_DERIVING = [(68, 1), (76, 1), (78, 1), (78, 2), (75, 0), (38, 3), (3, 12), (3, 1)]  # (88: its sample does not encode)


@settings(max_examples=int(os.environ.get("KGW_FUZZ_KAFKA_EXAMPLES", "150")), deadline=None,
          suppress_health_check=list(HealthCheck), database=None)
@given(pair=st.one_of(st.sampled_from(PAIRS), st.sampled_from(_DERIVING)), seed=st.integers(0, 1 << 30),
       ops=_OPS, regex=st.sampled_from([None, ".*", f"{NO}.*", "hidden.*", f"{OK}.*"]))
def test_mutated_requests_through_kgw_leave_kafka_with_nothing_unauthorized(world, pair, seed, ops, regex):
    key, version = pair
    request = sample(request_class(key, version), random.Random(seed), NAMES)
    if regex is not None and hasattr(request, "subscribed_topic_regex"):
        import dataclasses
        request = dataclasses.replace(request, subscribed_topic_regex=regex)
    frame = bytearray(encode_request(key, version, 5, request))
    body = _mutate(frame[4:], ops)
    outcome = world.exchange(struct.pack(">i", len(body)) + body if ops else bytes(frame))
    assert outcome != "hung", f"api {key} v{version}: no answer and no close"
    assert world.leaks == [], "\n".join(world.leaks)


def _valid_joins(world) -> None:
    """Well-formed requests of the kinds that make the broker derive something (mutated ones
    rarely get that far): a KIP-848 member joining with an expression that matches the hidden
    topic, heartbeating until the coordinator has resolved it, and an all-topics listing."""
    from datetime import timedelta
    from tests.support.oracle import request
    with RawConnection(world.gateway.bootstrap) as conn:
        for _ in range(40):
            if conn.call(10, 4, request(10, 4, key_type=0, coordinator_keys=(f"{OK}-g",))).coordinators[0].error_code == 0:
                break
        member, epoch = str(uuid.uuid4()), 0
        for _ in range(20):
            r = conn.call(68, 1, request(68, 1, group_id=f"{OK}-g", member_id=member, member_epoch=epoch,
                                         rebalance_timeout=timedelta(seconds=30) if epoch == 0 else timedelta(milliseconds=-1),
                                         subscribed_topic_regex=".*" if epoch == 0 else None,
                                         topic_partitions=() if epoch == 0 else None))
            world.exchange_seen(bytes(r.__repr__(), "utf-8"))
            if r.error_code == 0:
                epoch = r.member_epoch
                if r.assignment is not None and world.hidden_id in {t.topic_id for t in r.assignment.topic_partitions}:
                    world.leaks.append("a regex member was assigned the hidden topic")
            import time
            time.sleep(0.5)
        r = conn.call(75, 0, request(75, 0, topics=(), response_partition_limit=1, cursor=None))
        if any(t.name == HIDDEN for t in r.topics) or (r.next_cursor and r.next_cursor.topic_name == HIDDEN):
            world.leaks.append("an all-topics listing showed the hidden topic")


def test_afterwards_the_broker_holds_nothing_the_principal_may_not_have(world):
    """Runs after the fuzz test (file order)."""
    assert sum(world.outcomes.values()) >= 50, world.outcomes
    _valid_joins(world)
    assert world.leaks == [], world.leaks
    assert world.broker_state_violations() == []
    assert world.gateway.process.alive()
