"""ACLs acknowledged over the wire survive restarts and SIGKILL (issue: durable ACL log)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

pytestmark = pytest.mark.integration

AUTHZ = {"authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer",
                        "config": {"super.users": "User:ANONYMOUS"}}}
ALL = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                       AclPermissionType.ANY)


def _admin(gw) -> AdminClient:
    return AdminClient({"bootstrap.servers": gw.bootstrap, "socket.timeout.ms": 5000,
                        "logger": _quiet})


class _Quiet:
    def log(self, *args, **kw):
        pass

    def __getattr__(self, name):
        return lambda *a, **k: None


_quiet = _Quiet()


def _binding(i: int) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, f"durable-{i}", ResourcePatternType.LITERAL, f"User:u{i}", "*",
                      AclOperation.READ, AclPermissionType.ALLOW)


def _described(gw) -> set[str]:
    admin = _admin(gw)  # keep the client alive until its future resolves
    return {b.name for b in admin.describe_acls(ALL).result(timeout=20)}


def test_acls_survive_restart(start_gateway):
    gw = start_gateway(AUTHZ, name="restart")
    admin = _admin(gw)
    futures = admin.create_acls([_binding(i) for i in range(5)])
    for f in futures.values():
        f.result(timeout=20)
    gw.stop()
    again = start_gateway(AUTHZ, name="restart")
    assert _described(again) == {f"durable-{i}" for i in range(5)}


def test_acknowledged_acls_survive_sigkill_mid_burst(start_gateway):
    gw = start_gateway(AUTHZ, name="burst")
    acknowledged: list[int] = []
    enough = threading.Event()

    def burst():
        admin = _admin(gw)
        for i in range(100_000):
            try:
                admin.create_acls([_binding(i)])[_binding(i)].result(timeout=10)
            except Exception:
                return  # the gateway was killed
            acknowledged.append(i)
            if len(acknowledged) >= 60:
                enough.set()

    worker = threading.Thread(target=burst, daemon=True)
    worker.start()
    assert enough.wait(60), "no CreateAcls acknowledged"
    gw.process.proc.send_signal(signal.SIGKILL)
    worker.join(30)
    acked = list(acknowledged)
    again = start_gateway(AUTHZ, name="burst")
    present = _described(again)
    missing = [i for i in acked if f"durable-{i}" not in present]
    assert not missing, f"{len(missing)} acknowledged ACLs lost: {missing[:10]}"
    assert len(acked) >= 60


@contextlib.contextmanager
def _small_tmpfs(path: Path, size_kib: int):
    """A real small file system for the metadata log (a tmpfs; needs CAP_SYS_ADMIN)."""
    path.mkdir(parents=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k,mode=0700", "tmpfs", str(path)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}); tests/unit/metadata/test_disk_faults.py "
                    "checks the same rules on the simulated disk")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def _fill(path: Path, leave: int) -> None:
    """Grow ``path`` until the file system has about ``leave`` bytes free (0: none at all)."""
    with path.open("ab") as f:
        while True:
            stat = os.statvfs(path)
            room = stat.f_bavail * stat.f_frsize - leave
            if room <= 0:
                return
            try:
                f.write(b"\0" * min(room, 1 << 20))
                f.flush()
                os.fsync(f.fileno())
            except OSError:
                return


def _readyz(gw) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"{gw.admin_url}/readyz", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _metric(gw, name: str) -> float:
    with urllib.request.urlopen(f"{gw.admin_url}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"{name} not exported")


def _create(admin: AdminClient, names: list[str]) -> None:
    bindings = [AclBinding(ResourceType.TOPIC, n, ResourcePatternType.LITERAL, "User:disk", "*", AclOperation.READ,
                           AclPermissionType.ALLOW) for n in names]
    for future in admin.create_acls(bindings).values():
        future.result(timeout=20)


def test_a_full_metadata_disk_on_the_wire(start_gateway, tmp_path):
    """The operator's bad day on a real file system: room for appends but not for a snapshot
    (every CreateAcls still succeeds, no .part is left), then no room at all (CreateAcls fails
    naming the cause, /readyz says why), then room again (writes resume without a restart);
    after a restart the log holds exactly the changes that were acknowledged."""
    with _small_tmpfs(tmp_path / "md", 1024) as md:
        config = {**AUTHZ, "metadata": {"path": str(md), "snapshot_every_records": 1020}}
        gw = start_gateway(config, name="diskfull")
        admin = _admin(gw)
        acknowledged = [f"disk-{i}" for i in range(1000)]
        _create(admin, acknowledged)  # one append of 1,000 records
        _fill(md / "filler", leave=24 * 1024)  # room for appends, not for a 1,020-ACL snapshot
        for i in range(1000, 1040):
            _create(admin, [f"disk-{i}"])  # the snapshot at record 1,020 fails: the change does not
            acknowledged.append(f"disk-{i}")
        assert _metric(gw, "kgw_metadata_snapshot_failures_total") >= 1
        assert _metric(gw, "kgw_metadata_store_healthy") == 1
        assert not [p.name for p in md.iterdir() if p.name.endswith(".part")]

        _fill(md / "filler", leave=0)
        for i in range(500):  # the segment's last page may still hold a few appends
            try:
                _create(admin, [f"disk-full-{i}"])
            except KafkaException as e:
                assert "No space left" in str(e) and "the change was not made" in str(e)
                break
            acknowledged.append(f"disk-full-{i}")
        else:
            raise AssertionError("no CreateAcls failed on a full disk")
        status, body = _readyz(gw)
        assert status == 503 and "metadata not ready (no writes since" in body
        assert _metric(gw, "kgw_metadata_store_healthy") == 0

        (md / "filler").unlink()
        deadline = time.monotonic() + 30
        while "metadata not ready" in _readyz(gw)[1]:
            assert time.monotonic() < deadline, "writes did not resume once there was room"
            time.sleep(0.1)
        assert _metric(gw, "kgw_metadata_store_healthy") == 1
        _create(admin, ["disk-after"])
        acknowledged.append("disk-after")
        gw.stop()
        again = start_gateway(config, name="diskfull")
        assert _described(again) == set(acknowledged)
        again.stop()
