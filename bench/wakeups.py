#!/usr/bin/env python3
"""How often each of kgw's threads sleeps and wakes per small request: a count, not a timing.

    .venv/bin/python bench/wakeups.py                 # StandardAuthorizer, 1000 ACLs
    .venv/bin/python bench/wakeups.py --no-authz --requests 5000

Starts tansu and ``kgw run``, sends ``--warmup`` then ``--requests`` one-record produces (each
followed by ``flush()``, as bench/regress.py's small requests) and prints, per thread of the
gateway, the voluntary context switches (it blocked: in epoll_wait, on a lock or the GIL) and the
involuntary ones (the scheduler took the CPU away) per request, and the CPU ticks it used, from
``/proc/<pid>/task/*/status`` and ``stat``.  A proxy that waits for each request and each response
blocks twice per request; a thread that wakes for every request besides the data plane costs
that request a hand-over.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_common import produce_latency, small_request_gateway  # noqa: E402

Counts = dict[tuple[str, str], tuple[int, int, int]]


def thread_counts(pid: int) -> Counts:
    """(thread id, name) -> (voluntary switches, involuntary switches, CPU ticks)."""
    out: Counts = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        task = Path(f"/proc/{pid}/task/{tid}")
        try:
            name = (task / "comm").read_text().strip()
            status = dict(line.split(":", 1) for line in (task / "status").read_text().splitlines() if ":" in line)
            stat = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # the thread ended meanwhile
            continue
        out[(tid, name)] = (int(status["voluntary_ctxt_switches"]), int(status["nonvoluntary_ctxt_switches"]),
                            int(stat[11]) + int(stat[12]))  # utime + stime
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--acls", type=int, default=1000)
    ap.add_argument("--no-authz", action="store_true")
    args = ap.parse_args()
    with small_request_gateway("wakeups", args.requests, args.warmup, args.acls, not args.no_authz) as (gw, topic, _):
        before = thread_counts(gw.process.pid)
        result = produce_latency(gw.bootstrap, topic, args.requests, 0, "1")
        after = thread_counts(gw.process.pid)
    print(f"p50 {result['p50_ms']:.3f} ms, p99 {result['p99_ms']:.3f} ms")
    print(f"{'thread':<24} {'blocked/request':>16} {'preempted/request':>18} {'CPU ticks':>10}")
    for key in sorted(after):
        if key not in before:
            continue
        voluntary, involuntary, ticks = (after[key][i] - before[key][i] for i in range(3))
        if voluntary or involuntary or ticks:
            print(f"{key[1] + ' (' + key[0] + ')':<24} {voluntary / args.requests:>16.3f} "
                  f"{involuntary / args.requests:>18.3f} {ticks:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
