"""Server-side TLS: contexts from the listener config, handshakes and their failure messages.

Certificates are generated per module by ``tests/unit/gateway/certs.py``.
Handshakes run over trio memory streams (and once over a real socket).
"""

from __future__ import annotations

import ssl
import struct
from pathlib import Path

import pytest
import trio
import trio.testing

from configs.gateway_config import ClientAuth, ListenerTlsConfig, UpstreamTlsConfig
from gateway.auth.failures import AuthenticationFailed
from gateway.auth.tls import TlsConfigError, client_ssl_context, peer_certificate, server_ssl_context, tls_handshake
from tests.unit.gateway.certs import Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def listener_tls(pki: Pki, client_auth: str = "required") -> ListenerTlsConfig:
    return ListenerTlsConfig(
        cert_file=pki.server.cert_file, key_file=pki.server.key_file,
        ca_file=pki.ca.cert_file, client_auth=ClientAuth(client_auth),
    )


def client_context(pki: Pki, client=None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(pki.ca.cert_file))
    if client is not None:
        ctx.load_cert_chain(str(client.cert_file), str(client.key_file))
    return ctx


async def run_pair(server_ctx, client_ctx, *, timeout_s: float = 5.0, client_action=None):
    """Handshake both sides over memory streams; returns (server result or exception, client exception)."""
    server_stream, client_stream = trio.testing.memory_stream_pair()
    outcome: dict = {}
    server_done = trio.Event()

    async def server() -> None:
        try:
            outcome["server"] = await tls_handshake(server_stream, server_ctx, timeout_s)
        except AuthenticationFailed as exc:
            outcome["server"] = exc
            await server_stream.aclose()
        finally:
            server_done.set()

    async def client() -> None:
        try:
            if client_action is not None:
                await client_action(client_stream)
                return
            tls = trio.SSLStream(client_stream, client_ctx, server_hostname="localhost")
            await tls.do_handshake()
            await tls.send_all(b"ping")  # TLS 1.3: a refused client cert shows up after the handshake
            await tls.receive_some(10)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            outcome["client"] = exc

    async with trio.open_nursery() as nursery:
        nursery.start_soon(server)
        nursery.start_soon(client)
        # the client waits for "pong"; answer or give up once the server is done
        await server_done.wait()
        result = outcome["server"]
        if not isinstance(result, Exception):
            await result[0].send_all(b"pong")
    return outcome["server"], outcome.get("client")


async def test_mutual_tls_ok_and_peer_certificate(pki: Pki) -> None:
    result, client_error = await run_pair(server_ssl_context(listener_tls(pki)), client_context(pki, pki.client))
    assert client_error is None
    ssl_stream, der = result
    assert isinstance(ssl_stream, trio.SSLStream)
    cert = peer_certificate(der)
    assert cert is not None and cert.subject == pki.client.cert.subject


async def test_requested_client_auth_without_certificate_is_anonymous(pki: Pki) -> None:
    result, _ = await run_pair(server_ssl_context(listener_tls(pki, "requested")), client_context(pki))
    assert not isinstance(result, Exception)
    assert result[1] is None and peer_certificate(None) is None


async def test_client_auth_none_does_not_ask_for_a_certificate(pki: Pki) -> None:
    result, _ = await run_pair(server_ssl_context(listener_tls(pki, "none")), client_context(pki, pki.client))
    assert not isinstance(result, Exception)
    assert result[1] is None


async def test_client_certificate_from_another_ca_is_refused(pki: Pki) -> None:
    result, _ = await run_pair(server_ssl_context(listener_tls(pki)), client_context(pki, pki.rogue_client))
    assert isinstance(result, AuthenticationFailed)
    assert "client certificate refused" in str(result)
    assert "unable to get local issuer certificate" in str(result)


async def test_required_client_certificate_missing_is_refused(pki: Pki) -> None:
    result, _ = await run_pair(server_ssl_context(listener_tls(pki)), client_context(pki))
    assert isinstance(result, AuthenticationFailed)
    assert "did not present a certificate" in str(result)


async def test_plaintext_kafka_client_on_tls_port_gets_a_clear_error(pki: Pki) -> None:
    async def plaintext_api_versions(stream) -> None:
        body = struct.pack(">hhih", 18, 3, 1, 4) + b"kcat" + b"\x00\x00\x00"
        await stream.send_all(struct.pack(">i", len(body)) + body)
        await stream.receive_some(100)

    result, _ = await run_pair(server_ssl_context(listener_tls(pki)), None, client_action=plaintext_api_versions)
    assert isinstance(result, AuthenticationFailed)
    assert "non-TLS bytes on a TLS listener" in str(result)
    assert "Kafka PLAINTEXT client" in str(result)


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
async def test_tls_1_1_client_is_refused(pki: Pki) -> None:
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.load_verify_locations(str(pki.ca.cert_file))
    old.set_ciphers("DEFAULT:@SECLEVEL=0")
    old.minimum_version = ssl.TLSVersion.TLSv1_1
    old.maximum_version = ssl.TLSVersion.TLSv1_1
    result, _ = await run_pair(server_ssl_context(listener_tls(pki, "none")), old)
    assert isinstance(result, AuthenticationFailed)
    assert "older than 1.2" in str(result)


async def test_handshake_timeout(pki: Pki) -> None:
    async def silent(stream) -> None:
        await trio.sleep(1)

    with trio.fail_after(3):
        result, _ = await run_pair(
            server_ssl_context(listener_tls(pki)), None, timeout_s=0.1, client_action=silent)
    assert isinstance(result, AuthenticationFailed)
    assert "timed out after 0.1s" in str(result)


async def test_client_closing_early(pki: Pki) -> None:
    async def hang_up(stream) -> None:
        await stream.aclose()

    result, _ = await run_pair(server_ssl_context(listener_tls(pki)), None, client_action=hang_up)
    assert isinstance(result, AuthenticationFailed)
    assert "closed the connection" in str(result)


async def test_over_a_real_socket_with_kgw_client_context(pki: Pki) -> None:
    server_ctx = server_ssl_context(listener_tls(pki))
    upstream = UpstreamTlsConfig(
        ca_file=pki.ca.cert_file, cert_file=pki.client.cert_file, key_file=pki.client.key_file)
    client_ctx = client_ssl_context(upstream)
    assert client_ctx.minimum_version == ssl.TLSVersion.TLSv1_2 and client_ctx.check_hostname
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    got: dict = {}

    async def serve_one() -> None:
        stream = await listeners[0].accept()
        ssl_stream, der = await tls_handshake(stream, server_ctx, 5)
        got["subject"] = peer_certificate(der).subject
        await ssl_stream.send_all(await ssl_stream.receive_some(100))
        await ssl_stream.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_one)
        tcp = await trio.open_tcp_stream("127.0.0.1", port)
        tls = trio.SSLStream(tcp, client_ctx, server_hostname="localhost")
        await tls.send_all(b"hello")
        assert await tls.receive_some(100) == b"hello"
        await tls.aclose()
    await listeners[0].aclose()
    assert got["subject"] == pki.client.cert.subject


def test_server_context_policy(pki: Pki) -> None:
    ctx = server_ssl_context(listener_tls(pki, "requested"))
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert ctx.verify_mode == ssl.CERT_OPTIONAL
    assert server_ssl_context(listener_tls(pki, "required")).verify_mode == ssl.CERT_REQUIRED
    assert server_ssl_context(listener_tls(pki, "none")).verify_mode == ssl.CERT_NONE


def test_config_errors_name_the_file(pki: Pki, tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    with pytest.raises(TlsConfigError, match="tls.cert_file: no such file: .*nope.pem"):
        server_ssl_context(ListenerTlsConfig(cert_file=missing, key_file=pki.server.key_file))
    with pytest.raises(TlsConfigError, match="key match the certificate"):
        server_ssl_context(ListenerTlsConfig(cert_file=pki.server.cert_file, key_file=pki.client.key_file))
    with pytest.raises(TlsConfigError, match="ca_file is required when client_auth is required"):
        server_ssl_context(ListenerTlsConfig(
            cert_file=pki.server.cert_file, key_file=pki.server.key_file, client_auth=ClientAuth.REQUIRED))
