"""kgw's durable metadata log: the store ACLs, dynamic configs and SCRAM credentials live in.

Theory of operation
===================

State is a *log* of metadata records (:mod:`authz.metadata_records`) plus periodic
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
trusted); every later call raises :class:`MetadataStoreBrokenError` and a restart
recovers from disk.  The outcome of the failed append itself is unknown.

Recovery
--------
At ``load()`` every retained segment is scanned batch by batch: length, magic, CRC,
base offset continuity, record framing.  A problem in the *last* segment is a torn
or corrupt tail: the file is truncated to the last good batch and fsynced, with a
WARNING naming the bytes cut, the file position and the log offset.  Only
unacknowledged bytes can be torn (acknowledged ones were fsynced), so nothing
acknowledged is lost.  A problem in an earlier, sealed segment is real corruption and
raises :class:`MetadataLogCorruptError` instead of silently dropping data.

Snapshots are tried newest first; one that fails validation is renamed
``*.checkpoint.corrupt`` with a WARNING and the previous snapshot plus the log after it
is used.  That fallback always works because the log is retained back to the
*previous* snapshot: writing snapshot ``k`` deletes snapshots older than ``k-1`` and
segments that end at or before snapshot ``k-1``.

Snapshots are written to ``*.checkpoint.part``, fsynced, renamed, and the directory
fsynced; a new segment is rolled at the same time so old segments can be deleted
whole.  New files (segments, snapshots, the lock) are followed by a directory fsync.
"""

from __future__ import annotations

import abc
import enum
import errno
import logging
import os
import re
import struct
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import trio
from crc32c import crc32c

from authz.log_files import OS_FILES, OsFiles
from authz.metadata_records import MetadataRecord, MetadataRecordError, decode_record, encode_record

__all__ = [
    "CommittedBatch",
    "DirectoryMetadataStore",
    "LoadedState",
    "MetadataLogCorruptError",
    "MetadataLogError",
    "MetadataStore",
    "MetadataStoreBrokenError",
    "MetadataStoreClosedError",
    "MetadataStoreLockedError",
    "SubscriberLaggedError",
    "Subscription",
    "decode_batch",
    "encode_batch",
]

logger = logging.getLogger("kgw.authz.metadata_log")


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


class SubscriberLaggedError(MetadataLogError):
    """A subscriber fell more than its buffer behind; it must reload and resubscribe."""


class BatchFormatError(ValueError):
    """A record batch is torn, corrupt or not in the form kgw writes."""


# ---------------------------------------------------------------------------
# Record batches (magic v2), sans-IO
# ---------------------------------------------------------------------------

#: baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
#: lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch,
#: baseSequence, recordCount.
_BATCH_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
_BATCH_HEADER_SIZE: Final = _BATCH_HEADER.size  # 61
#: baseOffset + batchLength: the part not counted by batchLength.
_LOG_OVERHEAD: Final = 12
#: The CRC covers attributes .. end of batch.
_CRC_START: Final = 21
_MAGIC_V2: Final = 2
_CONTROL_FLAG: Final = 0x20
_COMPRESSION_MASK: Final = 0x07
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_CONTROL_KEY = struct.Struct(">hh")

#: ControlRecordType codes used in KRaft snapshots.
_SNAPSHOT_HEADER_TYPE: Final = 3
_SNAPSHOT_FOOTER_TYPE: Final = 4


def _zigzag_varint(value: int) -> bytes:
    """Signed varint as in Kafka record bodies (zig-zag, then LEB128)."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _read_zigzag(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    byte = buf[pos]
    pos += 1
    if byte < 0x80:
        return (byte >> 1) ^ -(byte & 1), pos
    result = byte & 0x7F
    shift = 7
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise BatchFormatError("varint longer than 10 bytes")


def _encode_record_entry(delta: int, key: bytes | None, value: bytes) -> bytes:
    body = b"".join(
        (
            b"\x00",  # attributes
            b"\x00",  # timestamp delta 0
            _zigzag_varint(delta),
            b"\x01" if key is None else _zigzag_varint(len(key)) + key,
            _zigzag_varint(len(value)),
            value,
            b"\x00",  # no headers
        )
    )
    return _zigzag_varint(len(body)) + body


def encode_batch(
    values: Sequence[bytes],
    *,
    base_offset: int = 0,
    timestamp_ms: int,
    epoch: int = 0,
    keys: Sequence[bytes | None] | None = None,
    control: bool = False,
) -> bytearray:
    """Build one uncompressed v2 record batch holding ``values`` (keys null by default).

    ``base_offset`` is outside the CRC, so a queued batch can be given its final
    offset later with :func:`set_base_offset`.
    """
    if not values:
        raise ValueError("a record batch needs at least one record")
    keys = keys if keys is not None else [None] * len(values)
    records = b"".join(
        _encode_record_entry(i, key, value) for i, (key, value) in enumerate(zip(keys, values))
    )
    count = len(values)
    header = bytearray(
        _BATCH_HEADER.pack(
            base_offset,
            _BATCH_HEADER_SIZE - _LOG_OVERHEAD + len(records),
            epoch,
            _MAGIC_V2,
            0,  # crc, filled in below
            _CONTROL_FLAG if control else 0,
            count - 1,
            timestamp_ms,
            timestamp_ms,
            -1,  # producer id
            -1,  # producer epoch
            -1,  # base sequence
            count,
        )
    )
    crc = crc32c(records, crc32c(header[_CRC_START:]))
    _UINT32.pack_into(header, 17, crc)
    header += records
    return header


def set_base_offset(batch: bytearray, base_offset: int) -> None:
    """Give an encoded batch its final base offset (does not affect the CRC)."""
    _INT64.pack_into(batch, 0, base_offset)


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    """One validated batch: where it starts, its offsets and its (key, value) records."""

    base_offset: int
    is_control: bool
    entries: list[tuple[bytes | None, bytes | None]]
    size: int

    @property
    def next_offset(self) -> int:
        return self.base_offset + len(self.entries)


def _decode_records(
    buf: bytes | memoryview, pos: int, end: int, count: int
) -> list[tuple[bytes | None, bytes | None]]:
    entries: list[tuple[bytes | None, bytes | None]] = []
    try:
        for expected_delta in range(count):
            length, pos = _read_zigzag(buf, pos)
            record_end = pos + length
            pos += 1  # attributes
            _ts_delta, pos = _read_zigzag(buf, pos)
            delta, pos = _read_zigzag(buf, pos)
            if delta != expected_delta:
                raise BatchFormatError(f"record offset delta {delta}, expected {expected_delta}")
            key_len, pos = _read_zigzag(buf, pos)
            key = None if key_len < 0 else bytes(buf[pos : pos + key_len])
            pos += max(key_len, 0)
            value_len, pos = _read_zigzag(buf, pos)
            value = None if value_len < 0 else bytes(buf[pos : pos + value_len])
            pos += max(value_len, 0)
            headers, pos = _read_zigzag(buf, pos)
            for _ in range(headers):
                for _part in range(2):
                    part_len, pos = _read_zigzag(buf, pos)
                    pos += max(part_len, 0)
            if pos != record_end:
                raise BatchFormatError("record length does not match its contents")
            entries.append((key, value))
    except IndexError:
        raise BatchFormatError("record runs past the end of its batch") from None
    if pos != end:
        raise BatchFormatError(f"{end - pos} byte(s) after the last record of the batch")
    return entries


def decode_batch(buf: bytes | memoryview, pos: int, expected_base_offset: int) -> DecodedBatch:
    """Validate and decode the batch at ``pos``.

    :raises BatchFormatError: short header, bad length, short batch, wrong magic,
        CRC mismatch, unexpected base offset, compression, or malformed records.
    """
    remaining = len(buf) - pos
    if remaining < _BATCH_HEADER_SIZE:
        raise BatchFormatError(f"short batch header ({remaining} of {_BATCH_HEADER_SIZE} bytes)")
    (base_offset, batch_length, _epoch, magic, crc, attributes, last_delta,
     _base_ts, _max_ts, _pid, _pepoch, _bseq, count) = _BATCH_HEADER.unpack_from(buf, pos)  # fmt: skip
    if batch_length < _BATCH_HEADER_SIZE - _LOG_OVERHEAD:
        raise BatchFormatError(f"bad batch length {batch_length}")
    size = _LOG_OVERHEAD + batch_length
    if size > remaining:
        raise BatchFormatError(f"short batch ({remaining} of {size} bytes present)")
    if magic != _MAGIC_V2:
        raise BatchFormatError(f"magic byte {magic}, expected {_MAGIC_V2}")
    end = pos + size
    actual_crc = crc32c(memoryview(buf)[pos + _CRC_START : end])
    if actual_crc != crc:
        raise BatchFormatError(f"CRC32C mismatch (stored {crc:#010x}, computed {actual_crc:#010x})")
    if base_offset != expected_base_offset:
        raise BatchFormatError(f"base offset {base_offset}, expected {expected_base_offset}")
    if attributes & _COMPRESSION_MASK:
        raise BatchFormatError(f"compressed batches are not supported (attributes {attributes:#x})")
    if count < 1 or last_delta != count - 1:
        raise BatchFormatError(f"record count {count} disagrees with last offset delta {last_delta}")
    entries = _decode_records(buf, pos + _BATCH_HEADER_SIZE, end, count)
    return DecodedBatch(base_offset, bool(attributes & _CONTROL_FLAG), entries, size)


@dataclass(frozen=True, slots=True)
class ScanResult:
    """The good prefix of a file of batches, and why scanning stopped early (if it did)."""

    batches: list[DecodedBatch]
    valid_bytes: int
    problem: str | None
    next_offset: int


def scan_batches(buf: bytes | memoryview, base_offset: int) -> ScanResult:
    """Decode consecutive batches starting at ``base_offset`` until the end or a bad one."""
    batches: list[DecodedBatch] = []
    pos = 0
    offset = base_offset
    while pos < len(buf):
        try:
            batch = decode_batch(buf, pos, offset)
        except BatchFormatError as exc:
            return ScanResult(batches, pos, str(exc), offset)
        batches.append(batch)
        pos += batch.size
        offset = batch.next_offset
    return ScanResult(batches, pos, None, offset)


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

    @property
    def last_offset(self) -> int:
        return self.base_offset + len(self.records) - 1


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


# ---------------------------------------------------------------------------
# File names and small blocking helpers (run in worker threads)
# ---------------------------------------------------------------------------

_SEGMENT_RE: Final = re.compile(r"^(\d{20})\.log$")
_SNAPSHOT_RE: Final = re.compile(r"^(\d{20})-(\d{10})\.checkpoint$")
_LOCK_NAME: Final = ".lock"
_PART_SUFFIX: Final = ".part"
_CORRUPT_SUFFIX: Final = ".corrupt"
#: Records per data batch in a snapshot; keeps batches around 100 KiB for ACLs.
_SNAPSHOT_BATCH_RECORDS: Final = 1000


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


def _decode_values(values: Iterable[bytes | None], where: str) -> list[MetadataRecord]:
    records = []
    for value in values:
        if value is None:
            raise MetadataLogCorruptError(f"{where}: metadata record with a null value")
        try:
            records.append(decode_record(value))
        except MetadataRecordError as exc:
            raise MetadataLogCorruptError(f"{where}: undecodable metadata record: {exc}") from exc
    return records


# ---------------------------------------------------------------------------
# Snapshot files
# ---------------------------------------------------------------------------


def _snapshot_header_value(last_contained_timestamp_ms: int) -> bytes:
    # SnapshotHeaderRecord v0: Version int16, LastContainedLogTimestamp int64, no tags.
    return struct.pack(">hq", 0, last_contained_timestamp_ms) + b"\x00"


def _snapshot_footer_value() -> bytes:
    # SnapshotFooterRecord v0: Version int16, no tags.
    return struct.pack(">h", 0) + b"\x00"


def _control_key(record_type: int) -> bytes:
    return _CONTROL_KEY.pack(0, record_type)


def encode_snapshot(records: Sequence[MetadataRecord], *, epoch: int, timestamp_ms: int) -> bytes:
    """A whole snapshot file: header control batch, data batches, footer control batch."""
    chunks = [
        encode_batch(
            [_snapshot_header_value(timestamp_ms)],
            timestamp_ms=timestamp_ms,
            epoch=epoch,
            keys=[_control_key(_SNAPSHOT_HEADER_TYPE)],
            control=True,
        )
    ]
    offset = 1
    for start in range(0, len(records), _SNAPSHOT_BATCH_RECORDS):
        values = [encode_record(r) for r in records[start : start + _SNAPSHOT_BATCH_RECORDS]]
        chunks.append(encode_batch(values, base_offset=offset, timestamp_ms=timestamp_ms, epoch=epoch))
        offset += len(values)
    chunks.append(
        encode_batch(
            [_snapshot_footer_value()],
            base_offset=offset,
            timestamp_ms=timestamp_ms,
            epoch=epoch,
            keys=[_control_key(_SNAPSHOT_FOOTER_TYPE)],
            control=True,
        )
    )
    return b"".join(chunks)


def _control_type(batch: DecodedBatch) -> int | None:
    if not batch.is_control or len(batch.entries) != 1:
        return None
    key = batch.entries[0][0]
    if key is None or len(key) != _CONTROL_KEY.size:
        return None
    return _CONTROL_KEY.unpack(key)[1]


def decode_snapshot(data: bytes, name: str) -> list[MetadataRecord]:
    """Validate a snapshot file and return its records.

    :raises MetadataLogCorruptError: torn, CRC mismatch, or header/footer missing.
    """
    scan = scan_batches(data, 0)
    if scan.problem is not None:
        raise MetadataLogCorruptError(f"snapshot {name}: {scan.problem} at byte {scan.valid_bytes}")
    batches = scan.batches
    if len(batches) < 2 or _control_type(batches[0]) != _SNAPSHOT_HEADER_TYPE:
        raise MetadataLogCorruptError(f"snapshot {name}: does not start with a snapshot header")
    if _control_type(batches[-1]) != _SNAPSHOT_FOOTER_TYPE:
        raise MetadataLogCorruptError(f"snapshot {name}: no snapshot footer (incomplete)")
    records: list[MetadataRecord] = []
    for batch in batches[1:-1]:
        if batch.is_control:
            continue
        records.extend(_decode_values((value for _, value in batch.entries), f"snapshot {name}"))
    return records


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


def _list_dir(files: OsFiles, path: Path) -> tuple[list[_Segment], list[_Snapshot]]:
    segments: list[_Segment] = []
    snapshots: list[_Snapshot] = []
    for name in files.listdir(path):
        entry = path / name
        if entry.name.endswith(_PART_SUFFIX):
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


def _scan_segment(files: OsFiles, segment: _Segment, is_last: bool) -> None:
    data = files.read_bytes(segment.path)
    scan = scan_batches(data, segment.base_offset)
    if scan.problem is not None:
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
            records.extend(_decode_values(values, f"log segment {segment.path}"))
            expected = batch.next_offset
    return records


@dataclass(slots=True)
class _Recovered:
    state: LoadedState
    segments: list[_Segment]
    snapshots: list[_Snapshot]
    next_offset: int


def _choose_snapshot(
    files: OsFiles, segments: list[_Segment], snapshots: list[_Snapshot]
) -> tuple[list[MetadataRecord], int, list[MetadataRecord], list[_Snapshot]]:
    """Newest valid snapshot + log after it; corrupt snapshots are set aside."""
    candidates = list(reversed(snapshots))
    while candidates:
        snap = candidates[0]
        try:
            snap_records = decode_snapshot(files.read_bytes(snap.path), snap.path.name)
        except MetadataLogCorruptError as exc:
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


def _recover(files: OsFiles, path: Path) -> _Recovered:
    segments, snapshots = _list_dir(files, path)
    for index, segment in enumerate(segments):
        _scan_segment(files, segment, is_last=index == len(segments) - 1)
    snap_records, start, log_records, snapshots = _choose_snapshot(files, segments, snapshots)
    log_end = segments[-1].next_offset if segments else 0
    next_offset = max(start + len(log_records), log_end)
    state = LoadedState(tuple(snap_records), start, tuple(log_records), next_offset - 1)
    return _Recovered(state, segments, snapshots, next_offset)


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
        data = encode_snapshot(records, epoch=self._epoch, timestamp_ms=_now_ms())
        final = self._path / _snapshot_name(end_offset, self._epoch)
        part = final.with_name(final.name + _PART_SUFFIX)
        files = self._files
        fd = files.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            _write_and_fsync(files, fd, data)
        finally:
            files.close(fd)
        files.rename(part, final)
        files.fsync_dir(self._path)
        self._snapshots.append(_Snapshot(end_offset, self._epoch, final))
        if self._segments[-1].next_offset > self._segments[-1].base_offset:
            self._roll_segment_blocking()
        self._apply_retention()

    def _apply_retention(self) -> None:
        """Keep the newest two snapshots and the log back to the older of them."""
        if len(self._snapshots) < 2:
            return
        keep_from = self._snapshots[-2].end_offset
        for old in self._snapshots[:-2]:
            self._files.unlink(old.path)
        self._snapshots = self._snapshots[-2:]
        while len(self._segments) > 1 and self._segments[1].base_offset <= keep_from:
            self._files.unlink(self._segments.pop(0).path)
        self._files.fsync_dir(self._path)


def snapshot_every(records_since_snapshot: int, *, threshold: int = 10_000) -> bool:
    """A simple policy for owners: snapshot once ``threshold`` records have accumulated."""
    return records_since_snapshot >= max(threshold, 1)
