"""The `kgw run` process contract the harness relies on: readiness lines,
a clean exit 0 on SIGTERM, exit 2 with a message on a bad config, and a
live admin endpoint.  Also exercises the start_gateway factory."""

from __future__ import annotations

import urllib.request

import pytest
from kafka import KafkaAdminClient

from tests.support.cluster import gateway_argv, gateway_env, write_config
from tests.support.kafka_data import assert_gateway_addresses
from tests.support.ports import free_port, free_port_base
from tests.support.processes import ManagedProcess

pytestmark = pytest.mark.integration


def test_start_gateway_factory_and_sigterm(start_gateway, tansu):
    gw = start_gateway({"listeners": [{
        "name": "SECOND", "security_protocol": "PLAINTEXT", "host": "127.0.0.1",
        "port": free_port(),
        "advertised_host": "127.0.0.1",
        "broker_port_base": free_port_base(),
    }]}, name="kgw-second")
    assert list(gw.listeners) == ["SECOND"]
    assert gw.bootstrap == f"127.0.0.1:{gw.config['listeners'][0]['port']}"
    assert gw.admin_url.startswith("http://127.0.0.1:")
    assert gw.upstream_bootstrap == tansu.bootstrap
    # A client of this gateway is shown this gateway's broker address.
    admin = KafkaAdminClient(bootstrap_servers=gw.bootstrap, request_timeout_ms=15000)
    try:
        brokers = admin.describe_cluster()["brokers"]
    finally:
        admin.close()
    assert_gateway_addresses([(b["broker_id"], b["host"], b["port"]) for b in brokers], gw,
                             tansu.port, "describe_cluster via a start_gateway() gateway")
    assert gw.stop() == 0, gw.process.describe_failure("kgw did not exit 0 on SIGTERM")


def test_admin_endpoint_answers(gateway):
    with urllib.request.urlopen(gateway.admin_url + "/healthz", timeout=10) as resp:
        assert resp.status == 200


def test_bad_config_exits_2(tmp_path):
    config = write_config(tmp_path / "bad.yaml", {"listeners": "not-a-list"})
    proc = ManagedProcess("kgw-bad", gateway_argv(config), log_dir=tmp_path,
                          env=gateway_env(), cwd=tmp_path).start()
    try:
        rc = proc.wait_exit(30)
    finally:
        proc.stop()
    assert rc == 2, proc.describe_failure(f"expected exit code 2, got {rc}")
    assert proc.stderr_tail().strip(), "a bad config must explain itself on stderr"
    assert "ready" not in proc.stdout_lines


def test_a_second_gateway_on_a_locked_metadata_log_says_so_and_exits_1(gateway, tmp_path):
    """Start-up failures are one clear line and exit status 1, never a traceback."""
    config = dict(gateway.config)
    config["listeners"] = [dict(gateway.config["listeners"][0], port=free_port(), broker_port_base=free_port_base())]
    config["admin"] = None
    path = write_config(tmp_path / "second.yaml", config)  # same metadata.path as the running gateway
    with ManagedProcess("kgw-locked", gateway_argv(path), log_dir=tmp_path, env=gateway_env(), cwd=tmp_path).start() as proc:
        assert proc.wait_exit(30) == 1
    err = proc.stderr_path.read_text()
    assert "kgw: cannot run: MetadataStoreLockedError: metadata log directory" in err
    assert "Traceback" not in err
