#!/usr/bin/env python3
"""What merging one Metadata answer costs a gateway with the StandardAuthorizer, in process.

    .venv/bin/python bench/metadata_merge.py                     # this tree
    .venv/bin/python bench/metadata_merge.py --against HEAD~1    # interleaved with a commit's code

With an authorizer, kgw merges every Metadata answer: topics the client may not describe left
out or answered 29, the authorized operations it computes set (protocol/apis/metadata.py).  This
times that merge (the decision's ``merge``, as the connection calls it after the brokers'
rewrite) for a client of ``bench_common``'s ACLs (``--acls`` of them), on v12 answers of three
brokers and three partitions per topic, two thirds of the topics named ``bench-*`` (described)
and one third ``other-*`` (not):

* ``named-1``: a request naming one topic, auto-creation off (a producer's or consumer's
  refresh of its topic);
* ``all-N``: a request for every topic (an admin tool's, a regex consumer's), answers of
  N topics (``--topics``).

Each case is timed over enough rounds to take about 0.2 s, best of three.  With ``--against``,
each round runs in a child process, once with the commit's code (a temporary git worktree) and
once with this tree's, alternating in order; the merge runs on the data plane (a large answer
on a worker thread, under the GIL), so its time is time no other client on that thread is served.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import ipaddress
import json
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
_CODE = ("protocol", "gateway", "authz", "configs", "metadata")


def _answer(version: int, names: list[str]) -> bytes:
    from kio.schema.errors import ErrorCode

    from protocol.codecs import encode, make, nested, response_class

    cls = response_class(3, version)
    topic, broker = nested(cls, "topics"), nested(cls, "brokers")
    partition = nested(topic, "partitions")
    return encode(make(cls, throttle_time=timedelta(0), cluster_id="c", controller_id=1,
                       cluster_authorized_operations=-2147483648, error_code=ErrorCode.none,
                       brokers=tuple(make(broker, node_id=i, host="gw", port=9000 + i, rack=None) for i in range(3)),
                       topics=tuple(make(topic, error_code=ErrorCode.none, name=name, topic_id=uuid.uuid4(),
                                         is_internal=False, topic_authorized_operations=-2147483648,
                                         partitions=tuple(make(partition, error_code=ErrorCode.none, partition_index=p,
                                                               leader_id=p % 3, leader_epoch=0, replica_nodes=(0, 1, 2),
                                                               isr_nodes=(0, 1, 2), offline_replicas=())
                                                          for p in range(3)))
                                    for name in names)))


def _decision(version: int, acls: int, names: list[str] | None):
    """The enforcement of a Metadata request for ``names`` (None: every topic) by a client of
    bench_common's ACLs."""
    from kio.serial import entity_writer

    from authz.authorizer import AuthorizableRequestContext
    from authz.principal import KafkaPrincipal
    from authz.standard_authorizer import StandardAuthorizer
    from bench_common import BENCH_PRINCIPAL, bench_acls
    from protocol.apis.registry import REGISTRY
    from protocol.auth_helper import AuthHelper
    from protocol.codecs import encode, make, nested, request_class
    from protocol.headers import parse_request_header
    from protocol.topic_ids import TopicCache

    authorizer = StandardAuthorizer()
    authorizer.configure({})
    authorizer.load_snapshot({uuid.uuid4(): b for b in bench_acls(acls)})
    authorizer.complete_initial_load()
    cls = request_class(3, version)
    tcls = nested(cls, "topics")
    request = make(cls, topics=None if names is None else tuple(make(tcls, name=n, topic_id=None) for n in names),
                   allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    out = io.BytesIO()
    hcls = request.__header_schema__
    entity_writer(hcls)(out, make(hcls, request_api_key=3, request_api_version=version, correlation_id=5,
                                  client_id="bench"))
    out.write(encode(request))
    frame = memoryview(out.getvalue())
    header = parse_request_header(frame)
    kind, name = BENCH_PRINCIPAL.split(":", 1)
    context = AuthorizableRequestContext("PLAIN", "PLAINTEXT", KafkaPrincipal(kind, name),
                                         ipaddress.ip_address("10.0.0.1"), 3, version, "bench", 5)
    spec = REGISTRY[3]
    decision = spec.enforce(AuthHelper(authorizer, context, topics=TopicCache()), header, frame,
                            spec.inspect(header, frame))
    assert decision.merge is not None
    return decision


def _best_us(fn, seconds: float = 0.2) -> float:
    fn()
    started = time.perf_counter()
    fn()
    once = max(1e-6, time.perf_counter() - started)
    rounds = max(3, int(seconds / once))
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(rounds):
            fn()
        best = min(best, (time.perf_counter() - started) / rounds)
    return best * 1e6


def measure(acls: int, topics: list[int]) -> dict[str, float]:
    from bench_common import BENCH_TOPIC_PREFIX

    version = 12
    times = {}
    one = f"{BENCH_TOPIC_PREFIX}0"
    body = memoryview(_answer(version, [one]))
    decision = _decision(version, acls, [one])
    times["named-1"] = _best_us(lambda: decision.merge(body, 0))
    decision = _decision(version, acls, None)
    for n in topics:
        names = [f"{BENCH_TOPIC_PREFIX}{i}" if i % 3 else f"other-{i}" for i in range(n)]
        body = memoryview(_answer(version, names))
        times[f"all-{n}"] = _best_us(lambda: decision.merge(body, 0))
    return times


def _child(code: Path, acls: int, topics: list[int]) -> dict[str, float]:
    done = subprocess.run([sys.executable, str(HERE / "metadata_merge.py"), "--child", str(code), "--acls", str(acls),
                           "--topics", *map(str, topics)], capture_output=True, text=True, timeout=600, cwd=code)
    if done.returncode != 0:
        raise SystemExit(f"the round with {code}'s code failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", metavar="COMMIT", help="also measure this commit's code, interleaved")
    ap.add_argument("--acls", type=int, default=1000)
    ap.add_argument("--topics", type=int, nargs="+", default=[10, 100, 1000])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--child", metavar="CODE", help=argparse.SUPPRESS)
    args = ap.parse_args()
    sys.path.insert(0, str(HERE))
    import bench_common  # noqa: F401  (puts this checkout first on sys.path)

    if args.child:
        sys.path.insert(0, args.child)
        for name in [m for m in sys.modules if m.split(".")[0] in _CODE]:
            del sys.modules[name]
        print(json.dumps(measure(args.acls, args.topics)))
        return 0

    from bench_common import REPO, load_text, worktree

    with tempfile.TemporaryDirectory(prefix="kgw-metadata-merge-") as tmp, \
            (worktree(args.against, Path(tmp)) if args.against else contextlib.nullcontext()) as tree:
        codes = {"base": tree, "work": REPO} if tree is not None else {"work": REPO}
        print(f"Metadata v12 merge, {args.acls} ACLs, {args.rounds} rounds; load {load_text()}")
        best: dict[str, dict[str, float]] = {}
        for i in range(args.rounds):
            for name in (list(codes) if i % 2 == 0 else list(reversed(codes))):
                r = _child(codes[name], args.acls, args.topics)
                best[name] = {k: min(v, best.get(name, {}).get(k, v)) for k, v in r.items()}
                print(f"  round {i + 1} {name:4}: " + "   ".join(f"{k} {v:,.0f} us" for k, v in r.items()),
                      flush=True)
        print("best of the rounds, us per merge:")
        for key in best["work"]:
            line = f"  {key:10}" + "".join(f"  {name} {best[name][key]:10,.0f}" for name in best)
            if "base" in best:
                line += f"   work/base {best['work'][key] / best['base'][key]:.3f}"
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
