"""The data plane: one epoll thread that forwards plain-TCP connections' requests and responses.

Theory of operation
-------------------
Trio's scheduler costs a few tens of microseconds of Python per wake-up, and a
proxied request needs two (the request arrives, its response arrives).  On
small sequential requests that is most of what a gateway adds to latency
(docs/benchmarks.md).  So once a connection's client and upstream sockets are
both plain TCP and its upstream connection is open, the connection's Trio task
hands it to this thread (:mod:`gateway.connection.handoff`), which serves the *forwarding path* with a raw
level-triggered epoll loop and no task switches (the loop's polls, epoll masks, reads and writes
are C, :mod:`gateway.connection.plane_steps`, and so are the handlers every request goes through,
:meth:`_read_client`, :meth:`_process_client`, :meth:`_read_upstream` and :meth:`_flush_client`,
whose Python methods here are the references; what the rarer events mean is this class's methods):

* client readable → frame → :meth:`ConnectionCore.dispatch` (the one
  dispatcher: header parse, registry lookup, inspection and authorization,
  as on the Trio path) → the frame is queued for the upstream, or a locally
  built answer (e.g. a fully denied Produce) takes its place in the response
  order;
* upstream readable → frame → :meth:`ConnectionCore._complete` (pairing,
  rewriting, merging) → responses leave from the head of ``pending``, so the
  order is the request order, as on the Trio path.

Where the dispatcher must wait for something (SASL, the ACL and config APIs kgw
answers itself, a question to the upstream, a version table not yet fetched, a
request too large to inspect here without stalling every other lane) it returns
an :class:`~gateway.connection.core.Await`: the lane pauses (neither socket is
read), the Await goes to the connection's Trio task, which performs it with its
I/O redirected to the lane (``ClientConnection.perform``), and the lane resumes
with whatever that produced.  One Await is served here instead: a client over a client quota
(``NeedThrottle``) has its request held by the lane, which reads nothing more of the client but
goes on reading and sending the upstream's answers, and lets the request go on at the first tick
after its time (KIP-219's mute).  A response too large to complete here is *heavy*:
completed on a worker thread the same way.  The connection's state is
therefore touched by one thread at a time: by the lane while it runs, by the
Trio task while the lane is paused.

Ownership of the sockets stays with Trio: the lane only reads and writes their
file descriptors.  It never closes them; when a lane ends (end of stream, a
protocol error, an upstream deadline, a :class:`CloseConnection` from an
awaited step, gateway shutdown) it unregisters both descriptors and then tells the
Trio task, which logs, counts and closes exactly as on the Trio path.

The thread adds no parallelism (the GIL): what it removes is the scheduler
pass, the task switch and the per-wait epoll_ctl of every request.  With
``io.data_plane_cpus`` it runs on those CPUs only, where its code and data are
still in the caches at the next request (docs/operations.md).  A
request's counter, and the authorizer's count of an allowance the decision memo
answered, are incremented right after it was written upstream (``deferred``:
before its response can be read, so before the client can see it); the upstream
latency is observed before the response is written; byte counters are added
every tick (they may lag the traffic by up to 100 ms).

Back-pressure: a lane stops reading its client while ``max_in_flight``
responses are outstanding, bytes wait to go upstream, or more than
``limits.max_unsent_bytes_per_connection`` of answers wait to go to the client
(a client that sends and never reads costs that much, not what it sends), and
stops reading its upstream while bytes wait to go to the client; writes that
would block are queued and finished on EPOLLOUT.

Splicing: a response whose API has a walker (Fetch) and that kgw need not change as a whole is
not assembled when at least ``io.splice_min_bytes`` of it are still to come after its first
(16 KiB) read: the lane passes it on while it arrives (:meth:`DataPlane._pump`), the walker's
bytes written as usual and each large record set spliced upstream socket → pipe → client socket
(:mod:`gateway.connection.splicing`).  Meanwhile no new request is dispatched; the upstream's
deadline runs from its last bytes, and a client that takes none for
``limits.connections_max_idle_ms`` is closed (its pipe is never reused).

Fairness: one lane gets at most :data:`_QUANTUM` requests dispatched per turn.
Frames it still has buffered wait on the ready list while every other lane with
an event is served, then it gets its next turn (the loop then polls without
blocking); meanwhile its client socket is not read, since the decoder still
holds frames.  A client pipelining thousands of small requests in one read
therefore delays another client by at most one quantum per turn, not by its
whole read.  Deadlines: every 100 ms, lanes whose oldest
request is past its deadline are closed, and so are lanes idle (nothing in
flight, nothing read) for ``limits.connections_max_idle_ms``.  A failure
inside one lane (even a bug) closes that connection only.
"""

from __future__ import annotations

import collections
import logging
import os
import select
import threading
import time
from types import MethodType
from typing import Callable

import trio

from gateway.connection.core import CloseConnection, NeedThrottle
from gateway.connection.lane import Lane
from gateway.connection.plane_steps import handlers, receive, serve, set_masks, write_queue
from gateway.connection.splicing import PipePool, Splicing, splice
from protocol.framing import NEED_DATA, FrameError

__all__ = ["DataPlane", "Lane", "on_trio_thread"]

log = logging.getLogger("kgw.data_plane")

_RECV = 256 * 1024
_RECV_INTO_MIN = 64 * 1024
#: a client's read while a large request is arriving: up to its rest, at most this (each read
#: allocates what it asks for, then gives back what did not come)
_RECV_FRAME = 1024 * 1024
#: SO_RCVLOWAT while a record set is spliced: an eighth of what is still to come, within these
#: bounds: fewer wake-ups than the segments loopback delivers, but never so many bytes held back
#: that the client waits for them (512 KiB of a 1 MB set cost a Java consumer a fifth of its
#: throughput; docs/benchmarks.md)
_LOW_WATER = (64 * 1024, 512 * 1024)
#: the first read of a response that may be spliced: its structure, not its records
_HEAD = 16 * 1024
_TICK_MS = 100
_TICK = _TICK_MS / 1000
#: requests one lane may have dispatched per turn of the loop (see Fairness)
_QUANTUM = 64
_IN, _OUT = select.EPOLLIN, select.EPOLLOUT
_BAD = select.EPOLLERR | select.EPOLLHUP


class _ClientGone(Exception):
    """Writing to the client failed: it is gone (logged at DEBUG, as on the Trio path)."""


def _write_failed(lane: Lane, fd: int, e: OSError) -> Exception:
    """What a failed write to ``fd`` ends ``lane`` with: the client is gone, or the upstream lost."""
    if fd == lane.cfd:
        return _ClientGone(str(e))
    return CloseConnection(f"upstream connection lost while sending: {e}", "upstream")


def on_trio_thread() -> bool:
    """True when called from the thread running Trio (where Trio APIs may be used)."""
    try:
        trio.lowlevel.current_trio_token()
    except RuntimeError:
        return False
    return True


class DataPlane:
    """The epoll thread.  :meth:`run` is the thread's body; the other public methods are thread-safe."""

    def __init__(self, splice_min: int = 0, pipes: int = 0, cpus: tuple[int, ...] = ()) -> None:
        #: record sets of a Fetch response with this many bytes still to come are spliced (0: never)
        self._splice_min = splice_min
        #: the CPUs :meth:`run` keeps its thread on (``io.data_plane_cpus``; empty: any)
        self._cpus = cpus
        self.pipes = PipePool(pipes if splice_min > 0 else 0)
        self._ep = select.epoll()
        self._epfd = self._ep.fileno()  # (for the steps in C: gateway/connection/plane_steps.py)
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._wake_lock = threading.Lock()
        self._ep.register(self._wake, _IN)
        self._commands: collections.deque = collections.deque()
        self._lanes: dict[int, Lane] = {}  # fd (client or upstream) -> lane
        #: lanes with frames left over from their last turn, served in order after the events
        self._ready: collections.deque[Lane] = collections.deque()
        #: turns of the loop (one poll and what it served): tests count them, not time
        self.turns = 0
        self._stop = False
        self._next_tick = 0.0
        #: False once :meth:`run` has returned (nothing will answer a release any more)
        self.running = True
        if handlers is not None:  # the C handlers stand for the methods (plane_steps.handlers)
            self._read_client = MethodType(handlers.read_client, self)  # type: ignore[method-assign]
            self._read_upstream = MethodType(handlers.read_upstream, self)  # type: ignore[method-assign]
            self._process_client = MethodType(handlers.process_client, self)  # type: ignore[method-assign]
            self._flush_client = MethodType(handlers.flush_client, self)  # type: ignore[method-assign]

    # ------------------------------------------------------------ thread-safe
    def call_soon(self, fn: Callable, *args) -> None:
        self._commands.append((fn, args))
        with self._wake_lock:  # never write to the eventfd's number once it is closed (and maybe reused)
            if self._wake >= 0:
                os.eventfd_write(self._wake, 1)

    def adopt(self, lane: Lane) -> None:
        self.call_soon(self._adopt, lane)

    def resume(self, lane: Lane, frames: list) -> None:
        """The awaited step is done: ``frames`` go upstream, the lane reads again."""
        self.call_soon(self._resume, lane, frames)

    def drain(self, lane: Lane) -> None:
        """Read no new request on ``lane``; end it ("eof") once every request is answered."""
        self.call_soon(self._drain, lane)

    def release(self, lane: Lane, flush: bool) -> None:
        """Stop serving ``lane`` (Trio closes the sockets next); it posts ``("released",)``."""
        self.call_soon(self._release, lane, flush)

    def stop(self) -> None:
        self._stop = True
        self.call_soon(lambda: None)

    @property
    def stopping(self) -> bool:
        return self._stop

    # ------------------------------------------------------------------ loop
    def run(self) -> None:
        lanes, commands, ready = self._lanes, self._commands, self._ready
        # (the thread is lent by Trio's thread cache: its CPUs are given back when run returns)
        lent_cpus = os.sched_getaffinity(0) if self._cpus else None
        try:
            if self._cpus:
                try:
                    os.sched_setaffinity(0, self._cpus)  # (0: this thread, on Linux)
                except OSError as e:
                    raise RuntimeError(f"io.data_plane_cpus {list(self._cpus)}: {e}") from None
            while not self._stop:
                # polls and their events until one of the steps below is due (plane_steps.serve):
                # each lane's event to _client_event or _upstream_event (a plain EPOLLIN straight
                # to _read_client or _read_upstream), then _set_masks, lane.metrics, _drained_yet
                serve(self, 0 if ready else (_TICK_MS if lanes else -1))
                if ready:
                    for _ in range(len(ready)):  # those ready before this turn: one quantum each
                        lane = ready.popleft()
                        lane.queued = False
                        if not lane.closed and not lane.paused:
                            self._guarded(lane, self._process_client, lane)
                while commands:
                    fn, args = commands.popleft()
                    fn(*args)
                if lanes:
                    now = time.monotonic()
                    if now >= self._next_tick:
                        self._next_tick = now + _TICK
                        self._expire(now)
        finally:
            self.running = False
            for lane in list({id(v): v for v in lanes.values()}.values()):
                self._end(lane, ("closed", CloseConnection("gateway is shutting down", "shutdown")))
            while commands:  # lanes adopted or released after the last pass: answer them too
                _fn, args = commands.popleft()
                lane = args[0] if args and isinstance(args[0], Lane) else None
                if lane is not None and not lane.closed:
                    lane.closed = True
                    lane.post(("closed", CloseConnection("gateway is shutting down", "shutdown")))
                elif lane is not None:
                    lane.post(("released",))
            self.pipes.close()
            self._ep.close()
            with self._wake_lock:
                os.close(self._wake)
                self._wake = -1
            if lent_cpus is not None:
                os.sched_setaffinity(0, lent_cpus)

    def _guarded(self, lane: Lane, fn, *args) -> None:
        try:
            fn(*args)
            self._set_masks(lane)
            lane.metrics()
        except Exception as e:
            self._failed(lane, e)

    def _failed(self, lane: Lane, e: Exception) -> None:
        if isinstance(e, CloseConnection):
            self._end(lane, ("closed", e))
        elif isinstance(e, _ClientGone):
            self._end(lane, ("broken",))
        else:  # a bug in one connection's handling must not stop the thread
            log.error("data plane: connection failed", exc_info=e, extra=lane.conn.log_fields())
            self._end(lane, ("closed", CloseConnection(f"internal error: {type(e).__name__}: {e}", "internal")))

    # -------------------------------------------------------------- commands
    def _adopt(self, lane: Lane) -> None:
        if self.pipes.size:
            lane.udec.defer_from = self._splice_min
        self._lanes[lane.cfd] = lane
        self._lanes[lane.ufd] = lane
        self._guarded(lane, self._start, lane)

    def _start(self, lane: Lane) -> None:
        self._process_client(lane)

    def _resume(self, lane: Lane, frames: list) -> None:
        if lane.closed:
            return
        lane.paused = False
        lane.uout.extend(memoryview(f) for f in frames)
        self._guarded(lane, self._after_await, lane)
        if lane.draining:
            self._drained_yet(lane)

    def _drain(self, lane: Lane) -> None:
        if lane.closed:
            return
        lane.draining = True
        if not lane.paused:
            self._guarded(lane, self._set_masks, lane)  # stop reading the client
            self._drained_yet(lane)

    def _drained_yet(self, lane: Lane) -> None:
        if (not lane.closed and not lane.paused and not lane.conn.pending and not lane.cout
                and not lane.uout):
            self._end(lane, ("eof", 0))

    def _after_await(self, lane: Lane) -> None:
        self._flush_client(lane)
        self._process_client(lane)

    def _release(self, lane: Lane, flush: bool) -> None:
        if lane.closed:
            lane.post(("released",))
            return
        if flush:
            try:
                self._flush_client(lane)
            except Exception:
                pass
        self._end(lane, ("released",))

    def _end(self, lane: Lane, message: tuple) -> None:
        if lane.closed:
            return
        lane.closed = True
        for fd, mask in ((lane.cfd, lane.cmask), (lane.ufd, lane.umask)):
            self._lanes.pop(fd, None)
            if mask:
                try:
                    self._ep.unregister(fd)
                except (OSError, ValueError):
                    pass
        lane.cmask = lane.umask = 0
        if lane.splicing is not None:  # its pipe may hold bytes: closed, not reused
            self.pipes.discard(lane.splicing.pipe)
            lane.splicing = None
        lane.count_bytes()
        lane.metrics()
        lane.post(message)

    def _expire(self, now: float) -> None:
        seen = set()
        for lane in list(self._lanes.values()):
            if id(lane) in seen or lane.closed:
                continue
            seen.add(id(lane))
            sent = lane.n_out
            lane.count_bytes()
            in_flight = lane.conn.in_flight
            sp = lane.splicing
            if sp is not None and (lane.cout or sp.in_pipe):  # a spliced response waits for the client
                if sent:
                    sp.client_at = now
                elif now >= sp.client_at + lane.conn.idle_s:  # (as a broker closes a client that reads nothing)
                    self._end(lane, ("closed", CloseConnection(
                        f"the client read nothing of a response for {lane.conn.idle_s * 1000:.0f} ms "
                        "(limits.connections_max_idle_ms)", "idle")))
            elif in_flight and now >= in_flight[0].deadline:
                self._end(lane, ("closed", lane.conn.timeout_error(in_flight[0])))
            elif not lane.paused:  # (a paused lane's connection belongs to its Trio task)
                try:
                    lane.conn.check_timeouts(now)  # idle for connections_max_idle_ms
                except CloseConnection as e:
                    self._end(lane, ("closed", e))
                    continue
                if lane.held is not None and now >= lane.held.until:
                    self._guarded(lane, self._release_held, lane)

    def _release_held(self, lane: Lane) -> None:
        """A client's throttle has passed: its held request goes on, then what it sent after."""
        step, lane.held = lane.held, None
        outcome = step.then(None, lane.uout)
        if type(outcome) is NeedThrottle:
            lane.held = outcome
        elif outcome is not True and outcome is not False:
            lane.paused = True
            lane.post(("await", outcome))
            return
        if lane.uout:
            self._write(lane, lane.ufd, lane.uout, False)
        if outcome is True:
            lane.metrics()
            self._flush_client(lane)
        self._process_client(lane)

    # ---------------------------------------------------------------- events
    def _client_event(self, lane: Lane, ev: int) -> None:
        # (a plain EPOLLIN while nothing is spliced comes not here but to _read_client, by
        # plane_steps.serve: what this method would do with it)
        if lane.splicing is not None:
            self._pump(lane)  # (the client is not read meanwhile: only EPOLLOUT is asked for)
            return
        if ev & _OUT and lane.cout:
            self._write(lane, lane.cfd, lane.cout, True)
            if not lane.cout:
                self._flush_client(lane)
        if ev & (_IN | _BAD) and lane.cmask & _IN:
            self._read_client(lane)

    def _upstream_event(self, lane: Lane, ev: int) -> None:
        # (a plain EPOLLIN while nothing is spliced goes straight to _read_upstream: see above)
        if lane.splicing is not None:
            if ev & _OUT and lane.uout:
                self._write(lane, lane.ufd, lane.uout, False)
            if ev & (_IN | _BAD):
                self._pump(lane)
            return
        if ev & _OUT and lane.uout:
            self._process_client(lane)  # writes what is queued, then takes more requests
        if ev & (_IN | _BAD) and lane.umask & _IN and not lane.closed:
            self._read_upstream(lane)

    def _read_client(self, lane: Lane) -> None:
        dec = lane.cdec
        to_come = dec.to_come  # the rest of a large request: in fewer reads (and turns)
        n = receive(lane.cfd, dec, _RECV if to_come <= _RECV else min(to_come, _RECV_FRAME), _RECV_INTO_MIN)
        if n == 0:
            self._end(lane, ("eof", dec.buffered if dec.in_frame else 0))
            return
        if n > 0:
            lane.n_in += n
            lane.conn.last_read = time.monotonic()
            self._process_client(lane)

    def _process_client(self, lane: Lane) -> None:
        """Write what waits for the upstream, then dispatch buffered client frames and write
        them, until the decoder needs data, max_in_flight is reached or a request must await."""
        if lane.closed or lane.paused:
            return
        uout = lane.uout
        if uout:
            self._write(lane, lane.ufd, uout, False)
            if uout:
                return  # the upstream is not taking more now: EPOLLOUT resumes us
        if lane.draining or lane.held is not None or lane.splicing is not None:
            return  # no new request while the gateway stops, the client waits out a throttle or a response is spliced
        conn, dec = lane.conn, lane.cdec
        pending, limit = conn.pending, conn.max_in_flight
        budget = _QUANTUM
        while True:
            answered = False
            frame = None
            while len(pending) < limit and conn.unsent < conn.max_unsent:  # (conn.muted, inlined)
                if not budget:
                    self._requeue(lane)  # its next frames wait for the other lanes' turn
                    break
                try:  # (next_request, inlined)
                    frame = dec.next_frame()
                except FrameError as e:
                    raise CloseConnection(str(e), "frame") from None
                if frame is NEED_DATA:
                    lane.backlog = False
                    break
                lane.backlog = True
                budget -= 1
                outcome = conn.dispatch(frame, uout)
                if outcome is False:  # forwarded (the usual outcome)
                    if not dec.buffered:  # nothing more was read: no frame to look for
                        lane.backlog = False
                        frame = NEED_DATA
                        break
                    continue
                if outcome is True:
                    answered = True
                elif type(outcome) is NeedThrottle:  # over a quota: held here, the answers still read
                    lane.held = outcome
                    break
                else:  # an Await: performed on the connection's Trio task
                    lane.paused = True
                    lane.post(("await", outcome))
                    break
            if uout:
                self._write(lane, lane.ufd, uout, False)  # (before an awaited one: the requests ahead of it)
            if not answered:
                return
            lane.metrics()  # counted before the client can see the answers
            self._flush_client(lane)  # local answers free their slots at once ...
            if (frame is NEED_DATA or lane.paused or lane.closed or uout or len(pending) >= limit or not budget
                    or conn.unsent >= conn.max_unsent):
                return  # ... so frames held back by max_in_flight may go on

    def _requeue(self, lane: Lane) -> None:
        if not lane.queued:
            lane.queued = True
            self._ready.append(lane)

    def _read_upstream(self, lane: Lane) -> None:
        dec = lane.udec
        in_flight = lane.conn.in_flight
        # a response that may be spliced: only its head is read here, not a whole _RECV of its records
        n = receive(lane.ufd, dec, _HEAD if dec.defer_from and in_flight and in_flight[0].spec.stream_response
                    and not dec.buffered else _RECV, _RECV_INTO_MIN)
        if n == 0:
            raise CloseConnection("upstream closed the connection", "upstream")
        if n < 0:
            return
        conn = lane.conn
        completed = conn.complete_responses(dec)
        if conn.heavy is not None:  # a large response to decode: on a worker thread, lane paused
            if completed:
                self._flush_client(lane)
            lane.paused = True
            lane.post(("heavy",))
            return
        if completed:
            self._flush_client(lane)
        if dec.deferred:  # a large response begins: passed on as it arrives if it can be
            self._open_splicing(lane)
            if lane.splicing is not None:
                return
        if completed and lane.cdec.buffered and not lane.paused:
            self._process_client(lane)  # requests held back by max_in_flight may go now

    # ------------------------------------------------------------- splicing
    def _open_splicing(self, lane: Lane) -> None:
        """Pass the response the upstream decoder held back on while it arrives, its large record
        sets spliced (gateway/connection/splicing.py); or let the decoder take it as usual."""
        dec = lane.udec
        pipe = None if lane.cout or lane.closed else self.pipes.acquire()
        if pipe is None:
            dec.materialize()
            return
        head, left = dec.deferred_frame()
        try:
            walker = lane.conn.open_stream(head, left, self._splice_min)
        except BaseException:
            self.pipes.release(pipe)
            raise
        if walker is None:
            self.pipes.release(pipe)
            dec.materialize()
            return
        dec.take_deferred()
        lane.splicing = Splicing(walker, pipe, lane.conn._upstream.stream.socket, time.monotonic())
        self._pump(lane)

    def _pump(self, lane: Lane) -> None:
        """Move the spliced response on as far as both sockets allow: the walker's bytes, then a
        record set through the pipe, then the walker again once the pipe is empty."""
        sp = lane.splicing
        walker, conn, cout = sp.walker, lane.conn, lane.cout
        r, w, _capacity = sp.pipe
        client_full = upstream_dry = False  # a short move: that side is not tried again this time
        while not lane.closed:
            if cout:
                self._write(lane, lane.cfd, cout, True)
            progress = False
            if sp.in_pipe and not cout and not client_full:  # (the walker's bytes in cout precede the pipe's)
                try:
                    n = splice(r, lane.cfd, sp.in_pipe)
                except OSError as e:
                    raise _ClientGone(str(e)) from None
                client_full = n < sp.in_pipe
                if n > 0:
                    sp.in_pipe -= n
                    lane.n_out += n
                    lane.n_spliced += n
                    progress = True
            if sp.moving and sp.in_pipe < sp.capacity and not upstream_dry:
                want = min(sp.moving, sp.capacity - sp.in_pipe)
                try:
                    n = splice(lane.ufd, w, want)
                except OSError as e:
                    raise CloseConnection(f"upstream connection lost while receiving: {e}", "upstream") from None
                if n == 0:
                    raise CloseConnection("upstream closed the connection", "upstream")
                upstream_dry = n < want
                if n > 0:
                    sp.moving -= n
                    sp.in_pipe += n
                    progress = True
            if sp.moving or sp.in_pipe or cout:
                if progress:
                    conn.stream_progress()
                    continue
                if sp.moving and sp.in_pipe < sp.capacity:  # wake when a good part of the set is there
                    sp.wake_at(min(sp.moving, sp.capacity - sp.in_pipe,
                                   max(_LOW_WATER[0], min(sp.moving >> 3, _LOW_WATER[1]))))
                return  # EPOLLIN on the upstream, EPOLLOUT on the client
            if sp.need:  # the walker's turn: the record set has gone whole
                sp.wake_at(1)
                try:
                    data = os.read(lane.ufd, min(walker.left, _RECV))
                except BlockingIOError:
                    return
                except ConnectionError:
                    data = b""
                if not data:
                    raise CloseConnection("upstream closed the connection", "upstream")
                walker.receive(data)
                conn.stream_progress()
                sp.need = False
            step = walker.next()
            for chunk in walker.take():
                cout.append(memoryview(chunk))
                conn.unsent += len(chunk)
            if step == walker.DONE:
                self._splicing_done(lane)
                return
            if step > 0:
                sp.moving = step
            else:
                sp.need = True

    def _splicing_done(self, lane: Lane) -> None:
        sp, lane.splicing = lane.splicing, None
        sp.wake_at(1)
        self.pipes.release(sp.pipe)
        lane.conn.stream_done()
        self._flush_client(lane)
        self._process_client(lane)  # requests the client sent meanwhile

    def _flush_client(self, lane: Lane) -> None:
        """Move completed responses from the head of ``pending`` to the client, in order."""
        pending, cout = lane.conn.pending, lane.cout
        while pending and pending[0].data is not None:
            cout.append(pending.popleft().data)
        if cout and not lane.closed:
            self._write(lane, lane.cfd, cout, True)

    @staticmethod
    def _write(lane: Lane, fd: int, out: collections.deque, to_client: bool) -> None:
        """Write ``out`` (bytes-like chunks) until done or the socket would block."""
        try:
            sent = write_queue(fd, out)
        except OSError as e:
            raise _write_failed(lane, fd, e) from None
        if to_client:
            lane.n_out += sent
            lane.conn.unsent -= sent

    def _set_masks(self, lane: Lane) -> None:
        """Register ``lane``'s descriptors for what its state asks (plane_steps.set_masks)."""
        set_masks(self, lane)


if handlers is not None:
    handlers.configure(NeedThrottle, _write_failed, _QUANTUM, _RECV, _RECV_FRAME, _RECV_INTO_MIN, _HEAD)
