#!/usr/bin/env python3
"""How much the CPU the data-plane thread runs on moves small-request latency (2 vCPUs).

    .venv/bin/python bench/placement.py [--requests 2000] [--rounds 2]

Starts tansu and one kgw, then for each setting pins kgw's data-plane thread
(``kgw-data-plane``) with ``sched_setaffinity`` -- to every CPU, then to each CPU
alone -- and measures the bench's small-request p50 directly and through kgw
back to back.  Side-by-side best-of in bench_gateway.py inherits this placement
luck per process; the interleaved measurement there does not.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common as bg  # noqa: E402


def thread_ids(pid: int, name: str) -> list[int]:
    tids = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            if f.read().strip().startswith(name):
                tids.append(int(tid))
    return tids


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    with bg.scratch("kgw-placement-") as (tmp, procs):
        tansu, tansu_port = bg.start_tansu(tmp)
        procs.append(tansu)
        kgw, kgw_port = bg.start_kgw(tmp, tansu_port)
        procs.append(kgw)
        direct, through = f"{bg.HOST}:{tansu_port}", f"{bg.HOST}:{kgw_port}"
        bg.create_topics(direct, ["bench-placement"])
        bg.produce_latency(through, "bench-placement", 100, 100, "1")  # the connection reaches the data plane
        tids = thread_ids(kgw.pid, "kgw-data-plane")
        if not tids:
            raise bg.BenchError("no kgw-data-plane thread (is io.data_plane_thread off?)")
        for _ in range(args.rounds):
            for setting in [None] + cpus:
                for tid in tids:
                    os.sched_setaffinity(tid, set(cpus) if setting is None else {setting})
                d = bg.produce_latency(direct, "bench-placement", args.requests, args.warmup, "1")["p50_ms"]
                g = bg.produce_latency(through, "bench-placement", args.requests, args.warmup, "1")["p50_ms"]
                where = "any CPU" if setting is None else f"CPU {setting}"
                print(f"  data plane on {where:7}: direct {d:.3f} ms, kgw {g:.3f} ms, {g / d:.2f}x", flush=True)
        return 0


if __name__ == "__main__":
    sys.exit(main())
