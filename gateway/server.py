"""The gateway: upstream cluster, listeners, admin endpoint, composed under one nursery.

Start-up order: discover the upstream (API versions, brokers), start the admin
endpoint (so ``/readyz`` can say "not ready"), then open each listener once the
authorizer reports it ready (KIP-504 ``start()``), and finally report readiness.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import trio

from gateway.admin_http import serve_admin
from gateway.listeners import Listener
from gateway.metrics import GatewayMetrics
from gateway.upstream import UpstreamCluster
from protocol.apis.api_versions import VersionRange, advertised_versions
from protocol.apis.registry import LOCAL_KEYS, REGISTRY

__all__ = ["Gateway", "StartedGateway"]

log = logging.getLogger("kgw.gateway")


@dataclass(frozen=True)
class StartedGateway:
    listeners: dict[str, tuple[str, int]]  # name -> bound (host, port)
    admin: tuple[str, int] | None


class Gateway:
    def __init__(self, config) -> None:
        self.config = config
        self.metrics = GatewayMetrics()
        up = config.upstream
        self.cluster = UpstreamCluster(up.bootstrap_servers, up.connect_timeout_ms / 1000, up.request_timeout_ms / 1000)
        self.authorizer = None
        self.listeners = [Listener(self, lc) for lc in config.listeners]
        self._ready: dict[str, bool] = {lc.name: False for lc in config.listeners}
        self._advertised: dict[int, VersionRange] | None = None
        self._advertised_for = None

    def readiness(self) -> dict[str, bool]:
        return dict(self._ready)

    async def advertised_versions(self) -> dict[int, VersionRange]:
        versions = await self.cluster.ensure_versions()
        if self._advertised_for is not versions:
            self._advertised = advertised_versions(versions, LOCAL_KEYS, frozenset(REGISTRY))
            self._advertised_for = versions
        assert self._advertised is not None
        return self._advertised

    async def run(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        cfg = self.config
        async with trio.open_nursery() as nursery:
            await nursery.start(self.cluster.refresh_forever, cfg.upstream.metadata_max_age_ms / 1000)
            admin = None
            if cfg.admin is not None:
                port = await nursery.start(serve_admin, cfg.admin.host, cfg.admin.port, self.metrics.registry, self.readiness)
                admin = (cfg.admin.host, port)
            bound = {}
            for listener in self.listeners:
                port = await nursery.start(listener.serve)
                bound[listener.name] = (listener.config.host, port)
                self._ready[listener.name] = True
                self.metrics.ready.labels(listener.name).set(1)
                log.info("listener %s accepting on %s:%d", listener.name, listener.config.host, port)
            task_status.started(StartedGateway(bound, admin))
