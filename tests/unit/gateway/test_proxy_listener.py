"""A listener behind a load balancer (PROXY protocol): the client address of the header is the
client address for host ACLs and per-host limits; a connection from outside the trusted
networks, or without a valid header, is closed before anything else is read; a listener
without ``proxy_protocol`` never takes a header."""

from __future__ import annotations

import socket
import struct
from datetime import timedelta

import trio
from kio.static.primitive import i16, i32

from authz.acl import AccessControlEntry, AclBinding, AclOperation, AclPermissionType, PatternType, ResourcePattern
from authz.acl import ResourceType
from protocol.codecs import request_class
from protocol.proxy_protocol import V2_SIGNATURE
from tests.support.kio_samples import record_batch
from tests.unit.gateway.fake_broker import NODE_ID, FakeBroker
from tests.unit.gateway.test_connection import RawClient, _start_gateway
from tests.support.ports import free_port_base

ALLOWED, OTHER = "10.1.2.3", "10.9.9.9"


def _v2(source: str, port: int = 40000) -> bytes:
    addresses = socket.inet_aton(source) + socket.inet_aton("10.0.0.1") + struct.pack(">HH", port, 9092)
    tlv = b"\x04\x00\x03abc"  # a NOOP TLV, skipped
    return V2_SIGNATURE + bytes([0x21, 0x11]) + struct.pack(">H", len(addresses) + len(tlv)) + addresses + tlv


def _v1(source: str, port: int = 40000) -> bytes:
    return f"PROXY TCP4 {source} 10.0.0.1 {port} 9092\r\n".encode()


def _listener(trusted: list[str] | None) -> dict:
    listener = {"name": "T", "host": "127.0.0.1", "port": 0, "advertised_host": "127.0.0.1",
                "broker_port_base": free_port_base((NODE_ID,))}
    if trusted is not None:
        listener["proxy_protocol"] = {"trusted_networks": trusted}
    return listener


async def _gateway(nursery, tmp_path, trusted, **sections):
    broker = await nursery.start(FakeBroker().serve)
    return (*await _start_gateway(nursery, tmp_path, broker, False, listeners=[_listener(trusted)], **sections),
            broker)


async def _client(port: int, header: bytes) -> RawClient:
    client = await RawClient.connect(port)
    await client.stream.send_all(header)
    return client


def _produce_request():
    cls = request_class(0, 8)
    topic_cls = cls.__dataclass_fields__["topic_data"].type.__args__[0]
    part_cls = topic_cls.__dataclass_fields__["partition_data"].type.__args__[0]
    return cls(transactional_id=None, acks=i16(1), timeout=timedelta(seconds=5), topic_data=(
        topic_cls(name="orders", partition_data=(part_cls(index=i32(0), records=record_batch()),)),))


async def _closed_unanswered(client: RawClient) -> bool:
    """Send a request; True when the gateway closed the connection instead of answering."""
    try:
        await client.send(16, 4, 1, request_class(16, 4)(states_filter=()))
        with trio.fail_after(10):
            return await client.receive_frame() is None
    except trio.BrokenResourceError:
        return True


def _errors(gateway, reason: str) -> float:
    return gateway.metrics.registry.get_sample_value("kgw_request_errors_total",
                                                     {"listener": "T", "api": "-", "reason": reason}) or 0


async def test_host_acls_see_the_address_of_the_header_v1_and_v2(nursery, tmp_path):
    gateway, port, broker = await _gateway(
        nursery, tmp_path, ["127.0.0.1/32"], authorizer={"class_name": "authz.standard_authorizer:StandardAuthorizer"})
    results = await gateway.authorizer.create_acls(None, [AclBinding(
        ResourcePattern(ResourceType.TOPIC, "orders", PatternType.LITERAL),
        AccessControlEntry("User:ANONYMOUS", ALLOWED, AclOperation.WRITE, AclPermissionType.ALLOW))])
    assert all(r.ok for r in results)
    for header in (_v1, _v2):
        for source, expected in ((ALLOWED, 0), (OTHER, 29)):  # 29: TOPIC_AUTHORIZATION_FAILED
            client = await _client(port, header(source))
            await client.send(0, 8, 7, _produce_request())
            correlation_id, response = await client.receive(0, 8)
            assert correlation_id == 7
            assert response.responses[0].partition_responses[0].error_code == expected, (header, source)
    assert len(broker.produce_bytes) == 2  # the allowed ones only reached the broker
    assert {conn.peer[0] for conn in gateway.connections} <= {ALLOWED, OTHER}


async def test_per_host_limits_count_the_client_behind_the_balancer(nursery, tmp_path):
    gateway, port, _broker = await _gateway(nursery, tmp_path, ["127.0.0.0/8"],
                                            limits={"max_connections_per_ip": 1})
    request = request_class(16, 4)(states_filter=())
    first = await _client(port, _v2(ALLOWED, 1))
    await first.send(16, 4, 1, request)
    assert (await first.receive(16, 4))[0] == 1
    second = await _client(port, _v2(ALLOWED, 2))  # the same client host: over its limit
    assert await second.receive_frame() is None
    other = await _client(port, _v2(OTHER, 3))  # another host through the same balancer: served
    await other.send(16, 4, 2, request)
    assert (await other.receive(16, 4))[0] == 2
    assert gateway.metrics.registry.get_sample_value(
        "kgw_request_errors_total", {"listener": "T", "api": "-", "reason": "connection_limit_per_ip"}) == 1


async def test_a_connection_from_outside_the_trusted_networks_is_closed_before_it_is_read(nursery, tmp_path):
    gateway, port, broker = await _gateway(nursery, tmp_path, ["127.0.0.2/32"])
    client = await _client(port, _v2(ALLOWED))  # a forged header, from 127.0.0.1: not a balancer
    assert await _closed_unanswered(client)
    assert _errors(gateway, "proxy_untrusted") == 1
    assert not [r for r in broker.received if r[0] == 16]


async def test_a_balancer_connection_without_a_valid_header_is_closed(nursery, tmp_path):
    gateway, port, broker = await _gateway(nursery, tmp_path, ["127.0.0.1/32"])
    bad = (b"GET / HTTP/1.1\r\n\r\n", V2_SIGNATURE + b"\x31\x11\x00\x0c" + b"\x00" * 12,  # version 3
           b"PROXY TCP4 10.1.2.3 10.0.0.1 99999 9092\r\n", V2_SIGNATURE + b"\x21\x11\xff\xff")  # too long
    for header in bad:
        assert await _closed_unanswered(await _client(port, header))
    assert await _closed_unanswered(await RawClient.connect(port))  # a Kafka request where the header should be
    assert _errors(gateway, "proxy_header") == len(bad) + 1
    assert not [r for r in broker.received if r[0] == 16]


async def test_a_listener_without_proxy_protocol_never_takes_a_header(nursery, tmp_path):
    gateway, port, broker = await _gateway(nursery, tmp_path, None)
    for header in (_v1(ALLOWED), _v2(ALLOWED)):
        assert await _closed_unanswered(await _client(port, header))  # the header is a bad Kafka frame
    assert not [r for r in broker.received if r[0] == 16]
    assert not [c for c in gateway.connections if c.peer[0] == ALLOWED]


async def test_a_tls_listener_reads_the_header_before_the_handshake(nursery, tmp_path):
    import ssl

    from tests.unit.gateway.certs import make_pki

    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    broker = await nursery.start(FakeBroker().serve)
    listener = {**_listener(["127.0.0.1/32"]), "security_protocol": "SSL",
                "tls": {"cert_file": str(pki.server.cert_file), "key_file": str(pki.server.key_file)}}
    gateway, port = await _start_gateway(nursery, tmp_path, broker, False, listeners=[listener])
    raw = await trio.open_tcp_stream("127.0.0.1", port)
    await raw.send_all(_v2(ALLOWED, 4242))  # HAProxy sends the header first, then the client's TLS bytes
    client = trio.SSLStream(raw, ssl.create_default_context(cafile=str(pki.ca.cert_file)), server_hostname="localhost")
    await client.do_handshake()
    tls = RawClient(client)
    await tls.send(16, 4, 3, request_class(16, 4)(states_filter=()))
    assert (await tls.receive(16, 4))[0] == 3
    assert [c.peer for c in gateway.connections] == [(ALLOWED, 4242)]
