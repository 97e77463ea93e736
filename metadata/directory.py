"""The local-directory metadata store: segments, snapshots, recovery, group commit.

See :mod:`metadata.store` for the layout, durability and recovery rules.
"""

from __future__ import annotations

import enum
import errno
import logging
import os
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import trio

from metadata.files import OS_FILES, OsFiles
from metadata.records import MetadataRecord, encode_record
from metadata.record_batch import DecodedBatch, ScanResult, encode_batch, scan_batches, set_base_offset
from metadata.snapshots import decode_values, decode_snapshot, encode_snapshot
from metadata.store import CommittedBatch, LoadedState, MetadataLogCorruptError, MetadataLogError, MetadataStore, MetadataStoreBrokenError, MetadataStoreClosedError, MetadataStoreLockedError, Subscription


logger = logging.getLogger("kgw.metadata.log")


# ---------------------------------------------------------------------------
# File names and small blocking helpers (run in worker threads)
# ---------------------------------------------------------------------------

_SEGMENT_RE: Final = re.compile(r"^(\d{20})\.log$")
_SNAPSHOT_RE: Final = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_LOCK_NAME: Final = ".lock"
_PART_SUFFIX: Final = ".part"
_CORRUPT_SUFFIX: Final = ".corrupt"


def _segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}.log"


def _snapshot_name(end_offset: int, epoch: int) -> str:
    return f"{end_offset:020d}-{epoch:010d}.checkpoint"


def _write_all(files: OsFiles, fd: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data)
    while view:
        written = files.write(fd, view)
        view = view[written:]


def _write_and_fsync(files: OsFiles, fd: int, data: bytes) -> None:
    _write_all(files, fd, data)
    files.fsync(fd)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000




# ---------------------------------------------------------------------------
# Recovery
# ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Segment:
    base_offset: int
    path: Path
    next_offset: int = 0
    size: int = 0
    batches: list[DecodedBatch] = field(default_factory=list)


@dataclass(slots=True)
class _Snapshot:
    end_offset: int
    epoch: int
    path: Path


def _list_dir(files: OsFiles, path: Path, read_only: bool = False) -> tuple[list[_Segment], list[_Snapshot]]:
    segments: list[_Segment] = []
    snapshots: list[_Snapshot] = []
    for name in files.listdir(path):
        entry = path / name
        if entry.name.endswith(_PART_SUFFIX):
            if read_only:  # a snapshot the gateway is writing now
                continue
            logger.warning("removing incomplete snapshot %s left by a crash", entry)
            files.unlink(entry)
        elif match := _SEGMENT_RE.match(entry.name):
            segments.append(_Segment(int(match[1]), entry))
        elif match := _SNAPSHOT_RE.match(entry.name):
            snapshots.append(_Snapshot(int(match[1]), int(match[2]), entry))
    segments.sort(key=lambda s: s.base_offset)
    snapshots.sort(key=lambda s: s.end_offset)
    return segments, snapshots


def _truncate_tail(files: OsFiles, segment: _Segment, scan: ScanResult, file_size: int) -> None:
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
    fd = files.open(segment.path, os.O_WRONLY)
    try:
        files.ftruncate(fd, scan.valid_bytes)
        files.fsync(fd)
    finally:
        files.close(fd)


def _scan_segment(files: OsFiles, segment: _Segment, is_last: bool, read_only: bool = False) -> None:
    data = files.read_bytes(segment.path)
    scan = scan_batches(data, segment.base_offset)
    if scan.problem is not None and not (is_last and read_only):  # read-only: a batch being written
        if not is_last:
            raise MetadataLogCorruptError(
                f"sealed log segment {segment.path} is corrupt at file position "
                f"{scan.valid_bytes} (log offset {scan.next_offset}): {scan.problem}; "
                "refusing to drop acknowledged records"
            )
        _truncate_tail(files, segment, scan, len(data))
    segment.batches = scan.batches
    segment.next_offset = scan.next_offset
    segment.size = scan.valid_bytes


def _log_records_from(segments: list[_Segment], start: int) -> list[MetadataRecord]:
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
class _Recovered:
    state: LoadedState
    segments: list[_Segment]
    snapshots: list[_Snapshot]
    next_offset: int


def _choose_snapshot(
    files: OsFiles, segments: list[_Segment], snapshots: list[_Snapshot], read_only: bool = False
) -> tuple[list[MetadataRecord], int, list[MetadataRecord], list[_Snapshot]]:
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
        log_records = _log_records_from(segments, snap.end_offset)
        return snap_records, snap.end_offset, log_records, list(reversed(candidates))
    first_base = segments[0].base_offset if segments else 0
    if first_base > 0:
        raise MetadataLogCorruptError(
            f"no usable snapshot and the log starts at offset {first_base}: "
            f"records 0..{first_base - 1} cannot be recovered"
        )
    return [], 0, _log_records_from(segments, 0), []


def _recover(files: OsFiles, path: Path, read_only: bool = False) -> _Recovered:
    segments, snapshots = _list_dir(files, path, read_only)
    for index, segment in enumerate(segments):
        _scan_segment(files, segment, is_last=index == len(segments) - 1, read_only=read_only)
    snap_records, start, log_records, snapshots = _choose_snapshot(files, segments, snapshots, read_only)
    log_end = segments[-1].next_offset if segments else 0
    next_offset = max(start + len(log_records), log_end)
    state = LoadedState(tuple(snap_records), start, tuple(log_records), next_offset - 1)
    return _Recovered(state, segments, snapshots, next_offset)


def read_log_state(path: Path, files: OsFiles = OS_FILES, attempts: int = 3) -> LoadedState:
    """What the log at ``path`` holds durably now, read without its lock and changing nothing:
    for tools that look while a gateway writes (``kgw acls list``).  A batch being appended is
    left out; a segment or snapshot removed by retention while being read makes it read again."""
    if not files.exists(path):
        raise MetadataLogError(f"metadata log directory {path} does not exist")
    for attempt in range(attempts):
        try:
            return _recover(files, path, read_only=True).state
        except (FileNotFoundError, MetadataLogCorruptError):
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


class DirectoryLogReader(MetadataStore):
    """A read-only :class:`MetadataStore` over a directory log (:func:`read_log_state`): load()
    works while a gateway holds the log; every write raises."""

    def __init__(self, path: str | os.PathLike[str], *, files: OsFiles = OS_FILES) -> None:
        self._path = Path(path)
        self._files = files
        self._last = -1

    async def load(self) -> LoadedState:
        state = await trio.to_thread.run_sync(read_log_state, self._path, self._files)
        self._last = state.last_offset
        return state

    async def append(self, records: Sequence[MetadataRecord]) -> int:
        raise MetadataStoreClosedError(f"the metadata log at {self._path} was opened read-only")

    async def snapshot(self, records: Iterable[MetadataRecord], *, through_offset: int | None = None) -> None:
        raise MetadataStoreClosedError(f"the metadata log at {self._path} was opened read-only")

    def subscribe(self, *, max_buffered_batches: int = 1024) -> Subscription:
        return Subscription(max_buffered_batches)

    @property
    def last_offset(self) -> int:
        return self._last

    @property
    def records_since_snapshot(self) -> int:
        return 0

    async def aclose(self) -> None:
        pass


# ---------------------------------------------------------------------------
# The directory backend
# ---------------------------------------------------------------------------


class _StoreState(enum.Enum):
    NEW = "new"
    OPEN = "open"
    BROKEN = "broken"
    CLOSED = "closed"


class _TicketState(enum.Enum):
    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


@dataclass(slots=True, eq=False)
class _Ticket:
    """One append() call waiting for the group commit that makes it durable."""

    records: tuple[MetadataRecord, ...]
    batch: bytearray
    base_offset: int = -1
    state: _TicketState = _TicketState.PENDING
    error: BaseException | None = None


def _acquire_lock(files: OsFiles, path: Path) -> int:
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
                f"(pid {holder}); only one gateway may write a directory store"
            ) from None
        raise
    files.ftruncate(fd, 0)
    files.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    if created:
        files.fsync_dir(path)
    return fd


class DirectoryMetadataStore(MetadataStore):
    """The embedded metadata store: segments and snapshots in one local directory.

    Resource handling: ``load()`` creates the directory if needed, takes the lock,
    recovers and opens the active segment; ``aclose()`` releases all of it.

    Error handling: see the module docstring - torn tails are truncated with a
    WARNING, damage to acknowledged data raises :class:`MetadataLogCorruptError`,
    write failures break the store.
    """

    def __init__(self, path: str | os.PathLike[str], *, epoch: int = 0, files: OsFiles = OS_FILES) -> None:
        self._path = Path(path)
        #: every file operation goes through this seam (tests put a simulated disk here)
        self._files = files
        self._epoch = epoch
        self._state = _StoreState.NEW
        self._write_lock = trio.Lock()
        self._pending: list[_Ticket] = []
        self._subscriptions: list[Subscription] = []
        self._lock_fd = -1
        self._segment_fd = -1
        self._segments: list[_Segment] = []
        self._snapshots: list[_Snapshot] = []
        self._next_offset = 0
        self._broken_cause: BaseException | None = None

    # -- properties ---------------------------------------------------------

    @property
    def path(self) -> Path:
        return self._path

    @property
    def last_offset(self) -> int:
        return self._next_offset - 1

    @property
    def records_since_snapshot(self) -> int:
        snapshot_end = self._snapshots[-1].end_offset if self._snapshots else 0
        return max(self._next_offset - snapshot_end, 0)

    # -- lifecycle ----------------------------------------------------------

    async def load(self) -> LoadedState:
        if self._state is not _StoreState.NEW:
            raise MetadataStoreClosedError(f"load() was already called on the store at {self._path}")
        recovered = await trio.to_thread.run_sync(self._open_blocking)
        self._state = _StoreState.OPEN
        return recovered.state

    def _open_blocking(self) -> _Recovered:
        files = self._files
        if not files.exists(self._path):
            files.mkdir(self._path)
            files.fsync_dir(self._path.parent)
        lock_fd = _acquire_lock(files, self._path)
        try:
            recovered = _recover(files, self._path)
            for segment in recovered.segments:
                segment.batches = []  # decoded into the LoadedState; free the copies
            self._segments = recovered.segments
            self._snapshots = recovered.snapshots
            self._next_offset = recovered.next_offset
            self._open_active_segment()
        except BaseException:
            self._close_fds()
            files.close(lock_fd)
            raise
        self._lock_fd = lock_fd
        return recovered

    def _open_active_segment(self) -> None:
        """Append to the last segment if it ends at the next offset, else roll a new one."""
        last = self._segments[-1] if self._segments else None
        if last is not None and last.next_offset == self._next_offset:
            self._segment_fd = self._files.open(last.path, os.O_WRONLY | os.O_APPEND)
            return
        self._roll_segment_blocking()

    def _roll_segment_blocking(self) -> None:
        segment = _Segment(self._next_offset, self._path / _segment_name(self._next_offset))
        segment.next_offset = self._next_offset
        files = self._files
        fd = files.open(segment.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            files.fsync_dir(self._path)
        except BaseException:
            files.close(fd)
            raise
        if self._segment_fd >= 0:
            files.close(self._segment_fd)
        self._segment_fd = fd
        self._segments.append(segment)

    def _close_fds(self) -> None:
        if self._segment_fd >= 0:
            self._files.close(self._segment_fd)
            self._segment_fd = -1

    async def aclose(self) -> None:
        if self._state is _StoreState.CLOSED:
            return
        async with self._write_lock:  # let an in-flight group commit finish
            self._state = _StoreState.CLOSED
            for ticket in self._pending:
                ticket.state = _TicketState.FAILED
                ticket.error = MetadataStoreClosedError("store closed before the append was written")
            self._pending.clear()
            self._close_fds()
            if self._lock_fd >= 0:
                self._files.close(self._lock_fd)
                self._lock_fd = -1
            for subscription in self._subscriptions:
                subscription._finish()
            self._subscriptions.clear()

    def _require_open(self) -> None:
        if self._state is _StoreState.OPEN:
            return
        if self._state is _StoreState.BROKEN:
            raise MetadataStoreBrokenError(
                f"metadata store {self._path} failed earlier and must be reopened"
            ) from self._broken_cause
        if self._state is _StoreState.NEW:
            raise MetadataStoreClosedError(f"call load() before using the store at {self._path}")
        raise MetadataStoreClosedError(f"metadata store {self._path} is closed")

    # -- appends (group commit) ---------------------------------------------

    async def append(self, records: Sequence[MetadataRecord]) -> int:
        self._require_open()
        if not records:
            raise ValueError("append() needs at least one record")
        values = [encode_record(record) for record in records]
        ticket = _Ticket(tuple(records), encode_batch(values, timestamp_ms=_now_ms(), epoch=self._epoch))
        self._pending.append(ticket)
        try:
            async with self._write_lock:
                if ticket.state is _TicketState.PENDING:
                    with trio.CancelScope(shield=True):
                        await self._flush_pending()
        except BaseException:
            if ticket.state is _TicketState.PENDING and ticket in self._pending:  # cancelled before anyone wrote it
                self._pending.remove(ticket)
            raise
        if ticket.state is _TicketState.FAILED:
            if isinstance(ticket.error, MetadataLogError):
                raise ticket.error
            raise MetadataStoreBrokenError(
                f"writing the metadata log {self._path} failed; the append may or may not be durable"
            ) from ticket.error
        return ticket.base_offset + len(ticket.records) - 1

    async def _flush_pending(self) -> None:
        """Write every queued batch with one write + fsync; caller holds the write lock."""
        tickets, self._pending = self._pending, []
        if not tickets or self._state is not _StoreState.OPEN:
            return
        offset = self._next_offset
        for ticket in tickets:
            set_base_offset(ticket.batch, offset)
            ticket.base_offset = offset
            offset += len(ticket.records)
        data = b"".join(ticket.batch for ticket in tickets)
        try:
            await trio.to_thread.run_sync(_write_and_fsync, self._files, self._segment_fd, data)
        except OSError as exc:
            self._break(exc, tickets)
            return
        self._next_offset = offset
        active = self._segments[-1]
        active.next_offset = offset
        active.size += len(data)
        for ticket in tickets:
            ticket.state = _TicketState.DONE
        self._publish(tickets)

    def _break(self, exc: OSError, tickets: list[_Ticket]) -> None:
        logger.error("metadata log %s: write/fsync failed, store is now broken: %s", self._path, exc)
        self._state = _StoreState.BROKEN
        self._broken_cause = exc
        for ticket in tickets + self._pending:
            ticket.state = _TicketState.FAILED
            ticket.error = exc
        self._pending.clear()

    # -- subscriptions ------------------------------------------------------

    def subscribe(self, *, max_buffered_batches: int = 1024) -> Subscription:
        self._require_open()
        subscription = Subscription(max_buffered_batches)
        self._subscriptions.append(subscription)
        return subscription

    def _publish(self, tickets: list[_Ticket]) -> None:
        if not self._subscriptions:
            return
        batches = [CommittedBatch(t.base_offset, t.records) for t in tickets]
        alive = []
        for subscription in self._subscriptions:
            if all(subscription._offer(batch) for batch in batches):
                alive.append(subscription)
            elif subscription.lagged:
                logger.warning("metadata log subscriber lagged and was dropped")
        self._subscriptions = alive

    # -- snapshots ----------------------------------------------------------

    async def snapshot(
        self, records: Iterable[MetadataRecord], *, through_offset: int | None = None
    ) -> None:
        self._require_open()
        records = tuple(records)
        async with self._write_lock:
            self._require_open()
            end_offset = self._snapshot_end(through_offset)
            if self._snapshots and end_offset <= self._snapshots[-1].end_offset:
                logger.debug("snapshot at %d skipped: not newer than the last one", end_offset)
                return
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self._snapshot_blocking, records, end_offset)

    def _snapshot_end(self, through_offset: int | None) -> int:
        if through_offset is None:
            return self._next_offset
        if not -1 <= through_offset < self._next_offset:
            raise ValueError(
                f"through_offset {through_offset} is outside the committed log "
                f"(last committed offset {self._next_offset - 1})"
            )
        return through_offset + 1

    def _snapshot_blocking(self, records: tuple[MetadataRecord, ...], end_offset: int) -> None:
        final = write_snapshot_file(self._files, self._path, records, end_offset, self._epoch)
        self._snapshots.append(_Snapshot(end_offset, self._epoch, final))
        if self._segments[-1].next_offset > self._segments[-1].base_offset:
            self._roll_segment_blocking()
        apply_retention(self._files, self._path, self._segments, self._snapshots)


def write_snapshot_file(files: OsFiles, directory: Path, records: Sequence[MetadataRecord], end_offset: int,
                        epoch: int) -> Path:
    """Write a snapshot durably: ``.part``, fsync, rename, directory fsync (no half snapshot
    ever has the final name).  Returns its path."""
    data = encode_snapshot(records, epoch=epoch, timestamp_ms=_now_ms())
    final = directory / _snapshot_name(end_offset, epoch)
    part = final.with_name(final.name + _PART_SUFFIX)
    fd = files.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        _write_and_fsync(files, fd, data)
    finally:
        files.close(fd)
    files.rename(part, final)
    files.fsync_dir(directory)
    return final


def apply_retention(files: OsFiles, directory: Path, segments: list[_Segment], snapshots: list[_Snapshot]) -> None:
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


def snapshot_every(records_since_snapshot: int, *, threshold: int = 10_000) -> bool:
    """A simple policy for owners: snapshot once ``threshold`` records have accumulated."""
    return records_since_snapshot >= max(threshold, 1)
