"""`kgw hash-password` and `kgw --version`, run as a user would."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from authz.credentials import SaslMechanism, ScramCredential
from configs.yaml_reader import parse_config


def _kgw(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gateway.cli", *args], input=stdin, capture_output=True, text=True,
                          timeout=60)


def _config_with(users: dict):
    return parse_config({
        "listeners": [{"name": "S", "security_protocol": "SASL_PLAINTEXT", "port": 9000, "broker_port_base": 20000,
                       "sasl": {"mechanisms": ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]}}],
        "upstream": {"bootstrap_servers": ["127.0.0.1:9092"]},
        "users": users,
    })


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_hash_password_prints_an_entry_the_gateway_accepts_and_logs_in_with(mechanism):
    done = _kgw("hash-password", "--user", "alice", "--mechanism", mechanism, stdin="s3cret\n")
    assert done.returncode == 0, done.stderr
    assert "s3cret" not in done.stdout
    users = _config_with(yaml.safe_load(done.stdout)).users
    if mechanism == "PLAIN":
        (user,) = users.plain
        assert user.name == "alice" and user.verify("s3cret") and not user.verify("wrong")
    else:
        (cred,) = users.scram
        again = ScramCredential.from_password("alice", "s3cret", SaslMechanism(mechanism), salt=cred.salt,
                                              iterations=cred.iterations)
        assert (cred.stored_key, cred.server_key) == (again.stored_key, again.server_key)


def test_hash_password_never_takes_the_password_from_the_command_line():
    done = _kgw("hash-password", "--user", "alice", "s3cret")
    assert done.returncode == 2 and "unrecognized arguments" in done.stderr
    assert _kgw("hash-password", "--user", "alice", stdin="\n").returncode == 2  # empty


def test_version():
    done = _kgw("--version")
    assert done.returncode == 0 and done.stdout.startswith("kgw ")


def test_the_collector_is_off_while_loading_and_back_on_once_ready():
    """Start-up runs with the collector off (it walked 100k ACLs' objects again and again) and
    _settle_garbage_collector turns it back on with start-up's objects frozen: a gateway, or a
    worker, must never serve with the collector off."""
    import gc

    from gateway.cli.main import _quiet_collector_while_loading, _settle_garbage_collector

    thresholds = gc.get_threshold()
    try:
        _quiet_collector_while_loading()
        assert not gc.isenabled()
        _settle_garbage_collector()
        assert gc.isenabled() and gc.get_freeze_count() > 0
        assert gc.get_threshold() == (20_000, 20, 50)
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        gc.enable()
