"""How the data plane reads a client: the rest of a large request in reads of up to 1 MiB (each
read is an epoll turn and a system call; 256 KiB reads cost a 1 MiB Produce four of each),
anything else in reads of 256 KiB, and the request arrives whole and copied once.  Each read
allocates what it asks for, so the cap is also a bound on what a client makes kgw allocate."""

from __future__ import annotations

import contextlib
import os
import select
import socket
import struct
import threading
from types import SimpleNamespace

from gateway.connection import data_plane
from protocol.framing import NEED_DATA, FrameDecoder


@contextlib.contextmanager
def client_sending(monkeypatch, wire: bytes, pieces: int, process):
    """A data plane reading ``wire`` from a client that sends it in ``pieces``-byte writes;
    yields (the data plane, the lane, the sizes each read of the client asked for).
    ``process(lane)`` stands for the dispatch that follows each read."""
    a, b = socket.socketpair()
    a.setblocking(False)
    dp = data_plane.DataPlane()
    writer = threading.Thread(target=lambda: [b.sendall(wire[i:i + pieces]) for i in range(0, len(wire), pieces)])
    try:
        sizes: list[int] = []
        real_receive = data_plane.receive
        monkeypatch.setattr(data_plane, "receive", lambda fd, dec, n, into_min: (
            sizes.append(n) if fd == a.fileno() else None) or real_receive(fd, dec, n, into_min))
        monkeypatch.setattr(dp, "_process_client", process)
        lane = SimpleNamespace(cfd=a.fileno(), cdec=FrameDecoder(128 << 20), n_in=0, conn=SimpleNamespace(last_read=0.0))
        writer.start()
        yield dp, lane, sizes
    finally:
        a.close()  # (a writer still blocked, after a failure, gets an error and ends)
        if writer.is_alive():
            writer.join(10)
        b.close()
        dp._ep.close()
        os.close(dp._wake)


def read_once(dp, lane) -> None:
    select.select([lane.cfd], [], [], 5)
    dp._read_client(lane)


def test_the_rest_of_a_large_request_is_read_in_pieces_of_up_to_1_mib(monkeypatch):
    wire = struct.pack(">i", (3 << 20) - 4) + os.urandom((3 << 20) - 4)
    with client_sending(monkeypatch, wire, 100_000, lambda lane: None) as (dp, lane, sizes):
        frame = NEED_DATA
        while frame is NEED_DATA:
            read_once(dp, lane)
            frame = lane.cdec.next_frame()
    assert bytes(frame) == wire and lane.n_in == len(wire)
    assert sizes[0] == 256 * 1024  # nothing known yet
    assert max(sizes) == 1 << 20 and all(n >= 256 * 1024 for n in sizes)
    assert lane.cdec.copied <= len(wire)


def test_a_client_announcing_a_huge_request_is_never_read_for_more_than_1_mib_at_once(monkeypatch):
    """A client announcing 64 MiB and sending 2 MiB must not make kgw allocate from the
    announced length."""
    sent = struct.pack(">i", 64 << 20) + os.urandom(2 << 20)
    with client_sending(monkeypatch, sent, len(sent), lambda lane: lane.cdec.next_frame()) as (dp, lane, sizes):
        while lane.n_in < len(sent):
            read_once(dp, lane)
    assert len(sizes) >= 2 and max(sizes) == 1 << 20
    assert lane.cdec.allocated == 0  # (kept as the reads' own chunks until whole)
