"""The Fetch request walk (in C where built, and its Python reference) against kio's decoder: what the walk reads of a request
(replica id, max wait, session, topic entries, forgotten topics) is what kio decodes, for every
version and for random requests; a request the walk does not read (a tagged field set, a null
or negative count, bytes missing) is left to kio, never read otherwise; damaged requests too.

Authorization hangs on it: a follower's ``replica_state`` read as a consumer's, or a partition
the walk missed, would be forwarded with the wrong check (docs/authorization.md, Fetch)."""

from __future__ import annotations

import random
import uuid
from datetime import timedelta

import pytest
from kio.static.primitive import i8, i32, i64

import protocol.apis.fetch as fetch_mod
import protocol.apis.produce  # noqa: F401  (binds the UUID type the C walks make ids of)
from gateway.upstream.cluster import encode_request
from protocol import _native
from protocol.apis.fetch import SPECS, _shape_of, walk_fetch_request, walk_fetch_request_python
from protocol.codecs import CodecError, decode_request, make, nested, request_class
from protocol.headers import parse_request_header

VERSIONS = range(4, 19)


def _request(version: int, rnd: random.Random, tags: bool = False) -> memoryview:
    """A random Fetch request, as a client builds it (``tags``: with tagged fields set where
    the version has them, as a follower's or a future client's)."""
    cls = request_class(1, version)
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    by_id = version >= 13

    def key(n: int):
        if by_id:
            return {"topic_id": uuid.UUID(int=0) if n == 0 else uuid.UUID(int=rnd.getrandbits(128) or 1)}
        return {"topic": rnd.choice(["walk", "wälk-ü", "a" * 200, f"t{n}"])}

    topics = []
    for n in range(rnd.choice([0, 1, 1, 2, 5])):
        parts = []
        for _ in range(rnd.choice([0, 1, 1, 3, 40])):
            fields = dict(partition=i32(rnd.choice([0, 1, 7, -1, 2**31 - 1])), current_leader_epoch=i32(-1),
                          fetch_offset=i64(rnd.getrandbits(40)), last_fetched_epoch=i32(-1),
                          log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20))
            if tags and version >= 17:
                fields["replica_directory_id"] = uuid.UUID(int=rnd.getrandbits(128) or 1)
            parts.append(make(part_cls, **fields))
        topics.append(make(topic_cls, **key(n), partitions=tuple(parts)))
    fields = dict(replica_id=i32(rnd.choice([-1, -1, 3])), max_wait=timedelta(milliseconds=rnd.choice([0, 500, 30_000])),
                  min_bytes=i32(1), max_bytes=i32(50 << 20), isolation_level=i8(rnd.choice([0, 1])),
                  session_id=i32(rnd.choice([0, 77, 2**31 - 1])), session_epoch=i32(rnd.choice([-1, 0, 1, 9])),
                  topics=tuple(topics), rack_id=rnd.choice(["", "rack-1", "räck"]), cluster_id=None)
    if version >= 7:
        forgotten_cls = nested(cls, "forgotten_topics_data")
        fields["forgotten_topics_data"] = tuple(
            make(forgotten_cls, **key(n + 1), partitions=tuple(i32(p) for p in range(rnd.choice([0, 1, 3]))))
            for n in range(rnd.choice([0, 0, 1, 2])))
    if tags and version >= 12:
        fields["cluster_id"] = "a-cluster"
    if tags and version >= 15:
        fields["replica_state"] = make(nested(cls, "replica_state"), replica_id=i32(3), replica_epoch=i64(5))
    return memoryview(encode_request(1, version, 7, make(cls, **fields)))[4:]


def _kio_shape(version: int, frame: memoryview, at: int):
    return _shape_of(decode_request(1, version, frame, at), version).fields()


WALKS = pytest.mark.parametrize("walk", [walk_fetch_request, walk_fetch_request_python], ids=["c", "python"])


@WALKS
@pytest.mark.parametrize("version", VERSIONS)
def test_the_walk_reads_what_kio_decodes(version, walk):
    rnd = random.Random(version)
    for _ in range(60):
        frame = _request(version, rnd)
        at = parse_request_header(frame).size
        walked = walk(version, frame, at)
        assert walked is not None, "a consumer's request (no tagged field set) is walked, not decoded"
        assert walked.fields() == _kio_shape(version, frame, at)
        assert walked.request is None


@WALKS
@pytest.mark.parametrize("version", [v for v in VERSIONS if v >= 12])
def test_a_request_with_tagged_fields_is_left_to_kio(version, walk):
    """A follower's replica_state (v15+) or directory id (v17+), a cluster id: kio reads them."""
    rnd = random.Random(1000 + version)
    for _ in range(20):
        frame = _request(version, rnd, tags=True)
        header = parse_request_header(frame)
        assert walk(version, frame, header.size) is None
        info = SPECS[0].inspect(header, frame)
        assert info.decoded.fields() == _kio_shape(version, frame, header.size)
        if version >= 15:
            assert info.decoded.replica_id == 3  # a follower's, from its replica_state


def test_the_usual_request_is_not_decoded_by_kio(monkeypatch):
    frame = _request(17, random.Random(5))
    header = parse_request_header(frame)
    monkeypatch.setattr(fetch_mod, "decode_request", None)
    info = SPECS[0].inspect(header, frame)
    assert info.decoded.request is None


@WALKS
@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 16, 17])
def test_damaged_requests_are_walked_as_kio_decodes_them_or_left_to_it(version, walk):
    """Truncated, flipped, grown or trimmed: whatever the walk reads, kio decodes the same;
    whatever kio refuses, the walk does not read."""
    rnd = random.Random(2000 + version)
    walked_some = 0
    for _ in range(150):
        frame = bytearray(_request(version, rnd))
        at = parse_request_header(memoryview(frame)).size
        kind = rnd.randrange(4)
        if kind == 0:
            del frame[rnd.randrange(at, len(frame)):]
        elif kind == 1:
            for _ in range(rnd.choice([1, 2, 4])):
                frame[rnd.randrange(at, len(frame))] = rnd.choice([0, 1, 0x7F, 0x80, 0xFF, rnd.randrange(256)])
        elif kind == 2:
            frame[rnd.randrange(at, len(frame) + 1):0] = bytes(rnd.randrange(256) for _ in range(rnd.choice([1, 4])))
        else:
            del frame[rnd.randrange(at, len(frame))]
        view = memoryview(bytes(frame))
        walked = walk(version, view, at)
        try:
            decoded = _kio_shape(version, view, at)
        except CodecError:
            assert walked is None
            continue
        if walked is not None:
            walked_some += 1
            assert walked.fields() == decoded
    assert walked_some > 10  # (the damage left many requests readable: the comparison ran)


@WALKS
def test_every_truncated_request_is_left_to_kio(walk):
    frame = _request(16, random.Random(9))
    at = parse_request_header(frame).size
    for cut in range(at, len(frame)):
        assert walk(16, frame[:cut], at) is None
    assert walk(16, frame, at) is not None


def test_the_topic_ids_kept_are_bounded(monkeypatch):
    """The Python walk keeps the UUIDs of the ids it read (a client chooses them): at most
    _UUIDS_KEPT (the C walk's are bounded too: tests/unit/protocol/test_native_walk.py)."""
    monkeypatch.setattr(fetch_mod, "_UUIDS_KEPT", 8)
    monkeypatch.setattr(fetch_mod, "_UUIDS", {})
    rnd = random.Random(11)
    for _ in range(40):
        frame = _request(16, rnd)
        at = parse_request_header(frame).size
        assert walk_fetch_request_python(16, frame, at).fields() == _kio_shape(16, frame, at)
        assert len(fetch_mod._UUIDS) <= 8
    assert fetch_mod._UUIDS  # (some were kept: the bound was what held them)


def _c_agrees(version: int, frame: memoryview | bytes, at: int) -> bool:
    """The C walk declines or reads what the Python walk reads; True when it read."""
    native = _native.walk_fetch(frame, at, version)
    if native is None:
        return False
    reference = walk_fetch_request_python(version, frame, at)
    assert reference is not None, "the C walk read what the reference leaves to kio"
    assert tuple(native) == reference.fields()
    return True


def test_the_c_walk_is_built_and_used():
    assert fetch_mod._native_walk is _native.walk_fetch


@pytest.mark.parametrize("version", VERSIONS)
def test_the_c_walk_reads_what_the_reference_reads(version):
    rnd = random.Random(3000 + version)
    for _ in range(60):
        frame = _request(version, rnd)
        assert _c_agrees(version, frame, parse_request_header(frame).size), "a usual request is read in C"
    for _ in range(10):
        frame = _request(version, rnd, tags=True)
        at = parse_request_header(frame).size
        assert (_native.walk_fetch(frame, at, version) is None) == (walk_fetch_request_python(version, frame, at)
                                                                     is None)


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 16, 17])
def test_the_c_walk_declines_or_agrees_on_damaged_requests(version):
    rnd = random.Random(4000 + version)
    read = 0
    for _ in range(60):
        frame = bytes(_request(version, rnd))
        at = parse_request_header(memoryview(frame)).size
        for cut in range(at, len(frame), max(1, (len(frame) - at) // 30)):
            read += _c_agrees(version, frame[:cut], at)
        for _ in range(30):
            damaged = bytearray(frame)
            damaged[rnd.randrange(at, len(damaged))] = rnd.choice([0, 1, 0x7F, 0x80, 0xFF, rnd.randrange(256)])
            read += _c_agrees(version, bytes(damaged), at)
    assert read > 100
