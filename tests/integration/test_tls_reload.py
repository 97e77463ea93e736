"""A TLS listener's certificate renewed without a restart, on the wire: files replaced, SIGHUP
sent to ``kgw run`` (and to the supervisor of ``kgw run --workers 2``, which passes it on).
A Kafka client connected before keeps producing; new connections are shown the new
certificate; files that do not make a context leave the last good one in use."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import ssl
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography import x509

from gateway.cli.dev_certs import issue, name
from tests.support.cluster import TANSU_NODE_ID, base_gateway_config, launch_gateway
from tests.support.ports import HOST, free_port, free_port_base
from tests.support.processes import wait_until
from tests.unit.gateway.certs import make_pki

pytestmark = pytest.mark.integration

T = 20


def _served_serial(address: str, ca_file: Path) -> int:
    host, port = address.rsplit(":", 1)
    context = ssl.create_default_context(cafile=str(ca_file))
    context.check_hostname = False  # the test certificate names localhost, the listener 127.0.0.1
    with socket.create_connection((host, int(port)), timeout=T) as raw:
        with context.wrap_socket(raw) as tls:
            return x509.load_der_x509_certificate(tls.getpeercert(binary_form=True)).serial_number


def _reloads(admin_url: str, result: str) -> float:
    """kgw_tls_certificate_reloads_total{listener="SSL", result=...}, summed over workers."""
    with urllib.request.urlopen(admin_url + "/metrics", timeout=T) as r:
        text = r.read().decode()
    total = 0.0
    for m in re.finditer(r'^kgw_tls_certificate_reloads_total\{([^}]*)\} (\S+)$', text, re.M):
        if 'listener="SSL"' in m.group(1) and f'result="{result}"' in m.group(1):
            total += float(m.group(2))
    return total


def _replace(path: Path, source: Path) -> None:
    tmp = path.with_suffix(".new")
    shutil.copy(source, tmp)
    os.replace(tmp, path)


@pytest.mark.parametrize("workers", [1, 2], ids=["kgw-run", "workers"])
def test_sighup_serves_a_renewed_certificate_without_dropping_clients(tansu, tmp_path, topic_name, workers):
    pki_dir = tmp_path / "pki"
    pki_dir.mkdir()
    pki = make_pki(pki_dir)
    live = tmp_path / "live"
    live.mkdir()
    cert, key = live / "server.pem", live / "server-key.pem"
    shutil.copy(pki.server.cert_file, cert)
    shutil.copy(pki.server.key_file, key)
    config = base_gateway_config(tansu.bootstrap, tmp_path / "metadata")
    config["listeners"].append({
        "name": "SSL", "security_protocol": "SSL", "host": HOST, "port": free_port(), "advertised_host": HOST,
        "broker_port_base": free_port_base((TANSU_NODE_ID,)),
        "tls": {"cert_file": str(cert), "key_file": str(key), "reload_check_ms": 0},  # SIGHUP only
    })
    args = ("--workers", "2") if workers == 2 else ()
    gw = launch_gateway(f"kgw-tls-reload-{workers}", config, tmp_path / "gw", args=args)
    try:
        admin = AdminClient({"bootstrap.servers": gw.listeners["EXTERNAL"]})
        admin.create_topics([NewTopic(topic_name, 1, 1)], operation_timeout=T)[topic_name].result(T)
        producer = Producer({"bootstrap.servers": gw.listeners["SSL"], "security.protocol": "SSL",
                             "ssl.ca.location": str(pki.ca.cert_file),
                             "ssl.endpoint.identification.algorithm": "none"})
        producer.produce(topic_name, b"before")
        assert producer.flush(T) == 0
        assert _served_serial(gw.listeners["SSL"], pki.ca.cert_file) == pki.server.cert.serial_number

        renewed = issue(pki_dir, "renewed", pki.ca, name(CN="localhost", O="kgw tests"), server=True, days=90)
        _replace(key, renewed.key_file)
        _replace(cert, renewed.cert_file)
        os.kill(gw.process.pid, signal.SIGHUP)
        wait_until(lambda: _reloads(gw.admin_url, "reloaded") == workers, T, message="the reload counted")
        for _ in range(4):  # with two workers, connections land on either
            assert _served_serial(gw.listeners["SSL"], pki.ca.cert_file) == renewed.cert.serial_number
        producer.produce(topic_name, b"after")  # the connection made before the renewal
        assert producer.flush(T) == 0
        assert gw.process.alive()

        wrong_key = issue(pki_dir, "unrelated", pki.ca, name(CN="other"), server=True)
        _replace(key, wrong_key.key_file)  # a key that does not match the certificate
        os.kill(gw.process.pid, signal.SIGHUP)
        wait_until(lambda: _reloads(gw.admin_url, "failed") == workers, T, message="the failed reload counted")
        assert _served_serial(gw.listeners["SSL"], pki.ca.cert_file) == renewed.cert.serial_number
        assert "TLS certificate not reloaded" in gw.stderr_path.read_text()
        assert gw.process.alive()
    finally:
        gw.stop()
