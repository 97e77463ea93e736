#!/usr/bin/env python3
"""Where a small request's time goes inside kgw's data plane (gateway/connection/data_plane.py).

    .venv/bin/python bench/data_plane_steps.py [--requests 2000]

Starts tansu and a kgw whose data-plane methods are wrapped with timers (in the
kgw process only: this script re-runs itself with ``--serve``), drives the
bench's small-request workload (one 100-byte record, ``flush()`` per request)
through it, and prints the median time per request of each step:

* ``client event``: the client socket became readable → the request was read,
  dispatched and written upstream;
* ``dispatch``: ``ConnectionCore.dispatch`` (header, route, inspect/peek,
  enforcement, slot);
* ``upstream event``: the upstream socket became readable → the response was
  read, completed and written to the client;
* ``complete``: ``ConnectionCore._complete`` (pairing, rewrite check, merge);
* ``write``: one ``DataPlane._write`` call (the ``write`` system call and its loop).

The timers add a little to every step; read the figures relative to each other.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def serve(config: str, out: str) -> int:
    """The kgw side: wrap the steps, run ``kgw run``, write the timings when stopped."""
    from gateway.cli import main as cli
    from gateway.connection import core as connection_core, data_plane

    samples: dict[str, list[int]] = {k: [] for k in ("client event", "dispatch", "upstream event", "complete", "write")}

    def timed(cls, name: str, key: str) -> None:
        raw = cls.__dict__[name]
        inner = raw.__func__ if isinstance(raw, staticmethod) else raw

        def wrapper(*args, **kwargs):
            t0 = time.perf_counter_ns()
            try:
                return inner(*args, **kwargs)
            finally:
                samples[key].append(time.perf_counter_ns() - t0)

        setattr(cls, name, staticmethod(wrapper) if isinstance(raw, staticmethod) else wrapper)

    timed(data_plane.DataPlane, "_client_event", "client event")
    timed(data_plane.DataPlane, "_upstream_event", "upstream event")
    timed(data_plane.DataPlane, "_write", "write")
    timed(connection_core.ConnectionCore, "dispatch", "dispatch")
    timed(connection_core.ConnectionCore, "_complete", "complete")
    try:
        return cli.main(["run", "--config", config])
    finally:
        with open(out, "w") as f:
            json.dump({k: (len(v), statistics.median(v) / 1000 if v else None) for k, v in samples.items()}, f)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--acls", type=int, default=0,
                    help="with N > 0: StandardAuthorizer and bench_gateway's N ACLs (the kgw+authz side)")
    ap.add_argument("--serve", nargs=2, metavar=("CONFIG", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        return serve(*args.serve)

    import bench_common as bg
    from tests.support.processes import ManagedProcess

    with bg.scratch("kgw-steps-") as (tmp, procs):
        tansu, tansu_port = bg.start_tansu(tmp)
        procs.append(tansu)
        port, base = bg.free_port(), bg.free_port_base()
        config = tmp / "kgw.yaml"
        authz = ""
        if args.acls:
            bg.seed_acls(tmp / "meta", args.acls)
            authz = "authorizer: {class_name: authz.standard_authorizer:StandardAuthorizer, config: {}}\n"
        config.write_text(
            "listeners:\n"
            f"  - {{name: BENCH, host: {bg.HOST}, port: {port}, advertised_host: {bg.HOST}, broker_port_base: {base}}}\n"
            f"upstream: {{bootstrap_servers: [\"{bg.HOST}:{tansu_port}\"]}}\n"
            f"admin: null\nmetadata: {{path: {tmp / 'meta'}}}\nlogging: {{level: WARNING}}\n" + authz)
        out = tmp / "steps.json"
        kgw = ManagedProcess("kgw", [sys.executable, __file__, "--serve", str(config), str(out)], log_dir=tmp,
                             env=dict(os.environ, PYTHONUNBUFFERED="1")).start()
        procs.append(kgw)
        kgw.wait_for_line(r"^ready$", 30)
        boot = f"{bg.HOST}:{port}"
        try:
            bg.create_topics(boot, ["bench-steps"])
        except bg.BenchError:
            print(bg.log_tail(kgw), file=sys.stderr)
            raise
        r = bg.produce_latency(boot, "bench-steps", args.requests, args.warmup, "1")
        kgw.stop(15)  # SIGTERM: the timings are written on the way out
        steps = json.loads(out.read_text())
        print(f"p50 through the timed kgw: {r['p50_ms']:.3f} ms ({args.requests} requests after {args.warmup} warm-up)")
        for name, (count, median_us) in steps.items():
            print(f"  {name:15} {count:6d} calls, median {median_us:.1f} us" if median_us is not None
                  else f"  {name:15} not called")
        return 0


if __name__ == "__main__":
    sys.exit(main())
