"""kgw's own login to a cluster that accepts only OAuth: Apache Kafka with an OAUTHBEARER-only
listener whose tokens Kafka's own KIP-768 validator checks against Keycloak's keys, kgw logging
in there with a client-credentials token from Keycloak (client ``kgw-upstream``, 12 s tokens),
renewing the token before it expires and re-authenticating (KIP-368) the upstream connections
it keeps open for its clients, which the broker would otherwise close every 3 s."""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.cluster import base_gateway_config, deep_merge, launch_gateway
from tests.support.kafka import OAuthListener, start_kafka

pytestmark = [pytest.mark.integration, pytest.mark.kafka, pytest.mark.keycloak]

SESSION_MS = 3000  # the broker's connections.max.reauth.ms on its OAUTH listener


@pytest.fixture(scope="module")
def oauth_kafka(keycloak, tmp_path_factory):
    """One Kafka node: SASL/PLAIN for its own use, OAUTHBEARER only on the listener kgw uses,
    Kafka's StandardAuthorizer with kgw's token principal (``azp``) as a super user."""
    cluster = start_kafka(tmp_path_factory.mktemp("kafka-oauth"), sasl_users={"admin": "admin-secret"},
                          oauth=OAuthListener(jwks_url=f"{keycloak.issuer}/protocol/openid-connect/certs",
                                              issuer=keycloak.issuer, audience="kgw", sub_claim="azp",
                                              max_reauth_ms=SESSION_MS, super_users=("User:kgw-upstream",)))
    try:
        yield cluster
    finally:
        cluster.stop()


def _gateway(oauth_kafka, keycloak, work, secret: str = "kgw-upstream-secret", **oauth):
    config = deep_merge(base_gateway_config(oauth_kafka.oauth_bootstrap, work / "metadata", oauth_kafka.node_ids), {
        "upstream": {"security_protocol": "SASL_PLAINTEXT", "principal": "User:kgw-upstream",
                     "sasl": {"mechanism": "OAUTHBEARER",
                              "oauthbearer": {"issuer_url": keycloak.issuer, "client_id": "kgw-upstream",
                                              "client_secret": secret, **oauth}}},
    })
    return launch_gateway(work.name, config, work, node_ids=oauth_kafka.node_ids)


def _metric(gw, name: str, **labels: str) -> float:
    with urllib.request.urlopen(f"{gw.admin_url}/metrics", timeout=10) as r:
        text = r.read().decode()
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    found = re.search(rf"^{name}{{{want}}} (\S+)$" if labels else rf"^{name} (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def test_kgw_logs_in_to_an_oauth_only_cluster_and_keeps_its_sessions_alive(oauth_kafka, keycloak, tmp_path):
    gw = _gateway(oauth_kafka, keycloak, tmp_path / f"kgw-up-oauth-{uuid.uuid4().hex[:6]}")
    try:
        conf = {"bootstrap.servers": gw.bootstrap, "broker.address.family": "v4"}
        topic = f"up-oauth-{uuid.uuid4().hex[:8]}"
        admin = AdminClient(conf)
        admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
        producer = Producer({**conf, "linger.ms": 0})
        failures: list = []
        sent = 0
        # A steady producer on one client connection across several broker sessions (3 s) and
        # one token renewal (12 s tokens, renewed after 80%): pacing, not synchronisation.
        until = time.monotonic() + 11
        while time.monotonic() < until:
            producer.produce(topic, str(sent).encode(), on_delivery=lambda err, _m: failures.append(err) if err else None)
            producer.flush(15)
            sent += 1
            time.sleep(0.2)
        assert not failures, failures
        consumer = Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < sent and time.monotonic() < deadline:
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                got.append(message.value())
        consumer.close()
        assert got == [str(i).encode() for i in range(sent)]

        log = gw.stderr_path.read_text()
        reauthenticated = _metric(gw, "kgw_upstream_reauthentications_total", result="ok")
        assert reauthenticated >= 2, log[-4000:]
        assert _metric(gw, "kgw_upstream_reauthentications_total", result="failed") == 0
        # the broker never had to close a connection whose session had expired
        assert "upstream closed the connection" not in log and "re-authentication failed" not in log, log[-4000:]
        assert log.count("fetched kgw's upstream OAUTHBEARER token") >= 2, log[-4000:]
        assert "kgw-upstream-secret" not in log
    finally:
        gw.stop()


def test_a_refused_client_secret_keeps_kgw_unready_with_the_providers_reason(oauth_kafka, keycloak, tmp_path):
    gw = _gateway(oauth_kafka, keycloak, tmp_path / f"kgw-up-bad-{uuid.uuid4().hex[:6]}", secret="not-the-secret")
    try:
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{gw.admin_url}/readyz", timeout=10)
        body = refused.value.read().decode()
        assert refused.value.code == 503
        assert "OAUTHBEARER" in body and "kgw-upstream" in body and "HTTP 401" in body, body
        assert "not-the-secret" not in body and "not-the-secret" not in gw.stderr_path.read_text()
    finally:
        gw.stop()
