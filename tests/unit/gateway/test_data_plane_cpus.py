"""``io.data_plane_cpus``: the data-plane thread runs on those CPUs while it serves, and the
thread Trio's cache lent it goes back with the CPUs it had."""

from __future__ import annotations

import os
import threading

from gateway.connection.data_plane import DataPlane
from tests.unit.gateway.fake_broker import FakeBroker
from tests.unit.gateway.test_connection import _forwarding_client, _start_gateway

#: the CPUs this process may use, and the last of them (on a machine of one CPU, pinned and
#: unpinned look alike)
_ALL = os.sched_getaffinity(0)
_CPU = max(_ALL)


def test_the_data_plane_runs_on_its_cpus_and_gives_the_thread_back_as_it_was():
    plane = DataPlane(cpus=(_CPU,))
    seen: dict[str, set[int]] = {}
    serving = threading.Event()

    def lent_thread() -> None:
        seen["before"] = os.sched_getaffinity(0)
        plane.run()
        seen["after"] = os.sched_getaffinity(0)

    def while_serving() -> None:
        seen["serving"] = os.sched_getaffinity(0)
        serving.set()

    thread = threading.Thread(target=lent_thread)
    thread.start()
    plane.call_soon(while_serving)
    assert serving.wait(10)
    plane.stop()
    thread.join(10)
    assert seen["serving"] == {_CPU}
    assert seen["after"] == seen["before"] == os.sched_getaffinity(0)


async def test_a_gateway_serves_its_data_plane_on_the_configured_cpus(nursery, tmp_path):
    broker = await nursery.start(FakeBroker().serve)
    _gateway, port = await _start_gateway(nursery, tmp_path, broker, True, io={"data_plane_thread": True,
                                                                               "data_plane_cpus": [_CPU]})
    client = await _forwarding_client(port)
    (thread,) = [t for t in threading.enumerate() if t.name == "kgw-data-plane"]
    assert thread.native_id is not None
    assert os.sched_getaffinity(thread.native_id) == {_CPU}
    assert os.sched_getaffinity(0) == _ALL  # (Trio's thread, and the rest of the process, as they were)
    await client.stream.aclose()
