"""Broker addresses in FindCoordinator, DescribeCluster and Metadata responses become gateway
addresses (the spec's rewrite_response, as the connection calls it), and each broker is learned."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kio.schema.errors import ErrorCode

from protocol.apis.registry import REGISTRY
from protocol.codecs import decode_response, encode, make, nested, response_class


class Nodes:
    """A NodeMap: node N is served by the gateway at gw:9000+N; node 99 cannot be exposed."""

    def __init__(self) -> None:
        self.learned: dict[int, tuple[str, int]] = {}

    def learn(self, node_id, host, port, rack) -> None:
        self.learned[node_id] = (host, port)

    def advertise(self, node_id):
        return None if node_id == 99 else ("gw", 9000 + node_id)


def _rewritten(key: int, version: int, response):
    nodes = Nodes()
    body = REGISTRY[key].rewrite_response(version, memoryview(encode(response)), 0, nodes)
    assert body is not None
    return decode_response(key, version, body, 0), nodes


@pytest.mark.parametrize("version", [0, 3])
def test_find_coordinator_v0_3_gets_the_gateway_address(version):
    cls = response_class(10, version)
    upstream = make(cls, throttle_time=timedelta(0), error_code=ErrorCode.none, error_message=None, node_id=2,
                    host="broker-2.internal", port=9092)
    out, nodes = _rewritten(10, version, upstream)
    assert (out.host, out.port) == ("gw", 9002)
    assert nodes.learned == {2: ("broker-2.internal", 9092)}


def test_find_coordinator_v4_rewrites_every_coordinator_and_keeps_errors():
    cls = response_class(10, 4)
    ccls = nested(cls, "coordinators")
    upstream = make(cls, throttle_time=timedelta(0), coordinators=(
        make(ccls, key="g1", node_id=1, host="b1", port=9092, error_code=ErrorCode.none, error_message=None),
        make(ccls, key="g2", node_id=-1, host="", port=-1, error_code=ErrorCode(15), error_message="not available")))
    out, _ = _rewritten(10, 4, upstream)
    assert [(c.key, c.host, c.port) for c in out.coordinators] == [("g1", "gw", 9001), ("g2", "", -1)]


def test_describe_cluster_and_metadata_list_only_gateway_addresses():
    cls = response_class(60, 1)
    bcls = nested(cls, "brokers")
    upstream = make(cls, throttle_time=timedelta(0), error_code=ErrorCode.none, error_message=None, endpoint_type=1,
                    cluster_id="c", controller_id=1, cluster_authorized_operations=-2147483648, brokers=(
                        make(bcls, broker_id=1, host="b1", port=9092, rack=None),
                        make(bcls, broker_id=99, host="b99", port=9092, rack=None)))
    out, nodes = _rewritten(60, 1, upstream)
    assert [(b.broker_id, b.host, b.port) for b in out.brokers] == [(1, "gw", 9001)]  # 99 cannot be exposed
    assert set(nodes.learned) == {1, 99}
    mcls = response_class(3, 12)
    mbcls = nested(mcls, "brokers")
    upstream = make(mcls, throttle_time=timedelta(0), cluster_id="c", controller_id=1, topics=(),
                    brokers=(make(mbcls, node_id=3, host="b3", port=9092, rack="r"),))
    out, _ = _rewritten(3, 12, upstream)
    assert [(b.node_id, b.host, b.port, b.rack) for b in out.brokers] == [(3, "gw", 9003, "r")]
