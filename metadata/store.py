"""kgw's metadata log: the store ACLs, dynamic configs and SCRAM credentials live in.

Theory of operation
===================

State is a *log* of metadata records (:mod:`metadata.records`) plus periodic
*snapshots*, exactly as in KRaft (KIP-500/KIP-631/KIP-801).  Offsets start at 0 and
increase by one per record.  The full state at offset ``N`` is "replay every record
``<= N`` in order"; a snapshot with *end offset* ``E`` is a compacted replay of the
records ``< E``, so the state is "snapshot, then log records ``>= E``".

:class:`MetadataStore` is the interface the gateway programs against.  It is written
so a backend on a Kafka topic (several gateways sharing state) can implement it too:
``load()`` returns snapshot + tail, ``append()`` returns once records are durable and
ordered, ``subscribe()`` delivers every committed batch in offset order - including
the caller's own - so the owner can apply changes from one place in log order
(``AclPublisher`` in Kafka does the same: a DENY then ALLOW must never be seen
reversed).

:class:`DirectoryMetadataStore` is the embedded default on local disk::

    <dir>/.lock                                  fcntl.flock'ed by the single writer
    <dir>/00000000000000000000.log               segment: record batches, base offset 0
    <dir>/00000000000000001234.log               segment rolled at a snapshot
    <dir>/00000000000000001234-0000000000.checkpoint   snapshot, end offset 1234, epoch 0

Both kinds of file hold Kafka record batches, magic v2, CRC32C, uncompressed, no
producer id (like KRaft's metadata batches); each record has a null key and the
framed metadata record as value.  A snapshot is framed like KRaft's: a control batch
with a SnapshotHeaderRecord, data batches, and a control batch with a
SnapshotFooterRecord; a missing footer marks it incomplete.

Durability and group commit
---------------------------
``append()`` encodes its records into one batch (base offset patched later - it is
outside the CRC), queues it, and takes the write lock.  Whoever holds the lock writes
*all* queued batches with one ``write`` and one ``fsync`` in a worker thread, then
releases every caller whose batch was in that write.  Callers therefore return only
after their data is on stable storage, and a burst of N concurrent appends costs
about one fsync instead of N.  The flush is shielded from cancellation: once bytes
may be on disk the in-memory offsets must follow.  An ``OSError`` while writing puts
the store in the BROKEN state (after a failed fsync the page cache cannot be
trusted); every later call raises :class:`MetadataStoreBrokenError` until
:meth:`MetadataStore.resume_writes` succeeds: it cuts the active segment back to the
last acknowledged byte (fsynced), so the failed append is not applied, and reopens it
(the gateway calls it every few seconds while the store is broken).  The writer of the
failed append was told it failed, and it did.

Each group commit is followed, at most once a second, by the *acknowledged-offset
file* (``<dir>/acknowledged``: the next offset and the active segment), rewritten with
``.part`` + fsync + rename: evidence, independent of the segments, of how far the log
reached.  A log that ends before it (a deleted or cut segment) is refused at start-up.

Recovery
--------
At ``load()`` every retained segment is scanned batch by batch: length, magic, CRC,
base offset continuity, record framing.  A bad batch at the very end of the last
segment, with no valid batch after it and not below the acknowledged offset, is a
torn tail (writes never acknowledged): the file is truncated to the last good batch
and fsynced, with a WARNING naming the bytes cut, the file position and the log
offset.  Anything else unreadable is *damage* to acknowledged records: a bad batch
with a valid one after it, a bad batch below the acknowledged offset, a gap between
segments, a log ending before the acknowledged offset.  Damage the newest valid
snapshot covers is a WARNING (retention deletes the segment); any other raises
:class:`MetadataLogCorruptError` naming the file, the position, the offset and
``kgw metadata recover`` (:mod:`metadata.repair`), instead of silently dropping
acknowledged records - a lost DENY or ACL deletion would give back revoked access.

Snapshots are tried newest first; one that fails validation is renamed
``*.checkpoint.corrupt`` with a WARNING and the previous snapshot plus the log after it
is used.  That fallback always works because the log is retained back to the
*previous* snapshot: writing snapshot ``k`` deletes snapshots older than ``k-1`` and
segments that end at or before snapshot ``k-1``.

Snapshots are written to ``*.checkpoint.part``, fsynced, renamed, and the directory
fsynced; a new segment is rolled at the same time so old segments can be deleted
whole.  New files (segments, snapshots, the lock) are followed by a directory fsync.

This module holds the interface; :mod:`metadata.directory` the local backend (its files:
:mod:`metadata.directory_files`; shared by the workers of ``kgw run --workers N``:
:mod:`metadata.directory_shared`), :mod:`metadata.record_batch` and
:mod:`metadata.snapshots` the file formats.
"""

from __future__ import annotations

import abc
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import trio

from authz.authorizer import StoreUnavailableError
from metadata.records import MetadataRecord


logger = logging.getLogger("kgw.metadata.log")
_R = TypeVar("_R")


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


class MetadataLogError(Exception):
    """Base class for metadata-store failures."""


class MetadataStoreLockedError(MetadataLogError):
    """Another process holds the directory's lock file (only one writer may open it)."""


class MetadataLogCorruptError(MetadataLogError):
    """Acknowledged data is damaged or missing; the store refuses to guess."""


class MetadataStoreBrokenError(MetadataLogError):
    """A write or fsync failed earlier; restart to recover from what is on disk."""


class MetadataStoreClosedError(MetadataLogError):
    """The store was used before ``load()`` or after ``aclose()``."""


class MetadataStoreUnavailableError(MetadataLogError, StoreUnavailableError):
    """A shared backend could not make a write durable in time (cluster unreachable, no
    leader, too few in-sync replicas).  Retriable: the write is one atomic record batch, so
    it is either applied whole later, by every instance in log order, or not at all."""


class SubscriberLaggedError(MetadataLogError):
    """A subscriber fell more than its buffer behind; it must reload and resubscribe."""




# ---------------------------------------------------------------------------
# The store interface
# ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadedState:
    """What ``load()`` found: the newest usable snapshot and every record after it.

    Apply ``snapshot_records`` atomically as a whole, then ``log_records`` in order;
    ``log_records[i]`` has offset ``log_start_offset + i``.
    """

    snapshot_records: tuple[MetadataRecord, ...]
    log_start_offset: int
    """End offset of the snapshot (0 without one): the offset of ``log_records[0]``."""
    log_records: tuple[MetadataRecord, ...]
    last_offset: int
    """Offset of the last record in the state, -1 for an empty store."""

    def records(self) -> Iterator[MetadataRecord]:
        """Snapshot records then log records: the replay order."""
        yield from self.snapshot_records
        yield from self.log_records


@dataclass(frozen=True, slots=True)
class CommittedBatch:
    """Records made durable by one ``append()`` (ours or, for shared backends, a peer's)."""

    base_offset: int
    records: tuple[MetadataRecord, ...]
    end: int = -1
    """The batch's last offset when a backend numbers batches, not records (the Kafka
    backend: one Kafka message per append); -1: one offset per record."""

    @property
    def last_offset(self) -> int:
        return self.end if self.end >= 0 else self.base_offset + len(self.records) - 1


class Subscription:
    """An async iterator of :class:`CommittedBatch` in offset order.

    Iteration ends when the store closes.  A subscriber that falls more than its
    buffer behind gets :class:`SubscriberLaggedError` (and nothing after it) rather
    than holding the writer up or growing memory without bound.
    """

    def __init__(self, max_buffered_batches: int) -> None:
        self._send, self._receive = trio.open_memory_channel[CommittedBatch](max_buffered_batches)
        self.lagged = False

    def _offer(self, batch: CommittedBatch) -> bool:
        """Deliver without blocking; False once this subscription is finished."""
        try:
            self._send.send_nowait(batch)
        except trio.WouldBlock:
            self.lagged = True
            self._send.close()
            return False
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        return True

    def _finish(self) -> None:
        self._send.close()

    def close(self) -> None:
        """Stop receiving; the store drops this subscription on its next delivery."""
        self._receive.close()

    def __aiter__(self) -> AsyncIterator[CommittedBatch]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[CommittedBatch]:
        async for batch in self._receive:
            yield batch
        if self.lagged:
            raise SubscriberLaggedError(
                "subscriber fell behind the metadata log; reload the state and resubscribe"
            )


async def handed_over(fn: Callable[..., _R], *args: Any) -> _R:
    """``fn(*args)`` on a worker thread, its result held by the caller alone: Trio's worker
    thread keeps the result of its last job referenced until it next runs, and a loaded log
    (100k decoded records) kept alive that way cannot be freed once applied, so the memory of
    everything built after it cannot reuse it (issue 17)."""
    box: list[_R] = []
    await trio.to_thread.run_sync(lambda: box.append(fn(*args)))
    return box.pop()


class MetadataStore(abc.ABC):
    """A durable, totally ordered log of metadata records with snapshots.

    Contract (every backend):

    * ``load()`` is called once, first.  It returns the newest snapshot and every
      record after it.  Other methods raise :class:`MetadataStoreClosedError` before.
    * ``append(records)`` gives the records consecutive offsets, returns the offset of
      the last one, and returns only when they are durable (local: fsynced; a Kafka
      backend: acknowledged by the cluster).  Records of one call are never split
      or interleaved with another call's.
    * ``subscribe()`` delivers each committed batch once, in offset order, from the
      first append after the call - the caller's own appends included.
    * ``snapshot(records, through_offset=...)`` stores ``records`` as the full state
      as of ``through_offset`` (default: the last committed offset).  Pass
      ``through_offset`` when the owner's state may lag the log, or the snapshot
      would claim records the owner has not applied yet.
    * ``records_since_snapshot`` hints when a snapshot is worthwhile.
    * ``aclose()`` is idempotent; in-flight appends finish first.
    """

    #: True for a log several gateways write (the Kafka backend): the image then applies
    #: every batch, its own included, from ``subscribe()`` in log order, and a write is
    #: acknowledged once it is durable *and* applied locally (read your own writes).
    shared: bool = False

    @property
    def stale_since(self) -> float | None:
        """Unix time since which a shared backend could not confirm it follows the log end
        (None while it does, and always for a local backend)."""
        return None

    @property
    def broken(self) -> tuple[float, BaseException] | None:
        """(Unix time, cause) since a failed write stopped this store taking writes (a full
        disk, an I/O error); None while it takes them."""
        return None

    async def resume_writes(self) -> bool:
        """After a failed write: make the log hold exactly what was acknowledged and take
        writes again.  True when the store takes writes (now, or all along); False while the
        cause persists.  Safe to call at any time and repeatedly."""
        return True

    @abc.abstractmethod
    async def load(self) -> LoadedState: ...

    @abc.abstractmethod
    async def append(self, records: Sequence[MetadataRecord]) -> int: ...

    @abc.abstractmethod
    async def snapshot(
        self, records: Iterable[MetadataRecord], *, through_offset: int | None = None
    ) -> None: ...

    @abc.abstractmethod
    def subscribe(self, *, max_buffered_batches: int = 1024) -> Subscription: ...

    @property
    @abc.abstractmethod
    def last_offset(self) -> int:
        """Offset of the last committed record, -1 when empty."""

    @property
    @abc.abstractmethod
    def records_since_snapshot(self) -> int:
        """Committed records after the newest snapshot."""

    @abc.abstractmethod
    async def aclose(self) -> None: ...

    async def __aenter__(self) -> MetadataStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


