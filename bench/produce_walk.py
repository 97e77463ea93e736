#!/usr/bin/env python3
"""The Produce request walk, in C (protocol/_native.c) and in Python (the reference), in process.

    .venv/bin/python bench/produce_walk.py [--version 9] [--number 20000]

Builds Produce requests of 1 topic x 1 partition (a librdkafka producer's one-record request),
1 x 50 and 10 x 10 partitions (a Java producer batching for many partitions), each record set one
100-byte record, and times ``walk_produce_request`` (the C walk, the reference when it declines)
against ``walk_produce_request_python``, best of five repeats, per request.  Warm caches, no I/O:
a live request costs several times these figures (bench/regress.py measures those).
"""

from __future__ import annotations

import argparse
import sys
import timeit
import uuid
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kio.static.primitive import i16, i32  # noqa: E402

from gateway.upstream.cluster import encode_request  # noqa: E402
from protocol.apis.produce import walk_produce_request, walk_produce_request_python  # noqa: E402
from protocol.codecs import make, nested, request_class  # noqa: E402
from protocol.headers import parse_request_header  # noqa: E402
from tests.support.kio_samples import record_batch  # noqa: E402


def request(version: int, topics: int, partitions: int) -> memoryview:
    cls = request_class(0, version)
    topic_cls = nested(cls, "topic_data")
    part_cls = nested(topic_cls, "partition_data")
    data = tuple(make(topic_cls, partition_data=tuple(make(part_cls, index=i32(p), records=record_batch(b"x" * 100))
                                                      for p in range(partitions)),
                      **({"topic_id": uuid.UUID(int=t + 1)} if version >= 13 else {"name": f"bench-walk-{t}"}))
                 for t in range(topics))
    body = make(cls, transactional_id=None, acks=i16(1), timeout=timedelta(seconds=30), topic_data=data)
    return memoryview(encode_request(0, version, 9, body))[4:]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--version", type=int, default=9)
    ap.add_argument("--number", type=int, default=20000)
    args = ap.parse_args()
    print(f"Produce v{args.version}, best of 5 x {args.number} walks, us per request")
    print("| topics x partitions | Python reference | C walk | ratio |\n|---|---:|---:|---:|")
    for topics, partitions in ((1, 1), (1, 50), (10, 10)):
        frame = request(args.version, topics, partitions)
        header = parse_request_header(frame)
        assert walk_produce_request(header, frame).topics_end == walk_produce_request_python(header, frame).topics_end
        times = []
        for walk in (walk_produce_request_python, walk_produce_request):
            best = min(timeit.repeat(lambda: walk(header, frame), number=args.number, repeat=5))
            times.append(best / args.number * 1e6)
        print(f"| {topics} x {partitions} | {times[0]:.2f} | {times[1]:.2f} | {times[1] / times[0]:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
