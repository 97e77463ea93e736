"""The lengths walk in C (``protocol/_native.c``, ``check_lengths``) against its Python reference
(``protocol.bounds.check_lengths_python``): on every request and response schema kgw handles,
sampled, then cut short, grown, damaged byte by byte and given counts beyond the buffer, the C walk
ends where the reference ends, and whatever the reference refuses the C walk declines (None: the
reference then names the problem).  And a response body from the upstream is walked before kio
reads it: a count of billions costs an error, not the process."""

from __future__ import annotations

import random
import struct

import pytest

from protocol import bounds
from protocol._native import check_lengths as native_check
from protocol.apis.registry import REGISTRY
from protocol.bounds import LengthError, check_lengths_python
from protocol.codecs import CodecError, decode_response, encode, request_class, response_class
from tests.support.kio_samples import sample

NAMES = {"topic": ["t", "a-longer-topic-name"], "group": ["g"], "transactional_id": ["x"]}


def _schemas():
    for key, spec in sorted(REGISTRY.items()):
        if key == 88:  # the sample builder cannot encode StreamsGroupHeartbeat (kio range quirk)
            continue
        for version in range(spec.versions[0], spec.versions[1] + 1):
            for load in (request_class, response_class):
                try:
                    yield load(key, version)
                except Exception:  # noqa: BLE001 - kio has no schema of that side and version
                    continue


def _reference(cls, buf: bytes) -> int | None:
    try:
        return check_lengths_python(cls, memoryview(buf), 0)
    except LengthError:
        return None


def _variants(body: bytes, rnd: random.Random):
    yield body
    yield body + bytes(rnd.randrange(256) for _ in range(rnd.randint(1, 8)))  # bytes after it
    for _ in range(3):
        if body:
            yield body[: rnd.randrange(len(body))]  # cut short
    for _ in range(6):
        if body:
            damaged = bytearray(body)
            for _ in range(rnd.randint(1, 3)):
                damaged[rnd.randrange(len(damaged))] = rnd.choice([0, 1, 0x7F, 0x80, 0xFE, 0xFF, rnd.randrange(256)])
            yield bytes(damaged)
    if len(body) >= 4:
        at = rnd.randrange(len(body) - 3)
        yield body[:at] + struct.pack(">i", rnd.choice([2_000_000_000, -2, 1 << 20])) + body[at + 4:]


@pytest.mark.parametrize("seed", range(3))
def test_the_c_walk_ends_where_the_reference_ends_and_declines_what_it_refuses(seed):
    rnd = random.Random(seed)
    walked = declined = 0
    for cls in _schemas():
        try:
            body = encode(sample(cls, rnd, NAMES))
        except (struct.error, ValueError, OverflowError):  # a sample kio cannot encode (an unsigned -1)
            continue
        for variant in _variants(body, rnd):
            expected = _reference(cls, variant)
            got = native_check(bounds._plan(cls)[0], memoryview(variant), 0)
            assert got == expected, (cls.__name__, cls.__version__, variant.hex())
            walked += got is not None
            declined += got is None
    assert walked > 3000 and declined > 3000, (walked, declined)


def test_check_lengths_names_what_the_c_walk_declined():
    cls = request_class(3, 4)
    body = bytearray(encode(sample(cls, random.Random(1), NAMES)))
    body[0:4] = struct.pack(">i", 2_000_000_000)  # the topics count of Metadata v4
    assert native_check(bounds._plan(cls)[0], memoryview(bytes(body)), 0) is None
    with pytest.raises(LengthError, match="claims more than"):
        bounds.check_lengths(cls, memoryview(bytes(body)), 0)


def test_a_response_body_with_a_count_of_billions_is_an_error_not_an_abort():
    """A Metadata v12 response whose topics count says two billion: kio's native reader would
    size an array from it and abort the process; decode_response refuses it first."""
    cls = response_class(3, 12)
    body = bytearray(encode(sample(cls, random.Random(2), NAMES)))
    plan_steps = bounds._plan(cls)[0][1]
    # the topics array follows throttle time, brokers, cluster id and controller id: find its count
    # by walking the same plan up to it
    off = 0
    for kind, arg in plan_steps:
        if kind == "array" and arg[0][1] and any(k == "array" for k, _ in arg[0][1]):  # (the topics)
            break
        off = bounds._walk((True, ((kind, arg),)), memoryview(bytes(body)), off, len(body))
    body[off:off + 5] = bytes([0xFF, 0xFF, 0xFF, 0xFF, 0x07])  # a varint of 2**35 - 1
    with pytest.raises(CodecError, match="claims more than"):
        decode_response(3, 12, memoryview(bytes(body)), 0)
