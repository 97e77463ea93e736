"""SNI routing: one TLS port for bootstrap and every broker.  The name in the ClientHello picks
the upstream broker, Metadata advertises every broker by its name on that one port, an unknown
name (or none) is refused during the handshake, no per-broker port is opened, and a renewed
certificate keeps the routing."""

from __future__ import annotations

import logging
import ssl
import struct

import pytest
import trio

from configs.gateway_config import ConfigError
from configs.yaml_reader import parse_config
from gateway.cli.dev_certs import issue, name
from protocol.codecs import decode_response
from tests.unit.gateway.certs import make_pki
from tests.unit.gateway.fake_broker import NODE_ID, FakeBroker
from tests.unit.gateway.test_connection import _md_request, _start_gateway
from gateway.upstream.cluster import encode_request

DOMAIN = "kgw.test"
SNI = {"bootstrap_host": f"bootstrap.{DOMAIN}", "broker_host_pattern": f"broker-{{node_id}}.{DOMAIN}"}


@pytest.fixture
def pki(tmp_path):
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    wildcard = issue(tmp_path / "pki", "wildcard", pki.ca, name(CN=f"*.{DOMAIN}"), server=True,
                     hosts=(f"*.{DOMAIN}",))
    return pki, wildcard


async def _gateway(nursery, tmp_path, pki):
    ca, wildcard = pki
    broker = FakeBroker()
    broker.extra_nodes = (2, 3)
    broker = await nursery.start(broker.serve)
    listener = {"name": "T", "security_protocol": "SSL", "host": "127.0.0.1", "port": 0, "advertised_port": 9443,
                "tls": {"cert_file": str(wildcard.cert_file), "key_file": str(wildcard.key_file)}, "sni": SNI}
    gateway, port = await _start_gateway(nursery, tmp_path, broker, False, listeners=[listener])
    return gateway, port, ca


async def _connect(port: int, ca, server_name: str | None) -> trio.SSLStream:
    context = ssl.create_default_context(cafile=str(ca.ca.cert_file))
    if server_name is None:
        context.check_hostname = False
    stream = trio.SSLStream(await trio.open_tcp_stream("127.0.0.1", port), context, server_hostname=server_name)
    await stream.do_handshake()
    return stream


async def _metadata(stream: trio.SSLStream) -> object:
    await stream.send_all(encode_request(3, 12, 1, _md_request(12)))
    data = b""
    while len(data) < 4 or len(data) < 4 + struct.unpack(">i", data[:4])[0]:
        chunk = await stream.receive_some(65536)
        assert chunk, "closed"
        data += chunk
    return decode_response(3, 12, memoryview(data), 9)  # length, correlation id, empty tagged fields


async def test_the_server_name_picks_the_broker_and_metadata_advertises_names(nursery, tmp_path, pki):
    gateway, port, ca = await _gateway(nursery, tmp_path, pki)
    bootstrap = await _connect(port, ca, f"bootstrap.{DOMAIN}")
    response = await _metadata(bootstrap)
    assert {(b.node_id, b.host, b.port) for b in response.brokers} == {
        (n, f"broker-{n}.{DOMAIN}", 9443) for n in (NODE_ID, 2, 3)}
    kept = []  # (a stream dropped here would be closed by the collector)
    for node in (2, NODE_ID):
        kept.append(await _connect(port, ca, f"BROKER-{node}.{DOMAIN}"))  # names are case-insensitive
        await _metadata(kept[-1])
    node_ids = sorted((c.node_id is None, c.node_id or 0) for c in gateway.connections)
    assert node_ids == sorted([(False, 2), (False, NODE_ID), (True, 0)])
    listener = gateway.listeners[0]
    assert listener._node_ports == {}  # no port per broker


@pytest.mark.parametrize("server_name", [f"broker-9.{DOMAIN}", f"other.{DOMAIN}", f"broker-01.{DOMAIN}", None])
async def test_an_unknown_name_is_refused_in_the_handshake(nursery, tmp_path, pki, server_name, caplog):
    caplog.set_level(logging.INFO)
    gateway, port, ca = await _gateway(nursery, tmp_path, pki)
    with pytest.raises(trio.BrokenResourceError):
        await _connect(port, ca, server_name)
    with trio.fail_after(10):
        while not [r for r in caplog.records if "authentication failed" in r.getMessage()]:
            await trio.sleep(0.01)  # the gateway's side of the handshake ends a moment later
    reason = next(r.getMessage() for r in caplog.records if "authentication failed" in r.getMessage())
    assert "unrecognized" in reason.lower() or "server name" in reason.lower(), reason
    assert not gateway.connections


async def test_a_reloaded_certificate_keeps_the_routing(nursery, tmp_path, pki):
    gateway, port, ca = await _gateway(nursery, tmp_path, pki)
    assert gateway.listeners[0].security.reload_tls()
    with pytest.raises(trio.BrokenResourceError):
        await _connect(port, ca, f"broker-9.{DOMAIN}")
    stream = await _connect(port, ca, f"broker-3.{DOMAIN}")
    await _metadata(stream)
    assert 3 in {c.node_id for c in gateway.connections}


def test_sni_needs_a_tls_listener_and_a_pattern_with_the_node_id():
    base = {"upstream": {"bootstrap_servers": ["b:9092"]}, "admin": None}
    for listener, error in (
            ({"name": "P", "port": 0, "sni": SNI}, "sni: needs a TLS listener"),
            ({"name": "S", "port": 0, "security_protocol": "SSL", "tls": {"cert_file": "/c", "key_file": "/k"},
              "sni": {**SNI, "broker_host_pattern": "broker.kgw.test"}}, 'with "{node_id}" once'),
            ({"name": "S", "port": 0, "security_protocol": "SSL", "broker_port_base": 20000,
              "tls": {"cert_file": "/c", "key_file": "/k"}, "sni": SNI}, "broker_port_base: not used with sni")):
        with pytest.raises(ConfigError, match=error):
            parse_config({**base, "listeners": [listener]})

