"""A TLS listener's certificate is replaced without a restart (gateway/auth/tls_reload.py): on
demand (SIGHUP) or when its files change; files that do not make a context leave the one in
use.  Runs the gateway's own listeners and TlsCertificates; handshakes over memory streams
show which certificate a new connection gets."""

from __future__ import annotations

import os
import shutil
import ssl
from pathlib import Path

import pytest
import trio
import trio.testing
from cryptography import x509

from configs.yaml_reader import parse_config
from gateway.cli.dev_certs import issue, name
from gateway.process.server import Gateway
from gateway.auth.tls import tls_handshake
from tests.unit.gateway.certs import Pki, make_pki


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    (tmp_path / "pki").mkdir()
    return make_pki(tmp_path / "pki")


def _gateway(tmp_path: Path, pki: Pki, *, reload_check_ms: int = 60000) -> tuple[Gateway, Path, Path]:
    live = tmp_path / "live"
    live.mkdir()
    cert, key = live / "server.pem", live / "server-key.pem"
    shutil.copy(pki.server.cert_file, cert)
    shutil.copy(pki.server.key_file, key)
    raw = {
        "listeners": [
            {"name": "PLAIN", "host": "127.0.0.1", "port": 0, "broker_port_base": 20000},
            {"name": "SSL", "security_protocol": "SSL", "host": "127.0.0.1", "port": 0, "broker_port_base": 21000,
             "tls": {"cert_file": str(cert), "key_file": str(key), "reload_check_ms": reload_check_ms}},
        ],
        "upstream": {"bootstrap_servers": ["127.0.0.1:1"]},
        "admin": None,
        "metadata": {"path": str(tmp_path / "meta")},
    }
    return Gateway(parse_config(raw)), cert, key


def _replace(path: Path, source: Path) -> None:
    """As an operator or cert-manager would: a new file moved over the old one."""
    tmp = path.with_suffix(".new")
    shutil.copy(source, tmp)
    os.replace(tmp, path)


async def _served_serial(context: ssl.SSLContext, pki: Pki) -> int:
    """The serial number of the certificate a new connection is shown."""
    server_stream, client_stream = trio.testing.memory_stream_pair()
    client_ctx = ssl.create_default_context(cafile=str(pki.ca.cert_file))
    client = trio.SSLStream(client_stream, client_ctx, server_hostname="localhost")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(tls_handshake, server_stream, context, 5.0)
        await client.do_handshake()
    return x509.load_der_x509_certificate(client.getpeercert(binary_form=True)).serial_number


def _metric(gw: Gateway, name_: str, **labels: str) -> float | None:
    return gw.metrics.registry.get_sample_value(name_, labels)


async def test_changed_files_are_served_to_new_connections(tmp_path: Path, pki: Pki) -> None:
    gw, cert, key = _gateway(tmp_path, pki)
    (plain, ssl_listener) = gw.listeners
    assert gw.tls.listeners == [ssl_listener]  # a PLAINTEXT listener has nothing to reload
    first = ssl_listener.security.ssl_context
    assert await _served_serial(first, pki) == pki.server.cert.serial_number
    expiry = "kgw_tls_certificate_expiry_timestamp_seconds"
    assert _metric(gw, expiry, listener="SSL") == pki.server.cert.not_valid_after_utc.timestamp()

    assert gw.tls.check(ssl_listener) is None  # unchanged files: nothing rebuilt
    assert ssl_listener.security.ssl_context is first

    renewed = issue(tmp_path / "pki", "renewed", pki.ca, name(CN="localhost", O="kgw tests"), server=True, days=90)
    _replace(key, renewed.key_file)
    _replace(cert, renewed.cert_file)
    assert gw.tls.check(ssl_listener) is True
    assert ssl_listener.security.ssl_context is not first
    assert await _served_serial(ssl_listener.security.ssl_context, pki) == renewed.cert.serial_number
    assert await _served_serial(first, pki) == pki.server.cert.serial_number  # what open connections hold
    assert _metric(gw, expiry, listener="SSL") == renewed.cert.not_valid_after_utc.timestamp()
    assert _metric(gw, "kgw_tls_certificate_reloads_total", listener="SSL", result="reloaded") == 1
    assert gw.tls.check(ssl_listener) is None


async def test_files_that_do_not_make_a_context_leave_the_one_in_use(tmp_path: Path, pki: Pki, caplog) -> None:
    gw, cert, key = _gateway(tmp_path, pki)
    ssl_listener = gw.listeners[1]
    in_use = ssl_listener.security.ssl_context
    renewed = issue(tmp_path / "pki", "renewed", pki.ca, name(CN="localhost", O="kgw tests"), server=True)
    _replace(cert, renewed.cert_file)  # the certificate copied, its key not yet
    assert gw.tls.check(ssl_listener) is False
    assert ssl_listener.security.ssl_context is in_use
    assert await _served_serial(ssl_listener.security.ssl_context, pki) == pki.server.cert.serial_number
    assert _metric(gw, "kgw_tls_certificate_reloads_total", listener="SSL", result="failed") == 1
    (warning,) = [r for r in caplog.records if r.name == "kgw.tls"]
    assert "listener SSL: TLS certificate not reloaded" in warning.getMessage()
    assert str(cert) in warning.getMessage()  # names the files, as at start-up
    assert _metric(gw, "kgw_tls_certificate_expiry_timestamp_seconds", listener="SSL") == \
        pki.server.cert.not_valid_after_utc.timestamp()

    assert gw.tls.check(ssl_listener) is None  # the same broken files are not tried every check
    _replace(key, renewed.key_file)  # the copy completes
    assert gw.tls.check(ssl_listener) is True
    assert await _served_serial(ssl_listener.security.ssl_context, pki) == renewed.cert.serial_number


async def test_sighup_reloads_every_tls_listener_even_unchanged(tmp_path: Path, pki: Pki) -> None:
    gw, _, _ = _gateway(tmp_path, pki, reload_check_ms=0)
    ssl_listener = gw.listeners[1]
    before = ssl_listener.security.ssl_context
    assert gw.tls.reload_all("SIGHUP") == {"SSL": True}
    assert ssl_listener.security.ssl_context is not before
    assert _metric(gw, "kgw_tls_certificate_reloads_total", listener="SSL", result="reloaded") == 1


async def test_the_watch_checks_every_reload_check_ms(tmp_path: Path, pki: Pki, autojump_clock) -> None:
    gw, cert, key = _gateway(tmp_path, pki, reload_check_ms=30000)
    ssl_listener = gw.listeners[1]
    renewed = issue(tmp_path / "pki", "renewed", pki.ca, name(CN="localhost", O="kgw tests"), server=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gw.tls.watch)
        _replace(key, renewed.key_file)
        _replace(cert, renewed.cert_file)
        await trio.sleep(29)  # virtual time (autojump clock): not checked yet
        assert await _served_serial(ssl_listener.security.ssl_context, pki) == pki.server.cert.serial_number
        await trio.sleep(2)
        assert await _served_serial(ssl_listener.security.ssl_context, pki) == renewed.cert.serial_number
        nursery.cancel_scope.cancel()


async def test_reload_check_ms_zero_means_only_on_sighup(tmp_path: Path, pki: Pki, autojump_clock) -> None:
    gw, cert, key = _gateway(tmp_path, pki, reload_check_ms=0)
    ssl_listener = gw.listeners[1]
    in_use = ssl_listener.security.ssl_context
    renewed = issue(tmp_path / "pki", "renewed", pki.ca, name(CN="localhost", O="kgw tests"), server=True)
    _replace(key, renewed.key_file)
    _replace(cert, renewed.cert_file)
    with trio.move_on_after(3600):
        await gw.tls.watch()  # nothing to watch: returns at once
    assert trio.current_time() < 3600
    assert ssl_listener.security.ssl_context is in_use


def test_reload_check_ms_is_validated(tmp_path: Path) -> None:
    from configs.gateway_config import ConfigError

    raw = {"listeners": [{"name": "SSL", "security_protocol": "SSL", "host": "127.0.0.1", "port": 0,
                          "tls": {"cert_file": "c.pem", "key_file": "k.pem", "reload_check_ms": -1}}],
           "upstream": {"bootstrap_servers": ["127.0.0.1:1"]}}
    with pytest.raises(ConfigError, match=r"listeners\[0\]\.tls\.reload_check_ms"):
        parse_config(raw)
