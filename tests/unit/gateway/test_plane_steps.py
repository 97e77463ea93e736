"""The data plane's per-event steps (gateway/connection/plane_steps.py): the C ones
(gateway/connection/_plane_steps.c) and the Python references on the same cases, over real
non-blocking sockets and a real epoll.

Writes: every byte queued arrives once and in order, what was written leaves the queue, a socket
that takes no more stops the write with the rest still queued, and an error names itself.
Reads: at most what was asked, or a trusted peer's large frame straight into it; nothing
there, the end of stream and a reset each say so.  Masks: each state of a lane registers its descriptors for what it must be polled for, as the
kernel reports them, and a mask that did not change is not touched.  The poll: each event goes
to its side's handler, then masks, deferred counters and a draining lane's end; paused and
ended lanes are left alone, the wake-up is emptied, and one lane's failure is that lane's only.
(The data plane's own tests run on both sets too: tests/unit/gateway/test_connection.py.)"""

from __future__ import annotations

import collections
import os
import select
import socket
import struct
import threading
import time
from types import SimpleNamespace

import pytest

from gateway.connection import _plane_steps, data_plane, plane_steps
from protocol.framing import NEED_DATA, FrameDecoder

WRITERS = {"c": _plane_steps.write_queue, "python": plane_steps.write_queue_python}
MASKERS = {"c": _plane_steps.set_masks, "python": plane_steps.set_masks_python}
SERVERS = {"c": _plane_steps.serve, "python": plane_steps.serve_python}
IN, OUT = select.EPOLLIN, select.EPOLLOUT


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


def test_the_c_steps_are_the_ones_the_data_plane_uses():
    assert data_plane.write_queue is _plane_steps.write_queue
    assert data_plane.set_masks is _plane_steps.set_masks
    assert data_plane.serve is _plane_steps.serve
    assert data_plane.receive is _plane_steps.receive
    assert data_plane.handlers is _plane_steps
    plane = data_plane.DataPlane()
    try:  # a data plane's handlers are the C ones, bound to it
        for name in ("read_client", "read_upstream", "process_client", "flush_client"):
            method = getattr(plane, f"_{name}")
            assert method.__func__ is getattr(_plane_steps, name) and method.__self__ is plane
    finally:
        plane._ep.close()
        os.close(plane._wake)


def test_the_c_handlers_refuse_wrong_arguments():
    with pytest.raises(TypeError, match="takes 2 arguments"):
        _plane_steps.process_client(object())
    with pytest.raises(ValueError, match="must be positive"):
        _plane_steps.configure(data_plane.NeedThrottle, data_plane._write_failed, 0, 1, 1, 1, 1)


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


# ------------------------------------------------------------------------- masks and the poll

class Plane:
    """What the steps use of a DataPlane: its epoll, wake-up eventfd and lanes, and the methods
    they call, which record their calls (a handler may be given something to do)."""

    def __init__(self) -> None:
        self._ep = select.epoll()
        self._epfd = self._ep.fileno()
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._ep.register(self._wake, IN)
        self._lanes: dict = {}
        self._ready: collections.deque = collections.deque()
        self._commands: collections.deque = collections.deque()
        self._stop = False
        self._next_tick = 0.0  # (due: with a lane, serve returns after one turn)
        self.turns = 0
        self.calls: list = []
        self.on_event = lambda lane, side: None

    def _requeue(self, lane) -> None:
        self.calls.append(("requeue", lane.name))
        self._ready.append(lane)

    def call_soon(self, command) -> None:
        self._commands.append(command)
        os.eventfd_write(self._wake, 1)

    def _client_event(self, lane, ev) -> None:
        self._event(lane, "client", ev)

    def _upstream_event(self, lane, ev) -> None:
        self._event(lane, "upstream", ev)

    def _read_client(self, lane) -> None:
        self._event(lane, "client", "read")

    def _read_upstream(self, lane) -> None:
        self._event(lane, "upstream", "read")

    def _event(self, lane, side: str, what) -> None:
        self.calls.append((side, lane.name, what))
        try:
            os.read(lane.cfd if side == "client" else lane.ufd, 1024)  # (level-triggered: taken, or it fires again)
        except OSError:
            pass
        self.on_event(lane, side)

    def _drained_yet(self, lane) -> None:
        self.calls.append(("drained_yet", lane.name))

    def _failed(self, lane, e) -> None:
        self.calls.append(("failed", lane.name, e))

    def registered(self) -> dict[int, int]:
        """fd -> the events it is registered for, as the kernel holds them (/proc's fdinfo)."""
        out = {}
        with open(f"/proc/self/fdinfo/{self._epfd}") as f:
            for line in f:
                if line.startswith("tfd:"):
                    fields = line.split()
                    out[int(fields[1])] = int(fields[3], 16) & (IN | OUT)
        out.pop(self._wake, None)
        return out

    def close(self) -> None:
        self._ep.close()
        os.close(self._wake)


class SlottedLane:
    """A stand-in with Lane's __slots__ (the C steps read such a lane's fields at their offsets)."""
    __slots__ = ("name", "cfd", "ufd", "closed", "cout", "uout", "splicing", "paused", "conn", "draining", "held",
                 "backlog", "cmask", "umask", "deferred", "metered", "sockets", "client", "upstream", "metrics",
                 "cdec", "udec", "n_in", "n_out", "post")  # (every slot the C steps know Lane by)

    def __init__(self, **fields) -> None:
        for key, value in fields.items():
            setattr(self, key, value)


def make_lane(name: str, kind=SimpleNamespace, **state):
    """A lane in its usual state (nothing queued, nothing limiting), over two socket pairs; its
    peers are ``lane.client`` and ``lane.upstream``."""
    c, client = socket.socketpair()
    u, upstream = socket.socketpair()
    for s in (c, u):
        s.setblocking(False)
    conn = SimpleNamespace(pending=collections.deque(), max_in_flight=4, unsent=0, max_unsent=1000)
    lane = kind(name=name, cfd=c.fileno(), ufd=u.fileno(), closed=False, cout=collections.deque(),
                           uout=collections.deque(), splicing=None, paused=False, conn=conn, draining=False,
                           held=None, backlog=False, cmask=0, umask=0, deferred=[], metered=0,
                           sockets=(c, client, u, upstream), client=client, upstream=upstream)

    def metrics():
        lane.metered += len(lane.deferred)
        lane.deferred.clear()
    lane.metrics = metrics
    for key, value in state.items():
        setattr(lane.conn if key in ("pending", "unsent") else lane, key, value)
    return lane


@pytest.fixture(params=[SlottedLane, SimpleNamespace], ids=["slotted-lanes", "other-lanes"])
def plane(request):
    p = Plane()
    lanes: list = []
    p.new_lane = lambda name, **state: lanes.append(make_lane(name, request.param, **state)) or lanes[-1]
    yield p
    p.close()
    for lane in lanes:
        for s in lane.sockets:
            s.close()


def registered_as(plane: Plane, lane, cmask: int, umask: int) -> None:
    """Register ``lane`` as the data plane would have for these masks."""
    for fd, mask in ((lane.cfd, cmask), (lane.ufd, umask)):
        if mask:
            plane._ep.register(fd, mask)
    lane.cmask, lane.umask = cmask, umask
    plane._lanes[lane.cfd] = plane._lanes[lane.ufd] = lane


def splicing(in_pipe=0, moving=0, capacity=100, need=False):
    return SimpleNamespace(in_pipe=in_pipe, moving=moving, capacity=capacity, need=need)


FULL = collections.deque([object()] * 4)  # (as many in flight as max_in_flight allows)
MASK_CASES = {  # state -> (client mask, upstream mask)
    "idle": ({}, IN, IN),
    "answers wait for the client": ({"cout": collections.deque([b"a"])}, IN | OUT, 0),
    "a request waits for the upstream": ({"uout": collections.deque([b"r"])}, 0, IN | OUT),
    "both wait": ({"cout": collections.deque([b"a"]), "uout": collections.deque([b"r"])}, OUT, OUT),
    "max_in_flight reached": ({"pending": FULL}, 0, IN),
    "unsent answers at their limit": ({"unsent": 1000}, 0, IN),
    "draining": ({"draining": True}, 0, IN),
    "a request held by a quota": ({"held": object()}, 0, IN),
    "frames left from the last turn": ({"backlog": True}, 0, IN),
    "paused": ({"paused": True}, 0, 0),
    "spliced: record bytes to come": ({"splicing": splicing(moving=10)}, 0, IN),
    "spliced: the pipe is full": ({"splicing": splicing(in_pipe=100, moving=10)}, OUT, 0),
    "spliced: the pipe waits for the client": ({"splicing": splicing(in_pipe=5)}, OUT, 0),
    "spliced: the walker needs bytes": ({"splicing": splicing(need=True)}, 0, IN),
    "spliced: the walker needs bytes, its own wait": (
        {"splicing": splicing(need=True), "cout": collections.deque([b"w"])}, OUT, 0),
    "spliced: a request waits for the upstream": (
        {"splicing": splicing(moving=10), "uout": collections.deque([b"r"])}, 0, IN | OUT),
}


@pytest.mark.parametrize("impl", sorted(MASKERS))
@pytest.mark.parametrize("case", sorted(MASK_CASES))
def test_each_state_registers_what_it_must_be_polled_for(plane, impl, case):
    state, cmask, umask = MASK_CASES[case]
    lane = plane.new_lane("a", **state)
    registered_as(plane, lane, IN, IN)
    MASKERS[impl](plane, lane)
    assert (lane.cmask, lane.umask) == (cmask, umask)
    expected = {fd: mask for fd, mask in ((lane.cfd, cmask), (lane.ufd, umask)) if mask}
    assert plane.registered() == expected  # what the kernel holds
    assert plane.calls == ([("requeue", "a")] if case == "frames left from the last turn" else [])


@pytest.mark.parametrize("impl", sorted(MASKERS))
def test_a_lane_unpaused_is_registered_again(plane, impl):
    lane = plane.new_lane("a")
    registered_as(plane, lane, 0, 0)
    MASKERS[impl](plane, lane)
    assert plane.registered() == {lane.cfd: IN, lane.ufd: IN} and (lane.cmask, lane.umask) == (IN, IN)


@pytest.mark.parametrize("impl", sorted(MASKERS))
def test_a_mask_that_did_not_change_is_not_touched(plane, impl):
    lane = plane.new_lane("a")
    lane.cmask = lane.umask = IN  # what the lane believes; the kernel holds nothing (a MOD would fail)
    MASKERS[impl](plane, lane)
    assert plane.registered() == {}


@pytest.mark.parametrize("impl", sorted(MASKERS))
def test_a_closed_lane_is_left_as_it_is(plane, impl):
    lane = plane.new_lane("a", closed=True, paused=True)
    registered_as(plane, lane, IN, IN)
    MASKERS[impl](plane, lane)
    assert plane.registered() == {lane.cfd: IN, lane.ufd: IN} and (lane.cmask, lane.umask) == (IN, IN)


@pytest.mark.parametrize("impl", sorted(MASKERS))
def test_an_epoll_error_is_raised(plane, impl):
    lane = plane.new_lane("a")
    lane.cmask = OUT  # believed registered, it is not: the change to IN is a MOD the kernel refuses
    with pytest.raises(FileNotFoundError):
        MASKERS[impl](plane, lane)


@pytest.fixture(params=sorted(SERVERS))
def serve(request):
    return SERVERS[request.param]


def test_each_event_goes_to_its_side_then_masks_counters_and_drain(plane, serve):
    lane = plane.new_lane("a", deferred=[1, 2], draining=True)
    registered_as(plane, lane, IN, IN)
    lane.client.send(b"request")
    lane.upstream.send(b"response")
    assert serve(plane, 1000) == 2
    assert sorted(c[:2] for c in plane.calls) == sorted(
        [("client", "a"), ("upstream", "a"), ("drained_yet", "a"), ("drained_yet", "a")])
    assert {c[2] for c in plane.calls if c[0] in ("client", "upstream")} == {"read"}  # (plain: to the read)
    assert lane.metered == 2 and not lane.deferred
    assert (lane.cmask, lane.umask) == (0, IN)  # (draining: the client is read no more)
    assert plane.registered() == {lane.ufd: IN}


def test_any_other_event_goes_to_its_side_s_handler(plane, serve):
    lane = plane.new_lane("a", cout=collections.deque([b"answer"]))
    registered_as(plane, lane, IN | OUT, 0)  # (the client writable: EPOLLOUT with the request's EPOLLIN)
    lane.client.send(b"request")
    assert serve(plane, 1000) == 1
    assert plane.calls == [("client", "a", IN | OUT)]


def test_a_plain_read_is_made_only_where_the_lane_asks_for_it(plane, serve):
    lane = plane.new_lane("a", closed=True)  # (ended by its Trio task meanwhile: left registered here)
    registered_as(plane, lane, IN, IN)
    lane.upstream.send(b"response")
    lane.cmask = 0  # (what the lane asks for, not what the kernel was told: a stale event)
    lane.client.send(b"request")
    serve(plane, 1000)
    assert plane.calls == []


def test_a_spliced_lane_s_reads_go_to_its_handler(plane, serve):
    lane = plane.new_lane("a", splicing=splicing(moving=10))
    registered_as(plane, lane, 0, IN)
    lane.upstream.send(b"records")
    assert serve(plane, 1000) == 1
    assert plane.calls == [("upstream", "a", IN)]


def test_a_handler_s_changes_set_the_masks_after_it(plane, serve):
    lane = plane.new_lane("a")
    registered_as(plane, lane, IN, IN)
    plane.on_event = lambda lane, side: lane.uout.append(b"request")  # (not written yet)
    lane.client.send(b"request")
    assert serve(plane, 1000) == 1
    assert plane.registered() == {lane.ufd: IN | OUT}


def test_a_paused_lane_s_events_are_left_to_it(plane, serve):
    lane = plane.new_lane("a", paused=True)
    registered_as(plane, lane, IN, IN)
    lane.client.send(b"request")
    assert serve(plane, 1000) == 1
    assert plane.calls == [] and plane.registered() == {lane.cfd: IN, lane.ufd: IN}


def test_a_command_ends_the_serving_and_its_wake_up_is_emptied(plane, serve):
    lane = plane.new_lane("a")
    registered_as(plane, lane, IN, IN)
    plane._next_tick = time.monotonic() + 10  # (a mistake returns at the tick, not never)
    plane.call_soon("adopt")
    assert serve(plane, 10_000) == 1 and plane.turns == 1
    assert time.monotonic() < plane._next_tick and plane.calls == []
    with pytest.raises(BlockingIOError):
        os.eventfd_read(plane._wake)


def test_serving_goes_on_turn_after_turn_until_the_tick(plane, serve):
    lane = plane.new_lane("a")
    registered_as(plane, lane, IN, IN)
    lane.client.send(b"request")
    plane._next_tick = time.monotonic() + 0.3
    assert serve(plane, 1000) == 1
    assert time.monotonic() >= plane._next_tick  # it returned for the tick ...
    assert plane.turns >= 2  # ... after polling on past the event


def test_a_command_from_another_thread_ends_the_serving(plane, serve):
    lane = plane.new_lane("a")
    registered_as(plane, lane, IN, IN)
    plane._next_tick = time.monotonic() + 10
    sender = threading.Thread(target=plane.call_soon, args=("release",))
    sender.start()
    serve(plane, 10_000)
    sender.join()
    assert time.monotonic() < plane._next_tick and list(plane._commands) == ["release"]


def test_a_lane_put_on_the_ready_list_ends_the_serving(plane, serve):
    lane = plane.new_lane("a")
    registered_as(plane, lane, IN, IN)
    plane._next_tick = time.monotonic() + 10
    plane.on_event = lambda lane, side: setattr(lane, "backlog", True)  # (frames left: requeued)
    lane.client.send(b"request")
    assert serve(plane, 10_000) == 1 and list(plane._ready) == [lane] and plane.turns == 1


def test_stopping_ends_the_serving(plane, serve):
    lane = plane.new_lane("a")
    registered_as(plane, lane, IN, IN)
    plane._next_tick = time.monotonic() + 10
    plane.on_event = lambda lane, side: setattr(plane, "_stop", True)
    lane.client.send(b"request")
    assert serve(plane, 10_000) == 1 and plane.turns == 1


def two_lanes_with_requests(plane):
    """Lanes a and b, registered as usual, each with a request from its client to read."""
    a, b = plane.new_lane("a"), plane.new_lane("b")
    for lane in (a, b):
        registered_as(plane, lane, IN, IN)
        lane.client.send(b"request")
    return a, b


def test_one_lane_s_failure_ends_that_lane_only(plane, serve):
    a, b = two_lanes_with_requests(plane)

    def fail(lane, side):
        if lane.name == "a":
            raise ValueError("a's bug")
        lane.uout.append(b"request")
    plane.on_event = fail
    assert serve(plane, 1000) == 2
    (failed,) = [c for c in plane.calls if c[0] == "failed"]
    assert failed[1] == "a" and isinstance(failed[2], ValueError) and failed[2].__traceback__ is not None
    assert ("client", "b", "read") in plane.calls and b.umask == IN | OUT  # b was served whole
    assert a.umask == IN  # (a's masks were not set after its failure)


def test_a_failing_mask_fails_its_lane(plane, serve):
    lane = plane.new_lane("a")
    registered_as(plane, lane, IN, IN)

    def behind_its_back(lane, side):  # the client's registration gone, its removal then refused
        plane._ep.unregister(lane.cfd)
        lane.uout.append(b"request")
    plane.on_event = behind_its_back
    lane.client.send(b"request")
    assert serve(plane, 1000) == 1
    assert [c[0] for c in plane.calls] == ["client", "failed"]
    assert isinstance(plane.calls[1][2], FileNotFoundError)


def test_what_is_not_an_exception_is_not_a_lane_s_failure(plane, serve):
    lane = plane.new_lane("a")
    registered_as(plane, lane, IN, IN)

    def interrupt(lane, side):
        raise KeyboardInterrupt
    plane.on_event = interrupt
    lane.client.send(b"request")
    with pytest.raises(KeyboardInterrupt):
        serve(plane, 1000)
    assert [c[0] for c in plane.calls] == ["client"]


def test_a_lane_ended_by_an_earlier_event_of_the_same_poll_is_not_served(plane, serve):
    a, b = two_lanes_with_requests(plane)

    def end_the_other(lane, side):
        other = b if lane is a else a
        plane._lanes.pop(other.cfd, None)
        plane._lanes.pop(other.ufd, None)
    plane.on_event = end_the_other
    assert serve(plane, 1000) == 2
    assert len([c for c in plane.calls if c[0] == "client"]) == 1


def test_nothing_to_poll_returns_at_the_timeout(plane, serve):
    lane = plane.new_lane("a")
    registered_as(plane, lane, IN, IN)
    assert serve(plane, 0) == 0 and plane.calls == []


# ------------------------------------------------------------------------------------- reads

RECEIVERS = {"c": _plane_steps.receive, "python": plane_steps.receive_python}


@pytest.fixture(params=sorted(RECEIVERS))
def receive(request):
    return RECEIVERS[request.param]


def test_a_read_takes_at_most_its_size_into_the_decoder(receive, pair):
    a, b = pair
    wire = struct.pack(">i", 996) + bytes(range(256)) * 3 + bytes(228)
    b.send(wire)
    decoder = FrameDecoder(1 << 20)
    assert receive(a.fileno(), decoder, 100, 64 * 1024) == 100 and decoder.buffered == 100
    assert receive(a.fileno(), decoder, 1 << 16, 64 * 1024) == 900
    assert bytes(decoder.next_frame()) == wire


def test_nothing_there_is_minus_one_and_the_end_of_stream_zero(receive, pair):
    a, b = pair
    decoder = FrameDecoder(1 << 20)
    assert receive(a.fileno(), decoder, 1024, 64 * 1024) == -1
    b.close()
    assert receive(a.fileno(), decoder, 1024, 64 * 1024) == 0 and decoder.buffered == 0


def test_a_reset_connection_reads_as_its_end(receive):
    with socket.create_server(("127.0.0.1", 0)) as server:
        peer = socket.create_connection(server.getsockname())
        a, _ = server.accept()
    with a:
        a.setblocking(False)
        peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        peer.close()  # (an RST: the read fails with ECONNRESET)
        select.select([a], [], [], 5)
        assert receive(a.fileno(), FrameDecoder(1 << 20), 1024, 64 * 1024) == 0


def test_a_trusted_peer_s_large_frame_is_read_straight_into_it(receive, pair):
    a, b = pair
    body = os.urandom(300_000)
    decoder = FrameDecoder(1 << 20, trusted=True)
    decoder.receive_data(struct.pack(">i", len(body)) + body[:1000])
    assert decoder.next_frame() is NEED_DATA
    writer = threading.Thread(target=b.sendall, args=(body[1000:],))
    b.setblocking(True)
    writer.start()
    reads = []
    frame = NEED_DATA
    while frame is NEED_DATA:  # (as the data plane does: the decoder asked after each read)
        select.select([a], [], [], 5)
        n = receive(a.fileno(), decoder, 16, 64 * 1024)
        assert n > 0
        reads.append(n)
        frame = decoder.next_frame()
    writer.join()
    assert max(reads) > 16  # reads of the frame's rest, not of 16 bytes
    assert bytes(frame)[4:] == body and decoder.allocated <= len(body) + 4


def test_a_bad_descriptor_s_read_raises(receive):
    r, w = os.pipe()
    os.close(r)
    os.close(w)
    with pytest.raises(OSError):
        receive(r, FrameDecoder(1 << 20), 1024, 64 * 1024)
