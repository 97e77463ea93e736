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
