"""Rewriting of broker addresses in responses (Metadata, FindCoordinator, DescribeCluster,
the KIP-951 endpoints of Produce and Fetch): the part every such API shares.

Theory of operation
-------------------
Every broker address an upstream response carries is (1) taught to the
listener's :class:`~protocol.apis.base.NodeMap`, so the gateway knows where
node N really is, and (2) replaced by the gateway address that stands for node N
on the client's listener.  A broker the listener cannot expose (its port
would fall outside 1-65535) is left out of broker lists rather than leaking the
upstream address.  Coordinators with an error carry no address and are kept.
"""

from __future__ import annotations

from dataclasses import replace

from typing import Any
from protocol.apis.base import NodeMap

__all__ = ["rewrite_node_list"]


def rewrite_node_list(nodes_in: Any, nodes: NodeMap, id_attr: str = "node_id") -> tuple[Any, ...]:
    out = []
    for node in nodes_in:
        node_id = getattr(node, id_attr)
        nodes.learn(node_id, node.host, node.port, getattr(node, "rack", None))
        address = nodes.advertise(node_id)
        if address is not None:
            out.append(replace(node, host=address[0], port=address[1]))
    return tuple(out)
