#!/usr/bin/env python3
"""What each part of kgw's request path costs a live small request: p50 through gateways with
parts taken out, interleaved with direct and HAProxy.

    .venv/bin/python bench/latency_parts.py plain plain:forward-only authz authz:allow-free
    .venv/bin/python bench/latency_parts.py --rounds 8 authz authz:no-authz-metrics plain

Each argument is one gateway in front of the same tansu: ``plain`` (no authorizer) or ``authz``
(the StandardAuthorizer with bench_common's 1,000 ACLs), optionally with ``:`` and what-ifs
joined by ``+`` (``bench/whatif/sitecustomize.py``: ``forward-only``, ``allow-free``,
``no-authz-metrics``), loaded through PYTHONPATH in that gateway only.  Direct (the same tansu)
and HAProxy (its own tansu) run beside them.  Every round sends ``--requests`` one-record
produces, each followed by ``flush()``, through every side in an order shuffled per request
(``produce_latency_interleaved``); it prints each round's p50 / direct and the medians, and each
proxy's CPU per request (its process's CPU over the round, warm-up included).

The what-ifs patch Python: the usual Produce request, dispatched, decided and counted in C on the
data plane since the express path, is out of their reach there (bench/whatif/sitecustomize.py).

In process, the dispatcher costs a few microseconds (bench/dispatch_cost.py); a live request
costs several times that, because the CPU ran the client, the broker and the other sides
between two requests of one gateway and kgw's code and objects are out of its caches.  This
measures that live cost, part by part; read differences of 0.01-0.02 as noise.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_common import (CpuMeter, create_topics, environment, load_text,  # noqa: E402
                          produce_latency_interleaved, scratch, seed_acls, start_haproxy_broker, start_kgw, start_tansu,
                          tree_state)

_AUTHZ = 'authorizer: {class_name: "authz.standard_authorizer:StandardAuthorizer", config: {}}\n'


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sides", nargs="+", help="plain|authz[:what-if[+what-if...]]")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--acls", type=int, default=1000)
    args = ap.parse_args()
    for side in args.sides:
        if side.split(":")[0] not in ("plain", "authz"):
            ap.error(f"{side}: a side is plain or authz, then optionally :what-ifs")
    head, dirty = tree_state()
    print(f"work = {head}{' + uncommitted changes' if dirty else ''}; load {load_text()}", flush=True)
    with scratch("kgw-latency-parts-") as (work, procs):
        tansu, port = start_tansu(work)
        procs.append(tansu)
        _proxy, haproxy, haproxy_broker = start_haproxy_broker(work, procs)
        sides = {"direct": f"127.0.0.1:{port}", "haproxy": haproxy}
        pids = {"haproxy": _proxy.pid}
        seeded = work / "seeded-acls"
        seed_acls(seeded, args.acls)
        for i, side in enumerate(args.sides):
            kind, _, whatif = side.partition(":")
            meta = None
            if kind == "authz":
                meta = work / f"gw{i}-meta"
                shutil.copytree(seeded, meta)
            # (start_kgw puts the checkout first on the PYTHONPATH)
            with environment(PYTHONPATH=str(HERE / "whatif") if whatif else os.environ.get("PYTHONPATH"),
                             KGW_WHATIF=whatif.replace("+", ",") or None):
                proc, kgw_port = start_kgw(work, port, f"gw{i}", _AUTHZ if kind == "authz" else "", meta_dir=meta)
            procs.append(proc)
            sides[f"{i}:{side}"] = f"127.0.0.1:{kgw_port}"
            pids[f"{i}:{side}"] = proc.pid
        topic = f"bench-latency-parts-{time.monotonic_ns()}"
        create_topics(f"127.0.0.1:{port}", [topic])
        create_topics(haproxy_broker, [topic])
        ratios: dict[str, list[float]] = {s: [] for s in sides}
        cpu: dict[str, list[float]] = {s: [] for s in pids}
        for r in range(args.rounds):
            meters = {s: CpuMeter(pid) for s, pid in pids.items()}
            out = produce_latency_interleaved(sides, topic, args.requests, 200, "1", seed=r + 1)
            for s, meter in meters.items():  # (each side's process, over the round: its requests and warm-up)
                cpu[s].append(meter.elapsed() / (args.requests + 200) * 1e6)
            direct = out["direct"]["p50_ms"]
            for s in sides:
                ratios[s].append(out[s]["p50_ms"] / direct)
            print(f"round {r + 1} (load {load_text()}, direct p50 {direct:.3f} ms): "
                  + ", ".join(f"{s} {out[s]['p50_ms'] / direct:.3f}" for s in sides if s != "direct"), flush=True)
    print("median p50 / direct: " + ", ".join(f"{s} {statistics.median(v):.3f}" for s, v in ratios.items()
                                               if s != "direct"))
    print("median CPU µs per request: " + ", ".join(f"{s} {statistics.median(v):.1f}" for s, v in cpu.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
