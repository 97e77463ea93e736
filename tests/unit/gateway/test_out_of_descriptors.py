"""A gateway that runs out of file descriptors (clients holding every one its limit allows),
as an operator meets it: the finding was 1,525 log lines in 16 s (an ERROR and a Trio
traceback every 100 ms) and /healthz timing out 4 times in 12.  Now: one WARNING per episode
and listener, a counter, accepting backs off, and the admin endpoint answers every probe."""

from __future__ import annotations

import socket
import struct
import time
import urllib.error
import urllib.request

from tests.support.cluster import base_gateway_config, launch_gateway
from tests.support.ports import free_port


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _served(address: str) -> bool:
    """Whether a new connection is accepted and its ApiVersions request handled: with nothing
    upstream, kgw answers it by closing the connection (the upstream versions are unknown),
    where a connection left in the backlog would wait for an answer until the timeout."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=15) as conn:
        conn.sendall(struct.pack(">ihhih", 10, 18, 0, 7, -1))
        try:
            return conn.recv(8) == b""
        except TimeoutError:
            return False


def _until(condition, what: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_out_of_descriptors_is_one_warning_and_the_admin_endpoint_answers(tmp_path):
    config = base_gateway_config(f"127.0.0.1:{free_port()}", tmp_path / "meta")  # no upstream needed
    gateway = launch_gateway("kgw-fds", config, tmp_path, open_files=64)
    stderr = lambda: gateway.stderr_path.read_text()  # noqa: E731
    clients: list[socket.socket] = []
    try:
        host, port = gateway.bootstrap.rsplit(":", 1)
        for _ in range(150):  # far more than 64 descriptors
            client = socket.socket()
            client.setblocking(False)
            client.connect_ex((host, int(port)))
            clients.append(client)
        _until(lambda: "cannot accept" in stderr(), "the listener to run out of descriptors")
        for _ in range(12):
            assert _get(f"{gateway.admin_url}/healthz") == (200, "ok\n")
        status, body = _get(f"{gateway.admin_url}/readyz")
        assert status in (200, 503) and "EXTERNAL" in body
    finally:
        for client in clients:
            client.close()
    assert _served(gateway.bootstrap)  # accepting again once descriptors are back
    metrics = _get(f"{gateway.admin_url}/metrics")[1]
    failed = [line for line in metrics.splitlines()
              if line.startswith("kgw_request_errors_total") and 'reason="accept_out_of_resources"' in line]
    assert failed and float(failed[0].rsplit(" ", 1)[1]) >= 1
    gateway.stop()
    log = stderr()
    assert log.count("cannot accept") == 1
    assert "upstream API versions unknown" in log  # the last connection was served
    assert "Traceback" not in log
    assert len(log.splitlines()) < 12, log
