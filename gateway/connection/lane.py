"""A client connection while the data plane serves it (:mod:`gateway.connection.data_plane`): its two file
descriptors, their frame decoders, the bytes queued each way, the epoll masks, and the counters
the epoll thread adds up every tick.  Touched by the epoll thread while the lane runs, by the
connection's Trio task only while it is paused."""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any, Callable

from protocol.framing import FrameDecoder

if TYPE_CHECKING:
    from gateway.connection.core import ConnectionCore

__all__ = ["Lane"]


class Lane:
    """One client connection while the data plane serves it."""

    __slots__ = ("conn", "cfd", "ufd", "cdec", "udec", "cout", "uout", "paused", "closed", "post",
                 "cmask", "umask", "bytes_in", "bytes_out", "n_in", "n_out", "deferred", "draining",
                 "backlog", "queued", "awaited_upstream", "held", "splicing", "bytes_spliced", "n_spliced")

    def __init__(self, conn: "ConnectionCore", cfd: int, ufd: int, client_decoder: FrameDecoder,
                 upstream_frames: list, post: Callable[[tuple], None]) -> None:
        self.conn = conn
        self.cfd = cfd
        self.ufd = ufd
        self.cdec = client_decoder
        self.udec = FrameDecoder((1 << 31) - 1, trusted=True)
        self.cout: collections.deque[memoryview] = collections.deque()
        self.uout: collections.deque[memoryview] = collections.deque(memoryview(f) for f in upstream_frames)
        self.paused = False
        self.closed = False
        self.post = post  # thread-safe: delivers a message to the connection's Trio task
        self.cmask = 0
        self.umask = 0
        series = conn.metrics.listener(conn.listener_name)
        self.bytes_in = series.bytes_in
        self.bytes_out = series.bytes_out
        self.bytes_spliced = series.bytes_spliced
        #: bytes not yet added to the counters above (added every tick and at the end)
        self.n_in = 0
        self.n_out = 0
        self.n_spliced = 0
        #: request counters, and decision-memo allowances, the connection deferred until the
        #: request was written upstream (see metrics(): each is counted by its inc())
        self.deferred: list = []
        #: the gateway is stopping: no new request is read; the lane ends once all are answered
        self.draining = False
        #: the client decoder may still hold whole frames (the last turn ended on its quantum, or
        #: on a limit); the socket is not read until they are dispatched
        self.backlog = bool(client_decoder.buffered)
        #: on the data plane's ready list
        self.queued = False
        #: frames an awaited step sent towards the upstream while the lane was paused (the
        #: Trio task does not write to the upstream socket then); sent when the lane resumes
        self.awaited_upstream: list[memoryview] = []
        #: a request held while the client is over a quota (a NeedThrottle step): the client is not
        #: read until it goes on, at the first tick after its time; the upstream's answers still are
        self.held: Any = None
        #: the response being passed on through a kernel pipe (gateway/connection/splicing.py)
        self.splicing: Any = None

    def metrics(self) -> None:
        deferred = self.deferred
        for counter in deferred:
            counter.inc()
        deferred.clear()

    def count_bytes(self) -> None:
        if self.n_in:
            self.bytes_in.inc(self.n_in)
            self.n_in = 0
        if self.n_out:
            self.bytes_out.inc(self.n_out)
            self.n_out = 0
        if self.n_spliced:
            self.bytes_spliced.inc(self.n_spliced)
            self.n_spliced = 0


try:  # the data plane's C counts a Lane's deferred counters as Lane.metrics, its reference, does
    from gateway.connection import _plane_steps
except ImportError:  # pragma: no cover - a build without a compiler: Lane.metrics alone
    pass
else:
    _plane_steps.configure_lane(Lane)
