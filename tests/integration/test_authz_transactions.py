"""Transaction authorization over the wire: clients -> kgw (StandardAuthorizer) -> tansu.

ACLs are seeded offline with ``kgw acls add`` before the gateway starts; clients
on the PLAINTEXT listener are ``User:ANONYMOUS``.

* raw-protocol InitProducerId: the idempotent path (no transactional id) is
  allowed by WRITE on any topic (KIP-679, by resource type) and otherwise
  answered by kgw with CLUSTER_AUTHORIZATION_FAILED without reaching tansu; the
  transactional path needs TRANSACTIONAL_ID:WRITE (else 53, not forwarded).
* confluent-kafka producers (idempotent, transactional) once the Metadata
  enforcement (topics family) is in the registry; before that a gateway with an
  authorizer refuses Metadata, so these tests skip.
"""

from __future__ import annotations

import re
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest

from tests.support.acls import seed_acls
from tests.support.raw_kafka import call
from kio.static.primitive import i16, i64

from protocol.codecs import request_class

pytestmark = pytest.mark.integration

AUTHORIZER = {"authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer", "config": {}}}
ANON = "User:ANONYMOUS"
T = 15


def start(start_gateway, tmp_path: Path, name: str, *acls: list[str]):
    seed_acls(tmp_path / name / "metadata", *acls)
    return start_gateway(AUTHORIZER, name=name)


def init_producer_id(txn: str | None):
    return request_class(22, 4)(transactional_id=txn, transaction_timeout=timedelta(seconds=30),
                                producer_id=i64(-1), producer_epoch=i16(-1))


def forwarded(gw, api: str) -> float:
    """How many ``api`` requests kgw forwarded and got an upstream answer for (admin /metrics)."""
    text = urllib.request.urlopen(gw.admin_url.rstrip("/") + "/metrics", timeout=T).read().decode()
    return sum(float(m.group(1)) for m in re.finditer(
        rf'^kgw_upstream_latency_seconds_count\{{[^}}]*api="{api}"[^}}]*\}} (\S+)$', text, re.M))


# -- raw protocol: the gateway's decision, whatever tansu supports --------------------


def test_idempotent_init_producer_id_allowed_by_write_on_a_topic(start_gateway, tmp_path):
    gw = start(start_gateway, tmp_path, "kgw-idem-ok", ["--operation", "WRITE", "--topic", "orders"])
    r = call(gw.bootstrap, 22, 4, init_producer_id(None))
    assert r.error_code == 0 and r.producer_id >= 0
    assert forwarded(gw, "InitProducerId") == 1


def test_idempotent_init_producer_id_without_any_write_is_31_and_not_forwarded(start_gateway, tmp_path):
    gw = start(start_gateway, tmp_path, "kgw-idem-denied", ["--operation", "READ", "--topic", "orders"])
    r = call(gw.bootstrap, 22, 4, init_producer_id(None))
    assert r.error_code == 31 and r.producer_id == -1 and r.producer_epoch == -1
    assert forwarded(gw, "InitProducerId") == 0


def test_transactional_init_producer_id_needs_transactional_id_write(start_gateway, tmp_path):
    gw = start(start_gateway, tmp_path, "kgw-txn",
               ["--operation", "WRITE", "--transactional-id", "tx-ok"],
               ["--operation", "DESCRIBE", "--transactional-id", "tx-no"])
    denied = call(gw.bootstrap, 22, 4, init_producer_id("tx-no"))
    assert denied.error_code == 53 and denied.producer_id == -1
    assert forwarded(gw, "InitProducerId") == 0
    allowed = call(gw.bootstrap, 22, 4, init_producer_id("tx-ok"))
    assert forwarded(gw, "InitProducerId") == 1  # reached tansu, which gave the producer its id
    assert allowed.error_code == 0 and allowed.producer_id >= 0


def test_end_txn_denied_answered_by_kgw(start_gateway, tmp_path):
    gw = start(start_gateway, tmp_path, "kgw-endtxn", ["--operation", "WRITE", "--topic", "orders"])
    body = request_class(26, 3)(transactional_id="tx", producer_id=i64(1), producer_epoch=i16(0), committed=True)
    assert call(gw.bootstrap, 26, 3, body).error_code == 53
    assert forwarded(gw, "EndTxn") == 0


# -- real clients -------------------------------------------------------------------------

COMMON = {"socket.timeout.ms": 10000, "reconnect.backoff.max.ms": 500, "broker.address.family": "v4"}


def _create_topic(tansu, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": tansu.bootstrap, **COMMON})
    admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=10)[topic].result(timeout=T)


def _produce(bootstrap: str, topic: str, **extra) -> tuple[list, list]:
    """Produce one record; return (delivery error codes, client-level (code, text) errors)."""
    from confluent_kafka import KafkaException, Producer

    delivered: list = []
    client_errors: list = []

    def on_error(err):
        client_errors.append((err.code(), err.str()))

    def on_delivery(err, _msg):
        delivered.append(None if err is None else err.code())

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "message.timeout.ms": 10000,
                  "error_cb": on_error, **COMMON, **extra})
    p.produce(topic, b"v", on_delivery=on_delivery)
    try:
        p.flush(T)
    except (KafkaException, SystemError) as e:  # a fatal idempotence error surfaces from flush
        client_errors.append((None, repr(e)))
    return delivered, client_errors


def test_confluent_idempotent_producer_with_topic_write_only(start_gateway, tmp_path, tansu, topic_name):
    _create_topic(tansu, topic_name)
    gw = start(start_gateway, tmp_path, "kgw-cf-idem", ["--operation", "WRITE", "--topic", topic_name],
               ["--operation", "DESCRIBE", "--topic", topic_name])
    delivered, client_errors = _produce(gw.bootstrap, topic_name)
    assert delivered == [None], client_errors
    assert forwarded(gw, "InitProducerId") >= 1


def test_confluent_idempotent_producer_without_write_fails_with_cluster_authorization(
        start_gateway, tmp_path, tansu, topic_name):
    from confluent_kafka import KafkaError

    _create_topic(tansu, topic_name)
    gw = start(start_gateway, tmp_path, "kgw-cf-idem-no", ["--operation", "DESCRIBE", "--topic", topic_name])
    from confluent_kafka import KafkaException, Producer

    # no Python callbacks: librdkafka raises the fatal idempotence error from flush()
    p = Producer({"bootstrap.servers": gw.bootstrap, "enable.idempotence": True, "message.timeout.ms": 10000,
                  **COMMON})
    p.produce(topic_name, b"v")
    with pytest.raises(KafkaException) as e:
        for _ in range(T):
            p.flush(1)
    assert e.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED, e.value
    assert forwarded(gw, "InitProducerId") == 0


@pytest.mark.parametrize("allowed", [True, False], ids=["txn-write", "no-txn-write"])
def test_confluent_transactional_producer(start_gateway, tmp_path, tansu, topic_name, allowed):
    from confluent_kafka import KafkaException, Producer

    _create_topic(tansu, topic_name)
    acls = [["--operation", "WRITE", "--topic", topic_name], ["--operation", "DESCRIBE", "--topic", topic_name]]
    if allowed:
        acls.append(["--operation", "WRITE", "--transactional-id", "tx-cf"])
    gw = start(start_gateway, tmp_path, f"kgw-cf-txn-{allowed}", *acls)
    p = Producer({"bootstrap.servers": gw.bootstrap, "transactional.id": "tx-cf", **COMMON})
    if not allowed:
        with pytest.raises(KafkaException) as e:
            p.init_transactions(T)
        assert "authoriz" in str(e.value).lower()
        assert forwarded(gw, "InitProducerId") == 0
        return
    try:
        p.init_transactions(T)
    except KafkaException as e:  # tansu's transaction support may be partial: not an authorization error
        assert "authoriz" not in str(e).lower()
        return
    assert forwarded(gw, "InitProducerId") >= 1
