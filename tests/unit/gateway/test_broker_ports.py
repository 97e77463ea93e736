"""Readiness that tells the truth about broker ports: a broker known at start-up without a
gateway port is a start-up error naming the listener, node and port; one learned later that
cannot be bound makes /readyz say so."""

from __future__ import annotations

import socket

import pytest
import trio

from configs.yaml_reader import parse_config
from gateway.process.server import Gateway
from tests.support.ports import free_port_base
from tests.unit.gateway.fake_broker import NODE_ID, FakeBroker


def _config(tmp_path, broker: FakeBroker, base: int) -> dict:
    return {
        "io": {"data_plane_thread": False},
        "listeners": [{"name": "T", "host": "127.0.0.1", "port": 0, "advertised_host": "127.0.0.1",
                       "broker_port_base": base}],
        "upstream": {"bootstrap_servers": [f"127.0.0.1:{broker.port}"]},
        "admin": None,
        "metadata": {"path": str(tmp_path / "meta")},
    }


async def test_a_broker_known_at_start_up_without_a_port_refuses_the_start(nursery, tmp_path):
    broker = await nursery.start(FakeBroker().serve)
    gateway = Gateway(parse_config(_config(tmp_path, broker, 65535)))  # node 1 at 65536: out of range
    with pytest.raises(BaseException) as failure:
        with trio.fail_after(10):
            await gateway.run()
    text = repr(failure.value)
    assert f"listener T cannot expose upstream broker {NODE_ID}: port 65535+{NODE_ID} is out of range" in text


async def test_a_broker_learned_later_without_a_port_makes_readiness_false(nursery, tmp_path):
    broker = await nursery.start(FakeBroker().serve)
    base = free_port_base((NODE_ID, 7))
    gateway = Gateway(parse_config(_config(tmp_path, broker, base)))
    await nursery.start(gateway.run)
    assert gateway.readiness()["broker_ports"] is True
    with socket.socket() as taken:  # node 7's gateway port is held by someone else
        taken.bind(("127.0.0.1", base + 7))
        taken.listen()
        gateway.cluster.learn(7, "127.0.0.1", broker.port)
        states = gateway.readiness()
        assert states["broker_ports"] is False and states["T"] is True
        assert "cannot bind" in gateway.listeners[0].unexposed[7]
