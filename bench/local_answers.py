"""Locally answered requests under load (issue 17, item 6).

``--connections`` busy clients (one load process, one request in flight per connection, each
answered request followed by the next) send Metadata v12 for one topic through kgw, forwarded
to tansu.  Meanwhile a probe sends, in turn, every ``--interval-ms``: an ApiVersions v3
(answered by kgw itself) and the same Metadata v12 (forwarded) on one connection, and an
ApiVersions v3 as the first request of a new connection; the latency of each is recorded.  The target: kgw's own answer is no slower than a forwarded one (the finding was
ApiVersions p99 160-204 ms against 19-40 ms forwarded under 500 busy connections).

    .venv/bin/python bench/local_answers.py [--connections 500] [--seconds 20] [--interval-ms 5] [--no-data-plane]

Prints one JSON line per kind (p50/p99/max in ms, samples), the load's request rate, and a
summary line.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import selectors
import socket
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_common import HOST, _recv_exact, create_topics, scratch, start_kgw, start_tansu  # noqa: E402

from gateway.upstream.cluster import encode_request  # noqa: E402
from protocol.codecs import nested, request_class  # noqa: E402


def metadata_frame(topic: str, correlation_id: int) -> bytes:
    cls = request_class(3, 12)
    body = cls(topics=(nested(cls, "topics")(name=topic, topic_id=None),), allow_auto_topic_creation=False,
               include_topic_authorized_operations=False)
    return encode_request(3, 12, correlation_id, body)


def api_versions_frame(correlation_id: int) -> bytes:
    cls = request_class(18, 3)
    return encode_request(18, 3, correlation_id, cls(client_software_name="kgw-bench", client_software_version="1"))


def _exactly(sock: socket.socket, n: int) -> bytes:
    return _recv_exact(sock, n, "kgw closed the probe connection")


def load(port: int, topic: str, connections: int, seconds: float, out) -> None:
    """The busy clients: one selector loop, a request always in flight on every connection."""
    frame = metadata_frame(topic, 7)
    sel = selectors.DefaultSelector()
    pending: dict[socket.socket, bytearray] = {}
    for _ in range(connections):
        s = socket.create_connection((HOST, port))
        s.setblocking(False)
        s.sendall(frame)
        pending[s] = bytearray()
        sel.register(s, selectors.EVENT_READ)
    answered = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for key, _ in sel.select(0.1):
            s = key.fileobj
            data = s.recv(1 << 16)
            if not data:
                raise ConnectionError("kgw closed a load connection")
            buf = pending[s]
            buf += data
            while len(buf) >= 4:
                size = struct.unpack_from(">i", buf)[0]
                if len(buf) < 4 + size:
                    break
                del buf[: 4 + size]
                answered += 1
                s.sendall(frame)
    out.put(answered / seconds)
    for s in pending:
        s.close()


NEW_CONNECTION = "ApiVersions, first request of a new connection"


def probe(port: int, topic: str, seconds: float, interval_s: float) -> dict[str, list[float]]:
    """In turn: ApiVersions and Metadata on one established connection, and ApiVersions as
    the first request of a new connection (what every client does; send to answer, the
    connect not counted)."""
    samples: dict[str, list[float]] = {"ApiVersions (answered by kgw)": [], "Metadata (forwarded)": [],
                                       NEW_CONNECTION: []}
    kinds = list(samples)
    with socket.create_connection((HOST, port)) as kept:
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end:
            n += 1
            kind = kinds[n % 3]
            s = kept if kind != NEW_CONNECTION else socket.create_connection((HOST, port))
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            frame = metadata_frame(topic, n) if kind.startswith("Metadata") else api_versions_frame(n)
            t0 = time.perf_counter()
            s.sendall(frame)
            (size,) = struct.unpack(">i", _exactly(s, 4))
            body = _exactly(s, size)
            elapsed = time.perf_counter() - t0
            if s is not kept:
                s.close()
            if struct.unpack_from(">i", body)[0] != n:
                raise RuntimeError("probe response out of order")
            samples[kind].append(elapsed * 1000)
            time.sleep(interval_s)
    return samples


def summary(values: list[float]) -> dict:
    v = sorted(values)
    return {"first_ms": round(values[0], 2), "samples": len(v), "p50_ms": round(v[len(v) // 2], 2), "p99_ms": round(v[min(len(v) - 1, int(len(v) * 0.99))], 2),
            "max_ms": round(v[-1], 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connections", type=int, default=500)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--interval-ms", type=float, default=5)
    ap.add_argument("--warmup", type=float, default=10, help="seconds of load before the probe starts")
    ap.add_argument("--no-data-plane", action="store_true", help="io.data_plane_thread: false (all on Trio)")
    args = ap.parse_args(argv)
    with scratch("kgw-local-") as (tmp, procs):
        tansu, tansu_port = start_tansu(tmp)
        procs.append(tansu)
        kgw, port = start_kgw(tmp, tansu_port,
                              extra_config="io: {data_plane_thread: false}\n" if args.no_data_plane else "")
        procs.append(kgw)
        topic = "bench-local"
        create_topics(f"{HOST}:{tansu_port}", [topic])
        rates = multiprocessing.Queue()
        loader = multiprocessing.Process(target=load, args=(port, topic, args.connections, args.seconds + args.warmup + 2, rates))
        loader.start()
        time.sleep(args.warmup)  # let every load connection have its first answers (a warm-up, not a synchronisation)
        samples = probe(port, topic, args.seconds, args.interval_ms / 1000)
        loader.join(args.seconds + 30)
        rate = rates.get(timeout=5)
        results = {kind: summary(v) for kind, v in samples.items()}
        for kind, r in results.items():
            print(json.dumps({"kind": kind, **r}))
        print(json.dumps({"load_connections": args.connections, "load_requests_per_s": round(rate)}))
        local, forwarded, first = results.values()
        worst = max(local["p99_ms"], first["p99_ms"])
        verdict = "met" if worst <= forwarded["p99_ms"] else "MISSED"
        print(f"p99: kgw's own answer {local['p99_ms']} ms (on a new connection {first['p99_ms']} ms), "
              f"forwarded {forwarded['p99_ms']} ms under {args.connections} busy connections: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
