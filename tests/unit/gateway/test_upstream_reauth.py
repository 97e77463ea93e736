"""KIP-368 on kgw's own side: the upstream connection kgw keeps open for a client logs in again
before the broker's session ends, on the same connection, while the client goes on sending
(pipelined requests included); the broker (tests/unit/gateway/fake_broker.py) closes a
connection whose session expired at its next request, as Kafka does."""

from __future__ import annotations

import logging

import trio

from protocol.codecs import request_class
from tests.unit.gateway.fake_broker import FakeBroker
from tests.unit.gateway.test_connection import RawClient, _start_gateway, data_plane  # noqa: F401 - a fixture

LIFETIME_MS = 300


async def _sasl_broker_and_gateway(nursery, tmp_path, data_plane: bool):
    """A broker requiring SASL/PLAIN with sessions of LIFETIME_MS, and a gateway logging in to it."""
    broker = FakeBroker()
    broker.sasl_lifetime_ms = LIFETIME_MS
    broker.versions = {**broker.versions, 17: (0, 1), 36: (0, 2)}
    broker.delay[16] = 0.02  # answers take a moment: requests are in flight when a session is due
    await nursery.start(broker.serve)
    gateway, port = await _start_gateway(nursery, tmp_path, broker, data_plane, upstream={
        "bootstrap_servers": [f"127.0.0.1:{broker.port}"], "request_timeout_ms": 5000,
        "security_protocol": "SASL_PLAINTEXT", "sasl": {"mechanism": "PLAIN", "username": "kgw", "password": "pw"}})
    return broker, gateway, port


async def test_a_client_connection_outlives_many_upstream_sessions(nursery, tmp_path, data_plane):
    broker, gateway, port = await _sasl_broker_and_gateway(nursery, tmp_path, data_plane)
    client = await RawClient.connect(port)
    request = request_class(16, 4)(states_filter=())
    correlation_id = 0
    with trio.fail_after(20):
        # eight session lifetimes of traffic, four requests pipelined at a time: a session falls
        # due with requests in flight (most often) and with none
        while broker.reauthentications < 8:
            for _ in range(4):
                correlation_id += 1
                await client.send(16, 4, correlation_id, request)
                await trio.sleep(0.005)  # pacing: each its own send upstream
            for expected in range(correlation_id - 3, correlation_id + 1):
                answer = await client.receive(16, 4)
                assert answer is not None, "the client connection was closed"
                assert answer[0] == expected
    assert broker.expired_closes == 0
    assert gateway.cluster.reauthentications["ok"] >= 8 and gateway.cluster.reauthentications["failed"] == 0
    assert gateway.metrics.registry.get_sample_value("kgw_upstream_reauthentications_total", {"result": "ok"}) >= 8


async def test_a_refused_reauthentication_closes_the_client_connection_with_the_reason(nursery, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    broker, gateway, port = await _sasl_broker_and_gateway(nursery, tmp_path, False)
    client = await RawClient.connect(port)
    request = request_class(16, 4)(states_filter=())
    await client.send(16, 4, 1, request)
    assert (await client.receive(16, 4))[0] == 1
    broker.close_on.add(17)  # the broker drops the connection at the re-authentication's handshake
    with trio.fail_after(10):
        while gateway.cluster.reauthentications["failed"] == 0:
            await client.send(16, 4, 2, request)
            if await client.receive_frame() is None:
                break
            await trio.sleep(0.05)
    assert gateway.cluster.reauthentications["failed"] == 1
    assert any("upstream re-authentication failed" in r.getMessage() for r in caplog.records)
