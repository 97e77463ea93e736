"""ACLs for tests: seeding a gateway's metadata log before it starts, with ``kgw acls add``
(going through the real command line keeps the offline tooling under test too), and changing
a running side's ACLs through its admin API until its authorizer holds the change.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.cluster import gateway_argv, gateway_env
from tests.support.processes import wait_until

ANONYMOUS = "User:ANONYMOUS"


def kgw_command() -> list[str]:
    """The kgw executable (or ``python -m gateway.cli``)."""
    return gateway_argv("unused")[:-3]


def add_acl(data_dir: Path, *args: str, principal: str = ANONYMOUS) -> None:
    """One ``kgw acls add --data-dir DIR --principal P ARGS...``; fails the test with kgw's message."""
    done = subprocess.run([*kgw_command(), "acls", "add", "--data-dir", str(data_dir), "--principal", principal,
                           *args], env=gateway_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def seed_acls(data_dir: Path, *acls: list[str] | tuple[str, ...], principal: str = ANONYMOUS) -> None:
    """``add_acl`` for each argument list."""
    for args in acls:
        add_acl(data_dir, *args, principal=principal)


def change_acls(admin, bindings: list, present: bool, timeout: float) -> None:
    """Create (``present``) or delete ``bindings`` with a confluent-kafka ``admin`` and wait until
    the authorizer that answers DescribeAcls holds (or has dropped) them.

    A Kafka broker's CreateAcls and DeleteAcls return once the controller committed the change;
    its own authorizer applies the records a moment later (KRaft publishes them asynchronously),
    and DescribeAcls is answered from that authorizer.  kgw applies a change before answering;
    the wait then ends at its first look.
    """
    from confluent_kafka.admin import AclBindingFilter

    filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation,
                                b.permission_type) for b in bindings]
    done = admin.create_acls(bindings) if present else admin.delete_acls(filters)
    for f in done.values():
        f.result(timeout=timeout)

    def applied() -> bool:
        return all(bool(admin.describe_acls(f).result(timeout=timeout)) == present for f in filters)

    wait_until(applied, timeout, message=f"ACLs {'applied' if present else 'dropped'} by the authorizer")
