#!/usr/bin/env python3
"""What opening one upstream connection costs kgw's Trio thread, in process: ``open_upstream``
(gateway/upstream/cluster.py: an IP address, or a host name's one address kept for
``ADDRESS_TTL_S``, connected to directly) against ``trio.open_tcp_stream``, which it used for
every client connection (a look-up on a worker thread for a name, then happy eyeballs).

    .venv/bin/python bench/upstream_connect.py
    .venv/bin/python bench/upstream_connect.py --hosts 127.0.0.1 broker.example.internal --connects 200

Each of ``--hosts`` must resolve to this machine (``localhost`` through /etc/hosts by default; a
name in DNS shows what a query per connection adds).  A local listener accepts and closes each
connection; wall and process CPU time per connect, three rounds, the two ways in turn.
"""

from __future__ import annotations

import argparse
import socket
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.upstream.cluster import open_upstream  # noqa: E402


async def measure(args) -> None:
    listener = socket.socket()
    listener.bind(("0.0.0.0", 0))
    listener.listen(4096)
    port = listener.getsockname()[1]

    async def direct_then_kept(host: str) -> trio.abc.Stream:
        return await open_upstream(host, port, 5)

    async def happy_eyeballs(host: str) -> trio.abc.Stream:
        with trio.fail_after(5):
            return await trio.open_tcp_stream(host, port)

    for round_ in range(3):
        for name, connect in (("trio.open_tcp_stream", happy_eyeballs), ("open_upstream", direct_then_kept)):
            for host in args.hosts:
                streams = []
                wall, cpu = time.perf_counter(), time.process_time()
                for _ in range(args.connects):
                    streams.append(await connect(host))
                    accepted, _ = listener.accept()
                    accepted.close()
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                for s in streams:
                    s.socket.close()
                print(f"round {round_ + 1}  {name:20} {host:24} {wall / args.connects * 1e6:6.0f} us wall  "
                      f"{cpu / args.connects * 1e6:6.0f} us CPU per connect", flush=True)
    listener.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", nargs="+", default=["127.0.0.1", "localhost"])
    ap.add_argument("--connects", type=int, default=500)
    trio.run(measure, ap.parse_args())
    return 0


if __name__ == "__main__":
    sys.exit(main())
