"""The Produce walker against kio's decoder: every version, record fields whose length prefix is
an int32 or a varint of one, two or three bytes, null records; and every truncated request is a
CodecError, never another exception (the walker reads the usual length prefixes in line)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from kio.static.primitive import i16, i32

from gateway.upstream.cluster import encode_request
from protocol.apis.produce import walk_produce_request
from protocol.codecs import CodecError, decode_request, make, nested, request_class
from protocol.headers import parse_request_header
from tests.support.kio_samples import record_batch

#: record values giving batches of about 70 B, 170 B and 20 KB: varint prefixes of 1, 2 and 3 bytes
_VALUES = (b"", b"v" * 100, b"w" * 20_000)


def _request(version: int, partitions_per_topic: tuple[int, ...], with_null: bool) -> memoryview:
    cls = request_class(0, version)
    topic_cls = nested(cls, "topic_data")
    part_cls = nested(topic_cls, "partition_data")
    topics = []
    for t, count in enumerate(partitions_per_topic):
        parts = tuple(make(part_cls, index=i32(p), records=record_batch(_VALUES[(t + p) % len(_VALUES)]))
                      for p in range(count))
        if with_null:
            parts += (make(part_cls, index=i32(count), records=None),)
        named = {"topic_id": uuid.UUID(int=t + 1)} if version >= 13 else {"name": f"walk-{version}-{t}"}
        topics.append(make(topic_cls, partition_data=parts, **named))
    body = make(cls, transactional_id=None, acks=i16(-1), timeout=timedelta(seconds=3), topic_data=tuple(topics))
    return memoryview(encode_request(0, version, 7, body))[4:]


@pytest.mark.parametrize("version", range(3, 14))
@pytest.mark.parametrize("shape", [(1,), (3,), (2, 1, 2)])
@pytest.mark.parametrize("with_null", [False, True])
def test_the_walk_finds_what_kio_decodes(version, shape, with_null):
    frame = _request(version, shape, with_null)
    header = parse_request_header(frame)
    walked = walk_produce_request(header, frame)
    decoded = decode_request(0, version, frame, header.size)
    assert (walked.acks, walked.timeout_ms, walked.transactional_id) == (-1, 3000, None)
    assert len(walked.topics) == len(decoded.topic_data)
    for span, topic in zip(walked.topics, decoded.topic_data):
        assert (span.topic_id if version >= 13 else span.name) == (topic.topic_id if version >= 13 else topic.name)
        assert span.partitions == [p.index for p in topic.partition_data]
        tags = 1 if header.flexible else 0  # each partition entry ends with its tagged fields
        for (start, end), part in zip(span.spans, topic.partition_data):
            assert int.from_bytes(frame[start:start + 4], "big", signed=True) == part.index
            if part.records is not None:  # the entry's records end where kio's end
                assert frame[end - tags - len(part.records):end - tags] == part.records
        # a batch kgw would forward is valid; null records are not
        assert set(span.invalid or {}) == ({len(topic.partition_data) - 1} if with_null else set())
    assert walked.topics_end + (1 if header.flexible else 0) == len(frame)


@pytest.mark.parametrize("version", [8, 9, 12])
def test_every_truncated_produce_request_is_a_codec_error(version):
    frame = _request(version, (2,), True)
    header = parse_request_header(frame)
    for cut in range(header.size, len(frame)):
        short = frame[:cut]
        with pytest.raises(CodecError, match=f"Produce v{version}"):
            walk_produce_request(header, short)
