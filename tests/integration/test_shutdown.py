"""SIGTERM drains: every request kgw read is answered, and nothing unanswered was written.

A client pipelines 200 Produce requests of 64 KiB through kgw to tansu and kgw
gets SIGTERM once the first answer is back.  kgw stops reading, answers what it
read, closes the connection and exits 0.  The client may not get an answer for
every request it *sent* (kgw no longer reads them: they never reach the broker,
and a client retries them elsewhere); the point is that the records in the broker
are exactly those answered, so a retrying client writes nothing twice.
"""

from __future__ import annotations

import signal
import socket
import struct
import threading
from datetime import timedelta

import pytest
from kio.static.primitive import i16, i32

from gateway.upstream.cluster import encode_request
from protocol.codecs import decode_response, nested, request_class
from tests.integration.test_hostile_clients import _batch, _create, _upstream_values

pytestmark = pytest.mark.integration


def _produce(topic: str, value: bytes):
    cls = request_class(0, 9)
    tcls = nested(cls, "topic_data")
    pcls = nested(tcls, "partition_data")
    return cls(transactional_id=None, acks=i16(-1), timeout=timedelta(seconds=10), topic_data=(
        tcls(name=topic, partition_data=(pcls(index=i32(0), records=_batch(value)),)),))


def _read_frame(sock: socket.socket) -> bytes | None:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (size,) = struct.unpack(">i", head)
    body = b""
    while len(body) < size:
        chunk = sock.recv(min(size - len(body), 1 << 20))
        if not chunk:
            return None
        body += chunk
    return body


def test_sigterm_answers_what_was_read_and_writes_nothing_unanswered(start_gateway, tansu, topic_name):
    _create(tansu, topic_name)
    gw = start_gateway({}, name="drain")
    host, port = gw.broker_addresses[111].rsplit(":", 1)
    n = 200
    frames = [encode_request(0, 9, corr, _produce(topic_name, corr.to_bytes(4, "big") + b"x" * 65536))
              for corr in range(n)]
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sender = threading.Thread(target=lambda: _send_all(sock, frames), daemon=True)
        sender.start()
        answered = []
        first = _read_frame(sock)
        assert first is not None
        answered.append(first)
        gw.process.proc.send_signal(signal.SIGTERM)
        while (frame := _read_frame(sock)) is not None:  # until the gateway closes the connection
            answered.append(frame)
        sender.join(30)
    assert gw.process.wait_exit(30) == 0
    errors = []
    for i, frame in enumerate(answered):
        (corr,) = struct.unpack_from(">i", frame)
        assert corr == i  # in request order, none skipped
        response = decode_response(0, 9, frame, 5)
        errors += [p.error_code for t in response.responses for p in t.partition_responses]
    assert set(errors) == {0}
    stored = [int.from_bytes(v[:4], "big") for v in _upstream_values(tansu, topic_name)]
    assert sorted(stored) == list(range(len(answered)))  # exactly the answered ones, each once
    assert "drained: every request in flight was answered" in gw.stderr_path.read_text()
    print(f"\n[drain] {len(answered)} of {n} requests answered before the connection closed")


def _send_all(sock: socket.socket, frames: list[bytes]) -> None:
    try:
        for frame in frames:
            sock.sendall(frame)
    except OSError:
        pass  # the gateway stopped reading and closed: the rest was never read
