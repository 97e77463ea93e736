"""Client quotas as a broker enforces them (gateway/connection/quotas.py): Kafka's windowed rate,
its throttle time, a client that backs off by itself held to its quota, and over the wire (a
fake broker behind the gateway, on Trio and on the data plane) the response's throttle time,
the connection not read meanwhile, and a client with no quota beside it untouched."""

from __future__ import annotations

import struct
import time
from datetime import timedelta

import pytest
import trio
from kio.schema.produce.v8 import request as produce8
from kio.static.primitive import i16, i32

from gateway.connection.quotas import QuotaManager, Rate
from metadata.client_quotas import Resolved
from metadata.records import ClientQuotaRecord
from gateway.upstream.cluster import encode_request
from protocol.codecs import request_class
from tests.unit.gateway.fake_broker import FakeBroker
from tests.unit.gateway.test_connection import RawClient, _start_gateway, data_plane  # noqa: F401 - a fixture


def test_rate_is_kafkas_windowed_rate():
    rate = Rate(11, 1000)
    rate.record(100, 0)
    # one sample: the window counts as window.num - 1 full windows (Kafka's Rate.windowSize)
    assert rate.window_size_ms(0) == 10_000 and rate.measure(0) == pytest.approx(10.0)
    rate.record(100, 15_000)  # 15 s later: the first sample expired (older than 11 windows)
    assert rate.window_size_ms(15_000) == 10_000 and rate.measure(15_000) == pytest.approx(10.0)
    for t in range(16_000, 27_000, 1000):  # 100 a second for 11 more seconds
        rate.record(100, t)
    assert rate.window_size_ms(26_500) == pytest.approx(10_500)
    assert rate.measure(26_500) == pytest.approx(1100 / 10.5)


def test_the_throttle_time_is_kafkas_and_a_client_that_waits_it_stays_within_its_quota():
    manager = QuotaManager(None, 11, 1)
    quota = (Resolved(1000.0, "user", ("alice", "")), manager._sensor("produce", ("alice", "")))
    # 20 kB at once against 1 kB/s over a 10 s window: (2000 - 1000) / 1000 * 10 s
    assert manager.record("produce", quota, 20_000, 0) == 10_000
    # a client sending 4 kB requests and waiting each throttle time (what KIP-219 asks of it),
    # measured over two whole windows (11 samples of 1 s) after the first
    now, sent, start, end = 20_000.0, 0, 31_000.0, 53_000.0
    while now < end:
        throttle = manager.record("produce", quota, 4000, now)
        sent += 4000 if now >= start else 0
        now += max(throttle, 5)  # 5 ms: the client's own pace when not throttled
    assert sent / ((end - start) / 1000) == pytest.approx(1000, rel=0.10)
    counts = manager.counts()[("produce", "user")]
    assert counts[0] > 0 and counts[2] > 20_000 + sent


def _produce(name: str, timeout_s: float = 5):
    return produce8.ProduceRequest(transactional_id=None, acks=i16(1), timeout=timedelta(seconds=timeout_s), topic_data=(
        produce8.TopicProduceData(name=name, partition_data=(produce8.PartitionProduceData(
            index=i32(0), records=b"x" * 970),)),))


async def test_a_producer_over_its_quota_is_told_and_not_read_while_throttled(nursery, tmp_path, data_plane):
    broker = await nursery.start(FakeBroker().serve)
    # two samples of a second: a rate spans at least one second, throttle times stay short
    gateway, port = await _start_gateway(nursery, tmp_path, broker, data_plane,
                                         quotas={"window_num": 2, "window_size_seconds": 1})
    # 500 bytes a second for client id "slow" (any user); "fast" has none
    await gateway.image.append([ClientQuotaRecord(entity=(("client-id", "slow"),), key="producer_byte_rate",
                                                  value=500.0, remove=False)])
    slow, fast = await RawClient.connect(port), await RawClient.connect(port)
    # what Kafka records: the request's bytes (without the size prefix)
    size = len(_with_client_id(bytearray(encode_request(0, 8, 2, _produce("t"))), "slow")) - 4
    for client in (slow, fast):
        await client.send(16, 4, 1, request_class(16, 4)(states_filter=()))  # opens the upstream (data plane)
        assert (await client.receive(16, 4))[0] == 1

    async def produce(client: RawClient, client_id: str, correlation_id: int):
        frame = bytearray(encode_request(0, 8, correlation_id, _produce("t")))
        await client.stream.send_all(_with_client_id(frame, client_id))
        with trio.fail_after(10):
            return await client.receive(0, 8)

    _corr, first = await produce(slow, "slow", 2)
    # (size / 1 s - 500) / 500 * 1 s, in ms
    assert first.throttle_time == timedelta(milliseconds=round((size - 500) / 500 * 1000))
    told_at = time.monotonic()
    _corr, unthrottled = await produce(fast, "fast", 2)
    assert unthrottled.throttle_time == timedelta(0)
    # the throttled client's next request is not even read before its throttle time has passed
    _corr, second = await produce(slow, "slow", 3)
    assert time.monotonic() - told_at >= first.throttle_time.total_seconds() * 0.95
    assert second.throttle_time > timedelta(0)
    registry = gateway.metrics.registry
    assert registry.get_sample_value("kgw_quota_throttled_responses_total",
                                     {"quota": "produce", "entity": "client-id"}) == 2
    assert registry.get_sample_value("kgw_quota_recorded_total", {"quota": "produce", "entity": "client-id"}) == 2 * size


def _with_client_id(frame: bytearray, client_id: str) -> bytes:
    """A request frame (v1 header, non-flexible) with its client id replaced."""
    (length,) = struct.unpack_from(">h", frame, 12)
    old_end = 14 + length
    body = bytes(frame[4:12]) + struct.pack(">h", len(client_id)) + client_id.encode() + bytes(frame[old_end:])
    return struct.pack(">i", len(body)) + body


async def test_connections_over_an_ip_creation_rate_quota_are_held_then_closed(nursery, tmp_path):
    broker = await nursery.start(FakeBroker().serve)
    gateway, port = await _start_gateway(nursery, tmp_path, broker, False,
                                         quotas={"window_num": 2, "window_size_seconds": 1})
    await gateway.image.append([ClientQuotaRecord(entity=(("ip", "127.0.0.1"),), key="connection_creation_rate",
                                                  value=1.0, remove=False)])
    first = await RawClient.connect(port)
    await first.send(16, 4, 1, request_class(16, 4)(states_filter=()))
    assert (await first.receive(16, 4))[0] == 1
    second = await RawClient.connect(port)  # the second within the window: 2 a second, quota 1
    opened = time.monotonic()
    await second.send(16, 4, 1, request_class(16, 4)(states_filter=()))
    with trio.fail_after(10):
        assert await second.receive_frame() is None  # never served: held, then closed
    assert time.monotonic() - opened >= 0.9  # held for the throttle time, (2 - 1) / 1 * 1 s
    registry = gateway.metrics.registry
    assert registry.get_sample_value("kgw_request_errors_total", {"listener": "T", "api": "-",
                                                          "reason": "connection_quota_per_ip"}) == 1
    assert registry.get_sample_value("kgw_quota_throttled_responses_total",
                                     {"quota": "connection_creation", "entity": "ip"}) == 1


async def test_a_client_over_its_request_percentage_is_throttled_at_most_a_window(nursery, tmp_path, data_plane):
    """KIP-124: the time kgw spends on a client's requests, against a share of one thread; the
    throttle time is at most one window (as Kafka's request quota)."""
    broker = await nursery.start(FakeBroker().serve)
    gateway, port = await _start_gateway(nursery, tmp_path, broker, data_plane,
                                         quotas={"window_num": 2, "window_size_seconds": 1})
    await gateway.image.append([ClientQuotaRecord(entity=(("client-id", None),), key="request_percentage",
                                                  value=0.0001, remove=False)])  # a millionth of a thread
    client = await RawClient.connect(port)
    throttles = []
    for correlation_id in range(1, 4):
        await client.send(16, 4, correlation_id, request_class(16, 4)(states_filter=()))
        with trio.fail_after(10):
            corr, response = await client.receive(16, 4)
        assert corr == correlation_id
        throttles.append(response.throttle_time)
    assert max(throttles) == timedelta(milliseconds=1000)  # capped at one window of 1 s
    assert gateway.metrics.registry.get_sample_value(
        "kgw_quota_throttled_responses_total", {"quota": "request", "entity": "client-id-default"}) >= 1


async def test_a_throttle_longer_than_the_request_timeout_does_not_time_out_what_is_in_flight(
        nursery, tmp_path, data_plane):
    """A pipelined request waits out the throttle its predecessor earned while that one's answer
    is on its way: the answer is read and sent meanwhile (on the data plane too, where the lane
    holds the request itself rather than pausing), so a throttle longer than the request timeout
    times nothing out."""
    broker = await nursery.start(FakeBroker().serve)
    gateway, port = await _start_gateway(
        nursery, tmp_path, broker, data_plane, quotas={"window_num": 2, "window_size_seconds": 1},
        upstream={"bootstrap_servers": [f"127.0.0.1:{broker.port}"], "request_timeout_ms": 1000})
    client = await RawClient.connect(port)
    await client.send(16, 4, 1, request_class(16, 4)(states_filter=()))  # opens the upstream (data plane)
    assert (await client.receive(16, 4))[0] == 1
    # (no broker-side wait in the produces: their deadline is the request timeout alone)
    size = len(_with_client_id(bytearray(encode_request(0, 8, 2, _produce("t", 0))), "slow")) - 4
    # a quota that gives the first produce a throttle of 1.5 s, longer than the 1 s request timeout
    await gateway.image.append([ClientQuotaRecord(entity=(("client-id", "slow"),), key="producer_byte_rate",
                                                  value=size / 2.5, remove=False)])
    burst = b"".join(_with_client_id(bytearray(encode_request(0, 8, c, _produce("t", 0))), "slow") for c in (2, 3))
    await client.stream.send_all(burst)
    with trio.fail_after(10):
        first = await client.receive(0, 8)
        second = await client.receive(0, 8)
    assert (first[0], second[0]) == (2, 3)
    assert first[1].throttle_time == timedelta(milliseconds=1500)
