"""A StandardAuthorizer whose initial load completes only when the process gets SIGUSR1.

Loaded by import path from a test gateway's YAML, it stands for a store that takes
long to load, so a test can watch a listener stay closed until readiness.
"""

from __future__ import annotations

import signal

import trio

from authz.standard_authorizer import StandardAuthorizer


class GatedAuthorizer(StandardAuthorizer):
    def complete_initial_load(self) -> None:
        trio.lowlevel.spawn_system_task(self._complete_on_signal)

    async def _complete_on_signal(self) -> None:
        with trio.open_signal_receiver(signal.SIGUSR1) as signals:
            print("gated authorizer: waiting for SIGUSR1", flush=True)
            async for _ in signals:
                StandardAuthorizer.complete_initial_load(self)
                return
