"""What the benches share: brokers and gateways (through tests/support, the one place that
starts them), the confluent-kafka workloads (topics, produce and consume throughput, produce
latency side by side and interleaved, idle connections), process figures (RSS, CPU time),
py-spy, and the ACLs and check of bench_gateway.py's kgw+authz side."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # authz.* for seeding the ACLs

import yaml  # noqa: E402
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.support.cluster import base_gateway_config, deep_merge, launch_gateway  # noqa: E402
from tests.support.cluster import start_tansu as support_start_tansu  # noqa: E402
from tests.support.ports import free_port, free_port_base  # noqa: E402, F401 (used by the other benches)
from tests.support.processes import ManagedProcess, ProcessError, tail_of_file  # noqa: E402
from tests.support.native import build_native  # noqa: E402

HOST = "127.0.0.1"
TANSU_NODE_ID = 111
RECORD_SIZE = 1024
REPO = Path(__file__).resolve().parents[1]

class BenchError(RuntimeError):
    pass


# --------------------------------------------------------------------------- A/B helpers
@contextlib.contextmanager
def worktree(commit: str, where: Path, python: str | None = None):
    """``commit`` checked out, detached, at ``where / "base"`` for the block (the code an A/B
    compares the working tree with), its C part built as ``make setup`` builds the working
    tree's (a commit with a ``setup.py``: else the two sides would not run the same code), by
    ``python`` (the interpreter that will run it; this one by default); the worktree is removed
    after it."""
    tree = where / "base"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(tree), commit], check=True)
    try:
        build_native(tree, python)
        yield tree
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)


def tree_state() -> tuple[str, bool]:
    """The working tree's HEAD (short) and whether it has uncommitted changes, as the A/B
    benches print them."""
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(REPO), "status", "--porcelain"], capture_output=True,
                                text=True).stdout.strip())
    return head, dirty


def load_text() -> str:
    """The machine's load averages (1, 5, 15 minutes), as the benches print them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


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


@contextlib.contextmanager
def environment(**values: str | None):
    """These environment variables set (None: unset) for the block, as they were after it."""
    saved = {k: os.environ.get(k) for k in values}

    def put(items) -> None:
        for k, v in items:
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    put(values.items())
    try:
        yield
    finally:
        put(saved.items())


def pin_threads(pid: int, cpus: set[int]) -> None:
    """Keep every thread of process ``pid`` on ``cpus`` (HAProxy's ``cpu-map``, applied from outside)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        os.sched_setaffinity(int(task.name), cpus)


def start_haproxy_broker(log_dir: Path, procs: list) -> tuple[ManagedProcess, str, str]:
    """HAProxy from Debian in TCP mode in front of a tansu of its own that advertises HAProxy's port
    (a client connects to the address its broker advertises, so a broker that others reach
    directly cannot also serve a proxy that does not rewrite addresses).  Both are appended to
    ``procs``; returns HAProxy's process, the bootstrap through it and the broker's own."""
    from tests.support.haproxy import start_haproxy

    front = free_port()
    broker, broker_port = start_tansu(log_dir / "haproxy-broker", advertised_port=front)
    procs.append(broker)
    haproxy = start_haproxy(log_dir / "haproxy", {"lb": (broker_port, "")}, ports={"lb": front})
    procs.append(haproxy.process)
    return haproxy.process, f"{HOST}:{front}", f"{HOST}:{broker_port}"


def start_kgw(log_dir: Path, tansu_port: int, name: str = "kgw", extra_config: str = "",
              meta_dir: Path | None = None, listener: dict | None = None,
              code: Path | None = None) -> tuple[ManagedProcess, int]:
    """``kgw run`` in front of tansu, logging at WARNING; ``extra_config`` (YAML) is merged into
    its configuration and ``listener`` into its one listener's.  ``meta_dir`` (the metadata log
    directory) is reused across start attempts, so ACLs seeded into it before the call survive
    a retry on other ports.  ``code``: another checkout of kgw to run (launch_gateway)."""
    meta_dir = meta_dir or log_dir / f"{name}-meta"
    extra = yaml.safe_load(extra_config) or {}
    last: Exception | None = None
    for attempt in range(3):
        config = deep_merge(base_gateway_config(f"{HOST}:{tansu_port}", meta_dir),
                            {"logging": {"level": "WARNING"}, **extra})
        if listener:
            config["listeners"][0] = deep_merge(config["listeners"][0], listener)
        try:
            gateway = launch_gateway(f"{name}-{attempt}", config, log_dir, code=code)
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


def _threads_cpu_ns(pid: int) -> tuple[int, frozenset[str]]:
    """Nanoseconds on a CPU summed over the process's threads now (each thread's schedstat),
    and which threads they were."""
    total, tids = 0, []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):  # the thread ended meanwhile
            continue
        tids.append(tid)
    return total, frozenset(tids)


class CpuMeter:
    """A process's CPU seconds since the meter was made.  /proc's clock ticks (``cpu_seconds``:
    10 ms each) make a tenth of a second of CPU a figure of ten steps, so the meter sums each
    thread's own nanoseconds instead, when the same threads ran throughout; if one ended or
    began meanwhile (its nanoseconds would be lost or half counted), it falls back to the ticks,
    which keep an ended thread's time."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._ticks = cpu_seconds(pid)
        self._ns, self._tids = _threads_cpu_ns(pid)
        #: how the last :meth:`elapsed` was measured: "ns" or "ticks"
        self.measured_by = ""

    def elapsed(self) -> float:
        ticks = cpu_seconds(self.pid) - self._ticks
        ns, tids = _threads_cpu_ns(self.pid)
        if tids == self._tids:
            self.measured_by = "ns"
            return (ns - self._ns) / 1e9
        self.measured_by = "ticks"
        return ticks


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


def produce_latency_interleaved(bootstraps: dict[str, str], topic: str, n: int, warmup: int, acks: str,
                                seed: int = 1) -> dict:
    """The latency workload on every side at once, one request per side in turn, so all sides
    see the same moments of a noisy machine.  The order is shuffled every round (``seed``: the
    same orders every run): a side's request is faster when the one before it ran the same
    code, whose instructions are still in the CPU's caches (another kgw: libpython's pages are
    shared), so a fixed or rotated order, in which a side always follows the same side, skews
    the figures; four identical gateways measured 1.38, 1.27, 1.23 and 1.21 times direct in
    their rotated order, 1.29-1.30 shuffled (docs/benchmarks.md)."""
    producers = {s: Producer({**_common(b), "acks": acks, "linger.ms": 0, "enable.idempotence": False})
                 for s, b in bootstraps.items()}
    payload = b"x" * 100
    order = list(bootstraps)
    samples: dict[str, list[float]] = {s: [] for s in order}
    rng = random.Random(seed)
    try:
        for i in range(warmup + n):
            rng.shuffle(order)
            for side in order:
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


def metadata_for_no_topic(correlation_id: int) -> bytes:
    """A Metadata v12 request naming no topic (the brokers only): forwarded by kgw, so the
    connection that sends it is connected upstream and handed to the data plane."""
    from gateway.upstream.cluster import encode_request
    from protocol.codecs import make, request_class

    return encode_request(3, 12, correlation_id, make(request_class(3, 12), topics=(), allow_auto_topic_creation=False,
                                                      include_topic_authorized_operations=False))


def read_frame(sock, what: str) -> bytes:
    """One size-prefixed frame from ``sock`` (plain or TLS); BenchError naming ``what`` at EOF."""
    (size,) = struct.unpack(">i", _recv_exact(sock, 4, what))
    return _recv_exact(sock, size, what)


def _short_client_requests() -> bytes:
    """What a client's first connection sends: ApiVersions, then Metadata for no topic,
    pipelined as librdkafka does once it knows the versions."""
    return _api_versions_request(1) + metadata_for_no_topic(2)


def connection_churn(bootstrap: str, n: int) -> dict:
    """``n`` short-lived clients, one after another: each connects, sends ApiVersions and a
    Metadata for no topic (forwarded: kgw connects upstream and hands the connection to its data
    plane), reads both answers and closes.  Returns the wall time per connection."""
    host, port = bootstrap.rsplit(":", 1)
    requests = _short_client_requests()
    started = time.perf_counter()
    for _ in range(n):
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(requests)
            for _answer in range(2):
                read_frame(s, "gateway closed a short-lived client's connection")
    return {"connections": n, "ms_per_connection": (time.perf_counter() - started) / n * 1000.0}


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


@contextlib.contextmanager
def small_request_gateway(name: str, requests: int, warmup: int, acls: int, authz: bool):
    """tansu and ``kgw run`` (the StandardAuthorizer holding ``acls`` ACLs when ``authz``), after
    printing what is measured, a fresh topic and ``warmup`` one-record produces through the
    gateway (as bench/regress.py's small requests): yields (the gateway, the topic, the scratch
    directory); everything is stopped and removed after."""
    head, dirty = tree_state()
    print(f"small requests (one-record Produce + flush), {requests} after {warmup}; "
          f"{f'StandardAuthorizer, {acls} ACLs' if authz else 'no authorizer'}; {head}"
          f"{' + uncommitted changes' if dirty else ''}; load {load_text()}", flush=True)
    with scratch(f"kgw-{name}-") as (work, procs):
        tansu, port = start_tansu(work)
        procs.append(tansu)
        meta = work / "metadata"
        extra: dict = {"logging": {"level": "WARNING"}}
        if authz:
            seed_acls(meta, acls)
            extra["authorizer"] = {"class_name": "authz.standard_authorizer:StandardAuthorizer"}
        gw = launch_gateway(name, deep_merge(base_gateway_config(f"127.0.0.1:{port}", meta), extra), work)
        try:
            topic = f"bench-{name}-{time.monotonic_ns()}"  # (bench_acls allow bench- topics)
            create_topics(gw.bootstrap, [topic])
            produce_latency(gw.bootstrap, topic, warmup, 0, "1")
            yield gw, topic, work
        finally:
            gw.process.stop(15)


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
