"""kgw behind HAProxy (Debian's package) sending the PROXY protocol, v1 (`send-proxy`) and v2
(`send-proxy-v2`): host ACLs that allow one client address and deny another decide on the
client's own address over the wire, the audit trail names it, and a forged header from a host
that is not a trusted balancer is refused."""

from __future__ import annotations

import struct
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.codecs import make, nested, request_class
from tests.support.acls import add_acl
from tests.support.haproxy import start_haproxy
from tests.support.ports import HOST, free_port, free_port_base
from tests.support.raw_kafka import RawConnection

pytestmark = pytest.mark.integration

ALLOWED, DENIED = "127.0.0.2", "127.0.0.3"  # two client hosts (Linux answers on all of 127/8)


@pytest.fixture
def behind_haproxy(start_gateway, tansu, tmp_path):
    topic = f"proxied-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": tansu.bootstrap, "broker.address.family": "v4"})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    port = free_port()
    gw_name = f"kgw-proxied-{uuid.uuid4().hex[:6]}"
    add_acl(tmp_path / gw_name / "metadata", "--host", ALLOWED, "--operation", "DESCRIBE",
            "--operation", "WRITE", "--topic", topic)
    gateway = start_gateway({
        "listeners": [{"name": "LB", "security_protocol": "PLAINTEXT", "host": HOST, "port": port,
                       "advertised_host": HOST, "broker_port_base": free_port_base(),
                       "proxy_protocol": {"trusted_networks": ["127.0.0.1/32"]}}],
        "authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer"},
    }, name=gw_name)
    haproxy = start_haproxy(tmp_path / "haproxy", {"v1": (port, "send-proxy"), "v2": (port, "send-proxy-v2")})
    try:
        yield gateway, haproxy, topic, port
    finally:
        haproxy.stop()


def _metadata(address: str, source: str, topic: str) -> int:
    """The topic's error code in a Metadata v12 answer, asked from ``source``."""
    cls = request_class(3, 12)
    topic_cls = nested(cls, "topics")
    body = make(cls, topics=(make(topic_cls, name=topic, topic_id=uuid.UUID(int=0)),),
                allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    with RawConnection(address, source=source) as conn:
        response = conn.call(3, 12, body)
    return int(response.topics[0].error_code)


def test_host_acls_decide_on_the_address_the_balancer_names(behind_haproxy):
    gateway, haproxy, topic, _port = behind_haproxy
    for route in ("v1", "v2"):
        address = f"{HOST}:{haproxy.ports[route]}"
        assert _metadata(address, ALLOWED, topic) == 0, route
        assert _metadata(address, DENIED, topic) == 29, route  # TOPIC_AUTHORIZATION_FAILED
    log = gateway.stderr_path.read_text()
    denials = [line for line in log.splitlines() if topic in line and "DENIED" in line.upper()]
    assert denials and all(DENIED in line for line in denials), log[-3000:]
    assert not [line for line in denials if "127.0.0.1" in line]


def test_a_forged_header_from_a_host_that_is_not_a_balancer_is_refused(behind_haproxy):
    gateway, _haproxy, topic, port = behind_haproxy
    forged = f"PROXY TCP4 {ALLOWED} {HOST} 40000 {port}\r\n".encode()
    with RawConnection(f"{HOST}:{port}", source=DENIED) as conn:  # straight to kgw, not via HAProxy
        conn.sock.sendall(forged + struct.pack(">i", 0))
        try:
            answer = conn.sock.recv(100)
        except ConnectionResetError:  # closed with the forged bytes unread
            answer = b""
        assert answer == b""  # closed, nothing answered
    log = gateway.stderr_path.read_text()
    assert f"closing one from {DENIED}" in log, log[-3000:]
