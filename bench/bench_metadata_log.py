"""Benchmark the directory metadata store against its two targets.

1. ``append``: one ``append()`` of 1,000 ACL records, end to end (encode, batch,
   write, fsync) - target <= 1 s.
2. ``load``: ``load()`` of a store holding a snapshot of 100,000 ACL records (read,
   CRC check, decode every record) - target <= 2 s.

Usage::

    .venv/bin/python bench/bench_metadata_log.py [--dir DIR] [--repeat N]

``--dir`` picks the file system (fsync cost depends on it); default: a temporary
directory under the system temp dir.  Prints one line per measurement.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import trio

from metadata.directory import DirectoryMetadataStore
from metadata.records import AccessControlEntryRecord

APPEND_RECORDS = 1_000
SNAPSHOT_RECORDS = 100_000


def make_acls(count: int) -> list[AccessControlEntryRecord]:
    return [
        AccessControlEntryRecord(
            id=uuid.uuid4(),
            resource_type=2,
            resource_name=f"payments.orders.{n:06d}",
            pattern_type=3,
            principal=f"User:service-{n % 500:03d}",
            host="*",
            operation=3,
            permission_type=3,
        )
        for n in range(count)
    ]


async def bench_append(root: Path, repeat: int) -> list[float]:
    timings = []
    for run in range(repeat):
        records = make_acls(APPEND_RECORDS)
        async with DirectoryMetadataStore(root / f"append-{run}") as store:
            await store.load()
            start = time.perf_counter()
            await store.append(records)
            timings.append(time.perf_counter() - start)
    return timings


async def bench_load(root: Path, repeat: int) -> tuple[float, list[float]]:
    path = root / "snapshot"
    records = make_acls(SNAPSHOT_RECORDS)
    async with DirectoryMetadataStore(path) as store:
        await store.load()
        await store.append(records[:1])
        start = time.perf_counter()
        await store.snapshot(records, through_offset=0)
        write_time = time.perf_counter() - start
    timings = []
    for _ in range(repeat):
        start = time.perf_counter()
        async with DirectoryMetadataStore(path) as store:
            state = await store.load()
        timings.append(time.perf_counter() - start)
        assert len(state.snapshot_records) == SNAPSHOT_RECORDS
    return write_time, timings


def report(name: str, timings: list[float], target: float) -> None:
    verdict = "OK" if max(timings) <= target else "OVER TARGET"
    print(
        f"{name}: median {statistics.median(timings) * 1000:.1f} ms, "
        f"max {max(timings) * 1000:.1f} ms over {len(timings)} runs "
        f"(target <= {target * 1000:.0f} ms) {verdict}"
    )


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="kgw-bench-") as tmp:
        root = Path(tmp)
        report(f"append {APPEND_RECORDS} ACLs in one durable append", await bench_append(root, args.repeat), 1.0)
        write_time, load_times = await bench_load(root, args.repeat)
        size = sum(p.stat().st_size for p in (root / "snapshot").glob("*.checkpoint"))
        print(f"snapshot of {SNAPSHOT_RECORDS} ACLs written in {write_time * 1000:.1f} ms ({size / 1e6:.1f} MB)")
        report(f"load snapshot of {SNAPSHOT_RECORDS} ACLs", load_times, 2.0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="directory to benchmark in (file system matters)")
    parser.add_argument("--repeat", type=int, default=5)
    trio.run(main, parser.parse_args())
