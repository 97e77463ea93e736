"""How much one huge request stalls everyone else (issue 11, finding 7).

A victim produces one small record at a time (confluent-kafka, flush per record)
through kgw with a StandardAuthorizer, and its latency is sampled in phases of
``--seconds`` each: quiet; while an anonymous attacker repeatedly sends a
Metadata v12 request naming ``--topics`` topics (none of them allowed); while it
repeatedly sends a Fetch v12 naming ``--partitions`` partitions; and while four
anonymous connections (on the data plane, after one Metadata each) pipeline
ApiVersions v0 requests as fast as they can, reading their answers (``pipeline``).
The target: the victim's p99 stays under 50 ms in every phase.

    .venv/bin/python bench/hostile_stall.py [--seconds 10] [--topics 200000] [--partitions 200000]
    .venv/bin/python bench/hostile_stall.py --phases quiet pipeline --code /path/to/other/checkout

Prints one JSON object per phase (victim p50/p99/max in ms, attacker requests
sent) and a summary line.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_common import (  # noqa: E402
    HOST, Producer, _common, create_topics, scratch, seed_acls, start_kgw, start_tansu,
)
from kio.static.primitive import i32, i64  # noqa: E402

from gateway.upstream.cluster import encode_request  # noqa: E402
from protocol.codecs import make, nested, request_class  # noqa: E402

AUTHZ = "authorizer: {class_name: authz.standard_authorizer:StandardAuthorizer}\n"


def metadata_frame(n: int) -> bytes:
    cls = request_class(3, 12)
    entry = nested(cls, "topics")
    body = cls(topics=tuple(entry(name=f"x{i}", topic_id=None) for i in range(n)), allow_auto_topic_creation=False,
               include_topic_authorized_operations=False)
    return encode_request(3, 12, 1, body)


def fetch_frame(n: int) -> bytes:
    cls = request_class(1, 12)
    tcls = nested(cls, "topics")
    pcls = nested(tcls, "partitions")
    per_topic = 1000
    topics = tuple(
        tcls(topic=f"y{t}", partitions=tuple(
            pcls(partition=i32(p), current_leader_epoch=i32(-1), fetch_offset=i64(0), last_fetched_epoch=i32(-1),
                 log_start_offset=i64(-1), partition_max_bytes=i32(1024)) for p in range(per_topic)))
        for t in range(n // per_topic))
    body = make(cls, cluster_id=None, replica_id=i32(-1), replica_state=None, max_wait=timedelta(0), min_bytes=i32(1),
               max_bytes=i32(1 << 20), isolation_level=0, session_id=i32(0), session_epoch=i32(-1), topics=topics,
               forgotten_topics_data=(), rack_id="")
    return encode_request(1, 12, 1, body)


def attacker(address: tuple[str, int], frame: bytes, stop: threading.Event, sent: list[int]) -> None:
    while not stop.is_set():
        try:
            with socket.create_connection(address, timeout=60) as sock:
                while not stop.is_set():
                    sock.sendall(frame)
                    head = _exactly(sock, 4)
                    if head is None:
                        break
                    if _exactly(sock, struct.unpack(">i", head)[0]) is None:
                        break
                    sent[0] += 1
        except OSError:
            pass


def pipeliner(address: tuple[str, int], stop: threading.Event, sent: list[int]) -> None:
    """One connection that moves to the data plane, then pipelines ApiVersions v0 as fast as it
    can write, reading the answers on a second thread (it never waits for one)."""
    with socket.create_connection(address, timeout=60) as sock:
        sock.sendall(metadata_frame(0))
        head = _exactly(sock, 4)
        _exactly(sock, struct.unpack(">i", head)[0])
        burst = encode_request(18, 0, 2, make(request_class(18, 0))) * 1000

        def drain():
            while not stop.is_set():
                try:
                    if not sock.recv(1 << 20):
                        return
                except OSError:
                    return

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        while not stop.is_set():
            try:
                sock.sendall(burst)
            except OSError:
                return
            sent[0] += 1000


def _exactly(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def victim(bootstrap: str, topic: str, seconds: float) -> dict:
    p = Producer({**_common(bootstrap), "acks": "1", "linger.ms": 0, "enable.idempotence": False})
    samples = []
    for _ in range(20):
        p.produce(topic, b"w")
        p.flush(10)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        p.produce(topic, b"x" * 100)
        if p.flush(30) != 0:
            raise RuntimeError("victim produce did not complete")
        samples.append((time.perf_counter() - t0) * 1000)
    samples.sort()
    q = lambda f: samples[min(len(samples) - 1, int(f * len(samples)))]  # noqa: E731
    return {"requests": len(samples), "p50_ms": round(q(0.5), 2), "p99_ms": round(q(0.99), 2),
            "max_ms": round(samples[-1], 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--topics", type=int, default=200_000)
    ap.add_argument("--partitions", type=int, default=200_000)
    ap.add_argument("--phases", nargs="+", default=["quiet", "metadata", "fetch", "pipeline"],
                    choices=["quiet", "metadata", "fetch", "pipeline"])
    ap.add_argument("--code", type=Path, help="run this checkout of kgw (e.g. a worktree of an older commit)")
    args = ap.parse_args(argv)
    frames = {"metadata": metadata_frame(args.topics), "fetch": fetch_frame(args.partitions)}
    with scratch("kgw-stall-") as (tmp, procs):
        tansu, tansu_port = start_tansu(tmp)
        procs.append(tansu)
        meta = tmp / "meta"
        seed_acls(meta, 10)
        kgw, port = start_kgw(tmp, tansu_port, extra_config=AUTHZ, meta_dir=meta, code=args.code)
        procs.append(kgw)
        bootstrap = f"{HOST}:{port}"
        topic = "bench-stall"
        create_topics(f"{HOST}:{tansu_port}", [topic])
        results = {}
        for phase in args.phases:
            stop, sent = threading.Event(), [0]
            threads = []
            if phase == "pipeline":
                threads = [threading.Thread(target=pipeliner, args=((HOST, port), stop, sent), daemon=True)
                           for _ in range(4)]
            elif phase != "quiet":
                threads = [threading.Thread(target=attacker, args=((HOST, port), frames[phase], stop, sent),
                                            daemon=True)]
            for thread in threads:
                thread.start()
            results[phase] = victim(bootstrap, topic, args.seconds)
            stop.set()
            for thread in threads:
                thread.join(60)
            results[phase]["attack_requests"] = sent[0]
            results[phase]["attack_frame_bytes"] = len(frames[phase]) if phase in frames else 0
            print(json.dumps({"phase": phase, **results[phase]}), flush=True)
        worst = max(r["p99_ms"] for r in results.values())
        print(f"victim p99 worst phase: {worst:.1f} ms (target < 50 ms): {'met' if worst < 50 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
