"""How the data plane reads a client: the rest of a large request in reads of up to 1 MiB (each
read is an epoll turn and a system call; 256 KiB reads cost a 1 MiB Produce four of each),
anything else in reads of 256 KiB, and the request arrives whole and copied once."""

from __future__ import annotations

import os
import select
import socket
import struct
import threading
from types import SimpleNamespace

from gateway.connection import data_plane
from protocol.framing import NEED_DATA, FrameDecoder


def test_the_rest_of_a_large_request_is_read_in_pieces_of_up_to_1_mib(monkeypatch):
    wire = struct.pack(">i", (3 << 20) - 4) + os.urandom((3 << 20) - 4)
    a, b = socket.socketpair()
    a.setblocking(False)
    dp = data_plane.DataPlane()
    try:
        sizes: list[int] = []
        real_read = os.read
        monkeypatch.setattr(os, "read", lambda fd, n: (sizes.append(n) if fd == a.fileno() else None) or real_read(fd, n))
        monkeypatch.setattr(dp, "_process_client", lambda lane: None)
        lane = SimpleNamespace(cfd=a.fileno(), cdec=FrameDecoder(64 << 20), n_in=0, conn=SimpleNamespace(last_read=0.0))
        writer = threading.Thread(target=lambda: [b.sendall(wire[i:i + 100_000]) for i in range(0, len(wire), 100_000)])
        writer.start()
        frame = NEED_DATA
        while frame is NEED_DATA:
            select.select([a], [], [], 5)
            dp._read_client(lane)
            frame = lane.cdec.next_frame()
        writer.join()
        assert bytes(frame) == wire and lane.n_in == len(wire)
        assert sizes[0] == 256 * 1024  # nothing known yet
        assert max(sizes) == 1 << 20 and all(n >= 256 * 1024 for n in sizes)
        assert lane.cdec.copied <= len(wire)
    finally:
        dp._ep.close()
        os.close(dp._wake)
        a.close()
        b.close()


def test_a_client_announcing_a_huge_request_is_never_read_for_more_than_1_mib_at_once(monkeypatch):
    """Each read allocates what it asks for: a client announcing 64 MiB and sending 2 MiB must not
    make kgw allocate from the announced length."""
    sent = struct.pack(">i", 64 << 20) + os.urandom(2 << 20)
    a, b = socket.socketpair()
    a.setblocking(False)
    dp = data_plane.DataPlane()
    try:
        sizes: list[int] = []
        real_read = os.read
        monkeypatch.setattr(os, "read", lambda fd, n: (sizes.append(n) if fd == a.fileno() else None) or real_read(fd, n))
        monkeypatch.setattr(dp, "_process_client", lambda lane: lane.cdec.next_frame())
        lane = SimpleNamespace(cfd=a.fileno(), cdec=FrameDecoder(128 << 20), n_in=0, conn=SimpleNamespace(last_read=0.0))
        writer = threading.Thread(target=lambda: b.sendall(sent))
        writer.start()
        while lane.n_in < len(sent):
            select.select([a], [], [], 5)
            dp._read_client(lane)
        writer.join()
        assert len(sizes) >= 2 and max(sizes) == 1 << 20
        assert lane.cdec.allocated == 0  # (kept as the reads' own chunks until whole)
    finally:
        dp._ep.close()
        os.close(dp._wake)
        a.close()
        b.close()
