"""The local broker of ``kgw demo`` and ``kgw broker`` is stopped by its own process and waited
for: SIGTERM, a grace to leave, then SIGKILL, and nothing of it is left once ``_stop_broker``
returns (``tests/integration/test_demo.py`` checks the same through the commands with real
brokers, where a Kafka node slow to shut down on a loaded machine was once left behind)."""

from __future__ import annotations

import os
import subprocess
import sys

import trio

from gateway.cli.main import _stop_broker

#: a broker that does not leave on SIGTERM, and one that does
_STUBBORN = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
             "time.sleep(600)")
_POLITE = "import time; print('ready', flush=True); time.sleep(600)"


def _stopped(code: str) -> trio.Process:
    async def main() -> trio.Process:
        process = await trio.lowlevel.open_process([sys.executable, "-c", code], stdout=subprocess.PIPE)
        assert process.stdout is not None
        assert (await process.stdout.receive_some(16)).startswith(b"ready")  # (its SIGTERM handling set)
        await _stop_broker(process, grace_s=0.5)
        return process

    return trio.run(main)


def test_a_broker_that_ignores_sigterm_is_killed_and_gone():
    process = _stopped(_STUBBORN)
    assert process.returncode == -9
    assert not os.path.exists(f"/proc/{process.pid}")


def test_a_broker_that_leaves_on_sigterm_is_gone_without_a_kill():
    process = _stopped(_POLITE)
    assert process.returncode == -15
    assert not os.path.exists(f"/proc/{process.pid}")
