#!/usr/bin/env python3
"""Python bytecodes kgw executes per small request: a deterministic measure of its per-request work.

    .venv/bin/python bench/opcodes.py                       # this tree, StandardAuthorizer, 1000 ACLs
    .venv/bin/python bench/opcodes.py --against HEAD~1      # and a commit's code, same workload
    .venv/bin/python bench/opcodes.py --no-authz --top 40
    .venv/bin/python bench/opcodes.py --workload consume    # per MB consumed instead
    .venv/bin/python bench/opcodes.py --workload produce    # per MB produced instead
    .venv/bin/python bench/opcodes.py --workload connect    # per short-lived client instead

On this machine a live request's time drifts by a factor of two between runs, and most of what
kgw spends beyond the kernel's share is the interpreter's (perf: ``_PyEval_EvalFrameDefault``
alone is a third of kgw's CPU on small requests): the number of bytecodes a request executes is
the figure that says, without noise, whether a change made the request path lighter.

Starts tansu and ``kgw run`` with ``bench/opcount/`` first on its PYTHONPATH (its
``sitecustomize`` counts, by function, the bytecodes of every thread but Trio's, which is traced
only in the frames it enters after counting began), warms up with ``--warmup`` one-record
produces (``flush()`` after each, as bench/regress.py's small requests), then counts
``--requests`` more and prints bytecodes per request by thread and the ``--top`` functions.
The counts move by a few per request from run to run (a read that finds part of a frame, a
turn that serves two events): read differences of a few percent, not of one bytecode.

``--workload consume`` counts per MB consumed instead: ``--records`` 1 KiB records written
straight to tansu, read once through kgw to warm up, then counted while read again
(confluent-kafka, bench_common's large fetches: each Fetch response's record sets spliced).
``--workload produce`` counts per MB produced: ``--records`` 1 KiB records produced through kgw
once to warm up, then counted while produced again (confluent-kafka, bench_common's 1 MiB
batches, acks=1).  ``--workload connect`` counts per short-lived client (bench_common's
``connection_churn``: connect, ApiVersions, a Metadata for no topic, close), ``--requests`` of
them after ``--warmup``; Trio's thread is counted whole there, each connection's frames being
entered after counting began.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_common import (REPO, RECORD_SIZE, connection_churn, consume_throughput, create_topics, environment, load_text,  # noqa: E402
                          produce_latency, produce_throughput, scratch, seed_acls, start_tansu, tree_state,
                          worktree)
from tests.support.cluster import base_gateway_config, deep_merge, launch_gateway  # noqa: E402

Key = tuple[str, str, str]


def _snapshot(pid: int, out: Path, n: int) -> dict[Key, int]:
    os.kill(pid, signal.SIGUSR1)
    path = out / f"{n}.json"
    deadline = time.monotonic() + 60
    while not path.exists():  # written by the gateway's signal handler
        if time.monotonic() > deadline:
            raise SystemExit(f"the gateway wrote no count to {path} within 60 s")
        time.sleep(0.05)
    return {(t, f, c): v for t, f, c, v in json.loads(path.read_text())}


def measure(name: str, code: Path | None, work: Path, tansu_port: int, args) -> dict[Key, float]:
    """Bytecodes per request (per MB consumed or produced with ``--workload consume`` or
    ``produce``) by (thread, file, function) through a gateway running ``code``."""
    out = work / f"{name}-counts"
    out.mkdir()
    meta = work / f"{name}-meta"
    extra: dict = {"logging": {"level": "WARNING"}}
    if args.acls:
        seed_acls(meta, args.acls)
        extra["authorizer"] = {"class_name": "authz.standard_authorizer:StandardAuthorizer"}
    config = deep_merge(base_gateway_config(f"127.0.0.1:{tansu_port}", meta), extra)
    # (launch_gateway puts the code's checkout first on the PYTHONPATH)
    with environment(PYTHONPATH=str(HERE / "opcount"), KGW_OPCOUNT=str(out)):
        gw = launch_gateway(name, config, work, code=code)
    try:
        os.kill(gw.process.pid, signal.SIGUSR2)
        topic = f"bench-opcodes-{name}-{time.monotonic_ns()}"
        if args.workload == "consume":
            create_topics(f"127.0.0.1:{tansu_port}", [topic])
            produce_throughput(f"127.0.0.1:{tansu_port}", topic, args.records, "1", 5)
            consume_throughput(gw.bootstrap, topic, args.records, 300)
            before = _snapshot(gw.process.pid, out, 1)
            consume_throughput(gw.bootstrap, topic, args.records, 300)
            units = args.records * RECORD_SIZE / 1e6
        elif args.workload == "produce":
            create_topics(gw.bootstrap, [topic])
            produce_throughput(gw.bootstrap, topic, args.records, "1", 5)
            before = _snapshot(gw.process.pid, out, 1)
            produce_throughput(gw.bootstrap, topic, args.records, "1", 5)
            units = args.records * RECORD_SIZE / 1e6
        elif args.workload == "connect":
            connection_churn(gw.bootstrap, args.warmup)
            before = _snapshot(gw.process.pid, out, 1)
            connection_churn(gw.bootstrap, args.requests)
            units = args.requests
        else:
            create_topics(gw.bootstrap, [topic])
            produce_latency(gw.bootstrap, topic, args.warmup, 0, "1")
            before = _snapshot(gw.process.pid, out, 1)
            produce_latency(gw.bootstrap, topic, args.requests, 0, "1")
            units = args.requests
        after = _snapshot(gw.process.pid, out, 2)
    finally:
        gw.process.stop(15)
    return {k: (v - before.get(k, 0)) / units for k, v in after.items() if v > before.get(k, 0)}


def _short(path: str) -> str:
    p = Path(path)
    try:
        return str(p.relative_to(REPO))
    except ValueError:
        parts = p.parts
        return "/".join(parts[parts.index("site-packages") + 1:]) if "site-packages" in parts else p.name


def _by_function(counts: dict[Key, float], base: Path | None) -> dict[str, float]:
    out: dict[str, float] = collections.Counter()
    for (_thread, path, func), v in counts.items():
        if base is not None and path.startswith(str(base)):
            path = str(REPO) + path[len(str(base)):]
        out[f"{_short(path)}:{func}"] += v
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", metavar="COMMIT", help="also count with this commit's code")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--warmup", type=int, default=300)
    ap.add_argument("--acls", type=int, default=1000)
    ap.add_argument("--no-authz", action="store_true")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--workload", choices=("small", "consume", "produce", "connect"), default="small")
    ap.add_argument("--records", type=int, default=50_000, help="records consumed or produced (--workload consume, produce)")
    args = ap.parse_args()
    if args.no_authz:
        args.acls = 0
    head, dirty = tree_state()
    what = (f"small requests (one-record Produce v9 + flush), {args.requests} counted after {args.warmup}"
            if args.workload == "small" else
            f"short-lived clients (ApiVersions + Metadata, then closed), {args.requests} counted after {args.warmup}"
            if args.workload == "connect" else f"{args.workload} of {args.records} x {RECORD_SIZE} B, counted per MB")
    unit = {"small": "request", "connect": "connection"}.get(args.workload, f"MB {args.workload}d")
    print(f"{what}; {'no authorizer' if not args.acls else f'StandardAuthorizer, {args.acls} ACLs'}; work = {head}"
          f"{' + uncommitted changes' if dirty else ''}; load {load_text()}", flush=True)
    with scratch("kgw-opcodes-") as (work, procs), tempfile.TemporaryDirectory(prefix="kgw-opcodes-tree-") as tmp:
        tansu, port = start_tansu(work)
        procs.append(tansu)
        results: dict[str, dict[str, float]] = {}
        threads: dict[str, dict[str, float]] = {}
        if args.against:
            with worktree(args.against, Path(tmp)) as tree:
                counts = measure("base", tree, work, port, args)
                results["base"] = _by_function(counts, tree)
                threads["base"] = _threads(counts)
        counts = measure("work", None, work, port, args)
        results["work"] = _by_function(counts, None)
        threads["work"] = _threads(counts)
    for side, by_thread in threads.items():
        print(f"{side}: {sum(by_thread.values()):.0f} bytecodes per {unit} ("
              + ", ".join(f"{t} {v:.0f}" for t, v in sorted(by_thread.items(), key=lambda kv: -kv[1]) if v >= 1) + ")")
    if "base" in results:
        b, w = sum(threads["base"].values()), sum(threads["work"].values())
        print(f"work / base: {w / b:.3f}")
    print(f"\nthe {args.top} functions executing most bytecodes per {unit}" + (" (base -> work)" if "base" in results else ""))
    names = sorted(set().union(*results.values()), key=lambda k: -max(r.get(k, 0) for r in results.values()))
    for name in names[:args.top]:
        print("  " + " -> ".join(f"{r.get(name, 0):7.1f}" for r in results.values()) + f"  {name}")
    return 0


def _threads(counts: dict[Key, float]) -> dict[str, float]:
    out: dict[str, float] = collections.Counter()
    for (thread, _path, _func), v in counts.items():
        out[thread] += v
    return out


if __name__ == "__main__":
    sys.exit(main())
