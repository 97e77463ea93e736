"""The audit trail's tamper evidence on the wire: a gateway publishing its chained audit events to
tansu, ``kgw audit verify`` finding the trail intact, then finding an edit, a deletion, a
reordering and an insertion in copies of the topic, each with its offset; a gateway SIGKILLed
and started again resumes its chain, reported as a restart, not as tampering."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.cli.audit import read_topic
from protocol.codecs import make, nested, request_class
from tests.support.acls import kgw_command
from tests.support.cluster import gateway_env
from tests.support.raw_kafka import RawConnection

pytestmark = pytest.mark.integration


def _denied_requests(bootstrap: str, topic: str, count: int) -> None:
    """``count`` Metadata requests for a topic no ACL allows: one denied decision each."""
    cls = request_class(3, 12)
    body = make(cls, topics=(make(nested(cls, "topics"), name=topic, topic_id=uuid.UUID(int=0)),),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    with RawConnection(bootstrap) as conn:
        for _ in range(count):
            assert int(conn.call(3, 12, body).topics[0].error_code) == 29


def _metric(gw, name: str) -> float:
    text = urllib.request.urlopen(f"{gw.admin_url}/metrics", timeout=5).read().decode()
    return next((float(line.split()[1]) for line in text.splitlines() if line.startswith(name + " ")), 0.0)


def _until(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)  # polling a condition


def _verify(gw, topic: str) -> tuple[int, str]:
    done = subprocess.run([*kgw_command(), "audit", "verify", "--config", str(gw.config_path), "--topic", topic],
                          env=gateway_env(), capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


def _copy(bootstrap: str, name: str, values: list[bytes]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "broker.address.family": "v4"})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "linger.ms": 0})
    for value in values:
        producer.produce(name, value, partition=0)
        producer.flush(15)  # one by one: the copy keeps the order given


@pytest.fixture
def audited(tansu, start_gateway):
    audit = f"kgw-audit-{uuid.uuid4().hex[:8]}"
    name = f"kgw-chain-{uuid.uuid4().hex[:6]}"
    extra = {"authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer", "config": {}},
             "audit": {"publish": True, "topic": audit, "linger_ms": 50, "checkpoint_interval_ms": 200}}
    return start_gateway, extra, name, audit


def test_an_intact_trail_verifies_and_each_kind_of_tampering_is_found(audited, tansu):
    start_gateway, extra, name, audit = audited
    gw = start_gateway(extra, name=name)
    _denied_requests(gw.bootstrap, f"secret-{uuid.uuid4().hex[:6]}", 12)
    _until(lambda: _metric(gw, "kgw_audit_events_published_total") >= 12, "the events to be published")
    gw.stop()  # a graceful stop writes the last checkpoint

    code, out = _verify(gw, audit)
    assert code == 0 and "intact" in out, out
    values = [v for _p, _o, v in sorted(read_topic({"bootstrap.servers": tansu.bootstrap}, audit))]
    assert len(values) >= 12 and all(json.loads(v)["hash"] for v in values)

    edited = json.loads(values[3])
    edited["decision"] = "ALLOWED"
    reordered = list(values)
    reordered[5], reordered[6] = reordered[6], reordered[5]
    forged = json.loads(values[2])
    forged["resource_name"] = "innocent"
    cases = {
        "edited": (values[:3] + [json.dumps(edited).encode()] + values[4:], "0:3"),
        "deleted": (values[:7] + values[8:], "0:7"),
        "reordered": (reordered, "0:6"),
        "inserted": (values[:8] + [json.dumps(forged).encode()] + values[8:], "0:8"),
    }
    for kind, (copy, first_bad) in cases.items():
        topic = f"{audit}-{kind}"
        _copy(tansu.bootstrap, topic, copy)
        code, out = _verify(gw, topic)
        assert code == 1 and f"first bad offset {first_bad}" in out and kind in out, (kind, out)


def test_a_killed_gateway_resumes_its_chain_and_verification_reports_a_restart(audited):
    start_gateway, extra, name, audit = audited
    gw = start_gateway(extra, name=name)
    _denied_requests(gw.bootstrap, "secret-a", 5)
    _until(lambda: _metric(gw, "kgw_audit_events_published_total") >= 5, "the first events to be published")
    checkpoints = gw.config_path.parent / "metadata"
    _until(lambda: _verify(gw, audit)[0] == 0 and "unverified_tail" not in _verify(gw, audit)[1],
           "a checkpoint of the first events")
    gw.process.kill()  # SIGKILL: no last checkpoint, whatever was buffered is lost
    assert checkpoints.exists()
    again = start_gateway(extra, name=name)
    _denied_requests(again.bootstrap, "secret-b", 4)
    _until(lambda: _metric(again, "kgw_audit_events_published_total") >= 4, "the events after the restart")
    again.stop()
    code, out = _verify(again, audit)
    assert code == 0, out
    assert "restart" in out and "2 run(s)" in out and "intact" in out, out
