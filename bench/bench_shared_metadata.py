"""Benchmark the shared metadata backend (issue 14) on a 3-node Apache Kafka cluster.

1. ``propagation``: three kgw instances share ``metadata.backend: kafka``.  For each of N
   changes an admin creates an ACL (alice may DESCRIBE topic ``prop-<i>``) through A; two
   raw connections of alice, at B and at C, send Metadata for that topic until it is no
   longer refused with TOPIC_AUTHORIZATION_FAILED.  Reported: the CreateAcls round trip at A
   (durable + applied at A) and the time from sending it until B *and* C enforce it
   (p50/p99/max) - target p99 <= 1 s.
2. ``start-up``: a history of ``--history`` records (``--acls`` surviving ACLs, the rest
   ACLs created and removed again) is produced straight into the metadata topic, in the
   format kgw writes (one record batch per message, ``--per-message`` records each).  Then:
   a gateway starting on the bare history (full replay, no snapshot), one admin write
   through it (which makes it write a snapshot), and a new gateway starting on snapshot +
   tail - target ready in <= 5 s.  "Ready" is the time from process start to its ``ready``
   line (listeners accepting).

Usage::

    KGW_KAFKA_LIBS=~/.cache/kgw/kafka-<v>/libs .venv/bin/python bench/bench_shared_metadata.py \\
        [--changes 1000] [--acls 100000] [--history 1000000] [--per-message 100] [--skip-startup]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kio.static.primitive import i8  # noqa: E402

from authz.credentials import PlainCredential  # noqa: E402
from metadata.record_batch import encode_batch  # noqa: E402
from metadata.records import AccessControlEntryRecord, RemoveAccessControlEntryRecord, encode_record  # noqa: E402
from protocol.codecs import nested, request_class  # noqa: E402
from tests.support.cluster import base_gateway_config, deep_merge, launch_gateway  # noqa: E402
from tests.support.kafka import start_kafka_cluster  # noqa: E402
from tests.support.ports import HOST, free_port, free_port_base  # noqa: E402
from tests.support.raw_kafka import RawConnection  # noqa: E402

PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}
TOPIC_AUTHORIZATION_FAILED = 29


def gateway_config(cluster, work: Path, md_topic: str) -> dict:
    base = base_gateway_config(cluster.bootstrap, work / "metadata", cluster.node_ids)
    return deep_merge(base, {
        "listeners": [{"name": "SASL", "security_protocol": "SASL_PLAINTEXT", "host": HOST, "port": free_port(),
                       "advertised_host": HOST, "broker_port_base": free_port_base(cluster.node_ids),
                       "sasl": {"mechanisms": ["PLAIN"]}}],
        "users": {"plain": [{"name": u, "password_hash": PlainCredential.hash_password(p, iterations=20_000)}
                            for u, p in PASSWORDS.items()]},
        "authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer",
                       "config": {"super.users": "User:admin"}},
        "metadata": {"backend": "kafka", "topic": md_topic},
    })


def start(cluster, work: Path, md_topic: str, name: str, timeout: float = 60.0):
    config = gateway_config(cluster, work, md_topic)
    t0 = time.perf_counter()
    gw = launch_gateway(name, config, work / name, node_ids=cluster.node_ids, ready_timeout=timeout)
    return gw, time.perf_counter() - t0


def login(gw, user: str) -> RawConnection:
    return RawConnection(gw.bootstrap, timeout=30).sasl_plain(user, PASSWORDS[user])


def create_acl(conn: RawConnection, topic: str) -> None:
    cls = request_class(30, 3)
    creation = nested(cls, "creations")(resource_type=i8(2), resource_name=topic, resource_pattern_type=i8(3),
                                        principal="User:alice", host="*", operation=i8(8), permission_type=i8(3))
    (result,) = conn.call(30, 3, cls(creations=(creation,))).results
    assert result.error_code == 0, result


def topic_error(conn: RawConnection, topic: str) -> int:
    cls = request_class(3, 12)
    t = nested(cls, "topics")(topic_id=None, name=topic)
    return conn.call(3, 12, cls(topics=(t,), allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False)).topics[0].error_code


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_propagation(cluster, work: Path, changes: int) -> None:
    md_topic = f"__kgw_bench_prop_{uuid.uuid4().hex[:8]}"
    gws = [start(cluster, work, md_topic, f"kgw-{n}")[0] for n in "ABC"]
    try:
        admin_a = login(gws[0], "admin")
        watchers = [login(gw, "alice") for gw in gws[1:]]
        acks, spreads = [], []
        for i in range(changes):
            topic = f"prop-{i}-{uuid.uuid4().hex[:6]}"
            assert all(topic_error(w, topic) == TOPIC_AUTHORIZATION_FAILED for w in watchers)
            t0 = time.perf_counter()
            create_acl(admin_a, topic)
            acks.append(time.perf_counter() - t0)
            pending = list(watchers)
            while pending:
                pending = [w for w in pending if topic_error(w, topic) == TOPIC_AUTHORIZATION_FAILED]
                assert time.perf_counter() - t0 < 30, f"change {i} not enforced within 30 s"
            spreads.append(time.perf_counter() - t0)
        for label, values in (("CreateAcls acknowledged at A", acks), ("enforced at B and C", spreads)):
            print(f"propagation, {changes} changes: {label}: p50 {pct(values, .5) * 1000:.1f} ms, "
                  f"p99 {pct(values, .99) * 1000:.1f} ms, max {max(values) * 1000:.1f} ms, "
                  f"mean {statistics.fmean(values) * 1000:.1f} ms")
    finally:
        for gw in gws:
            gw.stop()


def produce_history(cluster, md_topic: str, acls: int, history: int, per_message: int) -> None:
    """The metadata topic as kgw writes it, created first by a gateway (so its shape is kgw's)."""
    from confluent_kafka import Producer

    records: list = []
    survivors = acls
    transient = (history - acls) // 2
    for n in range(survivors):
        records.append(AccessControlEntryRecord(id=uuid.uuid4(), resource_type=2, resource_name=f"orders.{n:06d}",
                                                pattern_type=3, principal="User:alice" if n == 7 else f"User:service-{n % 500:03d}", host="*",
                                                operation=3, permission_type=3))
    for n in range(transient):
        acl_id = uuid.uuid4()
        records.append(AccessControlEntryRecord(id=acl_id, resource_type=2, resource_name=f"tmp.{n:07d}",
                                                pattern_type=3, principal="User:churn", host="*", operation=3,
                                                permission_type=3))
        records.append(RemoveAccessControlEntryRecord(id=acl_id))
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True, "acks": "all",
                         "linger.ms": 20, "batch.size": 1_000_000, "message.max.bytes": 1_000_000})
    now = int(time.time() * 1000)
    t0 = time.perf_counter()
    for start_at in range(0, len(records), per_message):
        value = bytes(encode_batch([encode_record(r) for r in records[start_at : start_at + per_message]],
                                   timestamp_ms=now))
        while True:
            try:
                producer.produce(md_topic, value=value, key=b"bench-history", partition=0)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(300) == 0
    print(f"history: {len(records)} records ({survivors} ACLs kept, {transient} created and removed) in "
          f"{-(-len(records) // per_message)} messages, produced in {time.perf_counter() - t0:.1f} s")


def bench_startup(cluster, work: Path, acls: int, history: int, per_message: int) -> None:
    md_topic = f"__kgw_bench_start_{uuid.uuid4().hex[:8]}"
    creator, took = start(cluster, work, md_topic, "kgw-creator")  # creates and validates the topics
    creator.stop()
    produce_history(cluster, md_topic, acls, history, per_message)
    first, took = start(cluster, work, md_topic, "kgw-full-replay", timeout=900)
    print(f"start-up on the bare history (full replay of {history} records): ready in {took:.2f} s")
    try:
        with login(first, "admin") as conn:
            t0 = time.perf_counter()
            create_acl(conn, "after-history")  # the write after which it snapshots
            print(f"first write after the history (includes writing the snapshot): {time.perf_counter() - t0:.2f} s")
        log = (work / "kgw-full-replay" / "kgw-full-replay.stderr.log").read_text()
        assert "snapshot written" in log, "no snapshot was written"
    finally:
        first.stop()
    for attempt in range(3):
        gw, took = start(cluster, work, md_topic, f"kgw-from-snapshot-{attempt}", timeout=120)
        try:
            with login(gw, "alice") as conn:
                assert topic_error(conn, "orders.000007") != TOPIC_AUTHORIZATION_FAILED  # the state is there
        finally:
            gw.stop()
        print(f"start-up from snapshot + tail ({acls} ACLs), run {attempt + 1}: ready in {took:.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changes", type=int, default=1000)
    parser.add_argument("--acls", type=int, default=100_000)
    parser.add_argument("--history", type=int, default=1_000_000)
    parser.add_argument("--per-message", type=int, default=100)
    parser.add_argument("--skip-startup", action="store_true")
    parser.add_argument("--skip-propagation", action="store_true")
    parser.add_argument("--keep", help="work directory to keep (gateway logs) instead of a temporary one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kgw-bench-shared-") as tmp:
        work = Path(args.keep or tmp)
        t0 = time.perf_counter()
        cluster = start_kafka_cluster(work / "kafka", 3)
        print(f"3-node Kafka cluster up in {time.perf_counter() - t0:.1f} s")
        try:
            if not args.skip_propagation:
                bench_propagation(cluster, work, args.changes)
            if not args.skip_startup:
                bench_startup(cluster, work, args.acls, args.history, args.per_message)
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
