"""Large Fetch responses on the data plane: record sets spliced upstream socket → pipe → client
socket (gateway/connection/splicing.py), the response reaching the client byte for byte, in its
place in the response order, with its pipe back in the pool; a broker that dies mid-response
closes the client's connection, it does not hang it."""

from __future__ import annotations

import socket
import struct
import uuid
from datetime import timedelta

import pytest
import trio
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64

from protocol.codecs import encode, make, nested, request_class, response_class
from tests.unit.gateway.fake_broker import FakeBroker
from tests.unit.gateway.test_connection import RawClient, _start_gateway, use_python_steps

VERSION = 17


@pytest.fixture(autouse=True, params=["c", "python"], ids=["c-steps", "python-steps"])
def plane_steps(request, monkeypatch) -> None:
    """Every test runs with the data plane's per-event steps in C, then the Python references
    (a spliced response's epoll masks are theirs)."""
    if request.param == "python":
        use_python_steps(monkeypatch)


def fetch_body(sizes, endpoints=()):
    """The same response body (of ``VERSION``) every time: partitions with records of ``sizes``."""
    def build(version):
        cls = response_class(1, version)
        tcls = nested(cls, "responses")
        pcls = nested(tcls, "partitions")
        parts = tuple(make(pcls, partition_index=i32(p), error_code=ErrorCode.none, high_watermark=i64(9),
                           last_stable_offset=i64(9), log_start_offset=i64(0), aborted_transactions=(),
                           preferred_read_replica=i32(-1), records=bytes([p % 251]) * 7 + uuid.uuid4().bytes * (size // 16))
                      for p, size in enumerate(sizes))
        return encode(make(cls, throttle_time=timedelta(0), error_code=ErrorCode.none, session_id=i32(0),
                           responses=(tcls(topic_id=uuid.UUID(int=5), partitions=parts),), node_endpoints=endpoints))
    body = build(VERSION)
    return lambda version: body


def fetch_request():
    cls = request_class(1, VERSION)
    tcls = nested(cls, "topics")
    pcls = nested(tcls, "partitions")
    return make(cls, max_wait=timedelta(milliseconds=100), min_bytes=i32(1), max_bytes=i32(50 << 20),
                isolation_level=0, session_id=i32(0), session_epoch=i32(-1), rack_id="",
                topics=(tcls(topic_id=uuid.UUID(int=5), partitions=(make(
                    pcls, partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(0),
                    last_fetched_epoch=i32(-1), log_start_offset=i64(-1), partition_max_bytes=i32(8 << 20)),)),),
                forgotten_topics_data=())


async def broker_with(nursery, sizes, pieces=1, pause=0.0, cut=None) -> FakeBroker:
    """A scripted broker answering every Fetch with records of ``sizes``, sent in ``pieces``
    ``pause`` seconds apart (``cut``: it closes the connection after that many bytes)."""
    broker = FakeBroker()
    broker.fetch_body = fetch_body(sizes)
    broker.fetch_pieces, broker.fetch_pause, broker.fetch_cut = pieces, pause, cut
    await nursery.start(broker.serve)
    return broker


async def gateway_with(nursery, tmp_path, broker, limits=None, **io):
    broker.versions[1] = (4, VERSION)
    gateway, port = await _start_gateway(nursery, tmp_path, broker, True, io={"data_plane_thread": True, **io},
                                         **({"limits": limits} if limits else {}))
    return gateway, port, await RawClient.connect(port)


def spliced(gateway) -> float:
    return sum(s.value for m in gateway.metrics.bytes_spliced.collect() for s in m.samples
               if s.name.endswith("_total"))


async def until_counted(gateway, at_least):
    with trio.fail_after(10):
        while spliced(gateway) < at_least:  # byte counters are added every tick (100 ms)
            await trio.sleep(0.02)


@pytest.mark.parametrize("pieces", [1, 40])
async def test_a_large_record_set_is_spliced_and_arrives_byte_for_byte(nursery, tmp_path, pieces):
    broker = await broker_with(nursery, [4 << 20, 300, 600_000], pieces, 0.002)
    gateway, _port, client = await gateway_with(nursery, tmp_path, broker)
    expected = struct.pack(">i", 21) + b"\x00" + broker.fetch_body(VERSION)
    for correlation_id in (21, 22):
        await client.send(1, VERSION, correlation_id, fetch_request())
        frame = await client.receive_frame()
        assert frame[4:] == struct.pack(">i", correlation_id) + expected[4:]
    # both large record sets of both responses went through the pipe (all but a first read's worth)
    await until_counted(gateway, 2 * (4 << 20) + 2 * 600_000 - 2 * 2 * 256 * 1024)
    assert gateway.data_plane.pipes.open == 1  # one pipe, reused


async def test_answers_after_a_spliced_response_keep_their_place(nursery, tmp_path):
    broker = await broker_with(nursery, [3 << 20], 30, 0.003)
    gateway, _port, client = await gateway_with(nursery, tmp_path, broker)
    await client.send(16, 4, 1, request_class(16, 4)(states_filter=()))  # on the data plane from here
    assert (await client.receive(16, 4))[0] == 1
    await client.send(1, VERSION, 2, fetch_request())
    await client.send(18, 0, 3, request_class(18, 0)())  # answered by kgw itself
    await client.send(16, 4, 4, request_class(16, 4)(states_filter=()))  # forwarded
    order = []
    for _ in range(3):
        frame = await client.receive_frame()
        order.append(struct.unpack_from(">i", frame, 4)[0])
    assert order == [2, 3, 4]
    await until_counted(gateway, (3 << 20) - 256 * 1024)


async def test_a_client_reading_slowly_gets_the_bytes_in_order(nursery, tmp_path):
    """The walker's bytes (a small record set, read through kgw) wait for the client while the
    next record set already fills the pipe: the pipe must not overtake them."""
    broker = await broker_with(nursery, [100_000, 3 << 20])
    gateway, port, _ = await gateway_with(nursery, tmp_path, broker)
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the kernel holds little for it
    await sock.connect(("127.0.0.1", port))
    client = RawClient(trio.SocketStream(sock))
    await client.send(1, VERSION, 5, fetch_request())
    await trio.sleep(0.3)  # not a synchronisation: the client is slow, the pipe fills meanwhile
    got = bytearray()
    expected = struct.pack(">i", 5) + b"\x00" + broker.fetch_body(VERSION)
    with trio.fail_after(30):
        while len(got) < 4 + len(expected):
            got += await client.stream.receive_some(8192)
    assert bytes(got[4:]) == expected
    await until_counted(gateway, (3 << 20) - 256 * 1024)


async def test_a_broker_dying_mid_response_closes_the_client_connection(nursery, tmp_path):
    broker = await broker_with(nursery, [4 << 20], cut=2 << 20)
    gateway, _port, client = await gateway_with(nursery, tmp_path, broker)
    await client.send(1, VERSION, 7, fetch_request())
    got = 0
    with trio.fail_after(10):
        while data := await client.stream.receive_some(1 << 20):
            got += len(data)
    assert got < 4 << 20  # the connection ended before the whole response
    with trio.fail_after(10):
        while gateway.data_plane.pipes.open:  # the pipe that held the rest was closed
            await trio.sleep(0.02)


async def test_a_client_leaving_mid_response_frees_its_pipe(nursery, tmp_path):
    broker = await broker_with(nursery, [6 << 20], 60, 0.005)
    gateway, port, client = await gateway_with(nursery, tmp_path, broker)
    await client.send(1, VERSION, 8, fetch_request())
    got = 0
    with trio.fail_after(10):
        while got < 1 << 20:
            got += len(await client.stream.receive_some(1 << 20))
    await client.stream.aclose()  # gone with five of its six MiB still to come
    with trio.fail_after(10):
        while gateway.data_plane.pipes.open or gateway.connections:
            await trio.sleep(0.02)
    other = await RawClient.connect(port)
    await other.send(1, VERSION, 9, fetch_request())
    assert (await other.receive_frame())[8:] == b"\x00" + broker.fetch_body(VERSION)


async def test_a_client_that_reads_nothing_of_a_spliced_response_is_closed_when_idle(nursery, tmp_path):
    """A response waiting for the client is not the upstream's delay (no upstream timeout), but a
    client that reads nothing for connections_max_idle_ms is closed, its pipe freed: as a broker
    closes a channel without activity.  Otherwise 64 such clients would hold every pipe forever."""
    broker = await broker_with(nursery, [16 << 20])
    gateway, port, _ = await gateway_with(nursery, tmp_path, broker, limits={"connections_max_idle_ms": 300})
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.connect(("127.0.0.1", port))
    client = RawClient(trio.SocketStream(sock))
    await client.send(1, VERSION, 3, fetch_request())
    with trio.fail_after(5):
        while not gateway.data_plane.pipes.open:  # the response is being spliced
            await trio.sleep(0.02)
    with trio.fail_after(10):
        while gateway.data_plane.pipes.open:  # closed for idleness, the pipe with it
            await trio.sleep(0.05)
    got = 0
    with trio.fail_after(10):
        while data := await client.stream.receive_some(1 << 20):
            got += len(data)
    assert got < 16 << 20  # the connection ended before the whole response


async def test_splicing_off_forwards_the_same_bytes_through_memory(nursery, tmp_path):
    broker = await broker_with(nursery, [2 << 20])
    gateway, _port, client = await gateway_with(nursery, tmp_path, broker, splice_min_bytes=0)
    await client.send(1, VERSION, 9, fetch_request())
    frame = await client.receive_frame()
    assert frame[8:] == b"\x00" + broker.fetch_body(VERSION)
    assert spliced(gateway) == 0 and gateway.data_plane.pipes.open == 0
