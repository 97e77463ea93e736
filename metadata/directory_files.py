"""The directory metadata log's files: their names, listing, recovery, snapshot files,
retention and the writer's lock - shared by the single gateway's store
(:mod:`metadata.directory`) and the store the workers of ``kgw run --workers N`` share
(:mod:`metadata.directory_shared`).  Every file operation goes through an
:class:`~metadata.files.OsFiles` (tests put a simulated disk there).

See :mod:`metadata.store` for the layout, durability and recovery rules.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from metadata.files import OS_FILES, OsFiles
from metadata.records import MetadataRecord
from metadata.record_batch import DecodedBatch, ScanResult, find_batch_after, scan_batches
from metadata.snapshots import decode_values, decode_snapshot, encode_snapshot
from metadata.store import LoadedState, MetadataLogCorruptError, MetadataLogError, MetadataStoreLockedError

logger = logging.getLogger("kgw.metadata.log")


# ---------------------------------------------------------------------------
# File names and small blocking helpers (run in worker threads)
# ---------------------------------------------------------------------------

_SEGMENT_RE: Final = re.compile(r"^(\d{20})\.log$")
_SNAPSHOT_RE: Final = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_LOCK_NAME: Final = ".lock"
PART_SUFFIX: Final = ".part"
_CORRUPT_SUFFIX: Final = ".corrupt"
#: the last acknowledged offset and the active segment, as evidence independent of the segments
ACKNOWLEDGED_NAME: Final = "acknowledged"
_ACKNOWLEDGED_RE: Final = re.compile(r"^kgw-acknowledged v1 next=(\d+) segment=(\d+)\n$")
#: the command a damaged log's error names
RECOVER_HINT: Final = "kgw metadata recover --data-dir {path}"


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def snapshot_name(end_offset: int, epoch: int) -> str:
    return f"{end_offset:020d}-{epoch:010d}.checkpoint"


def write_all(files: OsFiles, fd: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = files.write(fd, view)
        view = view[written:]


def write_and_fsync(files: OsFiles, fd: int, data: bytes) -> None:
    write_all(files, fd, data)
    files.fsync(fd)


def now_ms() -> int:
    return time.time_ns() // 1_000_000




# ---------------------------------------------------------------------------
# Recovery
# ---------------------------------------------------------------------------


@dataclass(slots=True)
class Segment:
    base_offset: int
    path: Path
    next_offset: int = 0
    size: int = 0
    batches: list[DecodedBatch] = field(default_factory=list)


@dataclass(slots=True)
class Snapshot:
    end_offset: int
    epoch: int
    path: Path


def list_dir(files: OsFiles, path: Path, read_only: bool = False) -> tuple[list[Segment], list[Snapshot]]:
    segments: list[Segment] = []
    snapshots: list[Snapshot] = []
    for name in files.listdir(path):
        entry = path / name
        if entry.name.endswith(PART_SUFFIX):
            if read_only:  # a snapshot the gateway is writing now
                continue
            logger.warning("removing incomplete file %s left by a crash", entry)
            files.unlink(entry)
        elif match := _SEGMENT_RE.match(entry.name):
            segments.append(Segment(int(match[1]), entry))
        elif match := _SNAPSHOT_RE.match(entry.name):
            snapshots.append(Snapshot(int(match[1]), int(match[2]), entry))
    segments.sort(key=lambda s: s.base_offset)
    snapshots.sort(key=lambda s: s.end_offset)
    return segments, snapshots


def _truncate_tail(files: OsFiles, segment: Segment, scan: ScanResult, file_size: int) -> None:
    cut = file_size - scan.valid_bytes
    logger.warning(
        "metadata log %s: truncating torn/corrupt tail: cut %d byte(s) at file position %d "
        "(log offset %d): %s",
        segment.path,
        cut,
        scan.valid_bytes,
        scan.next_offset,
        scan.problem,
    )
    truncate_durably(files, segment.path, scan.valid_bytes)


def truncate_durably(files: OsFiles, path: Path, size: int) -> None:
    """Cut the file at ``path`` to ``size`` bytes and fsync it."""
    fd = files.open(path, os.O_WRONLY)
    try:
        files.ftruncate(fd, size)
        files.fsync(fd)
    finally:
        files.close(fd)


@dataclass(slots=True)
class Damage:
    """A segment that is not readable to its end, and not because of a torn tail."""

    segment: Segment
    #: where the first bad batch starts, and the log offset it should hold
    position: int
    offset: int
    problem: str
    #: (file position, base offset) of the first valid batch after it, if any
    later: tuple[int, int] | None

    def describe(self, directory: Path) -> str:
        after = (f"; a valid batch follows at file position {self.later[0]} (log offset {self.later[1]}), so this is "
                 "damage, not a torn tail" if self.later is not None else "")
        return (f"metadata log segment {self.segment.path} is damaged at file position {self.position} "
                f"(log offset {self.offset}): {self.problem}{after}; kgw refuses to start rather than drop "
                f"acknowledged records: run `{RECOVER_HINT.format(path=directory)}` (docs/operations.md, "
                "\"Recovering the metadata log\")")


def _scan_segment(files: OsFiles, segment: Segment, is_last: bool, read_only: bool = False,
                  acknowledged_next: int = 0) -> Damage | None:
    """Decode a segment.  A bad batch at the very end of the last segment, with nothing valid
    after it and not below what the acknowledged-offset file says was acknowledged, is a torn
    tail (writes never acknowledged): cut (read-only: left alone, a write in progress).  Anything
    else unreadable is returned as :class:`Damage`, for the caller to decide whether records it
    needs are lost."""
    data = files.read_bytes(segment.path)
    scan = scan_batches(data, segment.base_offset)
    segment.batches = scan.batches
    segment.next_offset = scan.next_offset
    segment.size = scan.valid_bytes
    if scan.problem is None:
        return None
    later = find_batch_after(data, scan.valid_bytes, scan.next_offset)
    if is_last and later is None and scan.next_offset >= acknowledged_next:
        if not read_only:
            _truncate_tail(files, segment, scan, len(data))
        return None
    return Damage(segment, scan.valid_bytes, scan.next_offset, scan.problem, later)


def _log_records_from(segments: list[Segment], start: int) -> list[MetadataRecord]:
    """Records with offset >= ``start``, checking there is no gap from ``start`` on."""
    records: list[MetadataRecord] = []
    expected = start
    for segment in segments:
        for batch in segment.batches:
            if batch.next_offset <= start:
                continue
            if batch.base_offset > expected:
                raise MetadataLogCorruptError(
                    f"metadata log has a gap: records {expected}..{batch.base_offset - 1} "
                    f"are missing (next found in {segment.path})"
                )
            skip = max(start - batch.base_offset, 0)
            values = (value for _, value in batch.entries[skip:])
            records.extend(decode_values(values, f"log segment {segment.path}"))
            expected = batch.next_offset
    return records


@dataclass(slots=True)
class Recovered:
    state: LoadedState
    segments: list[Segment]
    snapshots: list[Snapshot]
    next_offset: int


def _choose_snapshot(
    files: OsFiles, segments: list[Segment], snapshots: list[Snapshot], read_only: bool = False
) -> tuple[list[MetadataRecord], int, list[MetadataRecord], list[Snapshot]]:
    """Newest valid snapshot + log after it; corrupt snapshots are set aside (read-only: skipped)."""
    candidates = list(reversed(snapshots))
    while candidates:
        snap = candidates[0]
        try:
            snap_records = decode_snapshot(files.read_bytes(snap.path), snap.path.name)
        except MetadataLogCorruptError as exc:
            if read_only:
                candidates.pop(0)
                continue
            aside = snap.path.with_name(snap.path.name + _CORRUPT_SUFFIX)
            logger.warning("%s; falling back to the previous snapshot, moved to %s", exc, aside)
            files.rename(snap.path, aside)
            candidates.pop(0)
            continue
        return snap_records, snap.end_offset, [], list(reversed(candidates))
    first_base = segments[0].base_offset if segments else 0
    if first_base > 0:
        raise MetadataLogCorruptError(
            f"no usable snapshot and the log starts at offset {first_base}: "
            f"records 0..{first_base - 1} cannot be recovered"
        )
    return [], 0, [], []


def _needed(damage: Damage, segments: list[Segment], start: int) -> bool:
    """Whether a damaged segment holds records the state after offset ``start`` needs: those up
    to the next segment's base (its true end; the last segment's is unknown)."""
    index = segments.index(damage.segment)
    if index + 1 < len(segments):
        return segments[index + 1].base_offset > start
    return True


def read_acknowledged(files: OsFiles, path: Path) -> tuple[int, int] | None:
    """(next offset, active segment base) from the acknowledged-offset file, or None."""
    marker = path / ACKNOWLEDGED_NAME
    if not files.exists(marker):
        return None
    match = _ACKNOWLEDGED_RE.match(files.read_bytes(marker).decode("ascii", "replace"))
    if match is None:
        raise MetadataLogCorruptError(f"{marker} is not an acknowledged-offset file kgw wrote; "
                                      f"run `{RECOVER_HINT.format(path=path)}`")
    return int(match[1]), int(match[2])


def write_acknowledged(files: OsFiles, path: Path, next_offset: int, segment_base: int) -> None:
    """Record, durably, that every offset below ``next_offset`` was acknowledged and that the
    active segment starts at ``segment_base`` (a new file, fsynced, renamed over the old one)."""
    final = path / ACKNOWLEDGED_NAME
    part = final.with_name(final.name + PART_SUFFIX)
    fd = files.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_and_fsync(files, fd, f"kgw-acknowledged v1 next={next_offset} segment={segment_base}\n".encode())
    finally:
        files.close(fd)
    files.rename(part, final)
    files.fsync_dir(path)


def _check_acknowledged(path: Path, acknowledged: tuple[int, int] | None, segments: list[Segment],
                        next_offset: int) -> None:
    """The log must reach the last offset recorded as acknowledged, and hold the segment that
    was active then: a deleted or cut segment loses acknowledged records without a trace in the
    segments themselves."""
    if acknowledged is None:
        return
    ack_next, active_base = acknowledged
    if next_offset >= ack_next:
        return
    present = {s.base_offset for s in segments}
    why = (f"its segment {segment_name(active_base)} is missing" if active_base not in present
           else "its segments end early")
    raise MetadataLogCorruptError(
        f"metadata log {path} ends at offset {next_offset - 1} but offsets up to {ack_next - 1} were "
        f"acknowledged ({ACKNOWLEDGED_NAME}): {why}; kgw refuses to start without them: run "
        f"`{RECOVER_HINT.format(path=path)}` (docs/operations.md, \"Recovering the metadata log\")")


def recover(files: OsFiles, path: Path, read_only: bool = False) -> Recovered:
    """What the log holds (see :mod:`metadata.store`, Recovery): a torn tail is cut; damage is
    an error unless a newer snapshot covers it (then a WARNING: retention deletes the segment);
    a log that ends before what was acknowledged is an error."""
    # read before the segments: a writer appends and then records the offset, so what is read
    # here never claims more than the segments listed next hold
    acknowledged = read_acknowledged(files, path)
    segments, snapshots = list_dir(files, path, read_only)
    damages = []
    for index, segment in enumerate(segments):
        damage = _scan_segment(files, segment, is_last=index == len(segments) - 1, read_only=read_only,
                               acknowledged_next=acknowledged[0] if acknowledged is not None else 0)
        if damage is not None:
            damages.append(damage)
    snap_records, start, _none, snapshots = _choose_snapshot(files, segments, snapshots, read_only)
    for damage in damages:
        if _needed(damage, segments, start):
            raise MetadataLogCorruptError(damage.describe(path))
        if not read_only:
            logger.warning("metadata log segment %s is damaged at file position %d (log offset %d): %s; the "
                           "snapshot at offset %d covers it, so nothing is lost; retention deletes it",
                           damage.segment.path, damage.position, damage.offset, damage.problem, start)
    usable = [s for s in segments if not any(d.segment is s for d in damages)]
    log_records = _log_records_from(usable, start)
    log_end = segments[-1].next_offset if segments else 0
    next_offset = max(start + len(log_records), log_end)
    _check_acknowledged(path, acknowledged, segments, next_offset)
    state = LoadedState(tuple(snap_records), start, tuple(log_records), next_offset - 1)
    return Recovered(state, segments, snapshots, next_offset)


def read_log_state(path: Path, files: OsFiles = OS_FILES, attempts: int = 3) -> LoadedState:
    """What the log at ``path`` holds durably now, read without its lock and changing nothing:
    for tools that look while a gateway writes (``kgw acls list``).  A batch being appended is
    left out; a segment or snapshot removed by retention while being read makes it read again."""
    if not files.exists(path):
        raise MetadataLogError(f"metadata log directory {path} does not exist")
    for attempt in range(attempts):
        try:
            return recover(files, path, read_only=True).state
        except (FileNotFoundError, MetadataLogCorruptError):
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")




def acquire_lock(files: OsFiles, path: Path) -> int:
    lock_path = path / _LOCK_NAME
    created = not files.exists(lock_path)
    fd = files.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        files.lock(fd)
    except OSError as exc:
        holder = files.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
        files.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise MetadataStoreLockedError(
                f"metadata log directory {path} is locked by another kgw process "
                f"(pid {holder}); only one gateway may write a directory store.  While it runs, change "
                "ACLs, SCRAM users and configs through it, with Kafka's tools (kafka-acls, kafka-configs "
                "--bootstrap-server <its listener>) or any admin client; `kgw acls list` and `kgw acls dump` "
                "still read the directory"
            ) from None
        raise
    files.ftruncate(fd, 0)
    files.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    if created:
        files.fsync_dir(path)
    return fd



#: the room a store that failed a write wants before it takes writes again
RESUME_ROOM_BYTES: Final = 64 * 1024


def probe_room(files: OsFiles, path: Path, size: int = RESUME_ROOM_BYTES) -> None:
    """Write ``size`` bytes to a scratch file, fsync and remove it: OSError (ENOSPC) unless the
    disk has room for more than one small append, so a store does not resume writes only to
    fail the next one."""
    probe = path / (".room-probe" + PART_SUFFIX)
    fd = files.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        write_and_fsync(files, fd, bytes(size))
    finally:
        files.close(fd)
        files.unlink(probe)


def write_snapshot_file(files: OsFiles, directory: Path, records: Sequence[MetadataRecord], end_offset: int,
                        epoch: int) -> Path:
    """Write a snapshot durably: ``.part``, fsync, rename, directory fsync (no half snapshot
    ever has the final name).  Returns its path.  A failure (a full disk) removes the ``.part``
    it leaves: failed snapshots must not fill the disk further."""
    data = encode_snapshot(records, epoch=epoch, timestamp_ms=now_ms())
    final = directory / snapshot_name(end_offset, epoch)
    part = final.with_name(final.name + PART_SUFFIX)
    fd = files.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        try:
            write_and_fsync(files, fd, data)
        finally:
            files.close(fd)
        files.rename(part, final)
    except BaseException:
        files.unlink(part)
        raise
    files.fsync_dir(directory)
    return final


def apply_retention(files: OsFiles, directory: Path, segments: list[Segment], snapshots: list[Snapshot]) -> None:
    """Keep the newest two snapshots and the log back to the older of them (the lists, sorted
    oldest first, are trimmed to what is kept)."""
    if len(snapshots) < 2:
        return
    keep_from = snapshots[-2].end_offset
    for old in snapshots[:-2]:
        files.unlink(old.path)
    del snapshots[:-2]
    while len(segments) > 1 and segments[1].base_offset <= keep_from:
        files.unlink(segments.pop(0).path)
    files.fsync_dir(directory)
