"""``kgw metadata recover`` (metadata/repair.py): a log the gateway refuses to start on is
repaired to exactly the records before the damage, later readable records are set aside with
a listing, nothing changes on a dry run, an interrupted repair is finished by running it
again, and a gateway that holds the log keeps it."""

from __future__ import annotations

import errno
import uuid
from pathlib import Path

import pytest
import trio
import yaml

from gateway.cli.main import EXIT_DAMAGED_LOG, main
from metadata.directory import DirectoryMetadataStore
from metadata.files import OsFiles
from metadata.record_batch import scan_batches
from metadata.records import AccessControlEntryRecord, ConfigRecord
from metadata.repair import apply_repair, plan_repair
from metadata.store import MetadataLogCorruptError

SEGMENT0 = "00000000000000000000.log"


def acl(n: int) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(id=uuid.UUID(int=0xAB00 + n), resource_type=2, resource_name=f"repair-{n}",
                                    pattern_type=3, principal=f"User:r{n}", host="*", operation=3, permission_type=3)


def write(path: Path, batches: list[list], *, snapshot_after: int | None = None) -> None:
    async def go() -> None:
        async with DirectoryMetadataStore(path) as store:
            state = await store.load()
            held = [*state.snapshot_records, *state.log_records]
            for index, batch in enumerate(batches):
                await store.append(batch)
                held += batch
                if index == snapshot_after:
                    await store.snapshot(held)

    trio.run(go)


def load(path: Path) -> list:
    async def go():
        async with DirectoryMetadataStore(path) as store:
            state = await store.load()
            return [*state.snapshot_records, *state.log_records]

    return trio.run(go)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def flip_byte_at(segment: Path, fraction: float) -> int:
    data = bytearray(segment.read_bytes())
    at = int(len(data) * fraction)
    data[at] ^= 0x01
    segment.write_bytes(bytes(data))
    return at


def batch_holding(segment: Path, position: int) -> tuple[int, int]:
    """(first offset, file position) of the batch the byte at ``position`` belongs to."""
    at = 0
    for batch in scan_batches(segment.read_bytes(), 0).batches:
        if at <= position < at + batch.size:
            return batch.base_offset, at
        at += batch.size
    raise AssertionError(position)


def test_a_flipped_byte_is_repaired_to_exactly_the_records_before_it(tmp_path: Path, capsys) -> None:
    records = [acl(i) for i in range(40)]
    write(tmp_path, [[r] for r in records])
    segment = tmp_path / SEGMENT0
    first_bad, _ = batch_holding(segment, int(len(segment.read_bytes()) * 0.5))
    flip_byte_at(segment, 0.5)
    with pytest.raises(MetadataLogCorruptError):
        load(tmp_path)
    damaged = segment.read_bytes()

    code, out, _ = run(capsys, "metadata", "recover", "--data-dir", str(tmp_path), "--dry-run")
    assert code == 0
    assert f"lost:       offsets {first_bad}..{first_bad} (1 record)" in out
    assert f"set aside:  {39 - first_bad} readable records" in out and "dry run: nothing changed" in out
    assert segment.read_bytes() == damaged and not list(tmp_path.glob("recovered-*"))

    code, out, _ = run(capsys, "metadata", "recover", "--data-dir", str(tmp_path))
    assert code == 0, out
    assert load(tmp_path) == records[:first_bad]
    (aside,) = tmp_path.glob("recovered-*")
    listing = (aside / "set-aside.txt").read_text()
    listed = [line for line in listing.splitlines() if line.startswith("offset ")]
    assert listed == [f"offset {i}: add ACL {line.split('add ACL ', 1)[1].split(':')[0]}: User:r{i} ALLOW READ on "
                      f"TOPIC 'repair-{i}' (LITERAL) from host *" for i, line in zip(range(first_bad + 1, 40), listed)]
    assert "repair-39" in listing and f"repair-{first_bad}'" not in listing  # the unreadable one is not listed
    # the gateway writes on from the repair, and a second run finds nothing to do
    write(tmp_path, [[acl(100)]])
    assert load(tmp_path) == [*records[:first_bad], acl(100)]
    code, out, _ = run(capsys, "metadata", "recover", "--data-dir", str(tmp_path))
    assert code == 0 and "nothing to recover" in out


def test_a_deleted_sealed_segment_sets_the_later_ones_aside(tmp_path: Path, capsys) -> None:
    """No snapshot covers segment 3..5: it is lost, and segment 6.. cannot follow a hole."""
    async def go() -> None:
        async with DirectoryMetadataStore(tmp_path) as store:
            await store.load()
            await store.append([acl(0), acl(1), acl(2)])
            await store.snapshot([acl(0), acl(1), acl(2)])  # rolls segment 3
            await store.append([acl(3), acl(4), acl(5)])
            await store.snapshot([acl(i) for i in range(6)])  # rolls segment 6
            await store.append([acl(6), acl(7)])

    trio.run(go)
    (tmp_path / "00000000000000000006-0000000000.checkpoint").unlink()  # only the snapshot at 3 is left
    (tmp_path / "00000000000000000003.log").unlink()
    with pytest.raises(MetadataLogCorruptError, match="gap"):
        load(tmp_path)
    plan = plan_repair(OsFiles(), tmp_path)
    assert (plan.snapshot_end, plan.keep_next, plan.unreadable) == (3, 3, (3, 6))
    assert [offset for offset, _ in plan.later] == [6, 7]
    assert run(capsys, "metadata", "recover", "--data-dir", str(tmp_path))[0] == 0
    assert load(tmp_path) == [acl(0), acl(1), acl(2)]
    (aside,) = tmp_path.glob("recovered-*")
    assert (aside / "00000000000000000006.log").exists()


def test_a_deleted_active_segment_is_reported_and_the_evidence_reset(tmp_path: Path, capsys) -> None:
    async def go() -> None:
        async with DirectoryMetadataStore(tmp_path) as store:
            await store.load()
            await store.append([acl(0), acl(1)])
            await store.snapshot([acl(0), acl(1)])  # rolls segment 2
            await store.append([acl(2), acl(3), acl(4)])

    trio.run(go)
    (tmp_path / "00000000000000000002.log").unlink()
    code, out, err = run(capsys, "check", "--config", str(_config(tmp_path)), "--no-ports")
    assert code == EXIT_DAMAGED_LOG == 2 and "00000000000000000002.log is missing" in err
    code, out, err = run(capsys, "run", "--config", str(_config(tmp_path)))
    assert code == 2 and "kgw: cannot run: metadata log" in err and "kgw metadata recover" in err
    assert "Traceback" not in err
    code, out, _ = run(capsys, "metadata", "recover", "--data-dir", str(tmp_path))
    assert code == 0 and "lost:       offsets 2..4 (3 records)" in out
    assert load(tmp_path) == [acl(0), acl(1)]


def _config(data_dir: Path) -> Path:
    path = data_dir.parent / f"{data_dir.name}-kgw.yaml"
    path.write_text(yaml.safe_dump({
        "listeners": [{"name": "PLAIN", "host": "127.0.0.1", "port": 0, "broker_port_base": 21000}],
        "upstream": {"bootstrap_servers": ["127.0.0.1:1"]}, "admin": None, "metadata": {"path": str(data_dir)}}))
    return path


class _CrashOnTruncate(OsFiles):
    def ftruncate(self, fd: int, size: int) -> None:
        raise OSError(errno.EIO, "simulated crash before the cut")


def test_an_interrupted_repair_is_finished_by_running_it_again(tmp_path: Path, capsys) -> None:
    records = [acl(i) for i in range(20)]
    write(tmp_path, [[r] for r in records])
    segment = tmp_path / SEGMENT0
    first_bad, _ = batch_holding(segment, int(len(segment.read_bytes()) * 0.3))
    flip_byte_at(segment, 0.3)
    with pytest.raises(OSError, match="simulated crash"):
        apply_repair(_CrashOnTruncate(), plan_repair(OsFiles(), tmp_path))
    with pytest.raises(MetadataLogCorruptError):
        load(tmp_path)  # half done is still refused, never half loaded
    assert run(capsys, "metadata", "recover", "--data-dir", str(tmp_path))[0] == 0
    assert load(tmp_path) == records[:first_bad]


def test_recover_refuses_while_a_gateway_holds_the_log(tmp_path: Path, capsys) -> None:
    write(tmp_path, [[acl(0)]])

    async def go() -> tuple[int, str]:
        async with DirectoryMetadataStore(tmp_path) as store:
            await store.load()
            code, _, err = run(capsys, "metadata", "recover", "--data-dir", str(tmp_path))
            return code, err

    code, err = trio.run(go)
    assert code == 2 and "locked by another kgw process" in err


def test_the_listing_names_records_without_values(tmp_path: Path, capsys) -> None:
    """Set-aside config records may be passwords: the listing names them, never their values."""
    write(tmp_path, [[acl(0)], [acl(1)], [ConfigRecord(resource_type=4, resource_name="", name="ssl.key.password",
                                                       value="hunter2-secret")]])
    segment = tmp_path / SEGMENT0
    data = bytearray(segment.read_bytes())
    first = scan_batches(bytes(data), 0).batches[0].size
    data[first + 20] ^= 0x01  # the second batch
    segment.write_bytes(bytes(data))
    assert run(capsys, "metadata", "recover", "--data-dir", str(tmp_path))[0] == 0
    (aside,) = tmp_path.glob("recovered-*")
    listing = (aside / "set-aside.txt").read_text()
    assert "offset 2: set config ssl.key.password of broker ''" in listing
    assert "hunter2" not in listing
    assert oct((aside / "set-aside.txt").stat().st_mode & 0o777) == "0o600"
