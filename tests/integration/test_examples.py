"""Every shipped example configuration runs as written (#15 item 7).

Each file under configs/examples/ is taken as an operator would take it; only what differs
per machine is changed (ports, the upstream's address, where state is kept, the advertised
host name, the metadata topic's name); the TLS example gets its certificates from
`kgw dev-certs`, as `make certs` makes them.  Then `kgw check` must pass, `kgw run` must
become ready, and a client logs in on every listener with the credentials the file's comments
document (and is refused with a wrong one).
"""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from tests.support.cluster import launch_gateway
from tests.support.kafka_data import authentication_error, confluent_errors
from tests.support.ports import free_port, free_port_base

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).resolve().parents[2] / "configs" / "examples"

#: the logins each example's comments document: listener -> kafka-python settings
LOGINS = {
    "single-listener.yaml": {"PLAINTEXT": {}},
    "standard-authorizer.yaml": {"SASL_PLAINTEXT": [
        {"sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "admin", "sasl_plain_password": "admin-secret"},
        {"sasl_mechanism": "PLAIN", "sasl_plain_username": "admin", "sasl_plain_password": "admin-secret"},
        {"sasl_mechanism": "PLAIN", "sasl_plain_username": "carol", "sasl_plain_password": "carol-secret"}]},
    "tls-and-sasl.yaml": {
        "MTLS": {"ssl_certfile": "certs/client.pem", "ssl_keyfile": "certs/client-key.pem"},
        "SASL_SSL": [
            {"sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"},
            {"sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "alice", "sasl_plain_password": "alice-secret"},
            {"sasl_mechanism": "PLAIN", "sasl_plain_username": "bob", "sasl_plain_password": "bob-secret"}]},
    "shared-metadata.yaml": {"SASL_PLAINTEXT": {
        "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "admin", "sasl_plain_password": "admin-secret"}},
}


def test_every_example_has_a_test():
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == sorted(LOGINS)


def _kgw(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args], capture_output=True, text=True, timeout=60)


def _on_this_machine(name: str, work: Path, upstream: str, node_ids: tuple[int, ...]) -> tuple[dict, Path]:
    """The example with only the machine-specific values changed, written into ``work``."""
    doc = yaml.safe_load((EXAMPLES / name).read_text())
    for lc in doc["listeners"]:
        lc.update(host="127.0.0.1", port=free_port(), broker_port_base=free_port_base(node_ids))
        if "advertised_host" in lc:
            lc["advertised_host"] = "localhost"  # what the development certificate names
    doc["upstream"]["bootstrap_servers"] = upstream.split(",")
    doc["admin"] = {"host": "127.0.0.1", "port": free_port()}
    doc.setdefault("metadata", {})["path"] = str(work / "metadata")
    if doc["metadata"].get("backend") == "kafka":
        doc["metadata"]["topic"] = f"__kgw_example_{uuid.uuid4().hex[:8]}"
    if any(lc.get("tls") for lc in doc["listeners"]):
        done = _kgw("dev-certs", "--dir", str(work / "certs"), "--host", "localhost", "--host", "127.0.0.1")
        assert done.returncode == 0, done.stderr
    path = work / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    done = _kgw("check", "--config", str(path))
    assert done.returncode == 0, f"kgw check refused the example {name}:\n{done.stderr}"
    return doc, path


def _login(bootstrap: str, lc: dict, settings: dict, work: Path) -> KafkaAdminClient:
    conf = {"bootstrap_servers": bootstrap, "security_protocol": lc.get("security_protocol", "PLAINTEXT"),
            "request_timeout_ms": 15000, "client_id": f"example-{uuid.uuid4().hex[:6]}"}
    if conf["security_protocol"].endswith("SSL"):
        conf["ssl_cafile"] = str(work / "certs" / "ca.pem")
    for key, value in settings.items():
        conf[key] = str(work / value) if key in ("ssl_certfile", "ssl_keyfile") else value
    return KafkaAdminClient(**conf)


def _run_example(name: str, upstream: str, work: Path, node_ids: tuple[int, ...]) -> None:
    doc, _ = _on_this_machine(name, work, upstream, node_ids)
    gw = launch_gateway(name.removesuffix(".yaml"), doc, work, node_ids=node_ids)
    try:
        for lc in doc["listeners"]:
            logins = LOGINS[name][lc["name"]]
            for settings in logins if isinstance(logins, list) else [logins]:
                admin = _login(gw.listeners[lc["name"]], lc, settings, work)
                try:
                    brokers = admin.describe_cluster()["brokers"]
                    assert {b["host"] for b in brokers} == {lc.get("advertised_host", "127.0.0.1")}, brokers
                    if lc["name"] == "PLAINTEXT":  # no authorizer: a topic made through kgw is listed
                        topic = f"example-{uuid.uuid4().hex[:8]}"
                        admin.create_topics([NewTopic(topic, 1, 1)])
                        assert topic in admin.list_topics()
                finally:
                    admin.close()
                if "sasl_plain_password" in settings:
                    conf = {"bootstrap.servers": gw.listeners[lc["name"]], "security.protocol": lc["security_protocol"],
                            "sasl.mechanisms": settings["sasl_mechanism"],
                            "sasl.username": settings["sasl_plain_username"], "sasl.password": "wrong"}
                    if lc["security_protocol"].endswith("SSL"):
                        conf["ssl.ca.location"] = str(work / "certs" / "ca.pem")
                    assert authentication_error(confluent_errors(conf, authentication_error)), settings
    finally:
        assert gw.stop() == 0, gw.process.describe_failure(f"{name}: kgw did not exit 0 on SIGTERM")


@pytest.mark.parametrize("name", ["single-listener.yaml", "standard-authorizer.yaml", "tls-and-sasl.yaml"])
def test_example_runs_as_written(name, tansu, tmp_path):
    _run_example(name, tansu.bootstrap, tmp_path, (tansu.node_id,))


@pytest.mark.kafka_cluster
def test_shared_metadata_example_runs_as_written(kafka_cluster, tmp_path):
    _run_example("shared-metadata.yaml", kafka_cluster.bootstrap, tmp_path, kafka_cluster.node_ids)
