"""Tests for metadata.directory (the directory store) and metadata.shell."""

from __future__ import annotations

import datetime
import io
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import pytest
import trio
import trio.testing
from kio.records.readers import read_batch
from kio.records.schema import NewRecordBatch, Record, RecordHeader
from kio.records.writers import write_batch
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

import metadata.directory as metadata_log
from metadata.directory import DirectoryMetadataStore
from metadata.record_batch import scan_batches
from metadata.store import LoadedState, MetadataLogCorruptError, MetadataStoreBrokenError, MetadataStoreLockedError
from metadata.record_batch import BatchFormatError, decode_batch
from metadata.records import AccessControlEntryRecord, ConfigRecord, RemoveAccessControlEntryRecord, decode_record, encode_record
from metadata.shell import dump_state, kafka_uuid_str, render

REPO_ROOT = Path(__file__).resolve().parents[3]
SEGMENT0 = "00000000000000000000.log"


def acl(n: int) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(
        id=uuid.UUID(int=n + 1),
        resource_type=2,
        resource_name=f"topic-{n}",
        pattern_type=3,
        principal=f"User:u{n}",
        host="*",
        operation=3,
        permission_type=3,
    )


async def open_store(path: Path) -> tuple[DirectoryMetadataStore, LoadedState]:
    store = DirectoryMetadataStore(path)
    state = await store.load()
    return store, state


async def reload(path: Path) -> LoadedState:
    store, state = await open_store(path)
    await store.aclose()
    return state


async def write_batches(path: Path, sizes: list[int]) -> list[AccessControlEntryRecord]:
    """One append per size; returns every record written, in order."""
    written: list[AccessControlEntryRecord] = []
    async with DirectoryMetadataStore(path) as store:
        await store.load()
        for size in sizes:
            batch = [acl(len(written) + i) for i in range(size)]
            await store.append(batch)
            written += batch
    return written


# -- basic behaviour ----------------------------------------------------------


async def test_empty_store_loads_empty(tmp_path: Path) -> None:
    state = await reload(tmp_path / "meta")
    assert state == LoadedState((), 0, (), -1)
    assert (tmp_path / "meta" / SEGMENT0).exists()


async def test_append_returns_last_offset_and_survives_reopen(tmp_path: Path) -> None:
    async with DirectoryMetadataStore(tmp_path) as store:
        await store.load()
        assert await store.append([acl(0), acl(1), acl(2)]) == 2
        assert await store.append([RemoveAccessControlEntryRecord(id=acl(1).id)]) == 3
        assert store.last_offset == 3
        assert store.records_since_snapshot == 4
        with pytest.raises(ValueError, match="at least one record"):
            await store.append([])
    state = await reload(tmp_path)
    assert state.log_records == (acl(0), acl(1), acl(2), RemoveAccessControlEntryRecord(id=acl(1).id))
    assert state.last_offset == 3


async def test_segment_is_readable_by_kio_and_kio_batches_by_us(tmp_path: Path) -> None:
    await write_batches(tmp_path, [2, 1])
    data = (tmp_path / SEGMENT0).read_bytes()
    first, size = read_batch(data, 0)
    second, _ = read_batch(data, size)
    assert [r.offset for r in first.records + second.records] == [0, 1, 2]
    assert all(r.key is None for r in first.records)
    assert decode_record(second.records[0].value) == acl(2)  # type: ignore[arg-type]

    now = TZAwareMicros.parse(datetime.datetime.now(datetime.UTC))
    kio_batch = NewRecordBatch(
        producer_id=i64(-1),
        producer_epoch=i16(-1),
        base_sequence=i32(-1),
        attributes=i16(0),
        records=tuple(
            Record(attributes=i8(0), timestamp=now, offset=i64(7 + i), key=None,
                   value=encode_record(acl(i)), headers=())
            for i in range(2)
        ),
    )
    buffer = io.BytesIO()
    write_batch(buffer, kio_batch)
    decoded = decode_batch(buffer.getvalue(), 0, 7)
    assert [decode_record(v) for _, v in decoded.entries] == [acl(0), acl(1)]  # type: ignore[arg-type]



def test_kio_batches_of_every_record_shape_decode_alike() -> None:
    """The record reader's one-byte varint shortcuts against kio's writer: keys and values of
    every length class (none, empty, one-byte and multi-byte lengths), headers, timestamps far
    from the base and offset deltas past 63 (two-byte varints)."""
    now = TZAwareMicros.parse(datetime.datetime.now(datetime.UTC))
    later = TZAwareMicros.parse(datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=3))
    sizes = [None, 0, 1, 63, 64, 200, 9000]
    records = []
    for i in range(150):
        key = None if sizes[i % 7] is None else bytes([i % 251]) * sizes[i % 7]
        value = None if sizes[(i // 7) % 7] is None else bytes([i % 13]) * sizes[(i // 7) % 7]
        headers = tuple(RecordHeader(key=b"h" * (i % 70), value=None if i % 2 else b"v" * i) for _ in range(i % 3))
        records.append(Record(attributes=i8(0), timestamp=later if i % 5 == 0 else now, offset=i64(40 + i), key=key,
                              value=value, headers=headers))
    buffer = io.BytesIO()
    write_batch(buffer, NewRecordBatch(producer_id=i64(-1), producer_epoch=i16(-1), base_sequence=i32(-1),
                                       attributes=i16(0), records=tuple(records)))
    decoded = decode_batch(buffer.getvalue(), 0, 40)
    assert decoded.entries == [(r.key, r.value) for r in records]



@pytest.mark.parametrize("swap", [1, 70])  # one-byte and two-byte offset deltas
def test_a_record_out_of_offset_order_is_refused(swap: int) -> None:
    now = TZAwareMicros.parse(datetime.datetime.now(datetime.UTC))
    offsets = list(range(100))
    offsets[swap], offsets[swap + 1] = offsets[swap + 1], offsets[swap]
    buffer = io.BytesIO()
    write_batch(buffer, NewRecordBatch(producer_id=i64(-1), producer_epoch=i16(-1), base_sequence=i32(-1),
                                       attributes=i16(0), records=tuple(
        Record(attributes=i8(0), timestamp=now, offset=i64(o), key=None, value=b"v", headers=()) for o in offsets)))
    with pytest.raises(BatchFormatError, match=f"record offset delta {swap + 1}, expected {swap}"):
        decode_batch(buffer.getvalue(), 0, 0)


# -- recovery -----------------------------------------------------------------


async def test_torn_tail_is_truncated_at_every_byte_of_the_last_batch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = tmp_path / "source"
    written = await write_batches(source, [3, 1, 2])
    data = (source / SEGMENT0).read_bytes()
    last_batch_start = len(data) - sum(b.size for b in scan_batches(data, 0).batches[2:])
    for cut in range(last_batch_start, len(data)):
        directory = tmp_path / f"cut{cut}"
        directory.mkdir()
        (directory / SEGMENT0).write_bytes(data[:cut])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="kgw.metadata.log"):
            store, state = await open_store(directory)
        assert state.log_records == tuple(written[:4]), cut
        torn = cut - last_batch_start
        if torn:
            assert f"cut {torn} byte(s) at file position {last_batch_start} (log offset 4)" in caplog.text
        else:
            assert "truncating" not in caplog.text
        assert (directory / SEGMENT0).stat().st_size == last_batch_start
        # The store keeps working after the truncation.
        assert await store.append([acl(99)]) == 4
        await store.aclose()
        assert (await reload(directory)).log_records == (*written[:4], acl(99))


def _torn(batch: bytes, where: str) -> bytes:
    """``batch`` as a crash may leave it: a flipped bit in its CRC, records, magic or length."""
    data = bytearray(batch)
    position = {"crc": 17, "records": len(data) - 5, "magic": 16, "length": 8}[where]
    data[position] ^= 0x40
    return bytes(data)


@pytest.mark.parametrize("where", ["crc", "records", "magic", "length"])
async def test_a_torn_tail_beyond_what_was_acknowledged_is_cut(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, where: str
) -> None:
    """A crash mid-write leaves a damaged batch at the very end, never acknowledged: cut."""
    written = await write_batches(tmp_path, [2, 2])
    segment = tmp_path / SEGMENT0
    end = len(segment.read_bytes())
    from metadata.record_batch import encode_batch, set_base_offset
    batch = encode_batch([encode_record(acl(9))], timestamp_ms=1, epoch=0)
    set_base_offset(batch, 4)
    with segment.open("ab") as f:
        f.write(_torn(bytes(batch), where))
    with caplog.at_level(logging.WARNING, logger="kgw.metadata.log"):
        state = await reload(tmp_path)
    assert state.log_records == tuple(written)
    assert f"at file position {end} (log offset 4)" in caplog.text


@pytest.mark.parametrize("where", ["crc", "records", "magic", "length"])
async def test_damage_to_the_last_acknowledged_batch_refuses_to_start(tmp_path: Path, where: str) -> None:
    """The same bytes inside what was acknowledged are damage: cutting them would silently drop
    acknowledged records (a DENY, an ACL deletion), so start-up refuses and names the way out."""
    await write_batches(tmp_path, [2, 2])
    segment = tmp_path / SEGMENT0
    data = segment.read_bytes()
    start = scan_batches(data, 0).batches[0].size
    segment.write_bytes(data[:start] + _torn(data[start:], where))
    with pytest.raises(MetadataLogCorruptError, match="kgw metadata recover --data-dir"):
        await reload(tmp_path)
    assert segment.read_bytes() != data[:start]  # nothing was cut


@pytest.mark.parametrize("at", [0.1, 0.5, 0.9])
async def test_damage_in_the_middle_of_the_active_segment_refuses_to_start(tmp_path: Path, at: float) -> None:
    """The finding: one byte flipped at 50 % of the active segment silently dropped 25 of 350
    acknowledged ACLs (at 10 %: 45) and /readyz said 200.  Valid batches follow the damage:
    it is not a torn tail."""
    written = await write_batches(tmp_path, [1] * 50)
    segment = tmp_path / SEGMENT0
    data = bytearray(segment.read_bytes())
    data[int(len(data) * at)] ^= 0x01
    segment.write_bytes(bytes(data))
    with pytest.raises(MetadataLogCorruptError, match=r"is damaged at file position \d+ \(log offset \d+\).*"
                                                      r"a valid batch follows.*kgw metadata recover"):
        await reload(tmp_path)
    assert len(segment.read_bytes()) == len(data)  # nothing was cut
    assert len(written) == 50


async def test_a_deleted_active_segment_refuses_to_start(tmp_path: Path) -> None:
    """The finding: deleting the active segment lost 50 acknowledged ACLs with no message."""
    async with DirectoryMetadataStore(tmp_path) as store:
        await store.load()
        await store.append([acl(i) for i in range(3)])
        await store.snapshot([acl(i) for i in range(3)])  # rolls segment 3
        for i in range(3, 8):
            await store.append([acl(i)])
    (tmp_path / "00000000000000000003.log").unlink()
    with pytest.raises(MetadataLogCorruptError, match=r"ends at offset 2 but offsets up to 7 were acknowledged.*"
                                                      r"segment 00000000000000000003.log is missing"):
        await reload(tmp_path)


async def test_evidence_of_acknowledged_records_is_kept_at_most_a_second_behind(tmp_path: Path, monkeypatch) -> None:
    """The acknowledged-offset file costs one extra fsync a second at most: written at start-up,
    at each roll, at a clean close, and after a group commit once a second has passed."""
    import time as time_module
    clock = [1000.0]
    monkeypatch.setattr(time_module, "monotonic", lambda: clock[0])
    store = DirectoryMetadataStore(tmp_path)
    await store.load()
    marker = tmp_path / "acknowledged"
    assert marker.read_text() == "kgw-acknowledged v1 next=0 segment=0\n"
    await store.append([acl(0)])
    assert "next=0" in marker.read_text()  # within the second: not written again
    clock[0] += 1.5
    await store.append([acl(1)])
    assert "next=2" in marker.read_text()
    await store.append([acl(2)])
    await store.aclose()
    assert marker.read_text() == "kgw-acknowledged v1 next=3 segment=0\n"


async def test_garbage_after_the_last_batch_is_cut(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    written = await write_batches(tmp_path, [2])
    with (tmp_path / SEGMENT0).open("ab") as f:
        f.write(b"\x00" * 100)
    with caplog.at_level(logging.WARNING, logger="kgw.metadata.log"):
        state = await reload(tmp_path)
    assert state.log_records == tuple(written)
    assert "cut 100 byte(s)" in caplog.text


async def test_corruption_in_a_sealed_segment_a_snapshot_covers_is_reported_not_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The finding: a corrupt sealed segment stopped start-up even when a newer valid snapshot
    covered it.  Start from the snapshot and the log after it; report the segment."""
    async with DirectoryMetadataStore(tmp_path) as store:
        await store.load()
        await store.append([acl(0), acl(1)])
        await store.snapshot([acl(0), acl(1)])  # rolls a new segment; segment 0 is sealed
        await store.append([acl(2)])
    segment = tmp_path / SEGMENT0
    data = bytearray(segment.read_bytes())
    data[-3] ^= 0xFF
    segment.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="kgw.metadata.log"):
        state = await reload(tmp_path)
    assert (state.snapshot_records, state.log_records) == ((acl(0), acl(1)), (acl(2),))
    assert "is damaged at file position" in caplog.text and "covers it" in caplog.text


async def test_corruption_in_a_sealed_segment_no_snapshot_covers_is_an_error(tmp_path: Path) -> None:
    async with DirectoryMetadataStore(tmp_path) as store:
        await store.load()
        await store.append([acl(0)])
        await store.snapshot([acl(0)])  # end 1: rolls segment 1
        await store.append([acl(1), acl(2)])
        await store.snapshot([acl(0), acl(1), acl(2)])  # end 3: segment 1 is sealed
        await store.append([acl(3)])
    sealed = tmp_path / "00000000000000000001.log"
    data = bytearray(sealed.read_bytes())
    data[-3] ^= 0xFF
    sealed.write_bytes(bytes(data))
    newest = tmp_path / "00000000000000000003-0000000000.checkpoint"
    newest.write_bytes(newest.read_bytes()[:-10])  # the snapshot that covers it is unusable
    with pytest.raises(MetadataLogCorruptError, match="00000000000000000001.log is damaged"):
        await reload(tmp_path)


# -- snapshots ----------------------------------------------------------------


async def test_snapshot_then_replay(tmp_path: Path) -> None:
    async with DirectoryMetadataStore(tmp_path) as store:
        await store.load()
        await store.append([acl(i) for i in range(10)])
        await store.append([RemoveAccessControlEntryRecord(id=acl(3).id)])
        full_state = [acl(i) for i in range(10) if i != 3]
        await store.snapshot(full_state)
        assert store.records_since_snapshot == 0
        await store.append([acl(10), acl(11)])
        assert store.records_since_snapshot == 2
    names = sorted(p.name for p in tmp_path.iterdir())
    assert "00000000000000000011-0000000000.checkpoint" in names
    assert "00000000000000000011.log" in names
    state = await reload(tmp_path)
    assert state.snapshot_records == tuple(full_state)
    assert state.log_start_offset == 11
    assert state.log_records == (acl(10), acl(11))
    assert state.last_offset == 12


async def test_snapshot_file_is_kraft_framed(tmp_path: Path) -> None:
    async with DirectoryMetadataStore(tmp_path) as store:
        await store.load()
        await store.append([acl(0)])
        await store.snapshot([acl(0)])
    data = (tmp_path / "00000000000000000001-0000000000.checkpoint").read_bytes()
    batches = scan_batches(data, 0).batches
    assert [b.is_control for b in batches] == [True, False, True]
    assert batches[0].entries[0][0] == b"\x00\x00\x00\x03"  # control key v0, SNAPSHOT_HEADER
    assert batches[-1].entries[0] == (b"\x00\x00\x00\x04", b"\x00\x00\x00")  # footer v0


async def test_snapshot_through_offset_keeps_later_records_in_the_log(tmp_path: Path) -> None:
    async with DirectoryMetadataStore(tmp_path) as store:
        await store.load()
        await store.append([acl(0), acl(1)])
        await store.append([acl(2)])
        await store.snapshot([acl(0), acl(1)], through_offset=1)
        with pytest.raises(ValueError, match="outside the committed log"):
            await store.snapshot([], through_offset=7)
    state = await reload(tmp_path)
    assert (state.snapshot_records, state.log_start_offset, state.log_records) == ((acl(0), acl(1)), 2, (acl(2),))


async def test_retention_keeps_two_snapshots_and_the_log_since_the_older(tmp_path: Path) -> None:
    async with DirectoryMetadataStore(tmp_path) as store:
        await store.load()
        for round_ in range(4):
            await store.append([acl(round_)])
            await store.snapshot([acl(i) for i in range(round_ + 1)])
    names = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".") and p.name != "acknowledged")
    # Snapshots 3 and 4 are kept; the log is needed from offset 3 (the older one) on.
    assert names == [
        "00000000000000000003-0000000000.checkpoint",
        "00000000000000000003.log",
        "00000000000000000004-0000000000.checkpoint",
        "00000000000000000004.log",
    ]


async def test_corrupt_snapshot_falls_back_to_previous_snapshot_and_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with DirectoryMetadataStore(tmp_path) as store:
        await store.load()
        await store.append([acl(0), acl(1)])
        await store.snapshot([acl(0), acl(1)])
        await store.append([RemoveAccessControlEntryRecord(id=acl(0).id), acl(2)])
        await store.snapshot([acl(1), acl(2)])
        await store.append([acl(3)])
    newest = tmp_path / "00000000000000000004-0000000000.checkpoint"
    data = bytearray(newest.read_bytes())
    data[80] ^= 0x01
    newest.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="kgw.metadata.log"):
        state = await reload(tmp_path)
    assert "falling back to the previous snapshot" in caplog.text
    assert state.snapshot_records == (acl(0), acl(1))
    assert state.log_records == (RemoveAccessControlEntryRecord(id=acl(0).id), acl(2), acl(3))
    assert state.last_offset == 4
    assert (tmp_path / (newest.name + ".corrupt")).exists()
    assert dump_state(state) == dump_state(LoadedState((), 0, (acl(1), acl(2), acl(3)), 2))


async def test_snapshot_without_footer_is_rejected(tmp_path: Path) -> None:
    async with DirectoryMetadataStore(tmp_path) as store:
        await store.load()
        await store.append([acl(0)])
        await store.snapshot([acl(0)])
    snap = tmp_path / "00000000000000000001-0000000000.checkpoint"
    data = snap.read_bytes()
    footer = scan_batches(data, 0).batches[-1].size
    snap.write_bytes(data[:-footer])  # a clean batch boundary: only the footer shows it
    state = await reload(tmp_path)  # falls back to "no snapshot": the whole log
    assert (state.snapshot_records, state.log_records) == ((), (acl(0),))


async def test_leftover_partial_snapshot_is_removed(tmp_path: Path) -> None:
    await write_batches(tmp_path, [1])
    part = tmp_path / "00000000000000000001-0000000000.checkpoint.part"
    part.write_bytes(b"half a snapshot")
    state = await reload(tmp_path)
    assert state.log_records == (acl(0),)
    assert not part.exists()


# -- locking, group commit, subscriptions, failures -----------------------------


async def test_second_writer_is_refused(tmp_path: Path) -> None:
    first, _ = await open_store(tmp_path)
    with pytest.raises(MetadataStoreLockedError, match=rf"locked by another kgw process \(pid {os.getpid()}\)"):
        await DirectoryMetadataStore(tmp_path).load()
    await first.aclose()
    await reload(tmp_path)  # released on close


@pytest.fixture
def gated_writes(monkeypatch: pytest.MonkeyPatch) -> tuple[list[int], threading.Event]:
    """Record each group write's size; the first write waits for the gate to open."""
    writes: list[int] = []
    gate = threading.Event()
    real_write = metadata_log.write_and_fsync

    def gated_write(files, fd: int, data: bytes) -> None:
        writes.append(len(data))
        if len(writes) == 1:
            gate.wait(10)
        real_write(files, fd, data)

    monkeypatch.setattr(metadata_log, "write_and_fsync", gated_write)
    return writes, gate


async def test_concurrent_appends_share_one_fsync(
    tmp_path: Path, gated_writes: tuple[list[int], threading.Event]
) -> None:
    writes, gate = gated_writes
    results: dict[int, int] = {}
    async with DirectoryMetadataStore(tmp_path) as store:
        await store.load()

        async def appender(n: int) -> None:
            results[n] = await store.append([acl(2 * n), acl(2 * n + 1)])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(appender, 0)
            await trio.testing.wait_all_tasks_blocked()  # first write is in flight
            for n in range(1, 50):
                nursery.start_soon(appender, n)
            await trio.testing.wait_all_tasks_blocked()  # 49 callers queued behind it
            assert results == {}
            gate.set()
    # The 49 callers that queued during the first write share the second one.
    assert len(writes) == 2
    on_disk = scan_batches((tmp_path / SEGMENT0).read_bytes(), 0)
    assert len(on_disk.batches) == 50 and on_disk.valid_bytes == sum(writes)  # one batch per call
    assert sorted(results.values()) == list(range(1, 100, 2))
    state = await reload(tmp_path)
    for n, last in results.items():  # each call's records are adjacent and in order
        assert state.log_records[last - 1 : last + 1] == (acl(2 * n), acl(2 * n + 1))


async def test_cancelled_queued_append_is_not_written(
    tmp_path: Path, gated_writes: tuple[list[int], threading.Event]
) -> None:
    writes, gate = gated_writes
    async with DirectoryMetadataStore(tmp_path) as store:
        await store.load()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.append, [acl(0)])
            await trio.testing.wait_all_tasks_blocked()
            with trio.move_on_after(0.05) as scope:
                await store.append([acl(1)])  # queued behind the gated write
            assert scope.cancelled_caught
            gate.set()
        assert await store.append([acl(2)]) == 1
    assert (await reload(tmp_path)).log_records == (acl(0), acl(2))
    assert len(writes) == 2


async def test_subscribers_see_committed_batches_in_order(tmp_path: Path) -> None:
    async with DirectoryMetadataStore(tmp_path) as store:
        await store.load()
        subscription = store.subscribe()
        await store.append([acl(0), acl(1)])
        await store.append([acl(2)])
    seen = [(batch.base_offset, batch.records) async for batch in subscription]
    assert seen == [(0, (acl(0), acl(1))), (2, (acl(2),))]


async def test_write_failure_breaks_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_write(files, fd: int, data: bytes) -> None:
        raise OSError(5, "Input/output error")

    async with DirectoryMetadataStore(tmp_path) as store:
        await store.load()
        monkeypatch.setattr(metadata_log, "write_and_fsync", failing_write)
        with pytest.raises(MetadataStoreBrokenError, match=r"Input/output error\); the change was not made"):
            await store.append([acl(0)])  # the failed write was cut off again
        with pytest.raises(MetadataStoreBrokenError, match="takes no writes since a write failed"):
            await store.append([acl(1)])


async def test_a_failed_write_that_cannot_be_cut_off_says_its_outcome_is_unknown(tmp_path: Path, monkeypatch) -> None:
    def failing_write(files, fd: int, data: bytes) -> None:
        raise OSError(5, "Input/output error")

    async with DirectoryMetadataStore(tmp_path) as store:
        await store.load()
        monkeypatch.setattr(metadata_log, "write_and_fsync", failing_write)
        monkeypatch.setattr(store, "_cut_back", lambda: False)
        with pytest.raises(MetadataStoreBrokenError, match="may or may not be durable"):
            await store.append([acl(0)])


# -- durability across SIGKILL ----------------------------------------------

CHILD = textwrap.dedent(
    """
    import sys, uuid, trio
    from metadata.directory import DirectoryMetadataStore
    from metadata.records import AccessControlEntryRecord

    async def worker(store, w):
        for i in range(1_000_000):
            record = AccessControlEntryRecord(
                id=uuid.uuid4(), resource_type=2, resource_name=f"t{w}-{i}", pattern_type=3,
                principal="User:burst", host="*", operation=3, permission_type=3)
            offset = await store.append([record])
            print(offset, record.id, flush=True)

    async def main(path):
        store = DirectoryMetadataStore(path)
        await store.load()
        async with trio.open_nursery() as nursery:
            for w in range(8):
                nursery.start_soon(worker, store, w)

    trio.run(main, sys.argv[1])
    """
)


def test_acknowledged_appends_survive_sigkill(tmp_path: Path) -> None:
    script = tmp_path / "burst.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    child = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "meta")], stdout=subprocess.PIPE, env=env
    )
    assert child.stdout is not None
    acknowledged: dict[int, uuid.UUID] = {}
    try:
        for line in child.stdout:  # synchronise on acknowledgements, not on time
            offset, acl_id = line.split()
            acknowledged[int(offset)] = uuid.UUID(acl_id.decode())
            if len(acknowledged) >= 300:
                break
        child.send_signal(signal.SIGKILL)
        for line in child.stdout.read().splitlines():  # acknowledged before the kill
            parts = line.split()
            if len(parts) == 2 and len(parts[1]) == 36:
                acknowledged[int(parts[0])] = uuid.UUID(parts[1].decode())
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    assert len(acknowledged) >= 300

    state = trio.run(reload, tmp_path / "meta")
    assert state.last_offset >= max(acknowledged)
    for offset, acl_id in acknowledged.items():
        record = state.log_records[offset]
        assert isinstance(record, AccessControlEntryRecord) and record.id == acl_id


# -- metadata shell -----------------------------------------------------------


def test_shell_dump_replays_acls_and_configs() -> None:
    removed = acl(1)
    state = LoadedState(
        snapshot_records=(acl(0), removed, ConfigRecord(resource_type=2, resource_name="t", name="a", value="1")),
        log_start_offset=3,
        log_records=(
            RemoveAccessControlEntryRecord(id=removed.id),
            ConfigRecord(resource_type=4, resource_name="", name="b", value="2"),
            ConfigRecord(resource_type=2, resource_name="t", name="a", value=None),
        ),
        last_offset=5,
    )
    dump = dump_state(state)
    acl_path = f"/acl/id/{kafka_uuid_str(acl(0).id)}"
    assert dump == {
        acl_path: {
            "id": "AAAAAAAAAAAAAAAAAAAAAQ",
            "resourceType": "TOPIC",
            "resourceName": "topic-0",
            "patternType": "LITERAL",
            "principal": "User:u0",
            "host": "*",
            "operation": "READ",
            "permissionType": "ALLOW",
        },
        "/configs/broker/<default>/b": "2",
    }
    assert dump_state(state, uuid_format="canonical").keys() >= {f"/acl/id/{acl(0).id}"}
    assert render(dump).splitlines()[1] == "/configs/broker/<default>/b: 2"
    assert render(state).startswith(acl_path + ': {"id":"AAAAAAAAAAAAAAAAAAAAAQ",')
