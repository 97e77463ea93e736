"""KIP-504 readiness: a listener accepts only once the authorizer says it is ready."""

from __future__ import annotations

import os
import signal
import socket
import urllib.error
import urllib.request

import pytest

from tests.support.cluster import base_gateway_config, gateway_argv, gateway_env, write_config
from tests.support.processes import ManagedProcess

pytestmark = pytest.mark.integration


def _connect(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def _readyz(admin: dict) -> int:
    try:
        with urllib.request.urlopen(f"http://{admin['host']}:{admin['port']}/readyz", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_listener_opens_only_after_authorizer_is_ready(tansu, tmp_path):
    config = base_gateway_config(tansu.bootstrap, tmp_path / "metadata")
    config["authorizer"] = {"class_name": "tests.support.gated_authorizer:GatedAuthorizer",
                            "config": {"super.users": "User:ANONYMOUS"}}
    listener = config["listeners"][0]
    address = f"{listener['host']}:{listener['port']}"
    path = write_config(tmp_path / "kgw.yaml", config)
    with ManagedProcess("kgw-gated", gateway_argv(path), log_dir=tmp_path, env=gateway_env(), cwd=tmp_path).start() as proc:
        proc.wait_for_line(r"^gated authorizer: waiting for SIGUSR1", 30)
        assert not _connect(address), "the listener accepted before the authorizer was ready"
        assert _readyz(config["admin"]) == 503
        os.kill(proc.pid, signal.SIGUSR1)
        proc.wait_for_line(r"^ready\s*$", 30)
        assert _connect(address)
        assert _readyz(config["admin"]) == 200


def test_an_unreachable_upstream_is_not_ready_and_says_so(tmp_path):
    """With nothing at the upstream address kgw accepts but is not ready: it prints `started,
    waiting for upstream` and not `ready` (the line scripts and the harness wait for), /readyz
    is 503 naming the upstream, and the log says so at WARNING."""
    from tests.support.ports import free_port

    config = base_gateway_config(f"127.0.0.1:{free_port()}", tmp_path / "metadata")  # nothing listens there
    config["upstream"]["connect_timeout_ms"] = 1000
    path = write_config(tmp_path / "kgw.yaml", config)
    with ManagedProcess("kgw-no-upstream", gateway_argv(path), log_dir=tmp_path, env=gateway_env(),
                        cwd=tmp_path).start() as proc:
        proc.wait_for_line(r"^started, waiting for upstream \(GET /readyz says why\)$", 30)
        assert "ready" not in proc.stdout_lines
        admin = config["admin"]
        try:
            urllib.request.urlopen(f"http://{admin['host']}:{admin['port']}/readyz", timeout=5)
            raise AssertionError("/readyz answered 200 with the upstream unreachable")
        except urllib.error.HTTPError as e:
            assert e.code == 503
            assert "upstream not ready" in e.read().decode()
    assert "listeners accept, but /readyz answers 503 until upstream is ready" in proc.stderr_path.read_text()
