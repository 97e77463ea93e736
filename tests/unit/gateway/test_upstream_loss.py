"""The upstream cluster going away and coming back: one WARNING each way, a metric, /readyz."""

from __future__ import annotations

import logging

import trio

from protocol.codecs import request_class
from tests.unit.gateway.fake_broker import FakeBroker
from tests.unit.gateway.test_connection import RawClient, _start_gateway, data_plane  # noqa: F401 - a fixture


async def _serve(broker: FakeBroker, scope: trio.CancelScope, task_status=trio.TASK_STATUS_IGNORED) -> None:
    with scope:
        await broker.serve(task_status=task_status)


async def _until(condition) -> None:
    with trio.fail_after(10):
        while not condition():
            await trio.sleep(0.02)


async def test_upstream_loss_and_return_are_logged_once_and_reported(nursery, tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="kgw.upstream")
    broker = FakeBroker()
    first = trio.CancelScope()
    await nursery.start(_serve, broker, first)
    gateway, _port = await _start_gateway(
        nursery, tmp_path, broker, True,
        upstream={"bootstrap_servers": [f"127.0.0.1:{broker.port}"], "metadata_max_age_ms": 100,
                  "request_timeout_ms": 1000, "connect_timeout_ms": 500})
    reachable = lambda: gateway.metrics.registry.get_sample_value("kgw_upstream_reachable")  # noqa: E731
    assert gateway.readiness()["upstream"] is True and reachable() == 1

    first.cancel()  # the broker goes away
    await _until(lambda: gateway.readiness()["upstream"] is not True)
    assert "cannot connect to 127.0.0.1" in gateway.readiness()["upstream"]  # /readyz says why
    retries = lambda: [r for r in caplog.records if "still unreachable" in r.getMessage()]  # noqa: E731
    await _until(lambda: len(retries()) >= 3)  # several failed refreshes ...
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len([w for w in warnings if "upstream cluster unreachable" in w]) == 1  # ... one WARNING
    assert reachable() == 0
    assert gateway.metrics.registry.get_sample_value("kgw_upstream_unreachable_since_seconds") > 0

    await nursery.start(_serve, broker, trio.CancelScope())  # back on the same port
    await _until(lambda: gateway.readiness()["upstream"] is True)
    assert reachable() == 1
    assert gateway.metrics.registry.get_sample_value("kgw_upstream_unreachable_since_seconds") == 0
    assert len([r for r in caplog.records if "reachable again after" in r.getMessage()]) == 1


async def test_upstream_request_timeouts_make_readiness_say_so_once_per_episode(nursery, tmp_path, caplog, data_plane):
    """The finding: broker replies delayed 1.5 s against kgw's 1 s request timeout, 21 client
    disconnects logged at INFO, /readyz said "upstream ready" throughout.  Now a timeout is
    counted, the first of an episode is a WARNING, readiness names it, and an answer in time
    (after a quiet period) ends the episode with one more WARNING."""
    caplog.set_level(logging.INFO, logger="kgw.upstream")
    broker = await nursery.start(FakeBroker().serve)
    gateway, port = await _start_gateway(
        nursery, tmp_path, broker, data_plane,
        upstream={"bootstrap_servers": [f"127.0.0.1:{broker.port}"], "request_timeout_ms": 300})
    timeouts = lambda: gateway.metrics.registry.get_sample_value("kgw_upstream_request_timeouts_total")  # noqa: E731
    assert gateway.readiness()["upstream"] is True and timeouts() == 0

    broker.delay[16] = 2.0  # ListGroups answered after kgw's deadline
    for correlation_id in (1, 2, 3):
        client = await RawClient.connect(port)
        await client.send(16, 4, correlation_id, request_class(16, 4)(states_filter=()))
        with trio.fail_after(5):
            assert await client.receive_frame() is None  # closed at the deadline, not answered
    state = gateway.readiness()["upstream"]
    assert isinstance(state, str) and "requests time out since" in state and "(3 so far)" in state
    assert timeouts() == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len([w for w in warnings if "did not answer ListGroups" in w]) == 1

    broker.delay[16] = 0
    gateway.cluster.quiet_s = 0  # the quiet period has passed
    client = await RawClient.connect(port)
    await client.send(16, 4, 9, request_class(16, 4)(states_filter=()))
    assert (await client.receive(16, 4))[0] == 9
    assert gateway.readiness()["upstream"] is True
    assert len([r for r in caplog.records if "answers in time again after" in r.getMessage()]) == 1
