"""Writing a connection's queue of outgoing chunks to its socket: the data plane's writes.

:func:`write_queue` is the C one (gateway/connection/_writes.c, built in place by ``make setup``
as the Produce walk is) where it was built, :func:`write_queue_python` otherwise; that is the
reference, and the suite runs both on the same cases (tests/unit/gateway/test_writes.py).
"""

from __future__ import annotations

import collections
import os
from typing import Callable

__all__ = ["write_queue", "write_queue_python"]

#: chunks given to one writev by the reference (the C one gives at most 128)
IOV_MAX = 512


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


write_queue: Callable[[int, collections.deque], int]
try:  # the C one, built by setup.py where a compiler is found
    from gateway.connection._writes import write_queue
except ImportError:  # pragma: no cover - a build without a compiler: the reference alone
    write_queue = write_queue_python
