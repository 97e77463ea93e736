"""ACLs acknowledged over the wire survive restarts and SIGKILL (issue: durable ACL log)."""

from __future__ import annotations

import signal
import threading

import pytest
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
