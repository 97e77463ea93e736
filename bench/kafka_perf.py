#!/usr/bin/env python3
"""Kafka's own perf tools through kgw, beside the same tools straight to Kafka and through HAProxy.

    .venv/bin/python bench/kafka_perf.py [--rounds 3] [--records 200000] [--record-size 1024]
                                         [--latency-records 2000] [--acls 1000]

What Kafka operators quote: ``ProducerPerformance``, ``ConsumerPerformance`` and
``EndToEndLatency`` from the resolved Kafka jars (``make setup``), against one Apache Kafka 4.x
node, on four paths, interleaved (the order rotates every round):

* ``direct``: the broker's own PLAINTEXT listener;
* ``haproxy``: HAProxy from Debian in TCP mode in front of a second listener of the same broker,
  advertised at HAProxy (so every connection of the client goes through it): the L4 floor;
* ``kgw``: kgw as a proxy (no authorizer);
* ``kgw+authz``: kgw with the StandardAuthorizer holding ``--acls`` ACLs (8 of them let the
  client through, bench_common.bench_acls).

Each round and path: produce ``--records`` records (1 KiB by default, acks=1) to a topic of its
own, consume them back, and run ``--latency-records`` end-to-end round trips; the proxy's CPU
seconds (``/proc``) over the produce and the consume give its CPU per MB.  It prints each round
and the medians, with throughput relative to ``direct``.  Everything it starts is stopped by its
own process id.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common as bg  # noqa: E402
from tests.support.acls import add_acl  # noqa: E402
from tests.support.cluster import base_gateway_config, deep_merge, launch_gateway  # noqa: E402
from tests.support.haproxy import start_haproxy  # noqa: E402
from tests.support.kafka import run_tool, start_kafka  # noqa: E402
from tests.support.ports import HOST, free_port  # noqa: E402

PATHS = ("direct", "haproxy", "kgw", "kgw+authz")
_PRODUCED = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency")
_E2E = re.compile(r"Avg latency: ([\d.]+) ms")
_PERCENTILES = re.compile(r"Percentiles: 50th = (\d+), 99th = (\d+)")


def _tool(main: str, *args: str, work: Path) -> str:
    done = run_tool(main, *args, work=work, timeout=300)
    if done.returncode != 0:
        raise bg.BenchError(f"{main} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return done.stdout


def produce(bootstrap: str, topic: str, records: int, size: int, work: Path) -> float:
    out = _tool("org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", str(records),
                "--record-size", str(size), "--throughput", "-1", "--producer-props",
                f"bootstrap.servers={bootstrap}", "acks=1", "linger.ms=5", "batch.size=262144",
                "compression.type=none", work=work)
    found = _PRODUCED.findall(out)
    if not found:
        raise bg.BenchError(f"no summary from ProducerPerformance:\n{out[-2000:]}")
    return float(found[-1][2])


def consume(bootstrap: str, topic: str, records: int, work: Path) -> float:
    out = _tool("org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap, "--topic", topic,
                "--num-records", str(records), "--timeout", "60000", "--group", f"kgw-bench-perf-{uuid.uuid4().hex[:8]}",
                "--command-property", "fetch.max.bytes=52428800", "--command-property",
                "max.partition.fetch.bytes=4194304", work=work)
    lines = [line for line in out.splitlines() if line.strip()]
    header = [h.strip() for h in lines[-2].split(",")]
    values = [v.strip() for v in lines[-1].split(",")]
    row = dict(zip(header, values))
    return float(row.get("fetch.MB.sec") or row["MB.sec"])


def end_to_end(bootstrap: str, topic: str, records: int, work: Path) -> tuple[float, int, int]:
    out = _tool("org.apache.kafka.tools.EndToEndLatency", "--bootstrap-server", bootstrap, "--topic", topic,
                "--num-records", str(records), "--producer-acks", "1", "--record-size", "100", work=work)
    avg, pct = _E2E.search(out), _PERCENTILES.search(out)
    if avg is None or pct is None:
        raise bg.BenchError(f"no latency summary from EndToEndLatency:\n{out[-2000:]}")
    return float(avg.group(1)), int(pct.group(1)), int(pct.group(2))


def _gateway(name: str, kafka, work: Path, acls: int):
    meta = work / f"{name}-meta"
    extra: dict = {"logging": {"level": "WARNING"}}
    if acls:
        bg.seed_acls(meta, acls)
        # EndToEndLatency names its own consumer group ("test-group-<time>"), whatever it is told
        add_acl(meta, "--operation", "READ", "--group", "test-group-", "--resource-pattern-type", "prefixed")
        extra["authorizer"] = {"class_name": "authz.standard_authorizer:StandardAuthorizer"}
    config = deep_merge(base_gateway_config(kafka.bootstrap, meta, kafka.node_ids), extra)
    return launch_gateway(name, config, work, node_ids=kafka.node_ids)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--latency-records", type=int, default=2000)
    parser.add_argument("--acls", type=int, default=1000)
    args = parser.parse_args()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"Kafka perf tools, {args.rounds} rounds, {args.records} x {args.record_size} B; "
          f"{platform.machine()}, Python {platform.python_version()}, load {load}")
    started = []
    with bg.scratch("kgw-kafka-perf") as (work, _procs):
        lb_bind, lb_front = free_port(), free_port()
        kafka = start_kafka(work / "kafka", extra={"num.network.threads": 3, "num.io.threads": 4},
                            extra_listeners={"LB": (lb_bind, f"{HOST}:{lb_front}")})
        started.append(kafka)
        try:
            haproxy = start_haproxy(work / "haproxy", {"lb": (lb_bind, "")}, ports={"lb": lb_front})
            started.append(haproxy)
            plain = _gateway("kgw-plain", kafka, work, 0)
            started.append(plain)
            authz = _gateway("kgw-authz", kafka, work, args.acls)
            started.append(authz)
            bootstrap = {"direct": kafka.bootstrap, "haproxy": f"{HOST}:{lb_front}", "kgw": plain.bootstrap,
                         "kgw+authz": authz.bootstrap}
            pids = {"haproxy": haproxy.process.pid, "kgw": plain.process.pid, "kgw+authz": authz.process.pid}
            results: dict[str, list[dict]] = {p: [] for p in PATHS}
            for round_no in range(args.rounds):
                order = PATHS[round_no % 4:] + PATHS[:round_no % 4]
                for path in order:
                    # bench_acls let the client write and read "bench-" topics, with "kgw-bench-" groups
                    topic = f"bench-perf-{path.replace('+', '-')}-{round_no}-{uuid.uuid4().hex[:6]}"
                    pid = pids.get(path)
                    cpu0 = bg.cpu_seconds(pid) if pid else 0.0
                    produced = produce(bootstrap[path], topic, args.records, args.record_size, work)
                    cpu1 = bg.cpu_seconds(pid) if pid else 0.0
                    consumed = consume(bootstrap[path], topic, args.records, work)
                    cpu2 = bg.cpu_seconds(pid) if pid else 0.0
                    avg, p50, p99 = end_to_end(bootstrap[path], topic + "-e2e", args.latency_records, work)
                    megabytes = args.records * args.record_size / 1e6
                    row = {"produce_mb_s": produced, "consume_mb_s": consumed, "e2e_avg_ms": avg, "e2e_p50_ms": p50,
                           "e2e_p99_ms": p99, "produce_cpu_s_per_gb": (cpu1 - cpu0) / megabytes * 1000,
                           "consume_cpu_s_per_gb": (cpu2 - cpu1) / megabytes * 1000}
                    results[path].append(row)
                    print(f"round {round_no + 1} {path:10} " + "; ".join(f"{k} {v:.2f}" for k, v in row.items()),
                          flush=True)
            print(f"\nmedian of {args.rounds} rounds (ratio: path / direct)")
            for key in results["direct"][0]:
                base = statistics.median(r[key] for r in results["direct"])
                cells = []
                for path in PATHS:
                    value = statistics.median(r[key] for r in results[path])
                    ratio = f" ({value / base:.2f})" if base and path != "direct" else ""
                    cells.append(f"{path} {value:8.2f}{ratio}")
                print(f"  {key:22} " + "  ".join(cells))
            print("load after: " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
        finally:
            for thing in reversed(started):
                thing.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
