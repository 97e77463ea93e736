"""Benchmark the directory metadata store against its two targets.

1. ``append``: one ``append()`` of 1,000 ACL records, end to end (encode, batch,
   write, fsync) - target <= 1 s.
2. ``load``: ``load()`` of a store holding a snapshot of 100,000 ACL records (read,
   CRC check, decode every record) - target <= 2 s.
3. ``shared``: the directory log two workers of ``kgw run --workers 2`` share
   (:mod:`metadata.directory_shared`): a one-ACL write until the writer's image has applied
   it, and until the other worker's has (propagation; target <= 1 s at p99, as for the
   Kafka backend), beside the same write on the single-gateway store.

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


async def bench_shared(root: Path, writes: int) -> None:
    from metadata.directory_shared import SharedDirectoryStore, hold_directory
    from metadata.image import MetadataImage

    single = MetadataImage(DirectoryMetadataStore(root / "single"), snapshot_every=10**9)
    await single.load()
    alone = []
    for record in make_acls(writes):
        start = time.perf_counter()
        await single.append([record])
        alone.append(time.perf_counter() - start)
    await single.store.aclose()

    path = root / "shared"
    lock = hold_directory(path)
    images = [MetadataImage(SharedDirectoryStore(path), snapshot_every=10**9) for _ in range(2)]
    own, other = [], []
    async with trio.open_nursery() as nursery:
        for image in images:
            await image.load()
            await nursery.start(image.follow)
        for n, record in enumerate(make_acls(writes)):
            writer, reader = images[n % 2], images[1 - n % 2]
            start = time.perf_counter()
            offset = await writer.append([record])
            own.append(time.perf_counter() - start)
            while reader.offset < offset:
                await reader._offset_changed.wait()
            other.append(time.perf_counter() - start)
        nursery.cancel_scope.cancel()
    for image in images:
        await image.store.aclose()
    import os

    os.close(lock)

    def line(name: str, timings: list[float]) -> str:
        ordered = sorted(timings)
        return (f"{name}: p50 {statistics.median(ordered) * 1000:.1f} ms, "
                f"p99 {ordered[int(len(ordered) * 0.99) - 1] * 1000:.1f} ms")

    print(f"one-ACL writes, {writes} each: " + "; ".join([
        line("single gateway, durable and applied", alone),
        line("shared by 2 workers, applied by the writer", own),
        line("applied by the other worker", other)]))


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
        await bench_shared(root, args.writes)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None, help="directory to benchmark in (file system matters)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--writes", type=int, default=500, help="one-ACL writes in the shared-log measurement")
    trio.run(main, parser.parse_args())
