"""gateway/process/audit_publisher.py against a scripted broker: batching, JSON records,
bounded buffer with counted drops, and an unreachable / hanging upstream that
never blocks ``offer``."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import trio
from kio.records.readers import read_batch
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32
from prometheus_client import generate_latest

from authz.audit_events import audit_event
from gateway.process.audit_publisher import AuditLogHandler, AuditPublisher, encode_batch
from gateway.upstream.cluster import UpstreamCluster
from protocol.codecs import decode_request, encode, response_class
from tests.unit.gateway.fake_broker import NODE_ID, FakeBroker

TOPIC = "kgw-audit"


def fields(i: int = 0, allowed: bool = False) -> dict:
    return {"kgw_principal": f"User:u{i % 2}", "kgw_allowed": allowed, "kgw_operation": "READ",
            "kgw_host": "10.0.0.1", "kgw_resource": "Topic:LITERAL:orders:eu", "kgw_request": "Fetch",
            "kgw_client_id": "c1", "kgw_correlation_id": i, "kgw_listener": "EXTERNAL",
            "kgw_rule": "DefaultDeny"}


class _Notifying(list):
    def __init__(self, on_append) -> None:
        super().__init__()
        self._on_append = on_append

    def append(self, item) -> None:
        super().append(item)
        self._on_append()


class AuditBroker(FakeBroker):
    """FakeBroker whose Metadata also lists the audit topic (2 partitions) and
    which keeps every produced record value."""

    def __init__(self) -> None:
        super().__init__()
        self.produced: list[tuple[int, dict, int]] = []  # (partition, event, record timestamp ms)
        self.batches = 0
        self._changed = trio.Event()
        self.received = _Notifying(self._notify)  # every request frame, as FakeBroker records them

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_until(self, condition) -> None:
        """Wait, without polling, until ``condition()`` holds after something arrived."""
        while not condition():
            await self._changed.wait()

    def _body(self, header, body) -> bytes:
        if header.api_key == 3:
            cls = response_class(3, header.api_version)
            f = cls.__dataclass_fields__
            broker_cls = f["brokers"].type.__args__[0]
            topic_cls = f["topics"].type.__args__[0]
            part_cls = topic_cls.__dataclass_fields__["partitions"].type.__args__[0]

            def mk(c, **kw):
                return c(**{k: v for k, v in kw.items() if k in c.__dataclass_fields__})

            parts = tuple(mk(part_cls, error_code=ErrorCode.none, partition_index=i32(p), leader_id=i32(NODE_ID),
                             leader_epoch=i32(0), replica_nodes=(i32(NODE_ID),), isr_nodes=(i32(NODE_ID),),
                             offline_replicas=()) for p in (0, 1))
            topic = mk(topic_cls, error_code=ErrorCode.none, name=TOPIC, topic_id=None, is_internal=False,
                       partitions=parts, topic_authorized_operations=i32(-2147483648))
            return encode(mk(cls, throttle_time=timedelta(0), cluster_id="fake", controller_id=i32(NODE_ID),
                             brokers=(broker_cls(node_id=i32(NODE_ID), host="127.0.0.1", port=i32(self.port),
                                                 rack=None),),
                             topics=(topic,), cluster_authorized_operations=i32(-2147483648)))
        if header.api_key == 0:
            request = decode_request(0, header.api_version, body, header.size)
            for t in request.topic_data:
                assert t.name == TOPIC
                for p in t.partition_data:
                    batch, _size = read_batch(p.records, 0)
                    self.batches += 1
                    for rec in batch.records:  # (kio's reader drops the ms of record timestamps)
                        self.produced.append((int(p.index), json.loads(rec.value), int(batch.base_timestamp)))
            self._notify()
        return super()._body(header, body)


def test_event_json_fields():
    event = audit_event(fields(7), 1735732800.123, "gw1")
    assert event == {
        "time": "2025-01-01T12:00:00.123Z", "ts_ms": 1735732800123, "principal": "User:u1", "allowed": False,
        "decision": "DENIED", "operation": "READ", "resource": "Topic:LITERAL:orders:eu",
        "resource_type": "Topic", "pattern_type": "LITERAL", "resource_name": "orders:eu",
        "listener": "EXTERNAL", "client_address": "10.0.0.1", "api": "Fetch", "client_id": "c1",
        "correlation_id": 7, "rule": "DefaultDeny", "event": "authorization", "gateway": "gw1"}


def test_a_failed_login_is_an_audit_event():
    """Failed authentications reach the audit stream (#15 item 9): the principal the client tried,
    the mechanism, its address and kgw's reason, as a denied AUTHENTICATE."""
    from gateway.auth.failures import AuthFailureTracker

    offered = []
    tracker = AuthFailureTracker()
    tracker.audit = offered.append
    tracker.record_failure(("10.0.0.9", 51000), listener="SASL", mechanism="SCRAM-SHA-512",
                           client_software="librdkafka/2.16.0", cause="credentials", user="mallory",
                           reason="invalid proof for user 'mallory'")
    (fields_,) = offered
    event = audit_event(fields_, 1735732800.0)
    assert {k: event[k] for k in ("principal", "allowed", "decision", "operation", "resource", "listener",
                                  "client_address", "event", "mechanism", "reason")} == {
        "principal": "User:mallory", "allowed": False, "decision": "DENIED", "operation": "AUTHENTICATE",
        "resource": "Authentication:LITERAL:SCRAM-SHA-512", "listener": "SASL", "client_address": "10.0.0.9",
        "event": "authentication", "mechanism": "SCRAM-SHA-512", "reason": "invalid proof for user 'mallory'"}
    tracker.record_failure("10.0.0.9", user="x" * 10_000, reason="y" * 10_000)  # client-sized text is bounded
    assert len(offered[1]["kgw_principal"]) <= 5 + 256 and len(offered[1]["kgw_reason"]) <= 256
    # a failed TLS handshake names no user: no principal, not the empty-named "User:"
    tracker.record_failure("10.0.0.8", listener="TLS", mechanism="SSL", reason="certificate verify failed")
    assert audit_event(offered[2], 1735732800.0)["principal"] is None


def test_encode_batch_is_record_batch_v2_of_json():
    raw = encode_batch([(1000.0 + i, fields(i, allowed=i % 2 == 0)) for i in range(3)])
    batch, size = read_batch(raw, 0)
    assert size == len(raw)
    assert [json.loads(r.value)["correlation_id"] for r in batch.records] == [0, 1, 2]
    assert [r.key for r in batch.records] == [b"User:u0", b"User:u1", b"User:u0"]
    assert [int(r.timestamp.timestamp()) for r in batch.records] == [1000, 1001, 1002]


def test_full_buffer_drops_and_counts():
    pub = AuditPublisher(TOPIC, max_buffered=3)
    assert [pub.offer(fields(i, allowed=i % 2 == 1)) for i in range(5)] == [True, True, True, False, False]
    assert pub.pending() == 3
    text = generate_latest(pub.registry).decode()
    assert 'kgw_audit_events_dropped_total{reason="buffer_full"} 2.0' in text
    assert "kgw_audit_events_buffered 3.0" in text
    # what was offered counts whether it was kept or not: offered = published + dropped + buffered
    assert 'kgw_audit_events_offered_total{decision="denied",event="authorization"} 3.0' in text
    assert 'kgw_audit_events_offered_total{decision="allowed",event="authorization"} 2.0' in text


def test_log_handler_offers_structured_records():
    pub = AuditPublisher(TOPIC)
    logger = logging.getLogger("kgw.authorizer.test-handler")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    handler = AuditLogHandler(pub)
    logger.addHandler(handler)
    try:
        logger.debug("allowed line", extra=fields(1, allowed=True))
        logger.info("not an audit line")
    finally:
        logger.removeHandler(handler)
    assert pub.pending() == 1


async def test_batches_are_produced_as_json_records():
    broker = AuditBroker()
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve)
        cluster = UpstreamCluster([f"127.0.0.1:{broker.port}"], 2, 2)
        pub = AuditPublisher(TOPIC, batch_max_events=4, linger_s=0.01, gateway_name="gw")
        await nursery.start(pub.run, cluster)
        for i in range(10):
            assert pub.offer(fields(i, allowed=i < 3))
        with trio.fail_after(10):
            await broker.wait_until(lambda: len(broker.produced) >= 10)
            while pub.registry.get_sample_value("kgw_audit_events_published_total") != 10:
                await trio.sleep(0)  # the acknowledgements are on their way back: no timed wait
        nursery.cancel_scope.cancel()
    events = [e for _p, e, _ts in broker.produced]
    assert [e["correlation_id"] for e in events] == list(range(10))
    assert sum(e["allowed"] for e in events) == 3
    assert broker.batches >= 3                       # 4 + 4 + 2 (more only if one was retried)
    assert {p for p, _e, _ts in broker.produced} == {0, 1}  # batches rotate over partitions
    # record timestamps (CreateTime) are the decision times: base timestamp = first event's
    assert all(abs(ts - e["ts_ms"]) <= 1 for _p, e, ts in broker.produced if e["correlation_id"] % 4 == 0)
    assert 'kgw_audit_events_published_total 10.0' in generate_latest(pub.registry).decode()


async def test_unreachable_upstream_never_blocks_offer():
    with trio.socket.socket() as s:           # a port nobody listens on
        await s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cluster = UpstreamCluster([f"127.0.0.1:{port}"], 0.5, 0.5)
    pub = AuditPublisher(TOPIC, max_buffered=100, linger_s=0.01, request_timeout_s=0.5,
                         backoff_initial_s=0.01, backoff_max_s=0.05)
    async with trio.open_nursery() as nursery:
        await nursery.start(pub.run, cluster)
        results = [pub.offer(fields(i)) for i in range(10_000)]  # synchronous: offer() cannot wait
        with trio.fail_after(10):  # the publisher's first attempt fails (nothing listens there)
            while not pub.registry.get_sample_value("kgw_audit_publish_errors_total"):
                await trio.sleep(0)
        nursery.cancel_scope.cancel()
    assert sum(results) <= 100 + 500
    dropped = pub.registry.get_sample_value("kgw_audit_events_dropped_total", {"reason": "buffer_full"})
    assert dropped == 10_000 - sum(results) and dropped >= 9_000
    assert pub.registry.get_sample_value("kgw_audit_publish_errors_total") >= 1


async def test_hanging_broker_times_out_and_retries():
    broker = AuditBroker()
    broker.hang.add(0)  # Produce never answered
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve)
        cluster = UpstreamCluster([f"127.0.0.1:{broker.port}"], 1, 1)
        pub = AuditPublisher(TOPIC, linger_s=0.01, request_timeout_s=0.3, backoff_initial_s=0.01,
                             backoff_max_s=0.02)
        await nursery.start(pub.run, cluster)
        pub.offer(fields(1))
        with trio.fail_after(10):  # a third attempt arrives only after two timed out
            await broker.wait_until(lambda: sum(1 for key, _v, _c in broker.received if key == 0) >= 3)
        assert pub.registry.get_sample_value("kgw_audit_publish_errors_total") >= 2
        broker.hang.discard(0)  # the broker recovers: the kept batch is delivered
        with trio.fail_after(10):
            await broker.wait_until(lambda: bool(broker.produced))
        nursery.cancel_scope.cancel()
    assert [e["correlation_id"] for _p, e, _ts in broker.produced][-1] == 1


class CreatingBroker(AuditBroker):
    """The audit topic does not exist until CreateTopics; after it, the first Metadata shows it
    without a leader (as a real cluster does for a moment)."""

    def __init__(self) -> None:
        super().__init__()
        self.versions = {**self.versions, 19: (0, 7)}
        self.created = False
        self.leaderless_answers = 1

    def _body(self, header, body) -> bytes:
        if header.api_key == 19:
            cls = response_class(19, header.api_version)
            topic_cls = cls.__dataclass_fields__["topics"].type.__args__[0]
            self.created = True
            fields = topic_cls.__dataclass_fields__
            topic = topic_cls(**{k: v for k, v in {
                "name": TOPIC, "topic_id": None, "error_code": ErrorCode.none, "error_message": None,
                "topic_config_error_code": ErrorCode.none, "num_partitions": i32(2),
                "replication_factor": i16(1), "configs": ()}.items() if k in fields})
            return encode(cls(**{k: v for k, v in {"throttle_time": timedelta(0), "topics": (topic,)}.items()
                                 if k in cls.__dataclass_fields__}))
        if header.api_key == 3 and not self.created:
            return FakeBroker._body(self, header, body)  # no topics: UNKNOWN_TOPIC_OR_PARTITION for ours
        if header.api_key == 3 and self.leaderless_answers:
            self.leaderless_answers -= 1
            return FakeBroker._body(self, header, body)  # the topic is not in the answer yet
        return super()._body(header, body)


async def test_the_first_start_creates_the_topic_quietly_and_publishes(caplog):
    broker = CreatingBroker()
    caplog.set_level(logging.DEBUG, logger="kgw.audit")
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve)
        cluster = UpstreamCluster([f"127.0.0.1:{broker.port}"], 2, 2)
        pub = AuditPublisher(TOPIC, batch_max_events=4, linger_s=0.01, backoff_initial_s=0.01, gateway_name="gw")
        await nursery.start(pub.run, cluster)
        assert pub.offer(fields(0))
        with trio.fail_after(10):
            await broker.wait_until(lambda: len(broker.produced) >= 1)
        nursery.cancel_scope.cancel()
    assert broker.created and broker.leaderless_answers == 0
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert any(r.getMessage() == f"created audit topic {TOPIC}" for r in caplog.records)
    assert pub.registry.get_sample_value("kgw_audit_publish_errors_total") == 0


class RejectingBroker(AuditBroker):
    """Refuses the first ``reject`` Produce requests for good (RECORD_LIST_TOO_LARGE) and keeps
    the raw record values of the rest."""

    def __init__(self, reject: int) -> None:
        super().__init__()
        self.reject = reject
        self.values: list[tuple[int, int, bytes]] = []  # (partition, offset in it, value)

    def _body(self, header, body) -> bytes:
        if header.api_key != 0:
            return super()._body(header, body)
        request = decode_request(0, header.api_version, body, header.size)
        if self.reject:
            self.reject -= 1
            cls = response_class(0, header.api_version)
            topic_cls = cls.__dataclass_fields__["responses"].type.__args__[0]
            part_cls = topic_cls.__dataclass_fields__["partition_responses"].type.__args__[0]
            parts = tuple(part_cls(**{k: v for k, v in {
                "index": p.index, "error_code": ErrorCode.record_list_too_large, "base_offset": -1,
                "log_append_time": None, "log_start_offset": -1, "record_errors": (), "error_message": "too large",
            }.items() if k in part_cls.__dataclass_fields__}) for t in request.topic_data for p in t.partition_data)
            self._notify()
            return encode(cls(responses=(topic_cls(name=TOPIC, partition_responses=parts),),
                              throttle_time=timedelta(0)))
        for t in request.topic_data:
            for p in t.partition_data:
                batch, _size = read_batch(p.records, 0)
                for rec in batch.records:
                    offset = sum(1 for part, _o, _v in self.values if part == int(p.index))
                    self.values.append((int(p.index), offset, bytes(rec.value)))
        return super()._body(header, body)


async def test_chained_batches_verify_and_a_refused_batch_is_recorded_as_dropped():
    from authz.audit_chain import ChainWriter, verify

    broker = RejectingBroker(reject=1)
    checkpoints: dict[str, dict[str, str]] = {}

    async def write(checkpoint) -> None:
        checkpoints.setdefault("gw-chain", {})[checkpoint.run] = checkpoint.to_value()

    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve)
        cluster = UpstreamCluster([f"127.0.0.1:{broker.port}"], 2, 2)
        pub = AuditPublisher(TOPIC, batch_max_events=3, linger_s=0.01, gateway_name="gw", chained=True,
                             checkpoint_interval_s=0.05, backoff_initial_s=0.01)
        await nursery.start(pub.run, cluster)
        for i in range(3):
            pub.offer(fields(i))
        await trio.sleep(0.1)  # the stimulus: linger periods pass with no chain attached ...
        assert broker.values == [] and broker.batches == 0  # ... and nothing was published
        pub.attach_chain(ChainWriter("gw-chain"), write)
        for i in range(3, 9):
            pub.offer(fields(i))
        with trio.fail_after(10):
            await broker.wait_until(lambda: len(broker.values) >= 7)  # 6 events + the "dropped" one
            while checkpoints.get("gw-chain") is None or '"seq":7' not in next(iter(checkpoints["gw-chain"].values())):
                await trio.sleep(0.01)  # the next checkpoint interval (its own clock, not a synchronisation)
        nursery.cancel_scope.cancel()
    events = [json.loads(v) for _p, _o, v in broker.values]
    assert [e["seq"] for e in events] == list(range(1, 8))
    assert events[0]["event"] == "dropped" and events[0]["count"] == 3  # the refused batch, on record
    assert [e["correlation_id"] for e in events[1:]] == list(range(3, 9))
    report = verify(broker.values, checkpoints)
    assert report.ok and report.chains == {"gw-chain": {"events": 7, "runs": 1}}
    assert not [f for f in report.findings if f.kind == "unverified_tail"]
    # the scraped head names the run and the last seq written: 6 published events + the marker
    head = pub.registry.get_sample_value("kgw_audit_chain_head", {"chain": "gw-chain", "run": pub.chain.run})
    assert head == 7 and pub.registry.get_sample_value("kgw_audit_events_published_total") == 6


async def test_ocsf_events_are_chained_and_verify_too():
    from authz.audit_chain import ChainWriter, verify

    broker = RejectingBroker(reject=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.serve)
        cluster = UpstreamCluster([f"127.0.0.1:{broker.port}"], 2, 2)
        pub = AuditPublisher(TOPIC, batch_max_events=5, linger_s=0.01, gateway_name="gw", chained=True,
                             event_format="ocsf")

        async def write(_checkpoint) -> None:
            return None

        pub.attach_chain(ChainWriter("gw-ocsf"), write)
        await nursery.start(pub.run, cluster)
        for i in range(4):
            pub.offer(fields(i, allowed=i % 2 == 0))
        with trio.fail_after(10):
            await broker.wait_until(lambda: len(broker.values) >= 4)
        nursery.cancel_scope.cancel()
    events = [json.loads(v) for _p, _o, v in broker.values]
    assert [(e["class_uid"], e["status_id"], e["seq"]) for e in events] == [(6003, 1, 1), (6003, 2, 2),
                                                                            (6003, 1, 3), (6003, 2, 4)]
    assert all(e["actor"]["user"]["uid"] in ("User:u0", "User:u1") and "principal" not in e for e in events)
    assert verify(broker.values, {}).ok
