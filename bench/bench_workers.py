"""What ``kgw run --workers N`` gives on this machine (issue 14 item 7).

One Apache Kafka node (KRaft) and, one at a time, a kgw with ``--workers 1`` and with
``--workers 2`` in front of it (PLAINTEXT, no authorizer, ``metadata.backend: kafka`` as workers
need).  The same workloads run against each, and directly against Kafka for reference:

1. ``small``: ``--clients`` client processes, each one confluent-kafka producer sending one
   100-byte record and waiting for it (acks=1, flush per record) for ``--seconds``; reported:
   requests per second, all clients together, and the median latency.
2. ``throughput``: ``--clients`` producer processes, 1 KiB records in large batches, for
   ``--seconds``; reported: MB/s (10^6 bytes of record value) all together.

Every side is measured ``--repeat`` times in rotating order; each figure is the best run.

Usage::

    KGW_KAFKA_LIBS=~/.cache/kgw/kafka-<v>/libs .venv/bin/python bench/bench_workers.py \\
        [--clients 4] [--seconds 10] [--repeat 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.cluster import base_gateway_config, deep_merge, launch_gateway  # noqa: E402
from tests.support.kafka import start_kafka  # noqa: E402


def _small(bootstrap: str, topic: str, seconds: float, out) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0, "broker.address.family": "v4"})
    value = b"x" * 100
    for _ in range(20):  # warm-up: connections and metadata
        p.produce(topic, value)
        p.flush(10)
    latencies = []
    end = time.perf_counter() + seconds
    while (t0 := time.perf_counter()) < end:
        p.produce(topic, value)
        p.flush(10)
        latencies.append(time.perf_counter() - t0)
    out.put((len(latencies), statistics.median(latencies)))


def _throughput(bootstrap: str, topic: str, seconds: float, out) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 10, "batch.size": 1_000_000,
                  "queue.buffering.max.kbytes": 256 * 1024, "broker.address.family": "v4"})
    value = b"y" * 1024
    sent = 0
    start = time.perf_counter()
    end = start + seconds
    while time.perf_counter() < end:
        for _ in range(1000):
            try:
                p.produce(topic, value)
                sent += 1
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(60)
    out.put((sent * 1024, time.perf_counter() - start))


def run_clients(fn, bootstrap: str, topic: str, clients: int, seconds: float) -> list:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=fn, args=(bootstrap, topic, seconds, out)) for _ in range(clients)]
    for p in procs:
        p.start()
    results = [out.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join(30)
    return results


def make_topic(bootstrap: str, name: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kgw-bench-workers-") as tmp:
        work = Path(tmp)
        kafka = start_kafka(work / "kafka")
        gateways = {}
        try:
            for n in (1, 2):
                config = deep_merge(base_gateway_config(kafka.bootstrap, work / f"md{n}", kafka.node_ids),
                                    {"metadata": {"backend": "kafka", "topic": f"__kgw_bench_workers_{n}"}})
                gateways[f"kgw --workers {n}"] = launch_gateway(f"kgw-w{n}", config, work / f"w{n}",
                                                                node_ids=kafka.node_ids, args=("--workers", str(n)))
            sides = {"direct": kafka.bootstrap, **{k: g.bootstrap for k, g in gateways.items()}}
            topic = f"bench-workers-{uuid.uuid4().hex[:6]}"
            make_topic(kafka.bootstrap, topic, args.clients)
            names = list(sides)
            results: dict[tuple[str, str], list] = {}
            for r in range(args.repeat):
                order = names[r % len(names):] + names[: r % len(names)]
                for side in order:
                    small = run_clients(_small, sides[side], topic, args.clients, args.seconds)
                    rate = sum(n for n, _ in small) / args.seconds
                    p50 = statistics.median(m for _, m in small)
                    results.setdefault((side, "small"), []).append((rate, p50))
                    thr = run_clients(_throughput, sides[side], topic, args.clients, args.seconds)
                    mbps = sum(b for b, _ in thr) / max(t for _, t in thr) / 1e6
                    results.setdefault((side, "throughput"), []).append(mbps)
                    print(f"repeat {r + 1} {side}: small {rate:.0f} req/s (median {p50 * 1000:.2f} ms), "
                          f"throughput {mbps:.1f} MB/s", flush=True)
            print(f"\nbest of {args.repeat}, {args.clients} client processes, {args.seconds:.0f} s each:")
            for side in names:
                rate, p50 = max(results[(side, "small")])
                mbps = max(results[(side, "throughput")])
                print(f"{side:>16}: small requests {rate:7.0f} req/s (median {p50 * 1000:.2f} ms); "
                      f"produce {mbps:6.1f} MB/s")
        finally:
            for g in gateways.values():
                g.stop()
            kafka.stop()


if __name__ == "__main__":
    main()
