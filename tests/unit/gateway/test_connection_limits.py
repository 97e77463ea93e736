"""Connection limits as Kafka's ConnectionQuotas has them: a listener's max.connections, and
max.connections.per.ip - unlimited by default (behind a TCP load balancer every client has
the balancer's address) - with its per-host overrides."""

from __future__ import annotations

import trio

from configs.gateway_config import LimitsConfig
from protocol.codecs import request_class
from tests.unit.gateway.fake_broker import FakeBroker
from tests.unit.gateway.test_connection import RawClient, _start_gateway


async def _served(port: int, correlation_id: int) -> tuple[RawClient, bool]:
    """A new connection and whether its ApiVersions was answered (False: closed at once)."""
    client = await RawClient.connect(port)
    await client.send(18, 0, correlation_id, request_class(18, 0)())
    with trio.fail_after(5):
        frame = await client.receive_frame()
    return client, frame is not None


async def _open(port: int, count: int) -> tuple[list[RawClient], list[bool]]:
    clients, served = [], []
    for n in range(count):
        client, ok = await _served(port, 100 + n)
        clients.append(client)
        served.append(ok)
    return clients, served


def _refused(gateway, reason: str) -> float:
    return gateway.metrics.registry.get_sample_value(
        "kgw_request_errors_total", {"listener": "T", "api": "-", "reason": reason}) or 0


async def test_a_listeners_max_connections_is_enforced(nursery, tmp_path):
    broker = await nursery.start(FakeBroker().serve)
    gateway, port = await _start_gateway(nursery, tmp_path, broker, True, listeners=[{
        "name": "T", "host": "127.0.0.1", "port": 0, "advertised_host": "127.0.0.1", "broker_port_base": 21300,
        "max_connections": 3}])
    clients, served = await _open(port, 5)
    assert served == [True, True, True, False, False]
    assert _refused(gateway, "connection_limit") == 2
    for client in clients:
        await client.stream.aclose()


async def test_connections_per_host_are_unlimited_by_default_as_in_kafka(nursery, tmp_path):
    """The finding: a default of 1,000 capped a whole gateway behind a load balancer."""
    assert LimitsConfig().max_connections_per_ip == 2**31 - 1  # Kafka's max.connections.per.ip default
    broker = await nursery.start(FakeBroker().serve)
    gateway, port = await _start_gateway(nursery, tmp_path, broker, True)
    assert gateway.connection_limit_of("127.0.0.1") == 2**31 - 1
    clients, served = await _open(port, 40)
    assert all(served)
    for client in clients:
        await client.stream.aclose()


async def test_a_per_host_override_replaces_the_limit_for_that_host(nursery, tmp_path):
    broker = await nursery.start(FakeBroker().serve)
    gateway, port = await _start_gateway(nursery, tmp_path, broker, True, limits={
        "max_connections_per_ip": 1, "max_connections_per_ip_overrides": {"127.0.0.1": 4, "localhost": 4,
                                                                          "10.9.9.9": 0}})
    assert gateway.connection_limit_of("10.9.9.9") == 0 and gateway.connection_limit_of("10.1.1.1") == 1
    clients, served = await _open(port, 6)
    assert served == [True] * 4 + [False] * 2
    assert _refused(gateway, "connection_limit_per_ip") == 2
    for client in clients:
        await client.stream.aclose()
