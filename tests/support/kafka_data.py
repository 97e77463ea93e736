"""Test data and assertions shared by the real-client compatibility tests.

Every client test produces the same shape of data: ``PARTITIONS`` partitions,
``PER_PARTITION`` keyed records in each, sent to an explicit partition one at
a time (one record per batch, waiting for each ack).  That makes the expected
(partition, offset) of every record exact, and keeps tansu's ListOffsets
(latest) quirk -- it answers "base offset of the last batch + 1" -- equal to
the true end offset.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError
from confluent_kafka.admin import AdminClient

PARTITIONS = 3
PER_PARTITION = 3


@dataclass(frozen=True, order=True)
class Rec:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def expected_records(topic: str, client: str) -> list[Rec]:
    """Records in send order; offsets are the ones each must get."""
    out = []
    for i in range(PARTITIONS * PER_PARTITION):
        partition = i % PARTITIONS
        offset = i // PARTITIONS
        out.append(Rec(partition, offset, f"key-{i}".encode(),
                       f"{client}:{topic}:value-{i}".encode()))
    return out


def expected_end_offsets() -> dict[int, int]:
    return {p: PER_PARTITION for p in range(PARTITIONS)}


def as_bytes(v: bytes | str | None) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    return v.encode()


def assert_same_records(got: Iterable[Rec], expected: Iterable[Rec], how: str) -> None:
    got_sorted = sorted(got, key=lambda r: (r.partition, r.offset))
    exp_sorted = sorted(expected, key=lambda r: (r.partition, r.offset))
    assert got_sorted == exp_sorted, (
        f"records read back via {how} differ from those produced\n"
        f"  got:      {got_sorted}\n  expected: {exp_sorted}")


def assert_gateway_addresses(addresses: Iterable[tuple[int, str, int]], gateway,
                             upstream_port: int, what: str) -> None:
    """Every (node_id, host, port) a client saw must be a gateway address,
    and the upstream (tansu) port must never appear."""
    seen = sorted({(int(n), h, int(p)) for n, h, p in addresses})
    assert seen, f"{what}: the client reported no brokers at all"
    allowed = gateway.all_addresses()
    for node, host, port in seen:
        assert port != upstream_port, (
            f"{what}: broker {node} is advertised at the upstream address "
            f"{host}:{port} (tansu) instead of a gateway address; saw {seen}")
        assert f"{host}:{port}" in allowed, (
            f"{what}: broker {node} at {host}:{port} is not a gateway address "
            f"{sorted(allowed)}; saw {seen}")
    # The node ids and addresses are exactly what the gateway config implies.
    expected = sorted((n, *a.rsplit(":", 1)) for n, a in gateway.broker_addresses.items())
    expected = [(n, h, int(p)) for n, h, p in expected]
    assert seen == expected, f"{what}: brokers {seen} != expected gateway brokers {expected}"


def confluent_errors(conf: dict[str, Any], until=None, wait_s: float = 8.0) -> list[KafkaError]:
    """What a confluent-kafka client is told when it tries to reach the cluster with ``conf``.

    Returns as soon as ``until(errors)`` holds (default: any error), not after a fixed wait:
    the gateway closes a bad connection at once and librdkafka reports it within
    milliseconds.  ``wait_s`` only bounds a client that is never told anything."""
    errors: list[KafkaError] = []
    done = until or bool
    admin = AdminClient({**conf, "error_cb": errors.append})
    deadline = time.monotonic() + wait_s
    while not done(errors) and time.monotonic() < deadline:
        with pytest.raises(Exception):
            admin.list_topics(timeout=0.3)  # never succeeds: these clients are refused
        admin.poll(0.05)
    admin.poll(0.1)  # the errors reported with the one that ended the wait
    return errors


def authentication_error(errors: list[KafkaError]) -> bool:
    return any(e.code() == KafkaError._AUTHENTICATION for e in errors)
