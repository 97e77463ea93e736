"""The walk to a Fetch response's top-level tagged fields in C (protocol/_native.c) against the
Python reference (``walk_fetch_response``): on every response of v13 and later the C walk either
declines (None: the reference walks it) or finds the very offset the reference finds; on the
usual responses it does not decline.  Responses with record sets of every length prefix, null
and present aborted transactions, partition tags and node endpoints set, then each of them
truncated and damaged byte by byte.  The offset decides where kgw writes its own addresses
into the response (``node_endpoints``): a wrong one would leave the brokers' in it."""

from __future__ import annotations

import random
import uuid
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from protocol import _native
from protocol.apis import fetch as fetch_api
from protocol.apis.fetch import top_level_tags_offset, walk_fetch_response
from protocol.codecs import CodecError, encode, make, nested, response_class
from tests.support.kio_samples import record_batch


def _response(rng: random.Random, version: int) -> bytes:
    cls = response_class(1, version)
    topic_cls = nested(cls, "responses")
    part_cls = nested(topic_cls, "partitions")
    abort_cls = nested(part_cls, "aborted_transactions")
    topics = []
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        parts = []
        for p in range(rng.choice([0, 1, 1, 2, 4])):
            records = rng.choice([None, b"", record_batch(b"v"), record_batch(b"w" * 200),
                                  record_batch(b"x" * 20_000)])
            fields = dict(partition_index=i32(p), error_code=ErrorCode.none, high_watermark=i64(42),
                          last_stable_offset=i64(40), log_start_offset=i64(0), preferred_read_replica=i32(-1),
                          records=records,
                          aborted_transactions=rng.choice([None, (), (make(abort_cls, producer_id=i64(3),
                                                                           first_offset=i64(1)),)]))
            if rng.random() < 0.3:
                leader_cls = nested(part_cls, "current_leader")
                fields["current_leader"] = make(leader_cls, leader_id=i32(2), leader_epoch=i32(5))
            parts.append(make(part_cls, **fields))
        topics.append(make(topic_cls, topic_id=uuid.UUID(int=rng.getrandbits(128)), topic="walk-tags",
                           partitions=tuple(parts)))
    endpoints = ()
    if version >= 16 and rng.random() < 0.3:
        node_cls = nested(cls, "node_endpoints")
        endpoints = (make(node_cls, node_id=i32(1), host="broker-1", port=i32(9092), rack=None),)
    return encode(make(cls, throttle_time=timedelta(0), error_code=ErrorCode.none, session_id=i32(rng.choice([0, 7])),
                       responses=tuple(topics), node_endpoints=endpoints))


def _reference(version: int, body: bytes, at: int) -> int | CodecError:
    try:
        return walk_fetch_response(version, body, at).topics_end
    except CodecError as e:
        return e


def _agrees(version: int, body: bytes, at: int) -> bool:
    """The C walk declines or agrees; True when it walked."""
    native = _native.fetch_response_tags(body, at, version)
    reference = _reference(version, body, at)
    if native is None:
        return False
    assert not isinstance(reference, CodecError), f"the C walk accepted what the reference refuses: {reference}"
    assert native == reference
    return True


def test_the_c_walk_is_built_and_used():
    assert fetch_api._native_tags_at is _native.fetch_response_tags


@pytest.mark.parametrize("version", range(13, 19))
def test_the_c_walk_finds_what_the_reference_finds(version):
    rng = random.Random(version)
    for _ in range(80):
        body = b"xyz" + _response(rng, version)
        assert _agrees(version, body, 3), "a usual response is walked in C"
        assert top_level_tags_offset(body, 3, version) == _reference(version, body, 3)


def test_earlier_versions_are_left_to_the_reference():
    """Before v13 topics are named, their names read as UTF-8 by the reference only."""
    body = _response(random.Random(1), 12)
    assert _native.fetch_response_tags(body, 0, 12) is None


@pytest.mark.parametrize("version", [13, 16, 18])
def test_damaged_responses_are_declined_or_walked_alike(version):
    rng = random.Random(100 + version)
    walked = 0
    for _ in range(40):
        body = _response(rng, version)
        for cut in range(0, len(body), max(1, len(body) // 60)):
            walked += _agrees(version, body[:cut], 0)
        for _ in range(60):
            damaged = bytearray(body)
            damaged[rng.randrange(len(damaged))] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
            walked += _agrees(version, bytes(damaged), 0)
    assert walked > 100  # (damage left many responses walkable: the comparison ran)


def test_a_response_ending_inside_its_top_level_tags_is_declined():
    body = bytearray(_response(random.Random(3), 16))
    at = walk_fetch_response(16, bytes(body), 0).topics_end
    body[at:] = b"\x01\x00\x05ab"  # one tag of five bytes, two of them there
    assert _native.fetch_response_tags(bytes(body), 0, 16) is None
    with pytest.raises(CodecError):
        walk_fetch_response(16, bytes(body), 0)
