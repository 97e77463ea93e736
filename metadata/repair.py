"""Repairing a damaged directory metadata log: what ``kgw metadata recover`` plans and does.

A gateway refuses to start on a log that lost acknowledged records (:mod:`metadata.directory_files`,
:class:`~metadata.directory_files.Damage`): it cannot tell which ACLs, configs or users are
missing, and starting without them could allow what was revoked.  Repair is the operator's
decision, made with what this module reports:

* **kept**: the newest readable snapshot and every record up to the first one the log cannot
  deliver (a bad batch, a missing segment, a log that ends before the acknowledged offset);
* **unreadable**: the offsets from there to the next readable batch (or to the acknowledged
  offset): lost;
* **set aside**: readable records after the hole.  They are not applied - a removal whose
  creation is in the hole, or an ACL the hole revoked, would give a state nobody wrote - but
  moved, whole files and the damaged segment's tail, into ``recovered-<time>/`` in the log
  directory, with a listing (``set-aside.txt``: offsets, kinds and names, no secrets or
  values) to re-apply from by hand.

The log then ends at the first unreadable offset and the acknowledged-offset file says so;
the next gateway start writes new records from there.  Each step is idempotent: a repair
interrupted by a crash is finished by running it again.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from metadata.directory_files import (
    ACKNOWLEDGED_NAME, Segment, Snapshot, list_dir, read_acknowledged, segment_name, truncate_durably, write_acknowledged,
    write_and_fsync,
)
from metadata.files import OsFiles
from metadata.record_batch import DecodedBatch, find_batch_after, scan_batches
from metadata.records import (
    AccessControlEntryRecord, ConfigRecord, MetadataRecord, RemoveAccessControlEntryRecord,
    RemoveUserScramCredentialRecord, UserScramCredentialRecord,
)
from metadata.shell import acl_json, config_type_name, kafka_uuid_str
from metadata.snapshots import decode_snapshot, decode_values
from metadata.store import MetadataLogCorruptError

__all__ = ["RepairPlan", "apply_repair", "describe_record", "plan_repair"]

#: the listing of set-aside records written beside them
SET_ASIDE_LISTING = "set-aside.txt"
_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}


@dataclass(slots=True)
class RepairPlan:
    """What repairing the log at :attr:`directory` keeps, loses and sets aside."""

    directory: Path
    #: why the log needs repair; None: it does not
    problem: str | None = None
    #: the state is the snapshot ending here plus the log records up to :attr:`keep_next`
    snapshot_end: int = 0
    keep_next: int = 0
    #: the segment to cut and the file position to cut it at (what follows is set aside)
    truncate: tuple[Path, int] | None = None
    #: whole segment files moved aside
    set_aside: list[Path] = field(default_factory=list)
    #: [first, end) offsets acknowledged once and not readable now
    unreadable: tuple[int, int] | None = None
    #: readable records after the hole, by offset: set aside, not applied
    later: list[tuple[int, MetadataRecord | None]] = field(default_factory=list)
    #: the acknowledged-offset file to write: (next offset, active segment base)
    marker: tuple[int, int] = (0, 0)


def _newest_snapshot(files: OsFiles, snapshots: Sequence[Snapshot]) -> int:
    for snap in reversed(snapshots):
        try:
            decode_snapshot(files.read_bytes(snap.path), snap.path.name)
        except MetadataLogCorruptError:
            continue  # the gateway's recovery moves it aside as .corrupt
        return snap.end_offset
    return 0


def _records_of(batches: Iterable[DecodedBatch]) -> list[tuple[int, MetadataRecord | None]]:
    out: list[tuple[int, MetadataRecord | None]] = []
    for batch in batches:
        records: list[MetadataRecord | None]
        try:
            records = [*decode_values((value for _, value in batch.entries), "set-aside batch")]
        except MetadataLogCorruptError:
            records = [None] * len(batch.entries)
        out.extend((batch.base_offset + i, record) for i, record in enumerate(records))
    return out


def _later_in(raw: bytes, position: int, min_offset: int) -> list[tuple[int, MetadataRecord | None]]:
    """The readable records of a damaged segment's tail: batch by batch from each valid one."""
    out: list[tuple[int, MetadataRecord | None]] = []
    while (found := find_batch_after(raw, position, min_offset)) is not None:
        at, base = found
        scan = scan_batches(memoryview(raw)[at:], base)
        out.extend(_records_of(scan.batches))
        if scan.problem is None:
            break
        position, min_offset = at + scan.valid_bytes, scan.next_offset
    return out


def plan_repair(files: OsFiles, path: Path) -> RepairPlan:
    """Read the log at ``path`` (changing nothing) and say what a repair would do."""
    plan = RepairPlan(path)
    try:
        acknowledged = read_acknowledged(files, path)
    except MetadataLogCorruptError as exc:
        acknowledged, plan.problem = None, str(exc)
    ack_next = acknowledged[0] if acknowledged is not None else 0
    segments, snapshots = list_dir(files, path, read_only=True)
    start = plan.snapshot_end = _newest_snapshot(files, snapshots)
    expected = start  # the next offset the state needs
    for index, segment in enumerate(segments):
        following = segments[index + 1:]
        if following and following[0].base_offset <= start:
            continue  # wholly covered by the snapshot (damage there is retention's business)
        if segment.base_offset > expected:
            plan.problem = (f"records {expected}..{segment.base_offset - 1} are missing: no segment holds them "
                            f"(the next one is {segment.path.name})")
            plan.keep_next, plan.unreadable = expected, (expected, segment.base_offset)
            plan.set_aside = [s.path for s in segments[index:]]
            for later in segments[index:]:
                plan.later.extend(_records_of(scan_batches(files.read_bytes(later.path), later.base_offset).batches))
            break
        raw = files.read_bytes(segment.path)
        scan = scan_batches(raw, segment.base_offset)
        segment.next_offset, segment.size = scan.next_offset, scan.valid_bytes
        if scan.problem is not None:
            found = find_batch_after(raw, scan.valid_bytes, scan.next_offset)
            torn_tail = not following and found is None and scan.next_offset >= ack_next
            if not torn_tail:
                bad = scan.next_offset
                plan.problem = (f"segment {segment.path.name} is damaged at file position {scan.valid_bytes} "
                                f"(log offset {bad}): {scan.problem}")
                if bad > start:
                    plan.keep_next, plan.truncate = bad, (segment.path, scan.valid_bytes)
                else:  # the snapshot is newer than the damage: the whole segment goes
                    plan.keep_next = start
                    plan.set_aside.append(segment.path)
                plan.set_aside.extend(s.path for s in following)
                resumes = (found[1] if found is not None else following[0].base_offset if following
                           else ack_next)
                plan.unreadable = (bad, resumes)
                plan.later = _later_in(raw, scan.valid_bytes, bad)
                for later in following:
                    plan.later.extend(_records_of(scan_batches(files.read_bytes(later.path),
                                                               later.base_offset).batches))
                break
        expected = max(expected, scan.next_offset)
    else:
        plan.keep_next = expected
        if ack_next > expected:
            gone = (acknowledged[1] if acknowledged is not None
                    and acknowledged[1] not in {s.base_offset for s in segments} else None)
            plan.problem = (f"the log ends at offset {expected - 1} but offsets up to {ack_next - 1} were "
                            f"acknowledged ({ACKNOWLEDGED_NAME}): "
                            + (f"segment {segment_name(gone)} is missing" if gone is not None
                               else "its last segment was cut"))
            plan.unreadable = (expected, ack_next)
    plan.marker = (plan.keep_next, _active_base(segments, plan))
    return plan


def _active_base(segments: Sequence[Segment], plan: RepairPlan) -> int:
    """The segment the log ends in after the repair (the next start rolls one at
    :attr:`RepairPlan.keep_next` when none ends there)."""
    if plan.truncate is not None:
        return next(s.base_offset for s in segments if s.path == plan.truncate[0])
    kept = [s for s in segments if s.path not in plan.set_aside]
    if kept and kept[-1].next_offset == plan.keep_next:
        return kept[-1].base_offset
    return plan.keep_next


def describe_record(record: MetadataRecord | None) -> str:
    """One line naming what a record does, without secrets or config values."""
    if record is None:
        return "undecodable record"
    if isinstance(record, AccessControlEntryRecord):
        acl = acl_json(record, "kafka")
        return (f"add ACL {acl['id']}: {acl['principal']} {acl['permissionType']} {acl['operation']} on "
                f"{acl['resourceType']} {acl['resourceName']!r} ({acl['patternType']}) from host {acl['host']}")
    if isinstance(record, RemoveAccessControlEntryRecord):
        return f"remove ACL {kafka_uuid_str(record.id)}"
    if isinstance(record, ConfigRecord):
        action = "delete" if record.value is None else "set"
        return f"{action} config {record.name} of {config_type_name(record.resource_type)} {record.resource_name!r}"
    if isinstance(record, UserScramCredentialRecord):
        return f"set {_MECHANISMS.get(record.mechanism, record.mechanism)} credential of user {record.name!r}"
    if isinstance(record, RemoveUserScramCredentialRecord):
        return f"remove {_MECHANISMS.get(record.mechanism, record.mechanism)} credential of user {record.name!r}"
    return f"record of api key {getattr(record, 'api_key', '?')}"


def apply_repair(files: OsFiles, plan: RepairPlan, *, now: float | None = None) -> Path | None:
    """Carry out ``plan`` (the caller holds the log's lock).  Returns the directory that holds
    what was set aside, or None when nothing was.  Order: copy and move aside first, cut next,
    record the new end last - a crash in between leaves a log the next run repairs again."""
    if plan.problem is None:
        return None
    directory = plan.directory
    aside: Path | None = None
    if plan.truncate is not None or plan.set_aside:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
        aside = directory / f"recovered-{stamp}"
        if not files.exists(aside):
            files.mkdir(aside)
        listing = [f"set aside by kgw metadata recover: {plan.problem}",
                   f"kept offsets below {plan.keep_next}; unreadable: "
                   + (f"{plan.unreadable[0]}..{plan.unreadable[1] - 1}" if plan.unreadable else "none"),
                   "these records were NOT applied; re-apply what still holds (kgw acls, kgw configs):", ""]
        listing += [f"offset {offset}: {describe_record(record)}" for offset, record in plan.later]
        _write_new(files, aside / SET_ASIDE_LISTING, ("\n".join(listing) + "\n").encode())
        if plan.truncate is not None:
            segment, position = plan.truncate
            tail = files.read_bytes(segment)[position:]
            _write_new(files, aside / f"{segment.name}.from-{position}", tail)
        for path in plan.set_aside:
            files.rename(path, aside / path.name)
        files.fsync_dir(aside)
        files.fsync_dir(directory)
    if plan.truncate is not None:
        truncate_durably(files, *plan.truncate)
    write_acknowledged(files, directory, *plan.marker)
    return aside


def _write_new(files: OsFiles, path: Path, data: bytes) -> None:
    fd = files.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        write_and_fsync(files, fd, data)
    finally:
        files.close(fd)
