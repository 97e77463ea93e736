"""Which gateway address stands for which upstream broker: the port-per-broker scheme.

Theory of operation
-------------------
Each listener has a bootstrap address and one port per upstream broker:
node N is served at bind port ``broker_port_base + N`` and advertised as
``advertised_host:advertised_broker_port_base + N``.  The mapping is a pure
function of (listener, node id) — no counter, no discovery order — so every
kgw instance and every restart hand out the same addresses, node ids need not
be contiguous, and a broker that appears later simply gets its port when it is
first seen.  A node id whose port would exceed 65535 cannot be exposed; it is
logged and left out of broker lists.

Other proxies use the same idea (Kroxylicious' port-per-broker strategy) or TLS
SNI host names (one port, ``broker-N.<domain>``); SNI needs TLS on every
listener and wildcard DNS, so port-per-broker is kgw's default.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.listeners import Listener

__all__ = ["ListenerNodeMap", "node_bind_port", "node_advertised_address"]


def node_bind_port(broker_port_base: int, node_id: int) -> int | None:
    port = broker_port_base + node_id
    return port if 0 < port <= 65535 and node_id >= 0 else None


def node_advertised_address(host: str, advertised_broker_port_base: int, node_id: int) -> tuple[str, int] | None:
    port = node_bind_port(advertised_broker_port_base, node_id)
    return None if port is None else (host, port)


class ListenerNodeMap:
    """The :class:`protocol.apis.base.NodeMap` of one listener."""

    def __init__(self, listener: "Listener") -> None:
        self._listener = listener

    def learn(self, node_id: int, host: str, port: int, rack: str | None) -> None:
        self._listener.gateway.cluster.learn(node_id, host, port, rack)

    def advertise(self, node_id: int) -> tuple[str, int] | None:
        if not self._listener.has_node_port(node_id):
            return None
        cfg = self._listener.config
        return node_advertised_address(cfg.advertised_host, cfg.advertised_broker_port_base, node_id)
