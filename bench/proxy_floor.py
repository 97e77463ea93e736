#!/usr/bin/env python3
"""Latency floor of a Python proxy: single-record produce latency through do-nothing byte pumps.

    .venv/bin/python bench/proxy_floor.py [--requests 2000] [--pumps trio,epoll] [--with haproxy,kgw]

Starts tansu broker A (clients talk to it directly) and, per pump, a tansu
broker whose advertised listener is that pump (bytes in, bytes out, no
framing, no parsing, TCP_NODELAY) in front of its real port, so every request
of a client bootstrapped at the pump goes through it.  Pumps:

* ``trio``: two Trio tasks per connection, ``receive_some``/``send_all``;
* ``epoll``: one thread, a level-triggered ``select.epoll`` loop, ``os.read``/``os.write``
  (what kgw's data plane, gateway/connection/data_plane.py, is built on).

The gap between a pump's p50 and the direct p50 is what one Python hop in each
direction costs on this machine before any work is done; compare it with kgw's
gap in bench_gateway.py.  ``--with`` measures, in the same rounds, HAProxy from Debian
(TCP mode, in front of a tansu of its own that advertises it) and ``kgw run`` without an
authorizer: a C proxy, a Python proxy doing nothing, and kgw, side by side.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common as bg  # noqa: E402
from tests.support.processes import ManagedProcess  # noqa: E402

PROXY = r'''
import socket, sys, trio
listen_port, target_port = int(sys.argv[1]), int(sys.argv[2])
async def pump(src, dst):
    while True:
        data = await src.receive_some(262144)
        if not data:
            await dst.aclose(); return
        await dst.send_all(data)
async def handle(client):
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    up = await trio.open_tcp_stream("127.0.0.1", target_port)
    up.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        async with trio.open_nursery() as n:
            n.start_soon(pump, client, up); n.start_soon(pump, up, client)
    except Exception:
        pass
async def main():
    listeners = await trio.open_tcp_listeners(listen_port, host="127.0.0.1")
    print("ready", flush=True)
    await trio.serve_listeners(handle, listeners)
trio.run(main)
'''


EPOLL_PROXY = r'''
import os, select, socket, sys
listen_port, target_port = int(sys.argv[1]), int(sys.argv[2])
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", listen_port)); ls.listen(128); ls.setblocking(False)
ep = select.epoll(); ep.register(ls.fileno(), select.EPOLLIN)
peer = {}
print("ready", flush=True)
while True:
    for fd, _ in ep.poll(1.0, 256):
        if fd == ls.fileno():
            c, _ = ls.accept()
            u = socket.create_connection(("127.0.0.1", target_port))
            for s in (c, u):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); s.setblocking(False)
                ep.register(s.fileno(), select.EPOLLIN)
            peer[c.fileno()], peer[u.fileno()] = (u, c), (c, u)
            continue
        try:
            data = os.read(fd, 262144)
        except BlockingIOError:
            continue
        except OSError:
            data = b""
        out, me = peer[fd]
        if not data:
            for s in (out, me):
                ep.unregister(s.fileno()); peer.pop(s.fileno()); s.close()
            continue
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(out.fileno(), view):]
            except BlockingIOError:
                select.select([], [out], [])
'''

PUMPS = {"trio": PROXY, "epoll": EPOLL_PROXY}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pumps", default="trio", help="comma-separated: " + ", ".join(PUMPS))
    ap.add_argument("--with", dest="others", default="", help="comma-separated: haproxy, kgw")
    args = ap.parse_args()
    pumps = [p.strip() for p in args.pumps.split(",") if p.strip()]
    if not pumps or any(p not in PUMPS for p in pumps):
        ap.error(f"--pumps: choose from {', '.join(PUMPS)}")
    others = [o.strip() for o in args.others.split(",") if o.strip()]
    if any(o not in ("haproxy", "kgw") for o in others):
        ap.error("--with: choose from haproxy, kgw")
    with bg.scratch("kgw-floor-") as (tmp, procs):
        a, a_port = bg.start_tansu(tmp)
        procs.append(a)
        sides: dict[str, tuple[str, object]] = {"direct": (f"127.0.0.1:{a_port}", None)}
        for name in pumps:
            proxy_port = bg.free_port()
            b, b_port = bg.start_tansu(tmp, advertised_port=proxy_port)
            procs.append(b)
            (tmp / f"pump_{name}.py").write_text(PUMPS[name])
            p = ManagedProcess(name, [sys.executable, str(tmp / f"pump_{name}.py"), str(proxy_port), str(b_port)],
                               log_dir=tmp).start()
            procs.append(p)
            p.wait_for_line(r"^ready$", 30)
            sides[f"{name}-pump"] = (f"127.0.0.1:{proxy_port}", p)
        if "haproxy" in others:
            haproxy, front, _broker = bg.start_haproxy_broker(tmp, procs)
            sides["haproxy"] = (front, haproxy)
        if "kgw" in others:
            kgw, kgw_port = bg.start_kgw(tmp, a_port)
            procs.append(kgw)
            sides["kgw"] = (f"127.0.0.1:{kgw_port}", kgw)
        for boot, _ in sides.values():
            bg.create_topics(boot, ["floor"])
        best: dict[str, dict] = {}
        cpus: dict[str, list[float]] = {s: [] for s in sides}
        for i in range(args.repeat):
            k = i % len(sides)  # rotated: each side once in each position every len(sides) repeats
            for side in list(sides)[k:] + list(sides)[:k]:
                boot, p = sides[side]
                cpu0 = bg.cpu_seconds(p.pid) if p else 0.0
                r = bg.produce_latency(boot, "floor", args.requests, args.warmup, "1")
                cpu = (bg.cpu_seconds(p.pid) - cpu0) / (args.requests + args.warmup) * 1e6 if p else 0.0
                cpus[side].append(cpu)
                print(f"  {side:10} #{i}: p50 {r['p50_ms']:.3f} ms  p99 {r['p99_ms']:.3f} ms"
                      + (f"  (proxy cpu {cpu:.0f} us/request)" if p else ""), flush=True)
                if side not in best or r["p50_ms"] < best[side]["p50_ms"]:
                    best[side] = r
        d = best["direct"]["p50_ms"]
        print("best p50: " + ", ".join(f"{s} {r['p50_ms']:.3f} ms ({r['p50_ms'] / d:.2f}x)" for s, r in best.items()))
        print("median proxy cpu per request: "
              + ", ".join(f"{s} {statistics.median(v):.0f} us" for s, v in cpus.items() if s != "direct"))
        return 0


if __name__ == "__main__":
    sys.exit(main())
