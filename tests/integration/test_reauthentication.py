"""KIP-368 re-authentication on a kgw listener (`sasl.connections_max_reauth_ms`): a client
that re-authenticates keeps its connection and keeps producing across many session
lifetimes, on the data plane as on the Trio path; one that does not is disconnected at its
first request after its session expired."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from authz.credentials import PlainCredential
from protocol.codecs import make, request_class
from tests.support.ports import HOST, free_port, free_port_base
from tests.support.raw_kafka import RawConnection

pytestmark = pytest.mark.integration

LIFETIME_MS = 1000


@pytest.fixture(params=[True, False], ids=["data-plane", "trio"])
def gateway(request, start_gateway):
    return start_gateway({
        "listeners": [{"name": "SASL", "security_protocol": "SASL_PLAINTEXT", "host": HOST, "port": free_port(),
                       "advertised_host": HOST, "broker_port_base": free_port_base(),
                       "sasl": {"mechanisms": ["PLAIN"], "connections_max_reauth_ms": LIFETIME_MS}}],
        "users": {"plain": [{"name": "alice", "password_hash": PlainCredential.hash_password("alice-pw",
                                                                                          iterations=1000)}]},
        "io": {"data_plane_thread": request.param},
    }, name=f"kgw-reauth-{uuid.uuid4().hex[:6]}")


def _conf(gw) -> dict:
    return {"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
            "sasl.username": "alice", "sasl.password": "alice-pw", "broker.address.family": "v4"}


def test_a_client_that_reauthenticates_keeps_its_connection_and_keeps_producing(gateway):
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(_conf(gateway))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer(_conf(gateway))
    failures: list = []
    delivered = 0
    until = time.monotonic() + 3.5 * LIFETIME_MS / 1000  # several session lifetimes
    while time.monotonic() < until:  # a steady producer (pacing, not synchronisation)
        producer.produce(topic, b"r", on_delivery=lambda err, _m: failures.append(err) if err else None)
        producer.flush(10)
        delivered += 1
        time.sleep(0.1)
    assert not failures and delivered > 5, failures
    log = gateway.process.stderr_path.read_text()
    assert log.count("re-authenticated as User:alice with PLAIN") >= 2, log[-3000:]
    assert "did not re-authenticate" not in log


def test_a_client_that_does_not_reauthenticate_is_closed_at_its_first_request_after_expiry(gateway):
    conn = RawConnection(gateway.bootstrap)
    handshake = conn.call(17, 1, make(request_class(17, 1), mechanism="PLAIN"))
    assert handshake.error_code == 0
    auth = conn.call(36, 2, make(request_class(36, 2), auth_bytes=b"\x00alice\x00alice-pw"))
    assert auth.error_code == 0 and auth.session_lifetime.total_seconds() * 1000 == LIFETIME_MS
    logged_in = time.monotonic()
    metadata = make(request_class(3, 12), topics=(), allow_auto_topic_creation=False,
                    include_topic_authorized_operations=False)
    assert conn.call(3, 12, metadata).brokers  # within the lifetime: served
    time.sleep(LIFETIME_MS / 1000)  # the session's lifetime passes (the feature under test is time)
    with pytest.raises(ConnectionError, match="connection closed"):
        conn.call(3, 12, metadata)
    assert time.monotonic() - logged_in >= LIFETIME_MS / 1000
    assert "did not re-authenticate (KIP-368)" in gateway.process.stderr_path.read_text()
