"""The Produce walk in C (protocol/_native.c) against the Python reference
(``walk_produce_request_python``): on every request the C walk either declines (None: the
reference walks it) or finds exactly what the reference finds, names, partitions, offsets,
flags and the batch problems; on the usual requests it does not decline.  Requests of every
version, transactional and refused batches, long names, then each of them truncated and
damaged byte by byte."""

from __future__ import annotations

import random
import uuid
from types import SimpleNamespace
from datetime import timedelta

import pytest
from kio.static.primitive import i16, i32

from gateway.upstream.cluster import encode_request
from protocol import _native
from protocol.apis import produce as produce_api
from protocol.apis.produce import walk_produce_request, walk_produce_request_python
from protocol.codecs import CodecError, make, nested, request_class
from protocol.headers import parse_request_header
from protocol.apis.base import RequestInfo
from tests.support.kio_samples import record_batch


def _shape(shape) -> tuple:
    """Everything a ProduceShape holds, comparable."""
    return (shape.transactional_id, shape.acks, shape.timeout_ms, shape.transactional, shape.topics_at,
            shape.topics_end, shape.any_invalid,
            [(t.name, t.topic_id, t.partitions, t.start, t.end, t.parts_at, t.parts_end, t.spans, t.invalid)
             for t in shape.topics])


def _batch(rng: random.Random) -> tuple[bytes | None, bool]:
    """Records for one partition, and whether kgw would forward them."""
    kind = rng.choice(["plain"] * 6 + ["transactional", "big", "magic1", "control", "two", "zstd", "short", "null"])
    if kind == "null":
        return None, False
    if kind == "big":
        return record_batch(b"b" * rng.choice([200, 20_000])), True
    if kind == "transactional":
        return record_batch(b"t", producer_id=7, attributes=0x10), True
    batch = bytearray(record_batch(b"v" * rng.randrange(5)))
    if kind == "magic1":
        batch[16] = 1
    elif kind == "control":
        batch[22] |= 0x20
    elif kind == "zstd":
        batch[22] = (batch[22] & ~0x07) | 4
    elif kind == "two":
        batch += record_batch(b"second")
    elif kind == "short":
        batch = batch[:40]
    return bytes(batch), kind in ("plain", "zstd")


def _request(rng: random.Random, version: int) -> memoryview:
    cls = request_class(0, version)
    topic_cls = nested(cls, "topic_data")
    part_cls = nested(topic_cls, "partition_data")
    topics = []
    for t in range(rng.choice([0, 1, 1, 1, 2, 3])):
        parts = tuple(make(part_cls, index=i32(rng.randrange(-2, 2000)), records=_batch(rng)[0])
                      for _ in range(rng.choice([0, 1, 1, 2, 5, 130])))
        named = ({"topic_id": uuid.UUID(int=rng.getrandbits(128))} if version >= 13
                 else {"name": rng.choice(["t", f"orders-{t}", "n" * 130, "é" * 64, ""])})
        topics.append(make(topic_cls, partition_data=parts, **named))
    body = make(cls, transactional_id=rng.choice([None, None, "tx", "x" * 140]),
                acks=i16(rng.choice([-1, 0, 1])), timeout=timedelta(milliseconds=rng.choice([0, 3000, 2**31 - 1])),
                topic_data=tuple(topics))
    return memoryview(encode_request(0, version, rng.randrange(1 << 31), body))[4:]


def _reference(header, frame):
    try:
        return walk_produce_request_python(header, frame)
    except CodecError as e:
        return e


def _agrees(header, frame) -> bool:
    """The C walk declines or agrees; True when it walked.  The express path's walk
    (``produce_sole``) too: it finds what ``_sole_action`` asks of the same shape, or declines
    where that has no action or the C walk declines."""
    native = _native.walk_produce(frame, header.size, header.flexible, header.api_version)
    reference = _reference(header, frame)
    sole = _native.produce_sole(frame, header.size, header.flexible, header.api_version)
    if native is None:
        assert sole is None, "the express walk took a request the C walk declines"
        return False
    assert not isinstance(reference, CodecError), f"the C walk accepted what the reference refuses: {reference}"
    assert _shape(native) == _shape(reference)
    action = produce_api._sole_action(header, RequestInfo(True, 0.0, reference), None, _LEARNED)
    if action is None:
        assert sole is None, f"the express walk took a request with no sole action: {sole}"
    else:  # (v13+: the topic's id, which the dispatcher names as _sole_action does)
        named = sole[0] if header.api_version < 13 else _LEARNED.name_of(sole[0])
        assert (named, *sole[1:]) == (action.resource_pattern.name, action.resource_reference_count,
                                      reference.acks, reference.timeout_ms)
    return True


#: topic ids the gateway learned: any id, named after itself
_LEARNED = SimpleNamespace(name_of=lambda topic_id: f"learned-{topic_id}")


def test_the_c_walk_is_built():
    """``make setup`` builds it (pip, setup.py): a machine without a compiler runs the reference
    only, which the suite must notice."""
    assert produce_api._native_walk is _native.walk_produce


@pytest.mark.parametrize("version", range(3, 14))
def test_the_c_walk_declines_or_agrees_with_the_reference(version):
    rng = random.Random(version)
    walked = declined = 0
    for _ in range(40):
        frame = _request(rng, version)
        header = parse_request_header(frame)
        if _agrees(header, frame):
            walked += 1
        else:
            declined += 1
        damaged = [frame[:cut] for cut in sorted(rng.sample(range(header.size, len(frame)), min(12, len(frame) - header.size)))]
        for _ in range(25):
            raw = bytearray(frame)
            raw[rng.randrange(header.size, len(raw))] = rng.choice([0, 1, 2, 0x7F, 0x80, 0xFF, rng.randrange(256)])
            damaged.append(memoryview(bytes(raw)))
        for other in damaged:
            _agrees(header, other)
    assert walked > declined  # the usual requests take the C walk


@pytest.mark.parametrize("version", [3, 8, 9, 12, 13])
def test_usual_requests_take_the_c_walk(version):
    """One topic, one partition, one batch; several of each; a transactional batch; batches of
    20 KB and 1 MiB (a flexible request's records length then takes three varint bytes, four
    beyond 2 MiB): walked in C, and a request of one topic by name without a transactional batch
    by the express path's walk too."""
    cls = request_class(0, version)
    topic_cls = nested(cls, "topic_data")
    part_cls = nested(topic_cls, "partition_data")
    for counts, attributes, value in (((1,), 0, b"v"), ((3, 2), 0, b"v"), ((1,), 0x10, b"v"),
                                      ((1,), 0, b"w" * 20_000), ((2,), 0, b"m" * (1 << 20)),
                                      ((1,), 0, b"l" * (3 << 20))):
        topics = tuple(make(topic_cls, partition_data=tuple(
            make(part_cls, index=i32(p), records=record_batch(value, producer_id=5 if attributes else -1,
                                                             attributes=attributes)) for p in range(n)),
            **({"topic_id": uuid.uuid4()} if version >= 13 else {"name": f"usual-{t}"}))
            for t, n in enumerate(counts))
        body = make(cls, transactional_id="tx" if attributes else None, acks=i16(-1),
                    timeout=timedelta(seconds=30), topic_data=topics)
        frame = memoryview(encode_request(0, version, 9, body))[4:]
        header = parse_request_header(frame)
        assert _agrees(header, frame)
        shape = walk_produce_request(header, frame)
        assert shape.transactional is bool(attributes) and not shape.any_invalid
        assert [len(t.partitions) for t in shape.topics] == list(counts)
        sole = _native.produce_sole(frame, header.size, header.flexible, header.api_version)
        if not attributes and len(counts) == 1:  # the express path's request
            assert sole == (shape.topics[0].topic_id if version >= 13 else "usual-0", counts[0], -1, 30_000)
        else:
            assert sole is None


def test_what_is_not_one_contiguous_buffer_is_left_to_the_reference():
    assert _native.walk_produce(memoryview(bytes(64))[::2], 0, True, 9) is None
    assert _native.walk_produce(object(), 0, True, 9) is None
    assert _native.walk_produce(b"\x00" * 8, 9, True, 9) is None  # an offset past the end


def test_topic_ids_kept_by_the_c_walk_are_bounded():
    """A client naming ever new topic ids makes the C walk keep at most 16,384 of their UUIDs
    (each is made once and reused: a UUID is immutable)."""
    cls = request_class(0, 13)
    topic_cls = nested(cls, "topic_data")
    part_cls = nested(topic_cls, "partition_data")
    records = record_batch(b"v")
    seen = []
    for batch in range(9):
        topics = tuple(make(topic_cls, topic_id=uuid.UUID(int=(batch << 32) + t + 1),
                            partition_data=(make(part_cls, index=i32(0), records=records),)) for t in range(2500))
        frame = memoryview(encode_request(0, 13, batch, make(cls, transactional_id=None, acks=i16(1),
                                                             timeout=timedelta(seconds=1), topic_data=topics)))[4:]
        header = parse_request_header(frame)
        shape = _native.walk_produce(frame, header.size, header.flexible, 13)
        assert [t.topic_id.int & 0xFFFFFFFF for t in shape.topics] == list(range(1, 2501))
        seen.append(_native.uuids_kept())
    assert max(seen) <= 16384 and any(later < earlier for earlier, later in zip(seen, seen[1:]))  # emptied when full
