"""`kgw users add` over the wire: a SCRAM user created with the command line (password on
stdin) logs in through the gateway; a wrong password is refused; `kgw users remove` ends it."""

from __future__ import annotations

import subprocess

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from tests.support.acls import kgw_command
from tests.support.cluster import gateway_env
from tests.support.ports import HOST, free_port, free_port_base

pytestmark = pytest.mark.integration


def users(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([*kgw_command(), "users", *args], input=stdin, env=gateway_env(), capture_output=True,
                          text=True, timeout=60)


def can_log_in(gw, password: str, timeout: float = 10) -> bool:
    client = AdminClient({"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                          "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "carol", "sasl.password": password,
                          "broker.address.family": "v4"})
    try:
        return bool(client.list_topics(timeout=timeout).brokers)
    except KafkaException:
        return False


def test_a_user_added_with_kgw_users_logs_in_and_removed_cannot(start_gateway, tmp_path):
    data_dir = tmp_path / "kgw-users" / "metadata"
    added = users("add", "--data-dir", str(data_dir), "--user", "carol", stdin="carol-pw\n")
    assert added.returncode == 0, added.stderr
    listener = {"name": "SASL", "security_protocol": "SASL_PLAINTEXT", "host": HOST, "port": free_port(),
                "advertised_host": HOST, "broker_port_base": free_port_base((111,)),
                "sasl": {"mechanisms": ["SCRAM-SHA-512"]}}
    extra = {"listeners": [listener], "metadata": {"path": str(data_dir)}}
    gw = start_gateway(extra, name="kgw-users")
    assert can_log_in(gw, "carol-pw")
    assert not can_log_in(gw, "wrong", timeout=4)
    gw.stop()
    removed = users("remove", "--data-dir", str(data_dir), "--user", "carol")
    assert removed.returncode == 0, removed.stderr
    gw = start_gateway(extra, name="kgw-users-2")  # the same log, without carol now
    assert not can_log_in(gw, "carol-pw", timeout=4)
