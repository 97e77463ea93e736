"""The data plane's writes (gateway/connection/writes.py): the C one (gateway/connection/_writes.c)
and the Python reference on the same cases, over real non-blocking sockets: every byte queued
arrives once and in order, what was written leaves the queue, a socket that takes no more stops
the write with the rest still queued, and an error names itself."""

from __future__ import annotations

import collections
import os
import socket

import pytest

from gateway.connection import _writes
from gateway.connection import writes

WRITERS = {"c": _writes.write_queue, "python": writes.write_queue_python}


@pytest.fixture(params=sorted(WRITERS))
def write_queue(request):
    return WRITERS[request.param]


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # (the kernel doubles it: a few KiB)
    yield a, b
    a.close()
    b.close()


def _drain(sock: socket.socket) -> bytes:
    got = bytearray()
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except BlockingIOError:
            return bytes(got)
        if not chunk:
            return bytes(got)
        got += chunk


def test_the_c_writer_is_the_one_the_data_plane_uses():
    assert writes.write_queue is _writes.write_queue


def test_chunks_of_every_bytes_like_kind_arrive_once_and_in_order(write_queue, pair):
    a, b = pair
    data = [b"head", memoryview(b"--view--")[2:6], bytearray(b"array"), b"", b"tail"]
    out = collections.deque(data)
    assert write_queue(a.fileno(), out) == 17 and not out
    assert _drain(b) == b"headviewarraytail"


def test_an_empty_queue_writes_nothing(write_queue, pair):
    a, b = pair
    assert write_queue(a.fileno(), collections.deque()) == 0 and _drain(b) == b""


@pytest.mark.parametrize("chunks", [1, 3, 700])  # one write; writev; more chunks than one writev takes
def test_a_full_socket_stops_the_write_and_keeps_exactly_the_rest(write_queue, pair, chunks):
    a, b = pair
    payload = bytes(range(256)) * (4096 // chunks + 64)
    size = len(payload) // chunks
    out = collections.deque(payload[i * size:(i + 1) * size] for i in range(chunks))
    whole = b"".join(out)
    sent = write_queue(a.fileno(), out)
    assert 0 < sent < len(whole)  # the socket took some, not all
    rest = b"".join(bytes(c) for c in out)
    assert sent + len(rest) == len(whole) and rest == whole[sent:]
    received = _drain(b)
    assert received == whole[:sent]
    while out:  # the rest follows as the peer reads
        sent = write_queue(a.fileno(), out)
        received += _drain(b)
    assert received == whole


def test_a_closed_peer_raises_the_error_for_its_errno(write_queue, pair):
    a, b = pair
    b.close()
    out = collections.deque([b"x" * 10, b"y"])
    with pytest.raises(BrokenPipeError):
        write_queue(a.fileno(), out)
    assert list(out) == [b"x" * 10, b"y"]  # nothing was written


def test_what_is_not_bytes_like_is_refused_and_left_queued(write_queue, pair):
    a, _ = pair
    out = collections.deque([b"ok", "text"])
    with pytest.raises(TypeError):
        write_queue(a.fileno(), out)
    assert len(out) == 2


def test_a_bad_descriptor_raises(write_queue):
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    with pytest.raises(OSError):
        write_queue(w, collections.deque([b"z"]))
