"""A newer broker's tagged field in a response kgw decodes (protocol/unknown_tags.py): left out
so that kio can read the rest, where kio refused the whole body and kgw closed the client's
connection.  A client's unknown tag still fails its request's decode: kgw forwards nothing it
could not read."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, assume, given, settings, strategies as st
from kio.schema.errors import ErrorCode
from kio.static.primitive import Records, i32

from protocol.apis.registry import REGISTRY
from protocol.codecs import (CodecError, UnknownTagError, _decode_checked, decode_request, decode_response, encode,
                             make, nested, request_class, response_class)
from protocol.unknown_tags import without_unknown_tags

st.register_type_strategy(Records, st.binary(max_size=16).map(Records))  # (Fetch's, ShareFetch's: opaque here)

UNKNOWN = bytes([1, 90, 3]) + b"new"  # one tagged field: tag 90, 3 bytes


def _flexible_responses():
    out = []
    for key in sorted(REGISTRY):
        for version in range(0, 20):
            try:
                cls = response_class(key, version)
            except Exception:
                continue
            if getattr(cls, "__flexible__", False):
                out.append((key, version))
    return out


FLEXIBLE = _flexible_responses()


def _without_tagged_values(entity):
    """``entity`` with its top-level tagged fields at their defaults (not written, as Kafka does)."""
    changes = {}
    for f in dataclasses.fields(entity):
        if f.metadata.get("tag") is not None and f.default is not dataclasses.MISSING:
            changes[f.name] = f.default
    return dataclasses.replace(entity, **changes)


@pytest.mark.parametrize("key,version", FLEXIBLE[::3] + FLEXIBLE[1::3] + FLEXIBLE[2::3])
def test_any_response_decodes_the_same_with_an_unknown_top_level_tag(key, version):
    """Every flexible response kio knows: the copy of a body with no unknown tag is the body
    itself (the walk reads every schema right), and with a newer broker's top-level tag added the
    body decodes to what it was without it."""
    cls = response_class(key, version)

    @settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.from_type(cls))
    def check(entity):
        body = encode(_without_tagged_values(entity))
        assert without_unknown_tags(cls, body, 0) == body
        try:
            decode_response(key, version, body, 0)
        except CodecError:  # kio encodes some values it cannot read back (a lifetime's overflow)
            assume(False)
        if body[-1] != 0:  # a tagged field kio declares but cannot leave unset
            return
        newer = body[:-1] + UNKNOWN
        with pytest.raises(UnknownTagError):
            _decode_checked(cls, newer, 0)  # kio alone refuses it
        assert decode_response(key, version, newer, 0) == decode_response(key, version, body, 0)

    check()


def test_an_unknown_tag_inside_an_entity_of_an_array_is_left_out_there():
    """FindCoordinator v4: a tag in the second coordinator's entry, and one at the top level."""
    cls = response_class(10, 4)
    ccls = nested(cls, "coordinators")
    coordinators = tuple(make(ccls, key=k, node_id=i32(n), host=h, port=i32(9092), error_code=ErrorCode.none,
                              error_message=None) for k, n, h in (("g1", 1, "b1"), ("g2", 2, "b2")))
    body = encode(make(cls, throttle_time=timedelta(0), coordinators=coordinators))
    second = body.index(b"\x03g2")
    entry_end = body.index(b"\x00\x00\x00", second + 3 + 4 + 3 + 4) + 2 + 1  # error code, null message
    assert body[entry_end] == 0  # its tagged section: empty
    newer = body[:entry_end] + UNKNOWN + body[entry_end + 1:-1] + UNKNOWN
    with pytest.raises(CodecError):
        _decode_checked(cls, newer, 0)
    assert decode_response(10, 4, newer, 0) == decode_response(10, 4, body, 0)
    # and at an offset, as the connection passes a body after its header
    assert decode_response(10, 4, b"\x00" * 9 + newer, 9) == decode_response(10, 4, body, 0)


def test_a_rewritten_response_with_a_newer_brokers_tag_reaches_the_client_without_it():
    """DescribeCluster's brokers are rewritten by decoding: a newer broker's tag closed the
    client's connection ("cannot rewrite upstream DescribeCluster response")."""
    from tests.unit.protocol.test_address_rewriting import Nodes

    cls = response_class(60, 1)
    bcls = nested(cls, "brokers")
    upstream = make(cls, throttle_time=timedelta(0), error_code=ErrorCode.none, error_message=None, cluster_id="c",
                    controller_id=i32(1), cluster_authorized_operations=i32(-2147483648), endpoint_type=1,
                    brokers=(make(bcls, broker_id=i32(3), host="b3", port=i32(9092), rack=None),))
    body = encode(upstream)
    out = REGISTRY[60].rewrite_response(1, memoryview(body[:-1] + UNKNOWN), 0, Nodes())
    assert decode_response(60, 1, out, 0).brokers[0].host == "gw"
    assert out == REGISTRY[60].rewrite_response(1, memoryview(body), 0, Nodes())


def test_a_requests_unknown_tag_still_fails_its_decode():
    """kgw cannot authorize what it cannot read: a client's tag kio does not know is refused,
    never left out and forwarded (the broker might know what it means)."""
    cls = request_class(3, 12)
    tcls = nested(cls, "topics")
    body = encode(make(cls, topics=(make(tcls, name="a", topic_id=None),), allow_auto_topic_creation=False,
                       include_topic_authorized_operations=False))
    with pytest.raises(UnknownTagError):
        decode_request(3, 12, body[:-1] + UNKNOWN, 0)


@pytest.mark.parametrize("cut", [1, 2, 3, 4])
def test_an_unknown_tag_cut_short_is_a_codec_error(cut):
    cls = response_class(10, 4)
    body = encode(make(cls, throttle_time=timedelta(0), coordinators=()))
    newer = body[:-1] + UNKNOWN[:-cut]
    with pytest.raises(CodecError):
        decode_response(10, 4, newer, 0)
    with pytest.raises(CodecError):  # a tag count claiming more than there is
        decode_response(10, 4, body[:-1] + bytes([9]) + UNKNOWN[1:], 0)


def test_an_unknown_tag_inside_a_tagged_array_of_entities_is_left_out_there():
    """Produce v10's node endpoints (KIP-951) are a tagged array of entities with tagged sections
    of their own: a newer broker's tag in an endpoint is left out, the array's size written again."""
    cls = response_class(0, 10)
    ecls = nested(cls, "node_endpoints")
    bare = make(cls, throttle_time=timedelta(0), responses=())
    endpoint = make(ecls, node_id=i32(3), host="b3", port=i32(9092), rack=None)
    body = encode(dataclasses.replace(bare, node_endpoints=(endpoint,)))
    head = encode(bare)[:-1]  # up to the (empty) top-level tagged section
    value = body[len(head) + 3:]  # after the section's count, the tag (0) and the value's size
    assert body[len(head):len(head) + 3] == bytes([1, 0, len(value)]) and value[-1] == 0
    newer_value = value[:-1] + UNKNOWN  # the endpoint's own tagged section
    newer = head + bytes([1, 0, len(newer_value)]) + newer_value
    with pytest.raises(UnknownTagError):
        _decode_checked(cls, newer, 0)
    assert decode_response(0, 10, newer, 0) == decode_response(0, 10, body, 0)
    assert without_unknown_tags(cls, newer, 0) == body
    liar = head + bytes([1, 0, len(newer_value) + 1]) + newer_value + b"\x00"  # a size past its value
    with pytest.raises(CodecError):
        decode_response(0, 10, liar, 0)
