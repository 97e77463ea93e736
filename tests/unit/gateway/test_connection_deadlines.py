"""The two deadlines of a connection: limits.authentication_timeout_ms runs from connecting to
a finished login whatever the client sends meanwhile; limits.connections_max_idle_ms applies
only after it.  (With 300 ms / 600 ms and a silent client the two could not be told apart.)"""

from __future__ import annotations

import struct

import pytest
import trio

from authz.credentials import PlainCredential
from protocol.codecs import request_class
from tests.unit.gateway.fake_broker import FakeBroker
from tests.unit.gateway.test_connection import RawClient, _start_gateway

PASSWORD = "deadline-secret"


@pytest.fixture(params=[True, False], ids=["data-plane", "trio-only"])
async def sasl_gateway(request, nursery, tmp_path):
    """A SASL_PLAINTEXT gateway with a 150 ms authentication and a 60 s idle deadline."""
    broker = await nursery.start(FakeBroker().serve)
    return await _start_gateway(nursery, tmp_path, broker, request.param,
                                **_sections(auth_ms=150, idle_ms=60_000, data_plane=request.param))


def _sections(auth_ms: int, idle_ms: int, data_plane: bool) -> dict:
    return dict(
        io={"data_plane_thread": data_plane},
        listeners=[{"name": "T", "host": "127.0.0.1", "port": 0, "advertised_host": "127.0.0.1",
                    "broker_port_base": 29100, "security_protocol": "SASL_PLAINTEXT",
                    "sasl": {"mechanisms": ["PLAIN"]}}],
        users={"plain": [{"name": "dora", "password_hash": PlainCredential.hash_password(PASSWORD, iterations=1000)}]},
        limits={"authentication_timeout_ms": auth_ms, "connections_max_idle_ms": idle_ms,
                "failed_authentication_delay_ms": 0},
    )


def _closed_for(gateway, reason: str) -> float:
    return gateway.metrics.registry.get_sample_value(
        "kgw_request_errors_total", {"listener": "T", "api": "-", "reason": reason}) or 0


async def test_a_client_that_keeps_talking_without_logging_in_is_closed_at_the_authentication_deadline(
        sasl_gateway):
    gateway, port = sasl_gateway
    client = await RawClient.connect(port)
    await client.stream.send_all(struct.pack(">i", 1000))  # a login request, sent a byte at a time
    sent = 0
    with trio.fail_after(20):  # a bound, not a timing (loaded CI machines); the idle deadline (60 s) would never close it: it is never idle
        while True:
            try:
                await client.stream.send_all(b"\x00")
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                break
            sent += 1
            with trio.move_on_after(0.05):  # a byte every 50 ms: never idle
                try:
                    if await client.stream.receive_some(100) == b"":
                        break
                except trio.BrokenResourceError:  # closed with a byte of ours unread: the kernel resets
                    break
    assert sent > 1  # it was read meanwhile
    assert _closed_for(gateway, "authentication_timeout") == 1


async def test_a_logged_in_client_is_held_to_the_idle_deadline_not_the_authentication_one(sasl_gateway):
    gateway, port = sasl_gateway
    client = await RawClient.connect(port)
    await client.send(17, 1, 1, request_class(17, 1)(mechanism="PLAIN"))
    assert (await client.receive(17, 1))[1].error_code == 0
    await client.send(36, 2, 2, request_class(36, 2)(auth_bytes=f"\0dora\0{PASSWORD}".encode()))
    assert (await client.receive(36, 2))[1].error_code == 0
    await trio.sleep(0.5)  # the stimulus: silent past the authentication deadline, far from the idle one
    await client.send(16, 4, 3, request_class(16, 4)(states_filter=()))
    assert (await client.receive(16, 4))[0] == 3
    assert _closed_for(gateway, "authentication_timeout") == 0 and _closed_for(gateway, "idle") == 0


async def test_a_tls_handshake_that_never_finishes_is_cut_at_the_authentication_deadline(nursery, tmp_path):
    """A client that opens a TLS listener's port and stalls its handshake (a slow-handshake
    flood) is closed at limits.authentication_timeout_ms (150 ms), not at the handshake's own
    10 s bound, and counted as an authentication timeout."""
    from tests.unit.gateway.certs import make_pki

    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    broker = await nursery.start(FakeBroker().serve)
    gateway, port = await _start_gateway(nursery, tmp_path, broker, False, limits={"authentication_timeout_ms": 150},
                                         listeners=[{
        "name": "T", "security_protocol": "SSL", "host": "127.0.0.1", "port": 0, "advertised_host": "127.0.0.1",
        "broker_port_base": 29200,
        "tls": {"cert_file": str(pki.server.cert_file), "key_file": str(pki.server.key_file)}}])
    tcp = await trio.open_tcp_stream("127.0.0.1", port)
    await tcp.send_all(b"\x16\x03\x01\x02\x00")  # a TLS record header promising a ClientHello that never comes
    with trio.fail_after(5):  # a bound, not a timing: the handshake's own bound is 10 s
        try:
            while await tcp.receive_some(1024):
                pass
        except trio.BrokenResourceError:
            pass
    await tcp.aclose()
    assert _closed_for(gateway, "authentication_timeout") == 1
