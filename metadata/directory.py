"""The local-directory metadata store of one gateway: group commit, snapshots, subscriptions
(the files themselves: :mod:`metadata.directory_files`).

See :mod:`metadata.store` for the layout, durability and recovery rules.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import trio

from metadata.directory_files import (
    Recovered, Segment, Snapshot, acquire_lock, apply_retention, now_ms, probe_room, read_log_state, recover,
    segment_name, truncate_durably, write_acknowledged, write_and_fsync, write_snapshot_file,
)
from metadata.files import OS_FILES, OsFiles
from metadata.records import MetadataRecord, encode_record
from metadata.record_batch import encode_batch, set_base_offset
from metadata.store import CommittedBatch, LoadedState, handed_over, MetadataLogError, MetadataStore, MetadataStoreBrokenError, MetadataStoreClosedError, Subscription

__all__ = ["DirectoryLogReader", "DirectoryMetadataStore", "read_log_state", "snapshot_every"]

logger = logging.getLogger("kgw.metadata.log")


class DirectoryLogReader(MetadataStore):
    """A read-only :class:`MetadataStore` over a directory log (:func:`read_log_state`): load()
    works while a gateway holds the log; every write raises."""

    def __init__(self, path: str | os.PathLike[str], *, files: OsFiles = OS_FILES) -> None:
        self._path = Path(path)
        self._files = files
        self._last = -1

    async def load(self) -> LoadedState:
        state = await handed_over(read_log_state, self._path, self._files)
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
        self._segments: list[Segment] = []
        self._snapshots: list[Snapshot] = []
        self._next_offset = 0
        self._broken_cause: BaseException | None = None
        self._broken_at = 0.0
        #: whether the last failed write was cut off the segment again (its change not made)
        self._undone = False
        #: time.monotonic() of the last acknowledged-offset file written (at most one a second)
        self._acknowledged_at = float("-inf")

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
        recovered = await handed_over(self._open_blocking)
        self._state = _StoreState.OPEN
        return recovered.state

    def _open_blocking(self) -> Recovered:
        files = self._files
        if not files.exists(self._path):
            files.mkdir(self._path)
            files.fsync_dir(self._path.parent)
        lock_fd = acquire_lock(files, self._path)
        try:
            recovered = recover(files, self._path)
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
        """Append to the last segment if it ends at the next offset, else roll a new one; record
        what the log holds now (the acknowledged-offset file)."""
        last = self._segments[-1] if self._segments else None
        if last is not None and last.next_offset == self._next_offset:
            self._segment_fd = self._files.open(last.path, os.O_WRONLY | os.O_APPEND)
            self._record_acknowledged()
            return
        self._roll_segment_blocking()

    def _record_acknowledged(self) -> None:
        """The acknowledged-offset file (:func:`~metadata.directory_files.write_acknowledged`):
        evidence, beside the segments, of how far the log reached, so a deleted or cut segment is
        found at the next start-up instead of silently losing acknowledged records."""
        write_acknowledged(self._files, self._path, self._next_offset, self._segments[-1].base_offset)
        self._acknowledged_at = time.monotonic()

    def _write_durably(self, data: bytes, next_offset: int) -> None:
        """One group commit's bytes, fsynced; then, at most once a second, the evidence of it.
        On failure, what reached the segment is cut off again (:attr:`_undone`): a writer told
        "failed" must not find its change applied after a restart."""
        try:
            write_and_fsync(self._files, self._segment_fd, data)
            if time.monotonic() - self._acknowledged_at >= 1.0:
                write_acknowledged(self._files, self._path, next_offset, self._segments[-1].base_offset)
                self._acknowledged_at = time.monotonic()
        except OSError:
            self._undone = self._cut_back()
            raise

    def _cut_back(self) -> bool:
        """Truncate the active segment to its last acknowledged byte and fsync; False if that
        failed too (the outcome of the failed write is then unknown until the next start)."""
        try:
            self._files.ftruncate(self._segment_fd, self._segments[-1].size)
            self._files.fsync(self._segment_fd)
        except OSError:
            return False
        return True

    def _roll_segment_blocking(self) -> None:
        segment = Segment(self._next_offset, self._path / segment_name(self._next_offset))
        segment.next_offset = self._next_offset
        files = self._files
        fd = files.open(segment.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            files.fsync_dir(self._path)
        except BaseException:
            files.close(fd)
            with contextlib.suppress(OSError):  # else the next roll meets it (O_EXCL) forever
                files.unlink(segment.path)
            raise
        if self._segment_fd >= 0:
            files.close(self._segment_fd)
        self._segment_fd = fd
        self._segments.append(segment)
        self._record_acknowledged()

    def _close_fds(self) -> None:
        if self._segment_fd >= 0:
            self._files.close(self._segment_fd)
            self._segment_fd = -1

    async def aclose(self) -> None:
        if self._state is _StoreState.CLOSED:
            return
        async with self._write_lock:  # let an in-flight group commit finish
            was_open = self._state is _StoreState.OPEN
            self._state = _StoreState.CLOSED
            for ticket in self._pending:
                ticket.state = _TicketState.FAILED
                ticket.error = MetadataStoreClosedError("store closed before the append was written")
            self._pending.clear()
            if was_open:
                try:  # a clean stop leaves exact evidence
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(self._record_acknowledged)
                except OSError as exc:
                    logger.warning("metadata log %s: recording the acknowledged offset at close failed: %s",
                                   self._path, exc)
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
                f"metadata store {self._path} takes no writes since a write failed ({self._broken_cause}); "
                "kgw tries again every few seconds"
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
        ticket = _Ticket(tuple(records), encode_batch(values, timestamp_ms=now_ms(), epoch=self._epoch))
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
            outcome = ("the change was not made" if self._undone
                       else "the change may or may not be durable")
            raise MetadataStoreBrokenError(
                f"writing the metadata log {self._path} failed ({ticket.error}); {outcome}"
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
            await trio.to_thread.run_sync(self._write_durably, data, offset)
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
        logger.error("metadata log %s: write/fsync failed: no metadata change is accepted until a write "
                     "succeeds again (tried every few seconds): %s", self._path, exc)
        self._state = _StoreState.BROKEN
        self._broken_cause = exc
        self._broken_at = time.time()
        for ticket in tickets + self._pending:
            ticket.state = _TicketState.FAILED
            ticket.error = exc
        self._pending.clear()

    @property
    def broken(self) -> tuple[float, BaseException] | None:
        if self._state is _StoreState.BROKEN and self._broken_cause is not None:
            return self._broken_at, self._broken_cause
        return None

    async def resume_writes(self) -> bool:
        if self._state is not _StoreState.BROKEN:
            return self._state is _StoreState.OPEN
        async with self._write_lock:
            try:
                await trio.to_thread.run_sync(self._resume_blocking)
            except OSError as exc:
                self._broken_cause = exc
                return False
            self._state = _StoreState.OPEN
            self._broken_cause = None
        logger.warning("metadata log %s takes writes again (after %.0f s); the failed appends were not applied",
                       self._path, time.time() - self._broken_at)
        return True

    def _resume_blocking(self) -> None:
        """Cut the active segment back to its last acknowledged byte (a failed write may have
        left part or all of its batch, never fsynced), fsync; check there is room for more than
        the next append (:func:`~metadata.directory_files.probe_room`); reopen it."""
        files, active = self._files, self._segments[-1]
        if self._segment_fd >= 0:
            files.close(self._segment_fd)
            self._segment_fd = -1
        truncate_durably(files, active.path, active.size)
        probe_room(files, self._path)
        self._segment_fd = files.open(active.path, os.O_WRONLY | os.O_APPEND)
        self._record_acknowledged()

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
        self._snapshots.append(Snapshot(end_offset, self._epoch, final))
        if self._segments[-1].next_offset > self._segments[-1].base_offset:
            self._roll_segment_blocking()
        apply_retention(self._files, self._path, self._segments, self._snapshots)



def snapshot_every(records_since_snapshot: int, *, threshold: int = 10_000) -> bool:
    """A simple policy for owners: snapshot once ``threshold`` records have accumulated."""
    return records_since_snapshot >= max(threshold, 1)
