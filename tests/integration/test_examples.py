"""Every shipped example configuration runs exactly as written, beside the broker its header
comment names.

Each file under configs/examples/ is copied byte for byte into a directory of the test (its
relative certificate paths then resolve there; ``HOME`` points into it, so the examples'
``~/.local/state/kgw/...`` metadata stays out of the real home), the broker the header says
to start runs on localhost:9092 (``kgw broker``, or ``kgw broker --broker kafka``), the TLS
example gets its certificates the way ``make certs`` makes them, and then: ``kgw check``
passes, ``kgw run`` prints ``ready``, ``/readyz`` on the example's admin port is 200, and on
every listener, at the example's own ports, each login its comments document works, a record
makes a produce/consume round trip, brokers are advertised under a name that resolves, and a
wrong password is refused.  The examples use ports of their own, so two can run side by side.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cluster import gateway_env
from tests.support.kafka_data import authentication_error, confluent_errors
from tests.support.processes import ManagedProcess

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "configs" / "examples"
#: where every example's header says the broker runs
BROKER_PORT = 9092

#: the logins each example's comments document: listener -> librdkafka settings (the first of
#: each listener makes the produce/consume round trip)
LOGINS = {
    "single-listener.yaml": {"PLAINTEXT": [{}]},
    "standard-authorizer.yaml": {"SASL_PLAINTEXT": [
        {"sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "admin", "sasl.password": "admin-secret"},
        {"sasl.mechanisms": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-secret"},
        {"sasl.mechanisms": "PLAIN", "sasl.username": "carol", "sasl.password": "carol-secret"}]},
    "tls-and-sasl.yaml": {
        "MTLS": [{"ssl.certificate.location": "certs/client.pem", "ssl.key.location": "certs/client-key.pem"}],
        "SASL_SSL": [
            {"sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": "alice", "sasl.password": "alice-secret"},
            {"sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice", "sasl.password": "alice-secret"},
            {"sasl.mechanisms": "PLAIN", "sasl.username": "bob", "sasl.password": "bob-secret"}]},
    "shared-metadata.yaml": {"SASL_PLAINTEXT": [
        {"sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "admin", "sasl.password": "admin-secret"}]},
}


def test_every_example_has_a_test():
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == sorted(LOGINS)


def test_examples_use_ports_of_their_own():
    """Any two examples run side by side: no port in common (upstream node ids 1 and 111)."""
    seen: dict[int, str] = {}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        ports = [doc["admin"]["port"]]
        for lc in doc["listeners"]:
            ports += [lc["port"], lc["broker_port_base"] + 1, lc["broker_port_base"] + 111]
        for port in ports:
            assert port not in seen, f"{path.name} and {seen[port]} both use port {port}"
            seen[port] = path.name
        assert doc["upstream"]["bootstrap_servers"] == ["localhost:9092"], path.name
        header = path.read_text().split("\n\n", 1)[0]
        assert "Needs: " in header and "kgw broker" in header and "Run: " in header, path.name


def _kgw(*args: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args], capture_output=True, text=True,
                          timeout=60, env=env, cwd=cwd)


def _start_broker(kind: str, work: Path) -> ManagedProcess:
    """The header's broker command, `kgw broker [--broker kafka]`, on localhost:9092."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", BROKER_PORT))
        except OSError as e:
            pytest.fail(f"the examples need localhost:{BROKER_PORT} for their broker, and it is taken: {e}")
    argv = [sys.executable, "-m", "gateway.cli", "broker", "--port", str(BROKER_PORT), "--broker", kind,
            "--data-dir", str(work / "broker")]
    broker = ManagedProcess(f"kgw-broker-{kind}", argv, log_dir=work, env=gateway_env()).start()
    try:
        broker.wait_for_line(rf"^broker: 127\.0\.0\.1:{BROKER_PORT}$", 120)
    except BaseException:
        broker.stop()
        raise
    return broker


def _conf(lc: dict, settings: dict, work: Path) -> dict:
    conf = {"bootstrap.servers": f"localhost:{lc['port']}", "security.protocol": lc["security_protocol"],
            "broker.address.family": "v4"}
    if lc["security_protocol"].endswith("SSL"):
        conf["ssl.ca.location"] = str(work / "certs" / "ca.pem")
    for key, value in settings.items():
        conf[key] = str(work / value) if key.endswith(".location") else value
    return conf


def _round_trip(conf: dict, topic: str) -> None:
    admin = AdminClient(conf)
    for future in admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=20).values():
        future.result(timeout=30)
    brokers = admin.list_topics(timeout=20).brokers.values()
    assert {b.host for b in brokers} == {"localhost"}, [str(b) for b in brokers]  # a name that resolves
    producer = Producer(conf)
    producer.produce(topic, b"through the example")
    assert producer.flush(30) == 0
    consumer = Consumer({**conf, "group.id": f"{topic}-g", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        for _ in range(60):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                assert message.value() == b"through the example"
                return
        raise AssertionError(f"nothing consumed from {topic} through {conf['bootstrap.servers']}")
    finally:
        consumer.close()


def _run_example(name: str, broker_kind: str, work: Path) -> None:
    copy = work / name
    copy.write_bytes((EXAMPLES / name).read_bytes())
    env = {**gateway_env(), "HOME": str(work / "home")}
    doc = yaml.safe_load(copy.read_text())
    if any(lc.get("tls") for lc in doc["listeners"]):  # what `make certs` runs
        made = _kgw("dev-certs", "--dir", str(work / "certs"), "--host", "localhost", "--host", "127.0.0.1",
                    env=env, cwd=work)
        assert made.returncode == 0, made.stderr
    broker = _start_broker(broker_kind, work)
    try:
        checked = _kgw("check", "--config", str(copy), env=env, cwd=work)
        assert checked.returncode == 0, f"kgw check refused the example {name} as written:\n{checked.stderr}"
        gw = ManagedProcess(f"kgw-{copy.stem}", [sys.executable, "-m", "gateway.cli", "run", "--config", str(copy)],
                            log_dir=work, env=env, cwd=work).start()
        try:
            gw.wait_for_line(r"^ready$", 90)
            with urllib.request.urlopen(f"http://127.0.0.1:{doc['admin']['port']}/readyz", timeout=10) as ready:
                assert ready.status == 200
            for lc in doc["listeners"]:
                for i, settings in enumerate(LOGINS[name][lc["name"]]):
                    conf = _conf(lc, settings, work)
                    if i == 0:
                        _round_trip(conf, f"example-{uuid.uuid4().hex[:8]}")
                    else:  # the other documented logins get in
                        assert AdminClient(conf).list_topics(timeout=20).brokers, settings
                    if "sasl.password" in settings:
                        wrong = {**conf, "sasl.password": "wrong"}
                        assert authentication_error(confluent_errors(wrong, authentication_error)), settings
        finally:
            assert gw.stop() == 0, gw.describe_failure(f"{name}: kgw did not exit 0 on SIGTERM")
    finally:
        broker.stop()


@pytest.mark.parametrize("name", ["single-listener.yaml", "standard-authorizer.yaml", "tls-and-sasl.yaml"])
def test_example_runs_as_written(name, tmp_path):
    _run_example(name, "tansu", tmp_path)


@pytest.mark.kafka
def test_shared_metadata_example_runs_as_written(tmp_path):
    _run_example("shared-metadata.yaml", "kafka", tmp_path)
