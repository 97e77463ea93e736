#!/usr/bin/env python3
"""What rewriting one Metadata answer's broker addresses costs, in process: the walk kgw runs
(``protocol/apis/metadata.py``: the broker list rewritten, the topics copied as they came)
against the decode-rewrite-encode it replaced, for answers of 0, 100 and 1,000 topics.

    .venv/bin/python bench/metadata_rewrite.py
    .venv/bin/python bench/metadata_rewrite.py --topics 0 10000 --partitions 6 --version 9

Each answer has three brokers and ``--partitions`` partitions per topic (three replicas each).
The two must give the same bytes (checked first); then each is timed over enough rounds to take
a few hundred milliseconds, best of three.  The rewrite runs on the data plane (or, for an answer
above ``limits.offload_response_bytes``, on a worker thread under the GIL): its time is time no
other connection on that thread is served.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kio.schema.errors import ErrorCode  # noqa: E402

from protocol.apis.addresses import rewrite_node_list  # noqa: E402
from protocol.apis.registry import REGISTRY  # noqa: E402
from protocol.codecs import decode_response, encode, make, nested, response_class  # noqa: E402


class Nodes:
    """Every broker learned and advertised at gw:9000+N, as a listener's node map does."""

    def learn(self, node_id, host, port, rack) -> None:
        pass

    def advertise(self, node_id):
        return ("gw", 9000 + node_id)


def answer(version: int, topics: int, partitions: int) -> bytes:
    cls = response_class(3, version)
    topic, broker = nested(cls, "topics"), nested(cls, "brokers")
    partition = nested(topic, "partitions")
    return encode(make(cls, throttle_time=timedelta(0), cluster_id="c", controller_id=1,
                       cluster_authorized_operations=-2147483648, error_code=ErrorCode.none,
                       brokers=tuple(make(broker, node_id=i, host=f"broker-{i}.internal", port=9092, rack=None)
                                     for i in range(3)),
                       topics=tuple(make(topic, error_code=ErrorCode.none, name=f"topic-{t}", topic_id=uuid.uuid4(),
                                         is_internal=False, topic_authorized_operations=-2147483648,
                                         partitions=tuple(make(partition, error_code=ErrorCode.none, partition_index=p,
                                                               leader_id=p % 3, leader_epoch=0, replica_nodes=(0, 1, 2),
                                                               isr_nodes=(0, 1, 2), offline_replicas=())
                                                          for p in range(partitions)))
                                    for t in range(topics))))


def best_us(fn, rounds: int) -> float:
    times = []
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(rounds):
            fn()
        times.append((time.perf_counter() - started) / rounds)
    return min(times) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topics", type=int, nargs="+", default=[0, 100, 1000])
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--version", type=int, default=12)
    args = ap.parse_args()
    version = args.version
    print(f"Metadata v{version}, 3 brokers, {args.partitions} partitions per topic")
    for topics in args.topics:
        body = memoryview(answer(version, topics, args.partitions))

        def decoded() -> bytes:
            response = decode_response(3, version, body, 0)
            return encode(replace(response, brokers=rewrite_node_list(response.brokers, Nodes())))

        def walked() -> bytes:
            return REGISTRY[3].rewrite_response(version, body, 0, Nodes())

        if decoded() != walked():
            raise SystemExit(f"the walk and the decoded rewrite differ at {topics} topics")
        rounds = max(3, int(0.1 / max(1e-6, best_us(decoded, 1) / 1e6)))
        d, w = best_us(decoded, rounds), best_us(walked, max(rounds, 1000))
        print(f"  {topics:6} topics, {len(body):9,} B: decoded {d:10,.0f} us   walked {w:8,.0f} us   ({d / w:,.0f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
