"""The sans-IO frame decoder, fed whole, one byte at a time, and with trailing data."""

import struct

import pytest

from protocol.framing import NEED_DATA, FrameDecoder, FrameTooLarge, InvalidFrame, frame


def frames_of(decoder: FrameDecoder) -> list[bytes]:
    out = []
    while (f := decoder.next_frame()) is not NEED_DATA:
        out.append(bytes(f))
    return out


BODIES = [b"a", b"", b"hello world" * 100, bytes(range(256))]
STREAM = b"".join(frame(b) for b in BODIES)


def test_whole_stream_in_one_chunk_returns_each_frame_with_its_prefix():
    d = FrameDecoder(1 << 20)
    d.receive_data(STREAM)
    assert frames_of(d) == [frame(b) for b in BODIES]
    assert d.buffered == 0


def test_one_byte_at_a_time():
    d = FrameDecoder(1 << 20)
    out = []
    for i in range(len(STREAM)):
        d.receive_data(STREAM[i : i + 1])
        out.extend(frames_of(d))
    assert out == [frame(b) for b in BODIES]


@pytest.mark.parametrize("cut", [1, 3, 4, 5, 17, len(STREAM) - 1])
def test_split_anywhere(cut):
    d = FrameDecoder(1 << 20)
    d.receive_data(STREAM[:cut])
    first = frames_of(d)
    d.receive_data(STREAM[cut:])
    assert first + frames_of(d) == [frame(b) for b in BODIES]


def test_trailing_partial_frame_is_kept_and_reported():
    d = FrameDecoder(1 << 20)
    d.receive_data(frame(b"x") + struct.pack(">i", 10) + b"abc")
    assert frames_of(d) == [frame(b"x")]
    assert d.in_frame and d.buffered == 7


def test_oversized_length_is_refused_before_allocation():
    d = FrameDecoder(1000)
    d.receive_data(struct.pack(">i", 1001))
    with pytest.raises(FrameTooLarge, match="1001 bytes exceeds the limit of 1000"):
        d.next_frame()


def test_negative_length_is_invalid():
    d = FrameDecoder(1000)
    d.receive_data(struct.pack(">i", -5))
    with pytest.raises(InvalidFrame):
        d.next_frame()


def test_whole_frames_in_a_chunk_are_views_not_copies():
    d = FrameDecoder(1 << 20)
    chunk = frame(b"abc") + frame(b"def")
    d.receive_data(chunk)
    f = d.next_frame()
    assert isinstance(f, memoryview) and f.obj is chunk


def test_frames_assembled_across_reads_are_read_only_views():
    # kio's native readers refuse writable buffers: a reassembled frame must be read-only
    d = FrameDecoder(1 << 20)
    d.receive_data(STREAM[:7])
    frames_of(d)
    d.receive_data(STREAM[7:])
    out = []
    while (f := d.next_frame()) is not NEED_DATA:
        out.append(f)
    assert all(f.readonly for f in out)


# ---------------------------------------------------------------- memory follows the bytes (Rule 3)

def _buffer_capacity(decoder) -> int:
    return len(decoder._partial) if decoder._partial is not None else 0


def test_an_announced_length_allocates_nothing_beyond_what_arrived():
    """A 4-byte length of 100 MiB plus one byte must not cost 100 MiB (hostile-client finding 6)."""
    from protocol.framing import INITIAL_PARTIAL

    decoder = FrameDecoder(200 * 1024 * 1024)
    decoder.receive_data(struct.pack(">i", 100 * 1024 * 1024) + b"x" * 46)
    assert decoder.next_frame() is NEED_DATA
    assert _buffer_capacity(decoder) <= 50 + INITIAL_PARTIAL


def test_a_large_frame_grows_with_its_bytes_and_arrives_whole_both_ways():
    body = bytes(range(256)) * 4096 * 3  # 3 MiB
    wire = struct.pack(">i", len(body)) + body
    # chunks fed with receive_data
    decoder = FrameDecoder(len(body))
    capacities = []
    for i in range(0, len(wire), 10_000):
        decoder.receive_data(wire[i : i + 10_000])
        got = decoder.next_frame()
        capacities.append(_buffer_capacity(decoder))
    assert bytes(got) == wire
    assert max(capacities) <= len(wire)
    assert capacities[0] < 100_000  # started small
    # received straight into the buffer (recv_into path)
    decoder = FrameDecoder(len(body))
    decoder.receive_data(wire[:1000])
    assert decoder.next_frame() is NEED_DATA
    pos = 1000
    while pos < len(wire):
        space = decoder.partial_space()
        assert space is not None
        n = min(len(space), 70_000, len(wire) - pos)
        space[:n] = wire[pos : pos + n]
        decoder.partial_filled(n)
        held = space[:n]  # a caller may still hold a view of the old buffer while it grows
        pos += n
    assert bytes(decoder.next_frame()) == wire
    del held


def test_the_limit_can_change_between_frames_and_names_its_setting():
    decoder = FrameDecoder(16, "sasl.server.max.receive.size")
    decoder.receive_data(struct.pack(">i", 17))
    with pytest.raises(FrameTooLarge, match=r"17 bytes exceeds the limit of 16 bytes \(sasl.server.max.receive.size\)"):
        decoder.next_frame()
    decoder = FrameDecoder(16)
    decoder.limit = 32
    decoder.receive_data(struct.pack(">i", 17) + b"y" * 17)
    assert len(decoder.next_frame()) == 21


# ---------------------------------------------------------------- counts checked before kio reads them

def test_an_array_count_beyond_the_frame_is_refused_before_kio_allocates_for_it():
    """A 50-byte ShareGroupDescribe (79 v1) found by the hostile-client fuzzer: its array
    count made kio's native reader ask for 182 GB and abort the whole process."""
    from protocol.codecs import CodecError, decode_request

    crasher = bytes.fromhex("004f0001000000050003" "6b6777" "00056f6b2d6701" "00275fe4d0dba6ed5417ef4e"
                            "c6ad82ae0bbafe98bb020020000101000000")
    with pytest.raises(CodecError, match="claim"):
        decode_request(79, 1, memoryview(crasher), 14)


def test_the_length_walk_agrees_with_kio_on_every_request_kgw_handles():
    """Every (API, version) kgw advertises, sampled 5 ways: the walk ends exactly where kio's
    encoding ends, and a count made larger than the frame is refused."""
    import random

    from protocol.apis.registry import REGISTRY
    from protocol.bounds import LengthError, check_lengths
    from protocol.codecs import encode, request_class
    from tests.support.kio_samples import sample

    names = {"topic": ["t"], "group": ["g"], "transactional_id": ["x"]}
    checked = 0
    for seed in range(5):
        rnd = random.Random(seed)
        for key, spec in REGISTRY.items():
            if key == 88:  # the sample builder cannot encode StreamsGroupHeartbeat (kio range quirk)
                continue
            for version in range(spec.versions[0], spec.versions[1] + 1):
                cls = request_class(key, version)
                body = encode(sample(cls, rnd, names))
                assert check_lengths(cls, memoryview(body), 0) == len(body), (key, version)
                checked += 1
    assert checked > 1000
    metadata = bytearray(encode(sample(request_class(3, 4), random.Random(1), names)))
    metadata[0:4] = struct.pack(">i", 2_000_000_000)  # the topics count of Metadata v4
    with pytest.raises(LengthError):
        check_lengths(request_class(3, 4), memoryview(bytes(metadata)), 0)
