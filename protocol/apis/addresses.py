"""Rewriting of broker addresses in responses: Metadata, FindCoordinator, DescribeCluster.

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

from protocol.apis.base import ApiSpec, NodeMap
from protocol.apis.generic import inspect_decoded
from protocol.codecs import decode_response, encode

__all__ = ["SPECS", "rewrite_node_list"]


def rewrite_node_list(nodes_in, nodes: NodeMap, id_attr: str = "node_id") -> tuple:
    out = []
    for node in nodes_in:
        node_id = getattr(node, id_attr)
        nodes.learn(node_id, node.host, node.port, getattr(node, "rack", None))
        address = nodes.advertise(node_id)
        if address is not None:
            out.append(replace(node, host=address[0], port=address[1]))
    return tuple(out)


def _rewrite_metadata(version: int, frame: memoryview, offset: int, nodes: NodeMap) -> bytes:
    response = decode_response(3, version, frame, offset)
    return encode(replace(response, brokers=rewrite_node_list(response.brokers, nodes)))


def _rewrite_describe_cluster(version: int, frame: memoryview, offset: int, nodes: NodeMap) -> bytes:
    response = decode_response(60, version, frame, offset)
    return encode(replace(response, brokers=rewrite_node_list(response.brokers, nodes, "broker_id")))


def _coordinator(entry, nodes: NodeMap):
    if entry.error_code != 0 or entry.node_id < 0:
        return entry
    nodes.learn(entry.node_id, entry.host, entry.port, None)
    address = nodes.advertise(entry.node_id)
    if address is None:
        return entry
    return replace(entry, host=address[0], port=address[1])


def _rewrite_find_coordinator(version: int, frame: memoryview, offset: int, nodes: NodeMap) -> bytes:
    response = decode_response(10, version, frame, offset)
    if version >= 4:
        return encode(replace(response, coordinators=tuple(_coordinator(c, nodes) for c in response.coordinators)))
    return encode(_coordinator(response, nodes))


SPECS = (
    ApiSpec(3, "Metadata", inspect_decoded, _rewrite_metadata),
    ApiSpec(10, "FindCoordinator", inspect_decoded, _rewrite_find_coordinator),
    ApiSpec(60, "DescribeCluster", inspect_decoded, _rewrite_describe_cluster),
)
