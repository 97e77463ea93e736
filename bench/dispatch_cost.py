#!/usr/bin/env python3
"""What kgw's connection core costs per small request, in process, with no I/O.

    .venv/bin/python bench/dispatch_cost.py                       # this tree
    .venv/bin/python bench/dispatch_cost.py --against HEAD~1      # interleaved with a commit's code
    .venv/bin/python bench/dispatch_cost.py --api fetch           # a consumer's usual Fetch instead

Builds two gateways from configs (no listener, no upstream: the upstream's API versions are
set as if learned) and a client connection's ``ConnectionCore`` on each, and drives them with
one-record Produce requests (``--version``, 9 by default: flexible, as librdkafka sends them)
and their responses, as the data plane does: ``dispatch`` then ``complete_responses``; or,
``--api fetch``, with a consumer's usual Fetch (v17 by default: incremental, on a session kgw
saw created, one partition of a topic named by id; 100 bytes of records in each answer).  One
gateway has no authorizer (``plain``), the other the StandardAuthorizer with ``--acls`` of
bench_common's ACLs (``authz``: ``User:ANONYMOUS`` let through by PREFIXED ``bench-`` WRITE and
READ, its decisions counted in the gateway's metrics as at run time).  The two take turns of 250
requests (distinct frames, as from a socket), ``--requests`` timed per side after as many to
warm up, and the median per request is kept.  This VM's speed drifts by up to a factor of two
within seconds, so each round also gives ``authz/plain``: the plain path is the same code on
both sides of an A/B unless the change touched it, and the round with the lowest ratio is
printed as the best.  With ``--against``, each round runs in a child process, once with the
commit's code (a temporary git worktree) and once with this tree's, alternating in order.

In process, nothing competes for the caches; a live request costs several times these figures
(bench/data_plane_steps.py, bench/regress.py).  Read them against each other, same run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def measure(version: int, acls: int, requests: int, api: str = "produce") -> dict[str, float]:
    """One round in this process, from the code found on sys.path: µs per request (medians) with
    no authorizer (``plain_``) and with the StandardAuthorizer (``authz_``), the two cores driven
    in turns of 250 requests (this VM's speed drifts by a factor of two within seconds: the
    ratio of the two is what a round compares best)."""
    from datetime import timedelta

    from kio.schema.errors import ErrorCode
    from kio.static.primitive import i16, i32, i64

    import bench_common as bg
    from configs.yaml_reader import parse_config
    from gateway.connection.core import ConnectionCore
    from gateway.process.server import Gateway
    from gateway.upstream.cluster import encode_request
    from protocol.apis.api_versions import VersionRange, advertised_versions
    from protocol.apis.registry import LOCAL_KEYS, REGISTRY
    from protocol.codecs import encode, make, nested, request_class, response_class
    from tests.support.kio_samples import record_batch

    import gateway
    if not Path(gateway.__file__).resolve().is_relative_to(Path(sys.path[0]).resolve()):
        raise SystemExit(f"measuring {gateway.__file__}, not the code asked for ({sys.path[0]})")

    # (the unit tests' offline core, tests/unit/gateway/test_connection_core.py, built here again:
    # with --against this runs an older commit's code, whose tests may not have what this needs)
    def core(with_acls: int) -> ConnectionCore:
        raw: dict = {"listeners": [{"name": "B", "host": "127.0.0.1", "port": 0, "broker_port_base": 21000}],
                     "upstream": {"bootstrap_servers": ["127.0.0.1:1"]}, "admin": None,
                     "metadata": {"path": "/nonexistent-kgw-dispatch-cost"}}
        if with_acls:
            raw["authorizer"] = {"class_name": "authz.standard_authorizer:StandardAuthorizer", "config": {}}
        gw = Gateway(parse_config(raw))
        if with_acls:
            gw.authorizer.load_snapshot({uuid.uuid4(): b for b in bg.bench_acls(with_acls)})
            gw.authorizer.complete_initial_load()
            gw.authorizer.monitor(gw.metrics.registry)  # as the gateway does at start: decisions counted
        gw.cluster.versions = {key: VersionRange(0, 16) for key in REGISTRY}
        gw.cluster.versions[0] = VersionRange(3, 13)
        gw.cluster.versions[1] = VersionRange(4, 17)
        gw.topic_ids.learn("bench-dispatch", _TOPIC_ID)
        gw._advertised = advertised_versions(gw.cluster.versions, LOCAL_KEYS, REGISTRY, gw.authorizer is not None)
        gw._advertised_for = gw.cluster.versions
        c = ConnectionCore(gw.listeners[0], None, ("127.0.0.1", 40000), None)
        c.auth = type("Auth", (), {"session": None, "principal": None})()
        c._upstream = object()  # open: forwarded requests go to the list given to dispatch
        return c

    if api == "fetch":
        return _measure_fetch(version, acls, requests, core)

    req_cls = request_class(0, version)
    topic_cls = nested(req_cls, "topic_data")
    part_cls = nested(topic_cls, "partition_data")
    resp_cls = response_class(0, version)
    rtopic_cls = nested(resp_cls, "responses")
    rpart_cls = nested(rtopic_cls, "partition_responses")
    named = {"topic_id": _TOPIC_ID} if version >= 13 else {"name": "bench-dispatch"}  # (v13: by the id learned)
    request = make(req_cls, transactional_id=None, acks=i16(1), timeout=timedelta(seconds=30), topic_data=(
        make(topic_cls, partition_data=(
            make(part_cls, index=i32(0), records=record_batch(b"x" * 100)),), **named),))
    response = encode(make(resp_cls, throttle_time=timedelta(0), responses=(make(rtopic_cls, **named,
        partition_responses=(make(rpart_cls, index=i32(0), error_code=ErrorCode(0), base_offset=i64(7),
                                  log_append_time=None, log_start_offset=i64(0), record_errors=(),
                                  error_message=None),)),)))
    body = (b"\x00" if resp_cls.__flexible__ else b"") + response  # (a v1 response header's tags)

    def frames(first: int, count: int) -> list[tuple[memoryview, bytes]]:
        return [(memoryview(encode_request(0, version, cid, request)),
                 (4 + len(body)).to_bytes(4, "big") + cid.to_bytes(4, "big") + body)
                for cid in range(first, first + count)]

    cores = {"plain": core(0), "authz": core(acls)}
    return _timed(cores, frames, requests)


_TOPIC_ID = uuid.UUID(int=0xB0B)
#: kgw's own packages: what a child measures must come from its commit's code
_CODE = ("protocol", "gateway", "authz", "configs", "metadata")


def _measure_fetch(version: int, acls: int, requests: int, core: Any) -> dict[str, float]:
    """The Fetch workload: a consumer's usual fetch, incremental on a session of one topic (by id
    from v13) that kgw saw created, naming its one partition, 100 bytes of records in each
    answer.  Each core first creates the session and fetches on it once (the memo then holds
    the session's action, as after a consumer's first fetches)."""
    from datetime import timedelta

    from kio.schema.errors import ErrorCode
    from kio.static.primitive import i8, i32, i64

    from gateway.upstream.cluster import encode_request
    from protocol.codecs import encode, make, nested, request_class, response_class
    from protocol.framing import FrameDecoder

    req_cls = request_class(1, version)
    topic_cls = nested(req_cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    key = {"topic_id": _TOPIC_ID} if version >= 13 else {"topic": "bench-dispatch"}

    def request(session_id: int, epoch: int) -> Any:
        part = make(part_cls, partition=i32(0), current_leader_epoch=i32(0), fetch_offset=i64(100),
                    last_fetched_epoch=i32(-1), log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20))
        return make(req_cls, replica_id=i32(-1), max_wait=timedelta(milliseconds=500), min_bytes=i32(1),
                    max_bytes=i32(50 << 20), isolation_level=i8(0), session_id=i32(session_id),
                    session_epoch=i32(epoch), topics=(make(topic_cls, **key, partitions=(part,)),),
                    forgotten_topics_data=(), rack_id="", cluster_id=None)

    resp_cls = response_class(1, version)
    rtopic_cls = nested(resp_cls, "responses")
    rpart_cls = nested(rtopic_cls, "partitions")
    answer = encode(make(resp_cls, throttle_time=timedelta(0), error_code=ErrorCode(0), session_id=i32(555),
                         responses=(make(rtopic_cls, **key, partitions=(make(
                             rpart_cls, partition_index=i32(0), error_code=ErrorCode(0), high_watermark=i64(101),
                             last_stable_offset=i64(101), log_start_offset=i64(0), aborted_transactions=None,
                             preferred_read_replica=i32(-1), records=b"r" * 100),)),),
                         node_endpoints=()))
    body = (b"\x00" if resp_cls.__flexible__ else b"") + answer

    def frames(first: int, count: int) -> list[tuple[memoryview, bytes]]:
        return [(memoryview(encode_request(1, version, cid, request(555, cid))),
                 (4 + len(body)).to_bytes(4, "big") + cid.to_bytes(4, "big") + body)
                for cid in range(first, first + count)]

    cores = {"plain": core(0), "authz": core(acls)}
    for c in cores.values():  # the session created (its id learned from the answer), then used once
        for frame, answered in [(memoryview(encode_request(1, version, 1, request(0, 0))),
                                 (4 + len(body)).to_bytes(4, "big") + (1).to_bytes(4, "big") + body),
                                *frames(2, 1)]:
            out: list = []
            c.dispatch(frame, out)
            decoder = FrameDecoder(1 << 20, trusted=True)
            decoder.receive_data(answered)
            c.complete_responses(decoder)
            c.pending.popleft()
    return _timed(cores, lambda first, count: frames(first + 2, count), requests)


def _timed(cores: dict[str, Any], frames: Any, requests: int) -> dict[str, float]:
    """Each core driven in turns of 250 requests, ``requests`` timed per side after as many to
    warm up: the median dispatch and completion per request (micro-seconds)."""
    from protocol.framing import FrameDecoder

    times: dict[str, list[int]] = {f"{side}_{step}": [] for side in cores for step in ("dispatch", "complete")}
    clock = time.perf_counter_ns
    turn = 250
    for first in range(1, 2 * requests + 1, turn):  # the first half warms up
        for side, c in cores.items():
            for frame, answer in frames(first, turn):
                out: list = []
                t0 = clock()
                if c.dispatch(frame, out) is not False:
                    raise SystemExit("the request was not forwarded: the bench's ACLs no longer let it through")
                t1 = clock()
                decoder = FrameDecoder(1 << 20, trusted=True)
                decoder.receive_data(answer)
                t2 = clock()
                c.complete_responses(decoder)
                t3 = clock()
                c.pending.popleft()
                if first > requests:
                    times[f"{side}_dispatch"].append(t1 - t0)
                    times[f"{side}_complete"].append(t3 - t2)
    return {key: statistics.median(values) / 1000 for key, values in times.items()}


def _child(code: Path, version: int, acls: int, requests: int, api: str) -> dict[str, float]:
    """The same round with ``code`` first on sys.path, in a child process."""
    done = subprocess.run([sys.executable, str(HERE / "dispatch_cost.py"), "--child", str(code), "--version",
                           str(version), "--acls", str(acls), "--requests", str(requests), "--api", api],
                          capture_output=True, text=True, timeout=600, cwd=code)
    if done.returncode != 0:
        raise SystemExit(f"the round with {code}'s code failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _line(r: dict[str, float]) -> str:
    return (f"dispatch {r['plain_dispatch']:.2f} / {r['authz_dispatch']:.2f} us (authz/plain "
            f"{r['authz_over_plain']:.2f}), complete {r['plain_complete']:.2f} / {r['authz_complete']:.2f} us")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", metavar="COMMIT", help="also measure this commit's code, interleaved")
    ap.add_argument("--api", choices=("produce", "fetch"), default="produce",
                    help="one-record Produce requests, or a consumer's usual Fetch (incremental, on a session)")
    ap.add_argument("--version", type=int, help="request version (Produce 3-13, default 9, v13 naming its topic by an id learned; Fetch 4-17, default 17)")
    ap.add_argument("--acls", type=int, default=1000, help="ACLs on the authorized side (default 1000)")
    ap.add_argument("--requests", type=int, default=5000, help="timed requests per side and round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--child", metavar="CODE", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.version is None:
        args.version = 17 if args.api == "fetch" else 9
    if args.child:
        # bench_common puts this checkout first on sys.path when imported (measure imports it):
        # imported first, then the measured code put before it, so that nothing of this
        # checkout's gateway stands in for the commit's
        sys.path.insert(0, str(HERE))
        import bench_common  # noqa: F401
        sys.path.insert(0, args.child)
        for name in [m for m in sys.modules if m.split(".")[0] in _CODE]:
            del sys.modules[name]
        print(json.dumps(measure(args.version, args.acls, args.requests, args.api)))
        return 0

    sys.path.insert(0, str(HERE))
    from bench_common import REPO, load_text, worktree

    with tempfile.TemporaryDirectory(prefix="kgw-dispatch-cost-") as tmp, \
            (worktree(args.against, Path(tmp)) if args.against else contextlib.nullcontext()) as tree:
        codes = {"base": tree, "work": REPO} if tree is not None else {"work": REPO}
        best: dict[str, dict[str, float]] = {}
        print(f"{'Fetch' if args.api == 'fetch' else 'Produce'} v{args.version}, {args.requests} requests per side "
              f"and round, {args.rounds} rounds; "
              f"load {load_text()}")
        for i in range(args.rounds):
            for name in (list(codes) if i % 2 == 0 else list(reversed(codes))):
                r = _child(codes[name], args.version, args.acls, args.requests, args.api)
                r["authz_over_plain"] = r["authz_dispatch"] / r["plain_dispatch"]
                if name not in best or r["authz_over_plain"] < best[name]["authz_over_plain"]:
                    best[name] = r
                print(f"  round {i + 1} {name:4}: " + _line(r), flush=True)
        print("best round (lowest authz/plain dispatch):")
        for name, r in best.items():
            print(f"  {name:4}: " + _line(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
