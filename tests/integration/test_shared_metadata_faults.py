"""Faults of the shared metadata backend (#14 item 6), three-node Kafka behind the gateways:
SIGKILL of the gateway taking a burst of CreateAcls, one broker lost, the whole cluster cut off
and restored.  Every check is made with clients over the wire, plus /readyz and /metrics."""

from __future__ import annotations

import re
import threading
import time
import urllib.request

import pytest
from confluent_kafka import KafkaException

from kio.static.primitive import i8

from protocol.codecs import make, nested, request_class
from tests.integration.test_shared_metadata import (
    PASSWORDS,
    T,
    acls_at,
    admin,
    applied_offset,
    read_acl,
    readyz,
    start_shared,
    until,
)

from tests.support.raw_kafka import RawConnection

pytestmark = pytest.mark.kafka_cluster
ANY, LITERAL, TOPIC, DESCRIBE, ALLOW = 1, 3, 2, 8, 3


def _retrying(call, timeout: float = 60):
    """A client's retry loop: a connection to the lost broker's address fails with a transport
    error, a write meeting a leader election with a retriable one; both are tried again."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except KafkaException as e:
            err = e.args[0]
            assert (err.retriable() or err.code() == -195) and time.monotonic() < deadline, e  # -195: _TRANSPORT


def _names(acls: set[tuple]) -> set[str]:
    return {a[1] for a in acls}


def test_sigkill_during_a_burst_loses_no_acknowledged_acl_and_writes_survive_a_lost_broker(
        kafka_cluster, kafka_gateway, topic_name):
    md_topic = f"__kgw_md_{topic_name}"
    a, b = start_shared(kafka_gateway, kafka_cluster, 2, md_topic)
    acked: list[str] = []
    stop = threading.Event()

    def burst() -> None:
        client = admin(a)
        i = 0
        while not stop.is_set():
            acl = read_acl(f"{topic_name}-{i}")
            try:
                client.create_acls([acl])[acl].result(timeout=T)
            except KafkaException:
                return  # the gateway died under us: this one was never acknowledged
            acked.append(acl.name)
            i += 1

    thread = threading.Thread(target=burst)
    thread.start()
    try:
        until(lambda: len(acked) >= 30 or not thread.is_alive(), "a burst of acknowledged CreateAcls")
        a.process.kill()  # SIGKILL, mid-burst
    finally:
        stop.set()
        thread.join(T + 5)
    snapshot_of_acked = set(acked)
    assert len(snapshot_of_acked) >= 30
    # every acknowledged ACL is in the log: B has it, and A restarted replays it
    until(lambda: snapshot_of_acked <= _names(acls_at(b)), "B to hold every acknowledged ACL")
    a2 = start_shared(kafka_gateway, kafka_cluster, 1, md_topic)[0]
    assert acls_at(a2) == acls_at(b)

    # one broker of three lost: the topic keeps 2 in-sync replicas, writes still succeed.  Raw
    # connections to the bootstrap ports: a client library would also be routed to the lost
    # broker's gateway port, which is not the subject here.
    victim = kafka_cluster.node_ids[-1]
    kafka_cluster.kill(victim)
    try:
        name = f"{topic_name}-after-loss"
        with _login(a2, "admin") as conn:
            deadline = time.monotonic() + 60
            while (code := _raw_create(conn, name)) != 0:  # the log's leader may be moving: retriable
                assert code == 7 and time.monotonic() < deadline, code
        with _login(b, "admin") as conn:
            until(lambda: name in _raw_acls(conn), "B to apply the write made with a broker down")
    finally:
        kafka_cluster.restart(victim)


def _stale_seconds(gw) -> float:
    text = urllib.request.urlopen(f"{gw.admin_url}/metrics", timeout=5).read().decode()
    return float(re.search(r"^kgw_metadata_stale_since_seconds (\S+)$", text, re.M).group(1))


def _login(gw, user: str) -> RawConnection:
    """A raw SASL/PLAIN connection: with every broker down a client library would not get past
    its Metadata request; the ACL APIs kgw answers itself need no broker."""
    return RawConnection(gw.bootstrap).sasl_plain(user, PASSWORDS[user])


def _raw_acls(conn: RawConnection) -> set[str]:
    response = conn.call(29, 3, make(request_class(29, 3), resource_type_filter=i8(ANY), resource_name_filter=None,
                                     pattern_type_filter=i8(ANY), principal_filter=None, host_filter=None,
                                     operation=i8(ANY), permission_type=i8(ANY)))
    assert response.error_code == 0, response
    return {r.resource_name for r in response.resources}


def _raw_create(conn: RawConnection, topic: str) -> int:
    cls = request_class(30, 3)
    creation = nested(cls, "creations")(resource_type=i8(TOPIC), resource_name=topic, resource_pattern_type=i8(LITERAL),
                                        principal="User:alice", host="*", operation=i8(DESCRIBE),
                                        permission_type=i8(ALLOW))
    (result,) = conn.call(30, 3, cls(creations=(creation,))).results
    return result.error_code


def test_cluster_cut_off_keeps_the_last_state_fails_writes_retriably_and_catches_up(
        kafka_cluster, kafka_gateway, topic_name):
    md_topic = f"__kgw_md_{topic_name}"
    a, b = start_shared(kafka_gateway, kafka_cluster, 2, md_topic, write_timeout_ms=3000)
    kept = read_acl(f"{topic_name}-kept")
    admin(a).create_acls([kept])[kept].result(timeout=T)
    until(lambda: applied_offset(b) >= applied_offset(a), "B to apply A's write")
    before = _names(acls_at(b))
    assert kept.name in before

    nodes = kafka_cluster.node_ids
    for n in nodes:
        kafka_cluster.kill(n)
    try:
        for gw in (a, b):  # both say so, and since when
            until(lambda gw=gw: readyz(gw)[0] == 503 and "metadata not ready (stale since" in readyz(gw)[1],
                  "/readyz to report the stale metadata state")
            assert _stale_seconds(gw) > 0
        with _login(a, "admin") as admin_a, _login(b, "alice") as alice_b:
            # the last state still answers and authorizes
            assert _raw_acls(admin_a) == before
            assert _raw_create(alice_b, f"{topic_name}-lost") == 31  # CLUSTER_AUTHORIZATION_FAILED
            # an admin write cannot be made durable: REQUEST_TIMED_OUT (retriable), nothing applied
            assert _raw_create(admin_a, f"{topic_name}-lost") == 7
            assert _raw_acls(admin_a) == before
    finally:
        kafka_cluster.restart(*nodes)

    # reachable again: both catch up without a restart and take writes
    for gw in (a, b):
        until(lambda gw=gw: "metadata ready" in readyz(gw)[1], "/readyz to recover", timeout=60)
        assert _stale_seconds(gw) == 0
    again = f"{topic_name}-again"
    with _login(b, "admin") as admin_b:
        deadline = time.monotonic() + 60
        while (code := _raw_create(admin_b, again)) != 0:  # leaders may still be moving: retriable
            assert code == 7 and time.monotonic() < deadline, code
    until(lambda: again in _names(_retrying(lambda: acls_at(a))), "A to apply B's write after the outage")
    assert _retrying(lambda: acls_at(a)) == _retrying(lambda: acls_at(b))
