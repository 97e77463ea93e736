"""How the data plane reads a client: the rest of a large request in reads of up to 1 MiB (each
read is an epoll turn and a system call; 256 KiB reads cost a 1 MiB Produce four of each), or
straight into the request once no more than 1 MiB of it is to come, anything else in reads of
256 KiB, and the request arrives whole and copied at most once.  Each read
allocates what it asks for, so the cap is also a bound on what a client makes kgw allocate.

Both reads run: the C handler (gateway/connection/_plane_steps.c) and its reference,
``DataPlane._read_client``.  What a read asked for is seen as what it allocated (tracemalloc's
peak during the read, which the interpreter's allocator reports for C and Python alike)."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
import threading
import tracemalloc
from types import SimpleNamespace

import pytest

from gateway.connection import data_plane
from protocol.framing import NEED_DATA, FrameDecoder

#: what a read allocates besides the bytes it asks for (the bytes object's header, a view)
_OVERHEAD = 4096


@pytest.fixture(params=["c", "python"])
def handlers(request, monkeypatch) -> None:
    if request.param == "python":
        monkeypatch.setattr(data_plane, "handlers", None)
    elif data_plane.handlers is None:
        pytest.fail("the data plane's C handlers were not built (make setup builds them)")


@contextlib.contextmanager
def client_sending(wire: bytes, pieces: int):
    """A data plane reading ``wire`` from a client that sends it in ``pieces``-byte writes;
    yields (the data plane, the lane, the sizes each read of the client asked for)."""
    a, b = socket.socketpair()
    a.setblocking(False)
    dp = data_plane.DataPlane()
    dp._process_client = lambda lane: None  # (the reference's dispatch after each read: none here)
    writer = threading.Thread(target=lambda: [b.sendall(wire[i:i + pieces]) for i in range(0, len(wire), pieces)])
    # closed: the C handler's own dispatch after each read goes no further
    lane = SimpleNamespace(cfd=a.fileno(), cdec=FrameDecoder(128 << 20), n_in=0, conn=SimpleNamespace(last_read=0.0),
                           closed=True, paused=False)
    tracemalloc.start()
    try:
        writer.start()
        yield dp, lane
    finally:
        tracemalloc.stop()
        a.close()  # (a writer still blocked, after a failure, gets an error and ends)
        if writer.is_alive():
            writer.join(10)
        b.close()
        dp._ep.close()
        os.close(dp._wake)


def read_once(dp, lane, sizes: list[int]) -> None:
    """One read of the client, as an EPOLLIN makes it; what it allocated joins ``sizes``."""
    select.select([lane.cfd], [], [], 5)
    before = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    dp._read_client(lane)
    sizes.append(tracemalloc.get_traced_memory()[1] - before)


def test_the_rest_of_a_large_request_is_read_in_pieces_of_up_to_1_mib(handlers):
    wire = struct.pack(">i", (3 << 20) - 4) + os.urandom((3 << 20) - 4)
    sizes: list[int] = []
    in_place: list[bool] = []  # whether each read could go into the request's own buffer
    with client_sending(wire, 100_000) as (dp, lane):
        frame = NEED_DATA
        while frame is NEED_DATA:
            in_place.append(lane.cdec._buffer is not None and lane.cdec.to_come >= data_plane._RECV_INTO_MIN)
            read_once(dp, lane, sizes)
            frame = lane.cdec.next_frame()
    assert bytes(frame) == wire and lane.n_in == len(wire)
    assert 256 * 1024 <= sizes[0] < 256 * 1024 + _OVERHEAD  # nothing known yet
    assert (1 << 20) <= max(sizes) < (1 << 20) + _OVERHEAD
    # kept as the reads' chunks while more than 1 MiB was to come; then received into the
    # request's own buffer (protocol/framing.py, Rule 3) while at least 64 KiB was: those reads
    # allocate nothing
    assert in_place[0] is False and any(in_place)
    assert all(n >= 256 * 1024 for n, into in zip(sizes, in_place) if not into)
    assert all(n < _OVERHEAD for n, into in zip(sizes, in_place) if into)
    assert lane.cdec.copied < len(wire)
    assert lane.conn.last_read > 0  # (the idle timeout's clock)


def test_a_client_announcing_a_huge_request_is_never_read_for_more_than_1_mib_at_once(handlers):
    """A client announcing 64 MiB and sending 2 MiB must not make kgw allocate from the
    announced length."""
    sent = struct.pack(">i", 64 << 20) + os.urandom(2 << 20)
    sizes: list[int] = []
    with client_sending(sent, len(sent)) as (dp, lane):
        while lane.n_in < len(sent):
            read_once(dp, lane, sizes)
            assert lane.cdec.next_frame() is NEED_DATA
    assert len(sizes) >= 2 and (1 << 20) <= max(sizes) < (1 << 20) + _OVERHEAD
    assert lane.cdec.allocated == 0  # (kept as the reads' own chunks until whole)


def _send_rest(sock: socket.socket, data: bytes) -> None:
    with contextlib.suppress(OSError):  # (the reader is closed once it read what the test looks at)
        sock.sendall(data)


def test_a_read_past_the_first_asks_for_what_is_still_to_come(handlers):
    """A request of which 100 KB arrived and more than 256 KiB is still to come (not yet received
    in place) is read for exactly what is to come of it, not for its whole announced size."""
    wire = struct.pack(">i", (800 << 10) - 4) + os.urandom((800 << 10) - 4)
    a, b = socket.socketpair()
    a.setblocking(False)
    dp = data_plane.DataPlane()
    dp._process_client = lambda lane: None
    lane = SimpleNamespace(cfd=a.fileno(), cdec=FrameDecoder(128 << 20), n_in=0, conn=SimpleNamespace(last_read=0.0),
                           closed=True, paused=False)
    sizes: list[int] = []
    tracemalloc.start()
    writer = None
    try:
        b.sendall(wire[:100_000])
        read_once(dp, lane, sizes)
        assert lane.cdec.next_frame() is NEED_DATA  # (as the dispatch after each read asks)
        to_come = lane.cdec.to_come
        assert lane.n_in == 100_000 and to_come == len(wire) - 100_000 and lane.cdec._buffer is None
        writer = threading.Thread(target=_send_rest, args=(b, wire[100_000:]))
        writer.start()
        read_once(dp, lane, sizes)
    finally:
        tracemalloc.stop()
        a.close()
        if writer is not None:
            writer.join(10)
        b.close()
        dp._ep.close()
        os.close(dp._wake)
    assert to_come <= sizes[1] < to_come + _OVERHEAD
