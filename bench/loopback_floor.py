#!/usr/bin/env python3
"""What this machine's kernel charges a proxy for moving bytes between two loopback sockets.

    .venv/bin/python bench/loopback_floor.py [--gib 1] [--rounds 3]

No broker and no Kafka: a sender thread writes ``--gib`` GiB into one TCP connection, a
proxy thread moves it to a second connection, a receiver thread reads it; the proxy thread's
CPU time (user + system, ``time.thread_time``) per GB is printed for two pumps, alternating:

* ``copy``: ``os.readv`` into a 256 KiB buffer, ``os.write`` out (what an L4 proxy without
  splicing does, and kgw's data plane for what it does not splice);
* ``splice``: ``os.splice`` socket → pipe (1 MiB) → socket (kgw's path for large Fetch
  record sets, gateway/connection/splicing.py).

On loopback the sender of each write also runs the receiving socket's TCP processing, so
these are floors for any proxy on this machine: a gateway cannot spend less CPU per GB
forwarded than the pump it uses.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import platform
import socket
import statistics
import threading
import time

_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


def _pair() -> tuple[socket.socket, socket.socket]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    a = socket.create_connection(listener.getsockname())
    b, _ = listener.accept()
    listener.close()
    return a, b


def run(mode: str, total: int) -> float:
    """Proxy CPU seconds per GB (1e9 bytes) for ``total`` bytes through the ``mode`` pump."""
    src, proxy_in = _pair()
    proxy_out, dst = _pair()
    cpu: dict[str, float] = {}

    def send() -> None:
        chunk = memoryview(b"k" * (1 << 20))
        left = total
        while left > 0:
            left -= src.send(chunk[: min(left, len(chunk))])
        src.shutdown(socket.SHUT_WR)

    def receive() -> None:
        buf = bytearray(1 << 20)
        while dst.recv_into(buf):
            pass

    def proxy() -> None:
        started = time.thread_time()
        fin, fout = proxy_in.fileno(), proxy_out.fileno()
        if mode == "copy":
            buf = bytearray(256 * 1024)
            view = memoryview(buf)
            while n := os.readv(fin, [buf]):
                sent = 0
                while sent < n:
                    sent += os.write(fout, view[sent:n])
        else:
            r, w = os.pipe()
            fcntl.fcntl(w, _F_SETPIPE_SZ, 1 << 20)
            while n := os.splice(fin, w, 1 << 20):
                while n:
                    n -= os.splice(r, fout, n)
            os.close(r)
            os.close(w)
        proxy_out.shutdown(socket.SHUT_WR)
        cpu["s"] = time.thread_time() - started

    threads = [threading.Thread(target=f) for f in (send, receive, proxy)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in (src, proxy_in, proxy_out, dst):
        s.close()
    return cpu["s"] / total * 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    total = int(args.gib * (1 << 30))
    print(f"loopback floor, {args.gib} GiB per run; {platform.machine()}, Python {platform.python_version()}, "
          f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    results: dict[str, list[float]] = {"copy": [], "splice": []}
    for round_no in range(args.rounds):
        for mode in ("copy", "splice") if round_no % 2 == 0 else ("splice", "copy"):
            results[mode].append(run(mode, total))
            print(f"round {round_no + 1} {mode:6} proxy CPU {results[mode][-1]:.2f} s per GB", flush=True)
    for mode, values in results.items():
        print(f"median {mode:6} {statistics.median(values):.2f} s per GB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
