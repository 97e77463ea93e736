"""The workers' shared directory log with real processes (#14 items 6 and 7): three processes
write ACLs into one directory at once, one of them is SIGKILLed in the middle of its burst, and
no acknowledged ACL is lost; every survivor and a fresh reader hold the same state.

Each writer is the production path (MetadataImage over SharedDirectoryStore, the supervisor's
lock held by this test) in its own process; it prints the id of every ACL whose write returned
(durable, and applied by its own image), so the test knows exactly what was acknowledged.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import trio

from metadata.directory import DirectoryMetadataStore
from metadata.directory_shared import hold_directory
from metadata.image import MetadataImage
from metadata.transfer import export_document

ROOT = Path(__file__).resolve().parents[3]

WRITER = textwrap.dedent("""
    import json, sys, uuid
    import trio
    from authz.acl import AccessControlEntry, AclBinding, AclOperation, AclPermissionType, PatternType, ResourcePattern, ResourceType
    from metadata.directory_shared import SharedDirectoryStore
    from metadata.image import MetadataImage
    from metadata.transfer import export_document

    path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])

    async def main():
        image = MetadataImage(SharedDirectoryStore(path), snapshot_every=150)  # snapshots amid the writes
        await image.load()
        async with trio.open_nursery() as nursery:
            await nursery.start(image.follow)
            print("ready", flush=True)
            sys.stdin.readline()  # go
            for i in range(count):
                acl_id = uuid.uuid4()
                binding = AclBinding(ResourcePattern(ResourceType.TOPIC, f"{name}-{i}", PatternType.LITERAL),
                                     AccessControlEntry(f"User:{name}", "*", AclOperation.READ, AclPermissionType.ALLOW))
                with trio.fail_after(10):  # a broken log fails the test (stdout ends), never hangs it
                    await image.write_acls({acl_id: binding}, [])
                print("acked", acl_id, flush=True)
            print("done", flush=True)
            sys.stdin.readline()  # every writer finished: the state to compare
            target = int(sys.stdin.readline())
            with trio.fail_after(20):
                while image.offset < target:  # the follower reads the others' last writes
                    await image._offset_changed.wait()
            print("state", json.dumps(export_document(image.acls, image.configs, image.scram, image.offset)), flush=True)
            nursery.cancel_scope.cancel()
        await image.store.aclose()

    trio.run(main)
""")


def start_writer(path: Path, name: str, count: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), name, str(count)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_a_worker_killed_mid_burst_loses_no_acknowledged_acl_and_the_others_agree(tmp_path):
    path = tmp_path / "md"
    lock = hold_directory(path)  # the supervisor's part
    writers = {name: start_writer(path, name, 300) for name in ("a", "b", "victim")}
    try:
        for proc in writers.values():
            proc.stdin.write("go\n")
            proc.stdin.flush()
        acked: dict[str, list[str]] = {name: [] for name in writers}
        victim = writers["victim"]
        while len(acked["victim"]) < 60:  # killed once it has 60 acknowledged writes, amid the others'
            line = victim.stdout.readline()
            assert line.startswith("acked "), line
            acked["victim"].append(line.split()[1])
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
        for line in victim.stdout:  # acknowledged before the signal landed, still in the pipe
            if line.startswith("acked "):
                acked["victim"].append(line.split()[1])
        survivors = {name: writers[name] for name in ("a", "b")}
        for name, proc in survivors.items():
            for line in proc.stdout:
                if line.strip() == "done":
                    break
                acked[name].append(line.split()[1])
            assert len(acked[name]) == 300

        # a fresh reader (the restarted worker) sees every acknowledged ACL
        async def fresh() -> MetadataImage:
            from metadata.directory_shared import SharedDirectoryStore

            image = MetadataImage(SharedDirectoryStore(path))
            await image.load()
            await image.store.aclose()
            return image

        image = trio.run(fresh)
        ids = {str(i) for i in image.acls}
        missing = [i for name in acked for i in acked[name] if i not in ids]
        assert not missing, f"{len(missing)} acknowledged ACL(s) lost"
        assert len(image.acls) >= 660

        # both survivors, once at the same offset, hold exactly the fresh reader's state
        expected = export_document(image.acls, image.configs, image.scram, image.offset)
        for proc in survivors.values():
            proc.stdin.write(f"compare\n{image.offset}\n")
            proc.stdin.flush()
        for proc in survivors.values():
            line = proc.stdout.readline()
            assert line.startswith("state "), line
            assert json.loads(line[len("state "):]) == json.loads(json.dumps(expected))
            assert proc.wait(30) == 0
    finally:
        for proc in writers.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        os.close(lock)

    # the supervisor gone, one gateway takes the directory over: same state
    async def single() -> MetadataImage:
        image = MetadataImage(DirectoryMetadataStore(path))
        await image.load()
        await image.store.aclose()
        return image

    assert export_document(*_state(trio.run(single))) == expected


def _state(image: MetadataImage):
    return image.acls, image.configs, image.scram, image.offset
