"""Restart time with many ACLs: `kgw run` from start to its `ready` line, on a directory log
holding N ACLs (bench_authorizer's snapshot mix), with the upstream unreachable so only kgw's own
start-up is timed.  Usage: .venv/bin/python bench/bench_restart.py [--acls 100000] [--runs 3] [--kgw PATH] [--from-snapshot]

``--from-snapshot``: the ACLs are in a snapshot file, as a gateway that wrote them has them once it
snapshotted (every 10,000 records), rather than in the log that ``kgw metadata import`` writes.

``--kgw``: the executable to time, e.g. of an install without the test extras, as a
deployment has it (``python -m venv /tmp/kgw-prod && /tmp/kgw-prod/bin/pip install .``):
the development venv also imports hypothesis and pytest at start-up (kio and trio use them
when present), about 0.3 s."""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

KGW = str(Path(sys.executable).parent / "kgw")


def document(count: int) -> dict:
    rng = random.Random(3)
    ops = ["READ", "WRITE", "DESCRIBE", "ALL"]
    acls = [{"id": str(uuid.UUID(int=rng.getrandbits(128))), "resource_type": "TOPIC" if i % 4 else "GROUP",
             "resource_name": f"svc-{i % 20_000}-{i // 20_000}", "pattern_type": "PREFIXED" if i % 7 == 0 else "LITERAL",
             "principal": f"User:user{i % 500}", "host": "*" if i % 3 else f"10.0.{i % 256}.{i % 200}",
             "operation": ops[i % 4], "permission_type": "DENY" if i % 11 == 0 else "ALLOW"} for i in range(count)]
    return {"format": "kgw-metadata", "version": 1, "offset": 0, "acls": acls, "configs": [], "scram_credentials": []}


def snapshot(data_dir: Path) -> None:
    """Write a snapshot of the whole log, as the gateway does every 10,000 records."""
    import trio

    from metadata.directory import DirectoryMetadataStore
    from metadata.image import MetadataImage

    async def write() -> None:
        store = DirectoryMetadataStore(data_dir)
        image = MetadataImage(store)
        await image.load()
        await store.snapshot(image.records(), through_offset=image.offset)
        await store.aclose()

    trio.run(write)


def time_to_ready(kgw: str, config: Path) -> tuple[float, int]:
    started = time.monotonic()
    proc = subprocess.Popen([kgw, "run", "--config", str(config)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)
    try:
        for line in proc.stdout:
            if line.strip() == "ready":
                elapsed = time.monotonic() - started
                with open(f"/proc/{proc.pid}/statm") as f:
                    rss_mb = int(f.read().split()[1]) * 4096 / 2**20
                return elapsed, rss_mb
        raise RuntimeError("kgw exited before ready")
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--acls", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--kgw", default=KGW, help="the kgw executable to time (default: this venv's)")
    p.add_argument("--from-snapshot", action="store_true", help="start from a snapshot file, not from the log")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="kgw-restart-") as tmp:
        work = Path(tmp)
        (work / "doc.json").write_text(json.dumps(document(args.acls)))
        subprocess.run([args.kgw, "metadata", "import", str(work / "doc.json"), "--data-dir", str(work / "meta")],
                       check=True, capture_output=True)
        if args.from_snapshot:
            snapshot(work / "meta")
            print("started from", ", ".join(sorted(p.name for p in (work / "meta").iterdir() if p.suffix)))
        config = work / "kgw.yaml"
        config.write_text(json.dumps({
            "listeners": [{"name": "PLAIN", "host": "127.0.0.1", "port": 0, "broker_port_base": 21000}],
            "upstream": {"bootstrap_servers": ["127.0.0.1:1"], "connect_timeout_ms": 500}, "admin": None,
            "authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer"},
            "metadata": {"path": str(work / "meta")}}))  # JSON is YAML
        for run in range(args.runs):
            elapsed, rss = time_to_ready(args.kgw, config)
            print(f"run {run + 1}: ready after {elapsed:.2f} s, RSS {rss:.1f} MB ({args.acls:,} ACLs)")


if __name__ == "__main__":
    main()
