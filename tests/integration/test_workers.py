"""``kgw run --workers 2`` (#14 item 7) in front of real Kafka, with the shared metadata backend
and with the directory log the workers share: both processes accept on the same ports, an ACL
change is enforced by both, a killed worker is replaced while the other serves, and the admin
port covers both.  With the directory log, no other process writes it while the workers run."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import urllib.request
import uuid

import pytest
from kio.static.primitive import i8

from gateway.cli.main import main
from protocol.codecs import nested, request_class
from tests.integration.test_shared_metadata import PASSWORDS, readyz, shared_config, until
from tests.support.acls import kgw_command
from tests.support.cluster import gateway_env
from tests.support.raw_kafka import RawConnection

pytestmark = pytest.mark.kafka
CONNECTIONS = 24


def metrics(gw) -> str:
    return urllib.request.urlopen(f"{gw.admin_url}/metrics", timeout=5).read().decode()


def metrics_when_served(gw) -> str:
    """/metrics, or "" for a scrape reset by a worker being killed (asked again by ``until``)."""
    try:
        return metrics(gw)
    except ConnectionError:  # (http.client.RemoteDisconnected is one)
        return ""


def per_worker(text: str, series: str) -> dict[str, float]:
    """worker -> summed value of ``series`` (all label sets)."""
    out: dict[str, float] = {}
    for m in re.finditer(rf'^{series}\{{worker="(\d+)"[^}}]*\}} (\S+)$', text, re.M):
        out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


def connect(gw, user: str) -> RawConnection | None:
    try:
        return RawConnection(gw.bootstrap).sasl_plain(user, PASSWORDS[user])
    except ConnectionResetError:
        return None


def topic_error(conn: RawConnection, topic: str) -> int:
    cls = request_class(3, 12)
    t = nested(cls, "topics")(topic_id=None, name=topic)
    return conn.call(3, 12, cls(topics=(t,), allow_auto_topic_creation=False,
                                include_topic_authorized_operations=False)).topics[0].error_code


def create_acl(conn: RawConnection, topic: str) -> int:
    cls = request_class(30, 3)
    creation = nested(cls, "creations")(resource_type=i8(2), resource_name=topic, resource_pattern_type=i8(3),
                                        principal="User:alice", host="*", operation=i8(8), permission_type=i8(3))
    return conn.call(30, 3, cls(creations=(creation,))).results[0].error_code


def workers_config(backend: str, topic_name: str, node_ids) -> dict:
    config = shared_config(f"__kgw_md_{topic_name}", node_ids)
    if backend == "directory":
        config["metadata"] = {"backend": "directory"}  # the fixture's own directory
    return config


@pytest.mark.parametrize("backend", ["kafka", "directory"])
def test_two_workers_share_the_ports_and_the_state_and_a_killed_one_is_replaced(kafka, kafka_gateway, topic_name,
                                                                                 backend):
    gw = kafka_gateway(workers_config(backend, topic_name, kafka.node_ids), name=f"kgw-workers-{backend}",
                       args=("--workers", "2"))
    pids = [int(p) for p in next(line for line in gw.process.stdout_lines if line.startswith("workers: ")).split()[1:]]
    assert len(pids) == 2 and gw.process.pid not in pids
    status, body = readyz(gw)
    assert status == 200 and body.splitlines() == ["worker 0 ready", "worker 1 ready"]

    # many connections to the one port: the kernel gives both workers some
    conns = [RawConnection(gw.bootstrap).sasl_plain("alice", PASSWORDS["alice"]) for _ in range(CONNECTIONS)]
    try:
        active = per_worker(metrics(gw), "kgw_connections_active")
        assert set(active) == {"0", "1"} and all(v >= 1 for v in active.values()), active
        assert sum(active.values()) == CONNECTIONS

        # denied everywhere, then one CreateAcls through whichever worker: allowed on every connection
        assert {topic_error(c, topic_name) for c in conns} == {29}
        with RawConnection(gw.bootstrap).sasl_plain("admin", PASSWORDS["admin"]) as admin:
            assert create_acl(admin, topic_name) == 0
        until(lambda: all(topic_error(c, topic_name) != 29 for c in conns), "every worker to enforce the ACL")
    finally:
        for c in conns:
            c.close()

    # a worker killed: replaced, and meanwhile new connections are served by the other (a
    # connection the kernel had queued to the dying worker is reset: a client reconnects)
    os.kill(pids[0], signal.SIGKILL)
    other = f"{topic_name}-{uuid.uuid4().hex[:4]}"
    with until(lambda: connect(gw, "admin"), "a connection while worker 0 is down") as admin:
        assert create_acl(admin, other) == 0
    until(lambda: per_worker(metrics_when_served(gw), "kgw_worker_restarts_total").get("0") == 1.0,
          "worker 0 restarted")
    until(lambda: metrics_when_served(gw) and readyz(gw)[0] == 200, "both workers ready again")
    assert per_worker(metrics(gw), "kgw_worker_up") == {"0": 1.0, "1": 1.0}
    # the new worker 0 replayed the log: the ACL created while it was down holds on every connection
    conns = [RawConnection(gw.bootstrap).sasl_plain("alice", PASSWORDS["alice"]) for _ in range(CONNECTIONS)]
    try:
        assert set(per_worker(metrics(gw), "kgw_connections_active")) == {"0", "1"}
        assert all(topic_error(c, other) != 29 for c in conns)
    finally:
        for c in conns:
            c.close()

    assert gw.stop() == 0  # SIGTERM: every worker drains, then the supervisor exits 0
    for pid in pids[1:]:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_with_the_directory_log_only_the_workers_write_it_and_tools_read_it(kafka, kafka_gateway, topic_name):
    gw = kafka_gateway(workers_config("directory", topic_name, kafka.node_ids), name="kgw-workers-dir",
                       args=("--workers", "2"))
    with RawConnection(gw.bootstrap).sasl_plain("admin", PASSWORDS["admin"]) as admin:
        assert create_acl(admin, topic_name) == 0

    def acls(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*kgw_command(), "acls", *args, "--config", str(gw.config_path)], env=gateway_env(),
                              capture_output=True, text=True, timeout=60)

    listed = acls("list")  # read-only, while the workers run
    assert listed.returncode == 0, listed.stderr
    assert topic_name in listed.stdout and "User:alice" in listed.stdout
    added = acls("add", "--principal", "User:bob", "--operation", "READ", "--topic", topic_name)
    assert added.returncode != 0 and "locked by another kgw process" in added.stderr, added.stderr
    supervisor = gw.process.pid
    assert f"pid {supervisor})" in added.stderr  # the supervisor holds the log for its workers
    assert gw.stop() == 0
    added = acls("add", "--principal", "User:bob", "--operation", "READ", "--topic", topic_name)
    assert added.returncode == 0, added.stderr
    listed = acls("list")
    assert "User:bob" in listed.stdout and "User:alice" in listed.stdout
