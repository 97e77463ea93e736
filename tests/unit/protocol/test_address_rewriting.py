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


# Metadata's broker list is rewritten by a walk of its bytes; the rest of the answer (topics,
# partitions: nearly all of a large cluster's Metadata) is copied as it came, never decoded.

def _reference(version: int, body: bytes, nodes) -> bytes:
    """What the rewrite was before the walk: decode all, rewrite the brokers, encode all."""
    from dataclasses import replace

    from protocol.apis.addresses import rewrite_node_list

    response = decode_response(3, version, body, 0)
    return encode(replace(response, brokers=rewrite_node_list(response.brokers, nodes)))


class Learned(Nodes):
    """Nodes that also keep every learned rack, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def learn(self, node_id, host, port, rack) -> None:
        super().learn(node_id, host, port, rack)
        self.calls.append((node_id, host, port, rack))


@pytest.mark.parametrize("version", range(0, 14))
def test_metadata_walk_gives_the_bytes_the_decoded_rewrite_gave(version):
    """Any Metadata response kio can encode, every version: the walk's bytes are the decoded
    rewrite's bytes (node 99 left out), and the same brokers are learned, in the same order."""
    from hypothesis import HealthCheck, given, settings, strategies as st

    cls = response_class(3, version)
    bcls = nested(cls, "brokers")
    broker = st.builds(lambda node_id, host, port, rack: make(bcls, node_id=node_id, host=host, port=port, rack=rack),
                       st.sampled_from([0, 1, 2, 99, 1000]), st.text(min_size=0, max_size=40),
                       st.integers(0, 65535), st.none() | st.text(max_size=12))

    @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.from_type(cls), st.lists(broker, max_size=6))
    def check(response, brokers):
        from dataclasses import replace

        body = encode(replace(response, brokers=tuple(brokers)))
        walked, reference = Learned(), Learned()
        assert REGISTRY[3].rewrite_response(version, memoryview(body), 0, walked) == _reference(version, body,
                                                                                                 reference)
        expected = [(b.node_id, b.host, b.port, b.rack if version >= 1 else None) for b in brokers]
        assert walked.calls == reference.calls == expected

    check()


def test_metadata_walk_keeps_a_brokers_tagged_fields_and_starts_at_the_offset_given():
    """A tagged field this kio does not know (a newer broker's) stays with its broker: decoding
    failed on it (kio: "Unknown tagged field"), which closed the client's connection.  The body
    may start after a response header, as the connection passes it."""
    bcls = nested(response_class(3, 12), "brokers")
    upstream = make(response_class(3, 12), throttle_time=timedelta(0), cluster_id="c", controller_id=1, topics=(),
                    brokers=(make(bcls, node_id=3, host="b3", port=9092, rack=None),))
    body = encode(upstream)
    end_of_broker = 4 + 1 + 4 + 3 + 4 + 1  # throttle, count, node id, host, port, rack (null)
    assert body[end_of_broker] == 0  # no tagged fields
    tagged = bytes([1, 7, 2]) + b"hi"  # one field: tag 7, 2 bytes
    frame = (b"\x00\x00\x00\x00\x00\x00\x00\x01\x00"  # size, correlation id, header tags
             + body[:end_of_broker] + tagged + body[end_of_broker + 1:])
    nodes = Nodes()
    out = REGISTRY[3].rewrite_response(12, memoryview(frame), 9, nodes)
    gateway_broker = (3).to_bytes(4, "big") + b"\x03gw" + (9003).to_bytes(4, "big") + b"\x00"
    assert out == body[:5] + gateway_broker + tagged + body[end_of_broker + 1:]
    assert nodes.learned == {3: ("b3", 9092)}


@pytest.mark.parametrize("version", [0, 1, 3, 9, 12])
def test_metadata_cut_inside_its_broker_list_fails_as_a_codec_error(version):
    from protocol.codecs import CodecError

    cls = response_class(3, version)
    bcls = nested(cls, "brokers")
    upstream = make(cls, throttle_time=timedelta(0), cluster_id="c", controller_id=1, topics=(),
                    cluster_authorized_operations=-2147483648, error_code=ErrorCode.none,
                    brokers=(make(bcls, node_id=1, host="b1", port=9092, rack="r"),
                             make(bcls, node_id=2, host="b2", port=9092, rack=None)))
    body = encode(upstream)
    from dataclasses import replace

    count_end = (4 if version >= 3 else 0) + (1 if version >= 9 else 4)
    brokers_end = count_end + len(body) - len(encode(replace(upstream, brokers=())))
    for cut in range(brokers_end):
        with pytest.raises(CodecError):
            REGISTRY[3].rewrite_response(version, memoryview(body[:cut]), 0, Nodes())


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 16383, 16384, 2 ** 21, 2 ** 31 - 1])
def test_a_written_varint_reads_back_as_the_walks_read_it(n):
    """(The writer the walk's rewrite uses for compact counts and lengths.)"""
    from protocol.wire import skip_string, string_bytes, uvarint, uvarint_bytes

    data = uvarint_bytes(n) + b"!"
    assert uvarint(data, 0) == (n, len(data) - 1)
    text = "é" * (n % 200)  # 0-199 characters, two bytes each: compact lengths of one and two bytes
    for flexible in (False, True):
        written = string_bytes(text, flexible)
        assert skip_string(written, 0, flexible) == (text, len(written))
