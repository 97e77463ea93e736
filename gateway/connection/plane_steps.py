"""The data plane's steps that run for every socket event: its polls and the events they return
(:func:`serve`), a lane's epoll masks after an event (:func:`set_masks`), a read into a frame
decoder (:func:`receive`) and the write of a queue of outgoing chunks (:func:`write_queue`).

Each is C where it was built (gateway/connection/_plane_steps.c, built in place by ``make
setup`` as the Produce walk is) and Python otherwise; the Python ones (``*_python``) are the
reference, and the suite runs both on the same cases (tests/unit/gateway/test_plane_steps.py,
and the data plane's own tests on either pair).  The C module also holds the handlers every
request goes through (:data:`handlers`: reading a client and dispatching its frames, reading the
upstream and flushing answers in order), which stand for the
:class:`~gateway.connection.data_plane.DataPlane`'s methods of those names, their references.
What a request means (dispatch, authorization) is Python either way; pairing a response with its
request is C too (``complete_responses``, called by ``ConnectionCore.complete_responses``; its
reference is ``ConnectionCore.complete_responses_python``).
"""

from __future__ import annotations

import collections
import math
import os
import select
import time
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from gateway.connection.lane import Lane

__all__ = ["handlers", "receive", "receive_python", "serve", "serve_python", "set_masks", "set_masks_python",
           "write_queue", "write_queue_python"]

#: chunks given to one writev by the reference (the C one gives at most 128)
IOV_MAX = 512
#: events one poll returns at most
MAX_EVENTS = 256
_IN, _OUT = select.EPOLLIN, select.EPOLLOUT


def serve_python(plane: Any, timeout_ms: int) -> int:
    """Poll ``plane``'s epoll and serve the events, turn after turn, until its loop has
    something else to do: it is stopping, a lane is on its ready list, a command is queued, or
    (while any lane is served) its tick (``plane._next_tick``, on the monotonic clock) is due.
    The first poll waits up to ``timeout_ms`` (-1: no limit), the later ones until the tick
    (without limit when no lane is served: a command wakes the poll).  Each poll is a turn
    (``plane.turns``).  Returns the events served."""
    lanes, ready, commands = plane._lanes, plane._ready, plane._commands
    served = 0
    while True:
        plane.turns += 1
        served += _serve_events(plane, lanes, timeout_ms)
        if plane._stop or ready or commands:
            return served
        if lanes:
            wait = plane._next_tick - time.monotonic()
            if wait <= 0:
                return served
            timeout_ms = math.ceil(wait * 1000)
        else:
            timeout_ms = -1


def _serve_events(plane: Any, lanes: dict, timeout_ms: int) -> int:
    """One poll: each lane's event goes to its handler, then the lane's masks are set, the
    counters it deferred added and a draining lane ended if it is done; the wake-up eventfd is
    emptied.  A paused lane's events are left to it; an event for a descriptor no lane holds any
    more (an earlier event of the same poll ended it) is dropped.  An ``Exception`` out of one
    lane's steps ends that lane (``plane._failed``), not the loop.  Returns the events polled."""
    try:
        events = plane._ep.poll(timeout_ms / 1000 if timeout_ms >= 0 else -1, MAX_EVENTS)
    except InterruptedError:
        return 0
    for fd, ev in events:
        lane = lanes.get(fd)
        if lane is None:
            if fd == plane._wake:
                try:
                    os.eventfd_read(fd)
                except BlockingIOError:
                    pass
            continue
        if lane.paused:
            continue
        try:
            _handle_event(plane, lane, fd, ev)
            set_masks_python(plane, lane)
            if lane.deferred:
                lane.metrics()  # after the upstream writes: off the request's latency
            if lane.draining:
                plane._drained_yet(lane)
        except Exception as e:
            plane._failed(lane, e)
    return len(events)


def _handle_event(plane: Any, lane: "Lane", fd: int, ev: int) -> None:
    """A lane's event to its handler: a plain EPOLLIN on a lane that splices nothing to the read
    that handler would make (when that side is polled for it and, upstream, the lane is open:
    nothing else of the handler applies then), any other to ``_client_event`` or
    ``_upstream_event``."""
    client = fd == lane.cfd
    if ev == _IN and lane.splicing is None:
        if client:
            if lane.cmask & _IN:
                plane._read_client(lane)
        elif lane.umask & _IN and not lane.closed:
            plane._read_upstream(lane)
    elif client:
        plane._client_event(lane, ev)
    else:
        plane._upstream_event(lane, ev)


def set_masks_python(plane: Any, lane: "Lane") -> None:
    """Register what ``lane``'s two descriptors are to be polled for, from its state: the
    client is read only while it may send a request (nothing waits to go upstream, below
    max_in_flight and the unsent-answers limit, not draining, held or backlogged: a backlogged
    lane is put on ``plane``'s ready list instead), the upstream while nothing waits for the
    client; each is written to while bytes wait for it.  A spliced response asks only for what
    moves it.  Registrations change only where the mask did."""
    if lane.closed:
        return
    cout, uout, sp = lane.cout, lane.uout, lane.splicing
    if sp is not None:  # (never paused: nothing is dispatched meanwhile)
        waits = cout or sp.in_pipe
        umask = _IN if (sp.moving and sp.in_pipe < sp.capacity) or (sp.need and not waits) else 0
        if uout:
            umask |= _OUT
        cmask = _OUT if waits else 0
    elif lane.paused:
        cmask = umask = 0
    else:
        conn = lane.conn
        if (uout or lane.draining or lane.held is not None or len(conn.pending) >= conn.max_in_flight
                or conn.unsent >= conn.max_unsent):
            cmask = 0  # it takes no request now
        elif lane.backlog:  # frames still buffered from the last read: served from the ready list, not the socket
            cmask = 0
            plane._requeue(lane)
        else:
            cmask = _IN
        if cout:
            cmask |= _OUT
            umask = _OUT if uout else 0
        else:
            umask = _IN | _OUT if uout else _IN
    if cmask != lane.cmask:  # (after most events neither mask changes)
        _apply(plane._ep, lane.cfd, lane.cmask, cmask)
        lane.cmask = cmask
    if umask != lane.umask:
        _apply(plane._ep, lane.ufd, lane.umask, umask)
        lane.umask = umask


def _apply(ep: select.epoll, fd: int, old: int, new: int) -> None:
    """Change ``fd``'s registration from mask ``old`` to ``new`` (they differ)."""
    if new == 0:
        ep.unregister(fd)
    elif old == 0:
        ep.register(fd, new)
    else:
        ep.modify(fd, new)


def receive_python(fd: int, decoder: Any, size: int, into_min: int) -> int:
    """Read what is available on the non-blocking ``fd`` into ``decoder``: up to ``size`` bytes,
    or, when a frame is being assembled in place (protocol/framing.py, Rule 3) and at least
    ``into_min`` of it is still to come, straight into that frame.  Returns the bytes read, 0 at
    end of stream (or when the peer reset the connection), -1 if nothing was there; other errors
    raise (OSError)."""
    # (a client's decoder has a frame to read into only once that frame is nearly whole)
    space = decoder.partial_space() if decoder.trusted or decoder._buffer is not None else None
    try:
        if space is not None and len(space) >= into_min:
            n = os.readv(fd, (space,))
            if n:
                decoder.partial_filled(n)
            return n
        data = os.read(fd, size)
    except BlockingIOError:
        return -1
    except ConnectionError:
        return 0
    if data:
        decoder.receive_data(data)
    return len(data)


def write_queue_python(fd: int, out: collections.deque) -> int:
    """Write ``out``'s bytes-like chunks to the non-blocking ``fd`` until ``out`` is empty or
    ``fd`` would block; what was written leaves ``out`` (a chunk written in part is replaced by
    a memoryview of its rest).  Returns the bytes written; an error other than EAGAIN raises
    (OSError), what the writes before it wrote already removed."""
    total = 0
    while out:
        try:
            if len(out) == 1:
                head = out[0]
                sent = os.write(fd, head)
                if sent == len(head):
                    out.clear()
                else:
                    out[0] = memoryview(head)[sent:]
            else:
                sent = os.writev(fd, [out[i] for i in range(min(len(out), IOV_MAX))])
                left = sent
                while out and left >= len(out[0]):
                    left -= len(out.popleft())
                if left:
                    out[0] = memoryview(out[0])[left:]
        except BlockingIOError:
            break
        total += sent
    return total


receive: Callable[[int, Any, int, int], int]
serve: Callable[[Any, int], int]
set_masks: Callable[[Any, "Lane"], None]
write_queue: Callable[[int, collections.deque], int]
#: the C module whose ``read_client``, ``read_upstream``, ``process_client`` and ``flush_client``
#: stand for the DataPlane's methods of those names (each ``(plane, lane)``; the methods are their
#: references), or None where it was not built
handlers: Any
try:  # the C ones, built by setup.py where a compiler is found
    from gateway.connection import _plane_steps as handlers
    from gateway.connection._plane_steps import receive, serve, set_masks, write_queue
except ImportError:  # pragma: no cover - a build without a compiler: the references alone
    handlers = None
    receive, serve, set_masks, write_queue = receive_python, serve_python, set_masks_python, write_queue_python
