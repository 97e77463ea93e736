"""A Fetch response passed on while it arrives (FetchResponseStream): what reaches the client is
the upstream's response byte for byte (bar the address rewrite), whatever the read sizes, and
large record sets never pass through user space."""

import random
import struct
import uuid
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from protocol.apis.fetch import PADDING_TAG, FetchResponseStream, same_size_tags, top_level_tags_offset
from protocol.codecs import CodecError, decode_response, encode, make, nested, response_class
from protocol.wire import uvarint

SPLICE_MIN = 64 * 1024


class Nodes:
    def learn(self, node_id, host, port, rack):
        pass

    def advertise(self, node_id):
        return ("kgw-gateway.example.internal", 30000 + node_id)


def response(version, sizes, endpoints=(), aborted=0, error=ErrorCode.none):
    """A Fetch response frame (length prefix, correlation id 7, header) whose partitions hold
    records of ``sizes`` (lists per topic)."""
    cls = response_class(1, version)
    tcls = nested(cls, "responses")
    pcls = nested(tcls, "partitions")
    acls = nested(pcls, "aborted_transactions")
    topics = []
    for t, part_sizes in enumerate(sizes):
        parts = tuple(
            make(pcls, partition_index=i32(p), error_code=error, high_watermark=i64(9), last_stable_offset=i64(9),
                 log_start_offset=i64(0), preferred_read_replica=i32(-1),
                 aborted_transactions=tuple(make(acls, producer_id=i64(a), first_offset=i64(a)) for a in range(aborted)),
                 records=bytes(random.getrandbits(8) for _ in range(min(size, 64))) * (size // 64)
                 + b"r" * (size % 64))
            for p, size in enumerate(part_sizes))
        key = {"topic_id": uuid.UUID(int=t + 1)} if version >= 13 else {"topic": f"stream-topic-{t}"}
        topics.append(tcls(partitions=parts, **key))
    fields = dict(throttle_time=timedelta(0), error_code=ErrorCode.none, session_id=i32(3), responses=tuple(topics))
    if version >= 16:
        fields["node_endpoints"] = endpoints
    body = encode(make(cls, **fields))
    header = struct.pack(">i", 7) + (b"\x00" if version >= 12 else b"")
    return struct.pack(">i", len(header) + len(body)) + header + body


def pass_on(version, frame, head_size, read_sizes, splice_min=SPLICE_MIN):
    """Drive a stream as the data plane does; returns (bytes the client got, bytes handed
    through user space, bytes moved)."""
    stream = FetchResponseStream(version, frame[:head_size], len(frame) - head_size, Nodes(), splice_min)
    at = head_size
    client, through_user, moved = [], 0, 0
    reads = iter(read_sizes)
    while True:
        step = stream.next()
        for chunk in stream.take():
            client.append(bytes(chunk))
            through_user += len(chunk)
        if step == stream.DONE:
            break
        if step == 0:
            n = min(next(reads, 4096), stream.left)
            stream.receive(frame[at : at + n])
            at += n
        else:
            client.append(frame[at : at + step])  # os.splice: never seen by the stream
            at += step
            moved += step
    assert at == len(frame) and stream.left == 0
    return b"".join(client), through_user, moved


@pytest.mark.parametrize("version", [4, 7, 11, 12, 13, 15, 16, 17, 18])
@pytest.mark.parametrize("seed", range(6))
def test_the_client_gets_the_upstream_response_byte_for_byte_whatever_the_reads(version, seed):
    rnd = random.Random(seed * 100 + version)
    sizes = [[rnd.choice([0, 10, 500, 70_000, 300_000, 1_200_000]) for _ in range(rnd.randint(0, 3))]
             for _ in range(rnd.randint(0, 3))]
    frame = response(version, sizes, aborted=rnd.randint(0, 2))
    head = rnd.randint(1, min(len(frame), 300_000))
    reads = [rnd.choice([1, 7, 100, 4096, 65536, 262144]) for _ in range(100_000)]
    out, through_user, moved = pass_on(version, frame, head, reads)
    assert out == frame
    large = sum(max(size - SPLICE_MIN, 0) for part_sizes in sizes for size in part_sizes)
    # every large record set but what arrived in the head (or a read) bypasses user space
    assert moved >= large - head - 262144 * sum(1 for p in sizes for s in p if s)
    assert through_user + moved == len(frame)


def test_a_4_mib_record_set_crosses_user_space_only_in_the_head():
    frame = response(17, [[4 << 20]])
    out, through_user, moved = pass_on(17, frame, 256 * 1024, [65536] * 100)
    assert out == frame
    assert through_user == 256 * 1024 + 3  # the head, then the partition's, topic's and top-level tags
    assert moved == len(frame) - through_user


def test_small_record_sets_are_walked_in_user_space_holding_little():
    frame = response(17, [[1000] * 500])
    out, through_user, moved = pass_on(17, frame, 512, [4096] * 10_000)
    assert out == frame and moved == 0


def without_padding(frame):
    """The frame with kgw's padding field taken out of its top-level tags (Kafka's clients skip
    an unknown tag, as KIP-482 says; kio, the decoder of these tests, refuses one)."""
    tags_at = top_level_tags_offset(memoryview(frame), 4 + 4 + 1)
    count, off = uvarint(frame, tags_at)
    fields = []
    for _ in range(count):
        start = off
        tag, off = uvarint(frame, off)
        size, off = uvarint(frame, off)
        off += size
        if tag != PADDING_TAG:
            fields.append(frame[start:off])
    assert off == len(frame)
    assert len(fields) < count, "no padding"
    return frame[:tags_at] + bytes([len(fields)]) + b"".join(fields)


def test_node_endpoints_get_gateway_addresses_at_the_size_the_upstream_gave():
    cls = nested(response_class(1, 17), "node_endpoints")
    endpoints = tuple(make(cls, node_id=i32(n), host=f"broker-{n}.a-rather-long-internal-name.example.net",
                           port=i32(9092), rack=None) for n in (1, 2))
    frame = response(17, [[300_000]], endpoints=endpoints, error=ErrorCode.not_leader_or_follower)
    out, _user, moved = pass_on(17, frame, 1024, [65536] * 100)
    assert len(out) == len(frame) and moved > 0
    decoded = decode_response(1, 17, memoryview(without_padding(out)), 4 + 4 + 1)
    assert [(n.node_id, n.host, n.port) for n in decoded.node_endpoints] == [
        (1, "kgw-gateway.example.internal", 30001), (2, "kgw-gateway.example.internal", 30002)]
    assert decoded.responses[0].partitions[0].records == response_records(frame)


def response_records(frame):
    return decode_response(1, 17, memoryview(frame), 4 + 4 + 1).responses[0].partitions[0].records


def test_node_endpoints_that_do_not_fit_are_dropped_for_padding_the_client_skips():
    cls = nested(response_class(1, 17), "node_endpoints")
    endpoints = (make(cls, node_id=i32(1), host="b1", port=i32(9092), rack=None),)
    frame = response(17, [[300_000]], endpoints=endpoints)
    out, _user, _moved = pass_on(17, frame, 1024, [65536] * 100)
    assert len(out) == len(frame)
    out = without_padding(out)
    decoded = decode_response(1, 17, memoryview(out), 4 + 4 + 1)
    assert decoded.node_endpoints == ()  # "kgw-gateway.example.internal" does not fit where "b1" was
    assert response_records(out) == response_records(frame)


@pytest.mark.parametrize("size", list(range(4, 300)))
def test_same_size_tags_pads_to_exactly_the_size(size):
    section = b"\x01\x00\x02\x01\x00"  # one field: tag 0, two bytes (an empty array, no tags)
    out = same_size_tags(section, size)
    assert len(out) == size
    count, off = uvarint(out, 0)
    tags = []
    for _ in range(count):
        tag, off = uvarint(out, off)
        length, off = uvarint(out, off)
        tags.append((tag, length))
        off += length
    assert off == size
    if size == len(section):
        assert out == section
    else:
        kept = size >= len(section) + 3  # room for the padding field (3 bytes at least) beside tag 0
        names = [t for t, _ in tags]
        assert names[:1] == ([0] if kept else [PADDING_TAG])
        assert set(names[1:]) <= {PADDING_TAG} and len(names) <= 3


@pytest.mark.parametrize("cut", [1, 2, 3, 50_000, 99_000])
def test_a_response_that_ends_early_is_refused(cut):
    frame = response(17, [[100_000]])
    broken = frame[: len(frame) - cut]
    broken = struct.pack(">i", len(broken) - 4) + broken[4:]  # the walk runs past its end
    with pytest.raises(CodecError):
        pass_on(17, broken, 8, [4096] * 1000)
