"""The directory log shared by the workers of ``kgw run --workers N`` (#14 item 7).

Each store here is what one worker opens (its own file descriptors, so the append lock
excludes them from each other as it excludes processes); what runs is the production path:
MetadataImage over SharedDirectoryStore, the StandardAuthorizer writing through it.  The
processes themselves are exercised in tests/integration/test_workers.py.
"""

from __future__ import annotations

import contextlib
import functools
import os
import uuid

import pytest
import trio

from authz.acl import AccessControlEntry, AclBinding, AclOperation, AclPermissionType, PatternType, ResourcePattern, ResourceType
from metadata.directory import DirectoryMetadataStore, read_log_state
from metadata.directory_shared import SharedDirectoryStore, hold_directory
from metadata.image import MetadataImage, binding_to_record
from metadata.records import ConfigRecord
from metadata.store import MetadataStoreBrokenError, MetadataStoreLockedError
from metadata.transfer import export_document


def binding(topic: str, user: str = "alice") -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                      AccessControlEntry(f"User:{user}", "*", AclOperation.READ, AclPermissionType.ALLOW))


async def opened(path, snapshot_every: int = 10**9) -> MetadataImage:
    image = MetadataImage(SharedDirectoryStore(path), snapshot_every=snapshot_every)
    await image.load()
    return image


@contextlib.asynccontextmanager
async def workers(path, *snapshot_every: int):
    """One following image per argument (what each worker holds), closed at the end."""
    images = [await opened(path, every) for every in snapshot_every]
    try:
        async with trio.open_nursery() as nursery:
            for image in images:
                await nursery.start(image.follow)
            yield images
            nursery.cancel_scope.cancel()
    finally:
        for image in images:
            await image.store.aclose()


async def until_offset(images, offset: int) -> None:
    with trio.fail_after(10):
        for image in images:
            while image.offset < offset:
                await image._offset_changed.wait()


def state(image: MetadataImage):
    return export_document(image.acls, image.configs, image.scram, image.offset)


def bounded(test):
    """A broken store must fail the test, not hang it (a write waits to be read back)."""
    @functools.wraps(test)
    async def run(*args, **kwargs):
        with trio.fail_after(30):
            await test(*args, **kwargs)
    return run


@pytest.fixture
def log_dir(tmp_path):
    path = tmp_path / "md"
    fd = hold_directory(path)  # what the supervisor does
    yield path
    os.close(fd)


@bounded
async def test_two_workers_writing_at_once_get_one_order_and_read_their_own_writes(log_dir):
    async with workers(log_dir, 10**9, 10**9) as (a, b):
        offsets = {a: [], b: []}

        async def writer(image: MetadataImage, name: str) -> None:
            for i in range(40):
                acl_id = uuid.uuid4()
                offset = await image.append([binding_to_record(acl_id, binding(f"{name}-{i}"))])
                assert acl_id in image.acls and image.offset >= offset  # applied here before the write returns
                offsets[image].append(offset)

        async with trio.open_nursery() as writers:
            for image, name in ((a, "a"), (b, "b"), (a, "a2"), (b, "b2")):
                writers.start_soon(writer, image, name)
        await until_offset((a, b), 159)
        assert a.offset == b.offset == 159 and len(a.acls) == 160
        assert state(a) == state(b)
        # the file is the order: every record has its own offset, none twice, no gap
        assert sorted(offsets[a] + offsets[b]) == list(range(160))
        recovered = read_log_state(log_dir)
        assert recovered.last_offset == 159 and len(list(recovered.records())) == 160


@bounded
async def test_a_dead_writers_torn_tail_is_cut_by_the_next_writer_and_never_applied(log_dir):
    async with workers(log_dir, 10**9, 10**9) as (a, b):
        await a.append([ConfigRecord(resource_type=4, resource_name="", name="x", value="1")])
        await until_offset((b,), 0)
        segment = sorted(p for p in log_dir.iterdir() if p.suffix == ".log")[-1]
        good = segment.stat().st_size
        with open(segment, "ab") as f:  # a worker SIGKILLed in the middle of its write
            f.write(b"\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x01\x00half a batch")
        await b.append([ConfigRecord(resource_type=4, resource_name="", name="x", value="2")])
        await until_offset((a, b), 1)
        assert a.configs[(4, "")] == b.configs[(4, "")] == {"x": "2"}
        data = segment.read_bytes()
        assert b"half a batch" not in data and len(data) > good


@bounded
async def test_a_snapshot_by_one_worker_rolls_the_log_the_others_follow_and_a_new_one_starts_from_it(log_dir):
    async with workers(log_dir, 25, 10**9) as (a, b):
        for round_ in range(4):  # four snapshots: retention deletes the oldest
            for i in range(30):
                image = a if i % 2 else b
                await image.write_acls({uuid.uuid4(): binding(f"t{round_}-{i}")}, [])
            await until_offset((a, b), 30 * (round_ + 1) - 1)
        snapshots = sorted(p.name for p in log_dir.iterdir() if p.name.endswith(".checkpoint"))
        assert len(snapshots) == 2, snapshots
        assert b.store.records_since_snapshot < 30  # b learned of a's snapshots
        segments = sorted(p for p in log_dir.iterdir() if p.suffix == ".log")
        assert int(segments[0].stem) > 0  # the log before the older snapshot is gone
        async with workers(log_dir, 10**9) as (c,):  # a worker started now loads from the snapshot
            assert c.offset == 119 and state(c) == state(a) == state(b) and len(c.acls) == 120
            await b.write_acls({}, [next(iter(b.acls))])
            await until_offset((a, b, c), 120)
            assert state(a) == state(b) == state(c) and len(c.acls) == 119


@bounded
async def test_the_supervisors_lock_keeps_any_other_writer_out_and_the_format_is_the_directory_logs(tmp_path):
    path = tmp_path / "md"
    lock = hold_directory(path)
    async with workers(path, 10**9) as (a,):
        await a.write_acls({uuid.uuid4(): binding("t")}, [])
        await a.append([ConfigRecord(resource_type=4, resource_name="", name="super.users", value="User:admin")])
        with pytest.raises(MetadataStoreLockedError, match="locked by another kgw process"):
            await DirectoryMetadataStore(path).load()  # `kgw acls add`, or a second gateway
    os.close(lock)  # the supervisor stopped: one gateway (or kgw acls) takes the log over as it is
    single = MetadataImage(DirectoryMetadataStore(path))
    await single.load()
    assert single.offset == a.offset == 1 and state(single) == state(a)
    await single.store.aclose()


async def test_a_failed_write_is_cut_and_writes_resume_without_a_restart(log_dir, monkeypatch):
    """A worker whose write fails (a full disk) takes no writes until resume_writes succeeds;
    what the failed write left in the segment is cut, so no worker ever applies it."""
    import metadata.directory_shared as shared

    async with workers(log_dir, 10**9, 10**9) as (a, b):
        await a.append([binding_to_record(uuid.uuid4(), binding("before"))])
        real = shared.write_all

        def half_then_fail(files, fd, data):
            os.write(fd, data[: len(data) // 2])
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(shared, "write_all", half_then_fail)
        with pytest.raises(MetadataStoreBrokenError, match=r"No space left on device\); the change was not made"):
            await a.append([binding_to_record(uuid.uuid4(), binding("failed"))])
        assert a.store.broken is not None
        monkeypatch.setattr(shared, "write_all", real)
        assert await a.store.resume_writes() is True and a.store.broken is None
        await a.append([binding_to_record(uuid.uuid4(), binding("after"))])
        await b.append([binding_to_record(uuid.uuid4(), binding("other"))])
        await until_offset((a, b), 2)
        for image in (a, b):
            assert sorted(acl.pattern.name for acl in image.acls.values()) == ["after", "before", "other"]
