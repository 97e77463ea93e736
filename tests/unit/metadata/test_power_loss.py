"""Power loss at every file operation of the metadata log: no acknowledged change is lost.

SIGKILL keeps the page cache, so it cannot show a missing fsync; this test can.
The directory store runs on :class:`tests.support.sim_disk.SimDisk` (through its
file seam, :mod:`metadata.files`), which keeps only fsynced file contents and
directory entries.  A workload of ACL creations and deletions, dynamic config
changes and SCRAM credential changes, with snapshots (which roll the log and
delete old segments and snapshots), is cut by a power loss before its 1st, 2nd,
... N-th mutating file operation.  After each cut the disk is booted three ways
(none, half or all of the un-fsynced bytes reached it), the store is loaded and
must hold every acknowledged change in order (an in-flight batch may or may not
be there, whole), and must take and keep a new write.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import metadata.directory as metadata_log
import metadata.directory_files as directory_files
from metadata.directory import DirectoryMetadataStore
from metadata.records import AccessControlEntryRecord, ConfigRecord, RemoveAccessControlEntryRecord, UserScramCredentialRecord
from tests.support.sim_disk import PowerLoss, SimDisk

ROOT = Path("/sim")
STORE = ROOT / "meta"


def _acl(n: int) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(id=uuid.UUID(int=n + 1), resource_type=2, resource_name=f"topic-{n}",
                                    pattern_type=3, principal=f"User:u{n}", host="*", operation=3, permission_type=3)


def _workload() -> list:
    """("append", records) and ("snapshot",) steps: CreateAcls, DeleteAcls, AlterConfigs and
    AlterUserScramCredentials writes, and snapshots that roll the log and apply retention."""
    steps: list = []
    n = 0
    for round_ in range(5):
        steps.append(("append", [_acl(n), _acl(n + 1)]))
        steps.append(("append", [ConfigRecord(resource_type=4, resource_name="", name="super.users",
                                              value=f"User:s{round_}")]))
        steps.append(("append", [UserScramCredentialRecord(name=f"user{round_}", mechanism=1, salt=b"s" * 16,
                                                           stored_key=b"k" * 32, server_key=b"v" * 32,
                                                           iterations=4096)]))
        steps.append(("append", [RemoveAccessControlEntryRecord(id=_acl(n).id)]))
        n += 2
        if round_ % 2 == 1:
            steps.append(("snapshot",))
    return steps


async def _run(disk: SimDisk, acknowledged: list, attempted: list) -> None:
    """Run the workload until it ends or the power goes; ``acknowledged`` gets the records of
    every append that returned, ``attempted`` those of every append that was started."""
    store = DirectoryMetadataStore(STORE, files=disk)
    await store.load()
    for step in _workload():
        if step[0] == "append":
            attempted.extend(step[1])
            await store.append(step[1])
            acknowledged.extend(step[1])
        else:
            await store.snapshot(list(acknowledged))
    await store.aclose()


async def _recovered(disk: SimDisk) -> list:
    store = DirectoryMetadataStore(STORE, files=disk)
    state = await store.load()
    records = [*state.snapshot_records, *state.log_records]
    extra = ConfigRecord(resource_type=4, resource_name="", name="log.level", value="DEBUG")
    await store.append([extra])  # and the store keeps working
    await store.aclose()
    again = await DirectoryMetadataStore(STORE, files=disk).load()
    assert [*again.snapshot_records, *again.log_records] == [*records, extra]
    return records


async def test_no_acknowledged_change_is_lost_at_any_power_loss():
    clean = SimDisk(ROOT)
    await _run(clean, [], [])
    total = clean.ops
    assert total > 40  # the workload really touched the disk (appends, snapshots, rolls, retention)
    cuts = 0
    for crash_at in range(1, total + 1):
        disk = SimDisk(ROOT, crash_at=crash_at)
        acknowledged: list = []
        attempted: list = []
        with pytest.raises(PowerLoss):
            await _run(disk, acknowledged, attempted)
        cuts += 1
        for unsynced in ("none", "half", "all"):
            records = await _recovered(disk.after_power_loss(unsynced))
            where = f"power lost at operation {crash_at}/{total}, unsynced bytes: {unsynced}"
            assert records[:len(acknowledged)] == acknowledged, where  # nothing acknowledged lost
            assert records == attempted[:len(records)], where  # nothing invented, order kept
    assert cuts == total


@pytest.mark.parametrize("mutation", ["no file fsync", "no directory fsync"])
async def test_the_simulated_disk_sees_a_missing_fsync(monkeypatch, mutation):
    """The check of the check: with either fsync removed, some power loss loses an
    acknowledged change (a SIGKILL test cannot see this)."""
    if mutation == "no file fsync":
        for module in (metadata_log, directory_files):  # the log's appends and its snapshot files
            monkeypatch.setattr(module, "write_and_fsync", directory_files.write_all)
    else:
        monkeypatch.setattr(SimDisk, "fsync_dir", lambda self, path: self._step())
    clean = SimDisk(ROOT)
    await _run(clean, [], [])
    lost = []
    for crash_at in range(1, clean.ops + 1):
        disk = SimDisk(ROOT, crash_at=crash_at)
        acknowledged: list = []
        with pytest.raises(PowerLoss):
            await _run(disk, acknowledged, [])
        try:
            records = await _recovered(disk.after_power_loss("none"))
        except Exception as e:  # noqa: BLE001 - a log that no longer loads counts as lost too
            lost.append((crash_at, repr(e)))
            continue
        if records[:len(acknowledged)] != acknowledged:
            lost.append((crash_at, "acknowledged records missing"))
    assert lost, f"{mutation}: no power loss lost anything"
