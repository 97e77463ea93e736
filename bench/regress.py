#!/usr/bin/env python3
"""The working tree against a commit, on consume, produce, small requests and short-lived clients, in one interleaved run.

Run by hand before submitting a change to the request path (not part of the test suite)::

    .venv/bin/python bench/regress.py --against HEAD~1
    .venv/bin/python bench/regress.py --against 6f620b7 --rounds 6 --records 200000
    .venv/bin/python bench/regress.py --against HEAD~1 --no-authz     # kgw as a plain proxy
    .venv/bin/python bench/regress.py --against HEAD --base-python /tmp/other-venv/bin/python  # two interpreters

It checks the commit out into a temporary git worktree, starts one tansu broker and, in front
of it, two ``kgw run`` processes: ``base`` (the commit's code) and ``work`` (this working
tree's), both with the StandardAuthorizer and the same ``--acls`` ACLs (bench_common's
``bench_acls``: the client is let through by 8 of them) unless ``--no-authz``.  Then, for each
of ``--rounds`` rounds, in an order that alternates from round to round:

* produce throughput (confluent-kafka, 1 KiB records, large batches) and the gateway's CPU
  seconds for it;
* consume throughput of one partition (``fetch.max.bytes`` 64 MiB, ``max.partition.fetch.bytes``
  16 MiB: large Fetch responses) and its gateway CPU seconds;
* small requests: one-record produces each followed by ``flush()``, one request per side in
  turn, in a shuffled order (``produce_latency_interleaved``), p50 and p99, and the gateway's CPU per request
  (micro-seconds);
* short-lived clients (``connect``): ``--connections`` connections, one after another, each
  ApiVersions and a Metadata for no topic, then closed (``connection_churn``): wall time and the
  gateway's CPU per connection (micro-seconds).

CPU is read per thread in nanoseconds (``bench_common.CpuMeter``), from /proc's clock ticks only
when a thread began or ended during the measurement (the ticks made a consume's 0.07 s a figure of
seven steps).

It prints each round and the median over rounds of every figure, with work/base ratios
(throughput: >1 is better; latency and CPU: <1 is better), and, with ``--json``, writes them.
Everything it starts is stopped, and the worktree removed, in ``finally`` blocks.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import (REPO, BenchError, CpuMeter, connection_churn, consume_throughput,  # noqa: E402
                          create_topics, load_text, produce_latency_interleaved, produce_throughput, scratch, seed_acls, start_tansu, tree_state,
                          worktree)
from tests.support.cluster import base_gateway_config, deep_merge, launch_gateway  # noqa: E402


def _gateway(name: str, tansu_port: int, work: Path, code: Path | None, acls: int, python: str | None):
    meta = work / f"{name}-meta"
    extra: dict = {"logging": {"level": "WARNING"}}
    if acls:
        seed_acls(meta, acls)
        extra["authorizer"] = {"class_name": "authz.standard_authorizer:StandardAuthorizer"}
    config = deep_merge(base_gateway_config(f"127.0.0.1:{tansu_port}", meta), extra)
    return launch_gateway(name, config, work, code=code, python=python)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", required=True, help="the commit to compare the working tree with")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--records", type=int, default=100_000, help="records produced, then consumed, per round")
    ap.add_argument("--latency", type=int, default=1500, help="small requests per side per round")
    ap.add_argument("--connections", type=int, default=300, help="short-lived clients per side per round")
    ap.add_argument("--acls", type=int, default=1000)
    ap.add_argument("--no-authz", action="store_true")
    ap.add_argument("--only", choices=("produce", "consume", "small", "connect"), action="append",
                    help="run only these workloads (repeatable)")
    ap.add_argument("--base-python", metavar="PYTHON",
                    help="run the base gateway on this interpreter (one with kgw's dependencies installed, "
                         "e.g. another virtualenv's bin/python); default: this one")
    ap.add_argument("--work-python", metavar="PYTHON",
                    help="the same for the working tree's gateway (its C parts as built in this tree)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    acls = 0 if args.no_authz else args.acls
    only = set(args.only or ("produce", "consume", "small", "connect"))
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.against], check=True,
                            capture_output=True, text=True).stdout.strip()
    head, dirty = tree_state()
    print(f"base = {commit}, work = {head}{' + uncommitted changes' if dirty else ''}; "
          f"{'no authorizer' if not acls else f'StandardAuthorizer, {acls} ACLs'}; load {load_text()}; "
          f"{platform.processor() or platform.machine()}, Python {platform.python_version()}", flush=True)
    for side, python in (("base", args.base_python), ("work", args.work_python)):
        if python:
            print(f"{side} runs on {python} ({os.path.realpath(python)})", flush=True)
    with scratch("kgw-regress-") as (work, procs):  # stops what is in procs, removes work
        with worktree(args.against, work, args.base_python) as tree:  # removed once the gateways below have stopped
            try:
                tansu, port = start_tansu(work)
                procs.append(tansu)
                sides = {"base": _gateway("base", port, work, tree, acls, args.base_python),
                         "work": _gateway("work", port, work, None, acls, args.work_python)}
                # one topic both sides consume, written once straight to the broker: the broker serves
                # the same data to both (per-side topics let the broker's own state differ between them)
                shared = f"bench-regress-consume-{time.monotonic_ns()}"
                create_topics(f"127.0.0.1:{port}", [shared])
                produce_throughput(f"127.0.0.1:{port}", shared, args.records, "1", 5)
                procs += [g.process for g in sides.values()]
                rounds = []
                for r in range(args.rounds):
                    order = list(sides) if r % 2 == 0 else list(reversed(sides))
                    figures: dict[str, dict] = {s: {} for s in sides}
                    for side in order:
                        gw = sides[side]
                        if "produce" in only:
                            topic = f"bench-regress-{side}-{r}-{time.monotonic_ns()}"
                            create_topics(gw.bootstrap, [topic])
                            meter = CpuMeter(gw.process.pid)
                            produced = produce_throughput(gw.bootstrap, topic, args.records, "1", 5)
                            figures[side]["produce_mb_s"] = produced["mb_s"]
                            figures[side]["produce_cpu_s"] = meter.elapsed()
                        if "consume" in only:
                            meter = CpuMeter(gw.process.pid)
                            consumed = consume_throughput(gw.bootstrap, shared, args.records, 120)
                            figures[side]["consume_mb_s"] = consumed["mb_s"]
                            figures[side]["consume_cpu_s"] = meter.elapsed()
                        if "connect" in only:
                            meter = CpuMeter(gw.process.pid)
                            churn = connection_churn(gw.bootstrap, args.connections)
                            figures[side]["connect_ms"] = churn["ms_per_connection"]
                            figures[side]["connect_cpu_us"] = meter.elapsed() / args.connections * 1e6
                    if "small" in only:
                        topic = f"bench-regress-latency-{r}-{time.monotonic_ns()}"
                        for gw in sides.values():
                            create_topics(gw.bootstrap, [topic])
                        meters = {s: CpuMeter(g.process.pid) for s, g in sides.items()}
                        latency = produce_latency_interleaved({s: g.bootstrap for s, g in sides.items()}, topic,
                                                              args.latency, 100, "1", seed=r + 1)
                        for side in sides:
                            figures[side]["small_p50_ms"] = latency[side]["p50_ms"]
                            figures[side]["small_p99_ms"] = latency[side]["p99_ms"]
                            figures[side]["small_cpu_us"] = meters[side].elapsed() / (args.latency + 100) * 1e6
                    rounds.append(figures)
                    print(f"round {r + 1} ({' then '.join(order)}, load {load_text()}): " + "; ".join(
                        f"{k} {figures['base'][k]:.2f} -> {figures['work'][k]:.2f}" for k in figures["base"]),
                        flush=True)
            finally:
                for proc in reversed(procs):
                    proc.stop(15)
                procs.clear()
    median = {side: {k: statistics.median(rnd[side][k] for rnd in rounds) for k in rounds[0][side]} for side in ("base", "work")}
    print(f"\nmedian of {len(rounds)} rounds (work / base):")
    for k in median["base"]:
        b, w = median["base"][k], median["work"][k]
        print(f"  {k:15} base {b:9.3f}  work {w:9.3f}  ratio {w / b if b else float('nan'):.3f}")
    if args.json:
        args.json.write_text(json.dumps({"base": commit, "work": head, "dirty": dirty, "acls": acls,
                                         "rounds": rounds, "median": median}, indent=2))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchError as e:
        print(f"regress: {e}", file=sys.stderr)
        sys.exit(1)
