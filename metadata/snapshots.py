"""KRaft-style snapshot files: a SnapshotHeaderRecord control batch, data batches of
metadata records, a SnapshotFooterRecord control batch (KIP-630); a missing footer marks
the snapshot incomplete.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Final


from metadata.records import MetadataRecord, decode_record, encode_record
from metadata.record_codec import MetadataRecordError
from metadata.record_batch import CONTROL_KEY, DecodedBatch, encode_batch, scan_batches
from metadata.store import MetadataLogCorruptError


#: ControlRecordType codes used in KRaft snapshots.
_SNAPSHOT_HEADER_TYPE: Final = 3
_SNAPSHOT_FOOTER_TYPE: Final = 4
#: Records per data batch in a snapshot; keeps batches around 100 KiB for ACLs.
_SNAPSHOT_BATCH_RECORDS: Final = 1000


# ---------------------------------------------------------------------------
def decode_values(values: Iterable[bytes | None], where: str) -> list[MetadataRecord]:
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
    return CONTROL_KEY.pack(0, record_type)


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
    if key is None or len(key) != CONTROL_KEY.size:
        return None
    return int(CONTROL_KEY.unpack(key)[1])


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
        records.extend(decode_values((value for _, value in batch.entries), f"snapshot {name}"))
    return records


