"""The upstream cluster going away and coming back: one WARNING each way, a metric, /readyz."""

from __future__ import annotations

import logging

import trio

from tests.unit.gateway.fake_broker import FakeBroker
from tests.unit.gateway.test_connection import _start_gateway


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
    await _until(lambda: not gateway.readiness()["upstream"])
    retries = lambda: [r for r in caplog.records if "still unreachable" in r.getMessage()]  # noqa: E731
    await _until(lambda: len(retries()) >= 3)  # several failed refreshes ...
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len([w for w in warnings if "upstream cluster unreachable" in w]) == 1  # ... one WARNING
    assert reachable() == 0
    assert gateway.metrics.registry.get_sample_value("kgw_upstream_unreachable_since_seconds") > 0

    await nursery.start(_serve, broker, trio.CancelScope())  # back on the same port
    await _until(lambda: gateway.readiness()["upstream"])
    assert reachable() == 1
    assert gateway.metrics.registry.get_sample_value("kgw_upstream_unreachable_since_seconds") == 0
    assert len([r for r in caplog.records if "reachable again after" in r.getMessage()]) == 1
