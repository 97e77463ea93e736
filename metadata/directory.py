"""The local-directory metadata store of one gateway: group commit, snapshots, subscriptions
(the files themselves: :mod:`metadata.directory_files`).

See :mod:`metadata.store` for the layout, durability and recovery rules.
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import trio

from metadata.directory_files import (
    Recovered, Segment, Snapshot, acquire_lock, apply_retention, now_ms, read_log_state, recover, segment_name,
    write_and_fsync, write_snapshot_file,
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
        """Append to the last segment if it ends at the next offset, else roll a new one."""
        last = self._segments[-1] if self._segments else None
        if last is not None and last.next_offset == self._next_offset:
            self._segment_fd = self._files.open(last.path, os.O_WRONLY | os.O_APPEND)
            return
        self._roll_segment_blocking()

    def _roll_segment_blocking(self) -> None:
        segment = Segment(self._next_offset, self._path / segment_name(self._next_offset))
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
            await trio.to_thread.run_sync(write_and_fsync, self._files, self._segment_fd, data)
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
        self._snapshots.append(Snapshot(end_offset, self._epoch, final))
        if self._segments[-1].next_offset > self._segments[-1].base_offset:
            self._roll_segment_blocking()
        apply_retention(self._files, self._path, self._segments, self._snapshots)



def snapshot_every(records_since_snapshot: int, *, threshold: int = 10_000) -> bool:
    """A simple policy for owners: snapshot once ``threshold`` records have accumulated."""
    return records_since_snapshot >= max(threshold, 1)
