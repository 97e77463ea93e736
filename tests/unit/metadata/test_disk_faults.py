"""The metadata log under an operator's bad day, on the simulated disk (tests/support/sim_disk.py):
a disk with room for appends but not for a snapshot, a disk that fills during an append and
empties again, a byte flipped in the middle of the log, a segment deleted.  Each test states
what a client is told and checks it against what the log holds after a restart."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import trio

from metadata.directory import DirectoryMetadataStore
from metadata.image import MetadataImage
from metadata.records import AccessControlEntryRecord
from metadata.store import MetadataLogCorruptError, MetadataStoreBrokenError
from tests.support.sim_disk import SimDisk

ROOT = Path("/sim")
STORE = ROOT / "meta"


def acl(n: int) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(id=uuid.UUID(int=0xD15C00 + n), resource_type=2, resource_name=f"fault-{n}",
                                    pattern_type=3, principal=f"User:f{n}", host="*", operation=3, permission_type=2)


async def reloaded(disk: SimDisk) -> list:
    """What a restarted gateway finds (power lost: only what was fsynced)."""
    async with DirectoryMetadataStore(STORE, files=disk.after_power_loss("none")) as store:
        state = await store.load()
        return [*state.snapshot_records, *state.log_records]


def names(disk: SimDisk) -> list[str]:
    return disk.listdir(STORE)


async def test_a_snapshot_without_room_never_fails_the_change_before_it(mock_clock) -> None:
    """The finding: from record 3,000 on every CreateAcls got "No space left on device" while
    each ACL was in force, and each failed snapshot left a .checkpoint.part behind."""
    disk = SimDisk(ROOT)
    store = DirectoryMetadataStore(STORE, files=disk)
    image = MetadataImage(store, snapshot_every=20)
    await image.load()
    for n in range(15):
        await image.append([acl(n)])
    disk.capacity = disk.used() + 1500  # room for a few more appends, not for a 20-ACL snapshot
    acknowledged = [acl(n) for n in range(15)]
    for n in range(15, 25):
        await image.append([acl(n)])  # never raises: the records are durable and in force
        acknowledged.append(acl(n))
    assert image.snapshot_failures == 1  # tried once at record 20, then backing off
    assert [binding.pattern.name for binding in image.acls.values()] == [f"fault-{n}" for n in range(25)]
    assert not [name for name in names(disk) if name.endswith(".part") or name.endswith(".checkpoint")]
    assert await reloaded(disk) == acknowledged

    disk.capacity = None  # the operator made room
    mock_clock.jump(6)  # past the first back-off
    await image.append([acl(25)])
    acknowledged.append(acl(25))
    assert [name for name in names(disk) if name.endswith(".checkpoint")] == ["00000000000000000026-0000000000.checkpoint"]
    assert image.snapshot_failures == 1
    assert await reloaded(disk) == acknowledged
    await store.aclose()


async def test_a_full_disk_fails_the_append_it_hits_and_writes_resume_when_room_returns() -> None:
    disk = SimDisk(ROOT)
    store = DirectoryMetadataStore(STORE, files=disk)
    image = MetadataImage(store, snapshot_every=10**9)
    await image.load()
    for n in range(5):
        await image.append([acl(n)])
    disk.capacity = disk.used() + 60  # part of one batch fits
    with pytest.raises(MetadataStoreBrokenError):
        await image.append([acl(5)])  # told "failed" ...
    assert acl(5).id not in image.acls  # ... and not in force
    assert store.broken is not None and "No space left" in str(store.broken[1])
    with pytest.raises(MetadataStoreBrokenError):
        await image.append([acl(6)])  # every change fails while the store is broken
    assert await store.resume_writes() is False  # still full
    assert store.broken is not None

    disk.capacity = None
    assert await store.resume_writes() is True
    assert store.broken is None
    await image.append([acl(7)])
    # the failed append left part of its batch; resuming cut it: it never comes back
    assert await reloaded(disk) == [*(acl(n) for n in range(5)), acl(7)]
    await store.aclose()
    async with DirectoryMetadataStore(STORE, files=disk) as again:
        state = await again.load()
        assert [*state.snapshot_records, *state.log_records] == [*(acl(n) for n in range(5)), acl(7)]


async def test_a_full_disk_at_the_evidence_file_fails_the_append_and_resumes_exactly() -> None:
    """The acknowledged-offset file is written after the segment's fsync: when only it fails,
    the append is reported failed, so resuming cuts the batch that did reach the segment."""
    import time as time_module

    disk = SimDisk(ROOT)
    store = DirectoryMetadataStore(STORE, files=disk)
    await store.load()
    await store.append([acl(0)])
    real_monotonic = time_module.monotonic
    store._acknowledged_at = real_monotonic() - 5  # the next commit rewrites the evidence
    batch_size = len(disk.read_bytes(STORE / "00000000000000000000.log"))  # acl(1)'s batch is as long
    disk.capacity = disk.used() + batch_size  # the batch fits, the evidence file does not
    with pytest.raises(MetadataStoreBrokenError, match="the change was not made"):
        await store.append([acl(1)])
    assert await reloaded(disk) == [acl(0)]  # cut off again at once: not there even after a crash now
    disk.capacity = None
    assert await store.resume_writes()
    await store.append([acl(2)])
    await store.aclose()
    assert await reloaded(disk) == [acl(0), acl(2)]


async def test_a_byte_flipped_in_the_middle_of_the_log_refuses_to_start() -> None:
    disk = SimDisk(ROOT)
    async with DirectoryMetadataStore(STORE, files=disk) as store:
        await store.load()
        for n in range(30):
            await store.append([acl(n)])
    after = disk.after_power_loss("none")
    segment = after.dirs[STORE].entries["00000000000000000000.log"]
    segment.data[len(segment.data) // 2] ^= 0x10
    with pytest.raises(MetadataLogCorruptError, match="a valid batch follows"):
        async with DirectoryMetadataStore(STORE, files=after) as store:
            await store.load()


async def test_a_deleted_segment_refuses_to_start_after_a_power_loss() -> None:
    """The evidence is durable too: after a power loss, a deleted active segment is still seen."""
    disk = SimDisk(ROOT)
    async with DirectoryMetadataStore(STORE, files=disk) as store:
        await store.load()
        await store.append([acl(0), acl(1)])
        await store.snapshot([acl(0), acl(1)])  # rolls segment 2
        await store.append([acl(2)])
        await store.append([acl(3)])
    after = disk.after_power_loss("none")
    del after.dirs[STORE].entries["00000000000000000002.log"]
    with pytest.raises(MetadataLogCorruptError, match="00000000000000000002.log is missing"):
        async with DirectoryMetadataStore(STORE, files=after) as store:
            await store.load()
