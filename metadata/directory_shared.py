"""The directory log shared by the worker processes of ``kgw run --workers N``.

One log, one order, several writers on one host.  The supervisor holds the directory's
``.lock`` for as long as it runs (so no other gateway and no offline ``kgw acls add`` writes
it meanwhile); each worker opens the directory with :class:`SharedDirectoryStore`, whose
operations are ordered by a second lock, ``.append.lock`` (``flock``, held only for one
write):

* **append** (group commit, as :class:`~metadata.directory.DirectoryMetadataStore`): under
  ``.append.lock`` the writer reads what the others appended since it last looked (to learn
  the next offset), cuts a torn tail a killed worker left, writes its batches at the end of
  the last segment with one ``write`` + ``fsync`` and lets go.  The file is the order: every
  batch has the offset of its place in it.
* **follow**: a thread reads every complete, CRC-valid batch after its position (every
  50 ms, at once after an append of its own) and hands it to the image in offset order,
  the worker's own batches included, as the Kafka backend does (``shared = True``:
  :meth:`metadata.image.MetadataImage.follow`).  An incomplete or damaged batch at the end
  of the last segment is a write in progress (or a dead writer's tail, cut by the next
  writer): the follower waits for it.  Segments are read in base-offset order; the
  directory is listed before a segment's end is read, so a segment that has a successor is
  read complete.
* **snapshot and retention**: under ``.append.lock``, the first worker past the threshold
  writes the snapshot (at the offset its image reflects; a newer one already there wins),
  rolls the segment and deletes what the directory backend deletes.  A follower keeps the
  segment it reads open, so a deletion does not cut it short; one so far behind that its
  next segment is gone stops with :class:`~metadata.store.SubscriberLaggedError` and its
  worker is restarted by the supervisor (it loads from the snapshot).

Recovery at ``load()`` is the directory backend's, under ``.append.lock``.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

import trio

from metadata.directory_files import (
    Damage, Segment, acquire_lock, apply_retention, list_dir, now_ms, probe_room, read_acknowledged, recover, segment_name,
    truncate_durably, write_acknowledged, write_all, write_snapshot_file,
)
from metadata.files import OS_FILES, OsFiles
from metadata.record_batch import encode_batch, find_batch_after, scan_batches, set_base_offset
from metadata.records import MetadataRecord, encode_record
from metadata.snapshots import decode_values
from metadata.store import (
    CommittedBatch, LoadedState, MetadataLogCorruptError, handed_over, MetadataStore, MetadataStoreBrokenError,
    MetadataStoreClosedError, Subscription,
)

__all__ = ["SharedDirectoryStore", "hold_directory"]

_R = TypeVar("_R")

log = logging.getLogger("kgw.metadata.log")

_APPEND_LOCK: Final = ".append.lock"
_POLL_S: Final = 0.05


def hold_directory(path: str | os.PathLike[str], files: OsFiles = OS_FILES) -> int:
    """Create the directory if needed and take its ``.lock`` for a supervisor whose workers
    share it (:class:`SharedDirectoryStore`); the descriptor is the lock (close it to let go).

    :raises MetadataStoreLockedError: another gateway (or tool) holds it."""
    path = Path(path)
    if not files.exists(path):
        files.mkdir(path)
        files.fsync_dir(path.parent)
    return acquire_lock(files, path)


class _Position:
    """Where a reader or the writer is: a segment, a byte position in it, the next offset."""

    __slots__ = ("base", "path", "pos", "next")

    def __init__(self, base: int, path: Path, pos: int, next_offset: int) -> None:
        self.base, self.path, self.pos, self.next = base, path, pos, next_offset


class SharedDirectoryStore(MetadataStore):
    """A directory log several processes of one host write and follow (module docstring)."""

    shared = True

    def __init__(self, path: str | os.PathLike[str], *, files: OsFiles = OS_FILES) -> None:
        self._path = Path(path)
        self._files = files
        self._state = "new"
        self._lock_fd = -1
        self._write_lock = trio.Lock()
        self._pending: list[tuple[bytearray, int, list[int | BaseException]]] = []  # (batch, record count, [base offset or error])
        self._writer: _Position | None = None
        self._reader: _Position | None = None
        self._reader_fd = -1
        self._last_offset = -1
        self._snapshot_end = 0
        self._subscriptions: list[Subscription] = []
        self._token: trio.lowlevel.TrioToken | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._broken: BaseException | None = None
        self._broken_at = 0.0
        #: whether the last failed write was cut off the segment again
        self._undone = False
        #: time.monotonic() of the last acknowledged-offset file this worker wrote
        self._acknowledged_at = float("-inf")

    @property
    def path(self) -> Path:
        return self._path

    @property
    def last_offset(self) -> int:
        return self._last_offset

    @property
    def records_since_snapshot(self) -> int:
        return max(self._last_offset + 1 - self._snapshot_end, 0)

    # -- the append lock ------------------------------------------------------------------------

    def _locked(self, fn: Callable[..., _R], *args: Any) -> _R:
        """Run ``fn`` holding ``.append.lock`` (blocking: a worker thread waits for it)."""
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        try:
            return fn(*args)
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    # -- lifecycle ------------------------------------------------------------------------------

    async def load(self) -> LoadedState:
        if self._state != "new":
            raise MetadataStoreClosedError(f"load() was already called on the store at {self._path}")
        files = self._files
        if not files.exists(self._path):
            raise MetadataStoreClosedError(f"metadata log directory {self._path} does not exist "
                                           "(the supervisor creates it)")
        self._lock_fd = files.open(self._path / _APPEND_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        state: LoadedState = await handed_over(self._locked, self._load_blocking)
        self._last_offset = state.last_offset
        self._token = trio.lowlevel.current_trio_token()
        self._state = "open"
        self._thread = threading.Thread(target=self._follow, name="kgw-metadata-follower", daemon=True)
        self._thread.start()
        return state

    def _load_blocking(self) -> LoadedState:
        recovered = recover(self._files, self._path)  # cuts a torn tail, sets a bad snapshot aside
        next_offset = recovered.next_offset
        last = recovered.segments[-1] if recovered.segments else None
        if last is None or last.next_offset != next_offset:
            last_path = self._roll(next_offset)
            self._writer = _Position(next_offset, last_path, 0, next_offset)
        else:
            self._writer = _Position(last.base_offset, last.path, last.size, next_offset)
        w = self._writer
        self._record_acknowledged()
        self._reader = _Position(w.base, w.path, w.pos, w.next)
        self._reader_fd = self._files.open(w.path, os.O_RDONLY)
        self._snapshot_end = recovered.snapshots[-1].end_offset if recovered.snapshots else 0
        return recovered.state

    def _roll(self, base: int) -> Path:
        path = self._path / segment_name(base)
        fd = self._files.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        self._files.close(fd)
        self._files.fsync_dir(self._path)
        write_acknowledged(self._files, self._path, base, base)
        self._acknowledged_at = time.monotonic()
        return path

    def _record_acknowledged(self) -> None:
        """Holding the append lock: the acknowledged-offset file (see the directory backend)."""
        w = self._writer
        assert w is not None
        write_acknowledged(self._files, self._path, w.next, w.base)
        self._acknowledged_at = time.monotonic()

    async def aclose(self) -> None:
        if self._state == "closed":
            return
        async with self._write_lock:
            self._state = "closed"
            for _batch, _count, result in self._pending:
                result.append(MetadataStoreClosedError("store closed before the append was written"))
            self._pending.clear()
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            await trio.to_thread.run_sync(thread.join, 5)
        for subscription in self._subscriptions:
            subscription._finish()
        self._subscriptions.clear()
        for fd in (self._reader_fd, self._lock_fd):
            if fd >= 0:
                self._files.close(fd)
        self._reader_fd = self._lock_fd = -1

    def _require_open(self) -> None:
        if self._broken is not None:
            raise MetadataStoreBrokenError(f"metadata store {self._path} takes no writes since a write failed "
                                           f"({self._broken}); kgw tries again every few seconds") from self._broken
        if self._state != "open":
            raise MetadataStoreClosedError(f"metadata store {self._path} is {self._state}")

    @property
    def broken(self) -> tuple[float, BaseException] | None:
        return None if self._broken is None else (self._broken_at, self._broken)

    async def resume_writes(self) -> bool:
        """After a failed write (an OSError; damage to the log needs an operator): catch the
        writer up with the log, cutting what a failed write left, and record the evidence."""
        if self._broken is None:
            return self._state == "open"
        if not isinstance(self._broken, OSError) or self._state != "open":
            return False
        async with self._write_lock:
            try:
                await trio.to_thread.run_sync(self._locked, self._resume_blocking)
            except OSError as exc:
                self._broken = exc
                return False
            except MetadataLogCorruptError as exc:
                self._broken = exc
                return False
            self._broken = None
        log.warning("metadata log %s takes writes again (after %.0f s)", self._path, time.time() - self._broken_at)
        return True

    def _resume_blocking(self) -> None:
        self._catch_up_writer()
        probe_room(self._files, self._path)
        self._record_acknowledged()

    # -- writing --------------------------------------------------------------------------------

    def _catch_up_writer(self) -> None:
        """Holding the append lock: move the writer's position to the end of the log, past
        the others' batches, cutting a torn tail (unacknowledged bytes of a dead writer)."""
        files, w = self._files, self._writer
        assert w is not None
        segments, _snapshots = list_dir(files, self._path, read_only=True)
        last = segments[-1]
        if last.base_offset != w.base:
            w.base, w.path, w.pos, w.next = last.base_offset, last.path, 0, last.base_offset
        fd = files.open(w.path, os.O_RDONLY)
        try:  # only what was appended since this writer last looked
            data = files.pread(fd, max(os.fstat(fd).st_size - w.pos, 0), w.pos)
        finally:
            files.close(fd)
        scan = scan_batches(data, w.next)
        if scan.problem is not None:
            acknowledged = read_acknowledged(files, self._path)
            later = find_batch_after(data, scan.valid_bytes, scan.next_offset)
            if later is not None or (acknowledged is not None and scan.next_offset < acknowledged[0]):
                # acknowledged records are damaged, not a dead writer's tail: cut nothing
                later_at = None if later is None else (w.pos + later[0], later[1])
                damage = Damage(Segment(w.base, w.path), w.pos + scan.valid_bytes, scan.next_offset, scan.problem,
                                later_at)
                raise MetadataLogCorruptError(damage.describe(self._path))
            log.warning("metadata log %s: cutting a torn tail of %d byte(s) at file position %d (log offset %d): %s",
                        w.path, len(data) - scan.valid_bytes, w.pos + scan.valid_bytes, scan.next_offset,
                        scan.problem)
            truncate_durably(files, w.path, w.pos + scan.valid_bytes)
        w.pos += scan.valid_bytes
        w.next = scan.next_offset

    def _write_blocking(self, batches: list[bytearray], counts: list[int]) -> list[int]:
        self._catch_up_writer()
        w = self._writer
        assert w is not None
        bases = []
        offset = w.next
        for batch, count in zip(batches, counts):
            set_base_offset(batch, offset)
            bases.append(offset)
            offset += count
        data = b"".join(batches)
        fd = self._files.open(w.path, os.O_WRONLY | os.O_APPEND)
        written = False
        try:
            write_all(self._files, fd, data)
            written = True
            self._files.fsync(fd)
        except OSError:
            # what part of the batch reached the file was never acknowledged: cut it while the
            # lock keeps the other workers' writers out.  A whole batch whose fsync failed may
            # have been read by their followers already: its outcome is unknown
            self._undone = False
            with contextlib.suppress(OSError):
                self._files.ftruncate(fd, w.pos)
                self._files.fsync(fd)
                self._undone = not written
            raise
        finally:
            self._files.close(fd)
        w.pos += len(data)
        w.next = offset
        if time.monotonic() - self._acknowledged_at >= 1.0:
            try:
                self._record_acknowledged()
            except OSError as exc:  # the records are durable: the evidence waits for the next write
                log.warning("metadata log %s: the acknowledged-offset file could not be written: %s", self._path, exc)
        return bases

    async def append(self, records: Sequence[MetadataRecord]) -> int:
        self._require_open()
        if not records:
            raise ValueError("append() needs at least one record")
        batch = encode_batch([encode_record(r) for r in records], timestamp_ms=now_ms(), epoch=0)
        result: list[int | BaseException] = []
        self._pending.append((batch, len(records), result))
        try:
            async with self._write_lock:
                if not result:
                    with trio.CancelScope(shield=True):
                        await self._flush()
        except BaseException:
            if not result:
                self._pending = [p for p in self._pending if p[2] is not result]
            raise
        outcome = result[0]
        if isinstance(outcome, BaseException):
            if isinstance(outcome, MetadataStoreClosedError):
                raise outcome
            done = "the change was not made" if self._undone else "the change may or may not be durable"
            raise MetadataStoreBrokenError(f"writing the metadata log {self._path} failed ({outcome}); {done}") \
                from outcome
        self._wake.set()  # the follower reads it now, not at its next tick
        return outcome + len(records) - 1

    async def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if self._state != "open":
            for _batch, _count, result in pending:
                result.append(MetadataStoreClosedError("store closed before the append was written"))
            return
        if not pending:
            return
        try:
            bases = await trio.to_thread.run_sync(
                self._locked, self._write_blocking, [p[0] for p in pending], [p[1] for p in pending])
        except (OSError, MetadataLogCorruptError) as exc:
            log.error("metadata log %s: write/fsync failed: no metadata change is accepted until a write succeeds "
                      "again: %s", self._path, exc)
            self._broken, self._broken_at = exc, time.time()
            for _batch, _count, result in pending:
                result.append(exc)
            return
        for (_batch, _count, result), base in zip(pending, bases):
            result.append(base)

    # -- snapshots ------------------------------------------------------------------------------

    async def snapshot(self, records: Iterable[MetadataRecord], *, through_offset: int | None = None) -> None:
        self._require_open()
        end = (self._last_offset if through_offset is None else through_offset) + 1
        records = tuple(records)
        async with self._write_lock:
            with trio.CancelScope(shield=True):
                written = await trio.to_thread.run_sync(self._locked, self._snapshot_blocking, records, end)
        if written:
            self._snapshot_end = max(self._snapshot_end, end)

    def _snapshot_blocking(self, records: tuple[MetadataRecord, ...], end: int) -> bool:
        files = self._files
        self._catch_up_writer()
        _segments, snapshots = list_dir(files, self._path, read_only=True)
        if snapshots and snapshots[-1].end_offset >= end:
            return False  # another worker's is as new
        write_snapshot_file(files, self._path, records, end, 0)
        w = self._writer
        assert w is not None
        if w.pos > 0:
            w.base, w.path, w.pos = w.next, self._roll(w.next), 0
        segments, snapshots = list_dir(files, self._path, read_only=True)
        apply_retention(files, self._path, segments, snapshots)
        log.info("metadata snapshot written: end offset %d, %d records", end, len(records))
        return True

    # -- following ------------------------------------------------------------------------------

    def subscribe(self, *, max_buffered_batches: int = 1024) -> Subscription:
        self._require_open()
        subscription = Subscription(max_buffered_batches)
        self._subscriptions.append(subscription)
        return subscription

    def _follow(self) -> None:
        try:
            while not self._stop.is_set():
                batches = self._read_new()
                if batches:
                    trio.from_thread.run_sync(self._deliver, batches, trio_token=self._token)
                self._wake.wait(_POLL_S)
                self._wake.clear()
        except trio.RunFinishedError:
            pass
        except Exception as exc:  # noqa: BLE001 - the subscribers learn it and the worker restarts
            log.error("metadata follower stopped: %s", exc)
            try:
                trio.from_thread.run_sync(self._fail, trio_token=self._token)
            except trio.RunFinishedError:
                pass

    def _read_new(self) -> list[CommittedBatch]:
        """Every complete batch after the reader's position, in offset order."""
        files, r = self._files, self._reader
        assert r is not None
        out: list[CommittedBatch] = []
        while True:
            segments, snapshots = list_dir(files, self._path, read_only=True)  # before reading: see above
            if snapshots:
                self._snapshot_end = max(self._snapshot_end, snapshots[-1].end_offset)
            size = os.fstat(self._reader_fd).st_size
            if size > r.pos:
                data = files.pread(self._reader_fd, size - r.pos, r.pos)
                scan = scan_batches(data, r.next)
                for batch in scan.batches:
                    if not batch.is_control:
                        records = tuple(decode_values((v for _, v in batch.entries), f"log segment {r.path}"))
                        out.append(CommittedBatch(batch.base_offset, records))
                r.pos += scan.valid_bytes
                r.next = scan.next_offset
                if scan.problem is not None:
                    later = [s for s in segments if s.base_offset > r.base]
                    if later:
                        raise MetadataLogCorruptError(f"sealed log segment {r.path} is damaged at file position "
                                                      f"{r.pos} (log offset {r.next}): {scan.problem}")
                    return out  # a write in progress, or a dead writer's tail the next writer cuts
            following = [s for s in segments if s.base_offset > r.base]
            if not following or os.fstat(self._reader_fd).st_size > r.pos:
                return out
            nxt = following[0]
            if nxt.base_offset != r.next:
                raise _Lagged(f"the metadata log continues at offset {nxt.base_offset} in {nxt.path.name}, "
                              f"this worker needs offset {r.next} (deleted by retention)")
            fd = files.open(nxt.path, os.O_RDONLY)
            files.close(self._reader_fd)
            self._reader_fd = fd
            r.base, r.path, r.pos = nxt.base_offset, nxt.path, 0

    def _deliver(self, batches: list[CommittedBatch]) -> None:
        for batch in batches:
            if batch.last_offset <= self._last_offset:
                continue
            self._last_offset = batch.last_offset
            self._subscriptions = [s for s in self._subscriptions if s._offer(batch)]

    def _fail(self) -> None:
        for subscription in self._subscriptions:
            subscription.lagged = True
            subscription._finish()
        self._subscriptions.clear()


class _Lagged(MetadataLogCorruptError):
    """The follower's next records were deleted by retention before it read them."""

