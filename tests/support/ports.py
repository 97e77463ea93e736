"""Free TCP port selection for integration tests.

A port is "free" if we can bind it on the loopback interface right now.  There
is an unavoidable race between picking a port and the subprocess binding it;
the process helpers surface a failed bind quickly (the process exits or never
prints its readiness line) so a collision shows up as a clear error.
"""

from __future__ import annotations

import os
import random
import socket

HOST = "127.0.0.1"


def _range() -> tuple[int, int]:
    """KGW_TEST_PORTS="low-high": the range of this pytest process (tests/run_suite.py runs two
    at once, each in its own half of 12000-32000)."""
    given = os.environ.get("KGW_TEST_PORTS")
    if not given:
        return 12000, 32000
    low, _, high = given.partition("-")
    return int(low), int(high)


_LOW, _HIGH = _range()

# Ports handed out during this test session; never hand the same one out twice.
_handed_out: set[int] = set()


def _can_bind(port: int, host: str = HOST) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # No SO_REUSEADDR: we want to know that a fresh listener would succeed
        # even with connections in TIME_WAIT.
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = HOST, low: int = _LOW, high: int = _HIGH) -> int:
    """A TCP port on ``host`` that is free now, below the kernel's ephemeral range (32768+):
    a port handed to a subprocess to bind must not be one an outgoing connection can take
    in the meantime (a port the OS picked with bind(0) is in that range)."""
    rng = random.Random()
    for _ in range(500):
        port = rng.randrange(low, high)
        if port in _handed_out:
            continue
        if _can_bind(port, host):
            _handed_out.add(port)
            return port
    raise RuntimeError(f"could not find a free TCP port in {low}-{high}")


def free_ports(n: int, host: str = HOST) -> list[int]:
    """Return ``n`` distinct free ports."""
    return [free_port(host) for _ in range(n)]


def free_port_base(offsets: tuple[int, ...] = (111,), host: str = HOST,
                   low: int = _LOW, high: int = _HIGH) -> int:
    """Return a base port B such that B+o is free for every o in ``offsets``.

    The gateway serves upstream node N at ``broker_port_base + N``; tansu's
    node id is 111, so the default checks ``base + 111``.  The base itself is
    not required to be free (it is not listened on), but it is never handed out
    again: the configuration refuses any other port equal to it (node 0's port).
    The range stays below
    the kernel's ephemeral range (32768+) so outgoing client connections
    cannot grab these ports between the check and the gateway's bind.
    """
    top = max(offsets)
    rng = random.Random()
    for _ in range(500):
        base = rng.randrange(low, high - top)
        ports = [base + o for o in offsets]
        if base in _handed_out or any(p in _handed_out for p in ports):
            continue
        if all(_can_bind(p, host) for p in ports):
            _handed_out.update(ports)
            _handed_out.add(base)
            return base
    raise RuntimeError(f"could not find a free port base for offsets {offsets}")
