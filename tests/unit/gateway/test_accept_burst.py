"""Accepting connections on a busy loop (issue 17 item 6, found by bench/local_answers.py): the
listener takes every connection already waiting in the backlog (up to 64) per wakeup.  One per
wakeup meant one per pass of Trio's scheduler, and with 500 busy connections on the loop a
connection queued behind 500 others waited 6 s for its first answer."""

from __future__ import annotations

import socket

import trio
import trio.testing

from configs.yaml_reader import parse_config
from gateway.process.listeners import accept_waiting
from gateway.process.server import Gateway
from tests.support.ports import free_port_base
from tests.unit.gateway.fake_broker import FakeBroker


class _Passes(trio.abc.Instrument):
    """Counts the passes of Trio's scheduler (each ends in one I/O wait)."""

    def __init__(self) -> None:
        self.count = 0

    def before_io_wait(self, timeout: float) -> None:
        self.count += 1


def test_accept_waiting_takes_what_waits_and_never_waits():
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(64)
        listening.setblocking(False)
        clients = [socket.create_connection(listening.getsockname()) for _ in range(10)]
        try:
            first = accept_waiting(listening, 4)
            rest = accept_waiting(listening, 64)
            assert (len(first), len(rest)) == (4, 6)
            assert accept_waiting(listening, 64) == []  # nothing waiting: returns at once
            for conn, _ in first + rest:
                conn.close()
        finally:
            for c in clients:
                c.close()


async def test_a_backlog_of_connections_is_accepted_in_a_few_passes_of_the_scheduler(nursery, tmp_path):
    broker = await nursery.start(FakeBroker().serve)
    config = parse_config({
        "io": {"data_plane_thread": False},
        "listeners": [{"name": "T", "host": "127.0.0.1", "port": 0, "advertised_host": "127.0.0.1",
                       "broker_port_base": free_port_base()}],
        "upstream": {"bootstrap_servers": [f"127.0.0.1:{broker.port}"]},
        "admin": None,
        "metadata": {"path": str(tmp_path / "meta")},
    })
    gateway = Gateway(config)
    started = await nursery.start(gateway.run)
    await trio.testing.wait_all_tasks_blocked()
    listener = next(l for l in gateway.listeners if l.name == "T")
    # 200 connections complete their handshake in the kernel while the loop does not run
    clients = [socket.create_connection(started.listeners["T"]) for _ in range(200)]
    passes = _Passes()
    trio.lowlevel.add_instrument(passes)
    try:
        with trio.fail_after(10):
            await trio.testing.wait_all_tasks_blocked()
        assert listener._connections == 200
        assert passes.count < 40, f"{passes.count} scheduler passes to accept 200 waiting connections"
    finally:
        trio.lowlevel.remove_instrument(passes)
        for c in clients:
            c.close()
