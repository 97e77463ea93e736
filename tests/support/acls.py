"""Seeding ACLs into a gateway's metadata log before it starts, with ``kgw acls add``.

Going through the real command line keeps the offline tooling under test too.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.support.cluster import gateway_argv, gateway_env

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
