#!/usr/bin/env python3
"""Where the data-plane thread's CPU goes during small requests, by shared object: the
interpreter (libpython), the kernel, libc, kgw's C parts; and its busiest symbols.

    .venv/bin/python bench/dso_share.py                  # StandardAuthorizer, 1000 ACLs
    .venv/bin/python bench/dso_share.py --requests 10000 --top 30

Starts tansu and ``kgw run``, warms up, then samples the ``kgw-data-plane`` thread with
``perf record`` (Linux perf must be installed and allowed to sample the process) while
``--requests`` one-record produces (each followed by ``flush()``, as bench/regress.py's small
requests) go through it.  The interpreter's share is what Python costs that thread; the
kernel's is the sockets and epoll, which any proxy pays.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_common import produce_latency, small_request_gateway  # noqa: E402


def data_plane_tid(pid: int) -> str:
    for tid in os.listdir(f"/proc/{pid}/task"):
        if Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip() == "kgw-data-plane":
            return tid
    raise SystemExit("no kgw-data-plane thread: is io.data_plane_thread off?")


def report(data: Path, sort: str, top: int) -> list[str]:
    out = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", sort, "--stdio", "-g", "none"],
                         capture_output=True, text=True, check=True).stdout
    return [line.rstrip() for line in out.splitlines() if line.strip() and not line.startswith("#")][:top]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=6000)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--acls", type=int, default=1000)
    ap.add_argument("--no-authz", action="store_true")
    ap.add_argument("--top", type=int, default=20)
    args = ap.parse_args()
    if shutil.which("perf") is None:
        raise SystemExit("Linux perf is not installed")
    gateway = small_request_gateway("dso-share", args.requests, args.warmup, args.acls, not args.no_authz)
    with gateway as (gw, topic, work):
        data = work / "perf.data"
        perf = subprocess.Popen(["perf", "record", "-q", "-F", "4999", "-t", data_plane_tid(gw.process.pid),
                                 "-o", str(data)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:  # (requests sent before perf has attached are simply not sampled)
            result = produce_latency(gw.bootstrap, topic, args.requests, 0, "1")
        finally:
            perf.send_signal(signal.SIGINT)
            perf.wait(30)
        print(f"p50 {result['p50_ms']:.3f} ms, p99 {result['p99_ms']:.3f} ms")
        print("\nthe data-plane thread's samples by shared object:")
        print("\n".join(report(data, "dso", args.top)))
        print("\nby symbol:")
        print("\n".join(report(data, "dso,symbol", args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
