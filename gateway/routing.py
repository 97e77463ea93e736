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

__all__ = ["ListenerNodeMap"]

# The mapping itself is ``ListenerConfig.node_bind_port`` / ``node_advertised_address``
# (configs/gateway_config.py), so the YAML model and the gateway cannot disagree.


class ListenerNodeMap:
    """The :class:`protocol.apis.base.NodeMap` of one listener."""

    def __init__(self, listener: "Listener") -> None:
        self._listener = listener

    def learn(self, node_id: int, host: str, port: int, rack: str | None) -> None:
        self._listener.gateway.cluster.learn(node_id, host, port, rack)

    def advertise(self, node_id: int) -> tuple[str, int] | None:
        if not self._listener.has_node_port(node_id):
            return None
        address = self._listener.config.node_advertised_address(node_id)
        return None if address is None else (address.host, address.port)
