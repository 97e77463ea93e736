"""SASL/OAUTHBEARER through kgw with tokens from a real OpenID Connect provider (Keycloak,
tests/support/keycloak.py): real clients log in with tokens Keycloak issued them, ACLs on their
`User:` principal and on the `Group:` principals of their token's groups claim decide, tokens
Keycloak issued for another audience (or forged) are refused with the reason in kgw's log, and
a signing-key rotation in Keycloak is picked up without a restart."""

from __future__ import annotations

import base64
import json
import re
import time
import urllib.error
import urllib.request
import uuid

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)
from kafka import KafkaProducer
from kafka.net.sasl.oauth import AbstractTokenProvider

from tests.support.cluster import base_gateway_config, deep_merge, launch_gateway
from tests.support.kafka_data import authentication_error, confluent_errors
from tests.support.ports import HOST, free_port, free_port_base
from tests.support.raw_kafka import RawConnection
from protocol.codecs import make, request_class

pytestmark = [pytest.mark.integration, pytest.mark.keycloak]

CLIENTS = {"svc-orders": "svc-orders-secret", "svc-reports": "svc-reports-secret",
           "svc-other-audience": "svc-other-secret", "svc-short": "svc-short-secret"}  # svc-short: 5 s tokens


def _listener(oauthbearer: dict, reauth_ms: int = 0) -> dict:
    return {"name": "OAUTH", "security_protocol": "SASL_PLAINTEXT", "host": HOST, "port": free_port(),
            "advertised_host": HOST, "broker_port_base": free_port_base(),
            "sasl": {"mechanisms": ["OAUTHBEARER"], "oauthbearer": oauthbearer, "connections_max_reauth_ms": reauth_ms}}


@pytest.fixture(scope="module")
def gateway(_tansu_session, keycloak, tmp_path_factory):
    """One gateway for the module (each test its own topics and ACLs)."""
    work = tmp_path_factory.mktemp("kgw-oauth")
    config = deep_merge(base_gateway_config(_tansu_session.bootstrap, work / "metadata"), {
        "listeners": [_listener({"issuer_url": keycloak.issuer, "expected_audience": ["kgw"],
                                 "sub_claim_name": "azp", "groups_claim": "groups"}, reauth_ms=3_600_000)],
        "authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer",
                       "config": {"super.users": "User:svc-orders"}},
    })
    gw = launch_gateway("kgw-oauth", config, work)
    try:
        yield gw
    finally:
        gw.stop()


def _conf(gw, keycloak, client: str) -> dict:
    """librdkafka's own OIDC client-credentials login (KIP-768), against Keycloak."""
    return {"bootstrap.servers": gw.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER",
            "sasl.oauthbearer.method": "oidc", "sasl.oauthbearer.client.id": client,
            "sasl.oauthbearer.client.secret": CLIENTS[client],
            "sasl.oauthbearer.token.endpoint.url": keycloak.token_endpoint, "broker.address.family": "v4"}


def _produce(conf: dict, topic: str) -> KafkaError | None:
    """One record; the delivery error, or None when it was written."""
    outcome: list = []
    producer = Producer({**conf, "message.timeout.ms": 15000})
    producer.produce(topic, b"r", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(30)
    assert outcome, "no delivery report"
    return outcome[0]


def _acl(topic: str, principal: str, permission=AclPermissionType.ALLOW) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", AclOperation.ALL,
                      permission)


def test_keycloak_tokens_log_in_and_acls_on_users_and_groups_decide(gateway, keycloak):
    topic = f"oauth-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(_conf(gateway, keycloak, "svc-orders"))  # a super user by its token's azp
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    assert _produce(_conf(gateway, keycloak, "svc-orders"), topic) is None
    reports = _conf(gateway, keycloak, "svc-reports")  # User:svc-reports, Group:analytics
    denied = _produce(reports, topic)
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, denied
    for f in admin.create_acls([_acl(topic, "Group:analytics")]).values():
        f.result(30)
    assert _produce(reports, topic) is None  # allowed by its group, granted mid-life
    listed = admin.describe_acls(AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None,
                                                  AclOperation.ANY, AclPermissionType.ANY)).result(30)
    assert [b.principal for b in listed] == ["Group:analytics"]
    for f in admin.create_acls([_acl(topic, "Group:analytics", AclPermissionType.DENY),
                                _acl(topic, "User:svc-reports")]).values():
        f.result(30)
    denied = _produce(reports, topic)  # a DENY on the group beats an ALLOW on the user
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, denied
    log = gateway.process.stderr_path.read_text()
    assert "authenticated as User:svc-reports with OAUTHBEARER" in log


class _Tokens(AbstractTokenProvider):
    def __init__(self, token: str) -> None:
        self._token = token

    def token(self) -> str:
        return self._token


def _kafka_python_login(gw, token: str) -> Exception | None:
    """kafka-python with a token provider: None when it logged in and produced."""
    try:
        producer = KafkaProducer(bootstrap_servers=gw.bootstrap, security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=_Tokens(token),
                                 request_timeout_ms=10000, max_block_ms=10000)
        try:
            producer.partitions_for("oauth-probe")  # metadata: logged in first
        finally:
            producer.close(timeout=5)
    except Exception as e:  # noqa: BLE001 - the refusal is the outcome
        return e
    return None


def _forged_none(token: str) -> str:
    """The token with its header changed to `alg: none` and no signature."""
    head = base64.urlsafe_b64encode(json.dumps({"alg": "none", "typ": "JWT"}).encode()).rstrip(b"=").decode()
    return f"{head}.{token.split('.')[1]}."


def _log_reasons(gw) -> str:
    return "\n".join(line for line in gw.process.stderr_path.read_text().splitlines()
                     if "SASL authentication failed" in line)


def test_a_keycloak_key_rotation_is_picked_up_without_a_restart(gateway, keycloak):
    new_kid = keycloak.rotate_keys()
    token = keycloak.token("svc-orders", CLIENTS["svc-orders"])
    header = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
    assert header["kid"] == new_kid  # signed with a key kgw has not fetched yet
    assert _kafka_python_login(gateway, token) is None


def _raw_login(gw, token: str) -> tuple[int, str | None]:
    with RawConnection(gw.bootstrap) as conn:
        return conn.sasl_oauthbearer(token)


def test_tokens_not_issued_for_kgw_are_refused_with_their_reason(gateway, keycloak):
    good = keycloak.token("svc-orders", CLIENTS["svc-orders"])
    assert _kafka_python_login(gateway, good) is None  # another real client, Keycloak's token
    errors = confluent_errors(_conf(gateway, keycloak, "svc-other-audience"), authentication_error)
    assert authentication_error(errors), errors  # Keycloak issued it, but not for kgw
    assert "Missing claim: 'aud'" in _log_reasons(gateway)
    assert _raw_login(gateway, good) == (0, None)
    master = json.loads(urllib.request.urlopen(urllib.request.Request(  # another realm's token
        keycloak.issuer.replace("/realms/kgw", "/realms/master") + "/protocol/openid-connect/token",
        data=b"grant_type=password&client_id=admin-cli&username=admin&password=admin-secret"), timeout=30).read())
    tampered = good[:-8] + ("A" * 8 if not good.endswith("A" * 8) else "B" * 8)
    for token, reason in ((master["access_token"], "kid"), (_forged_none(good), "invalid token"),
                          (tampered, "invalid token"),
                          (keycloak.token("svc-other-audience", CLIENTS["svc-other-audience"]), "'aud'")):
        code, message = _raw_login(gateway, token)
        assert code == 58 and reason in message, (code, message)  # SASL_AUTHENTICATION_FAILED, saying why


def test_keys_that_cannot_be_fetched_keep_the_listener_unready_and_say_why(start_gateway):
    nowhere = f"http://127.0.0.1:{free_port()}/realms/kgw"
    gw = start_gateway({"listeners": [_listener({"issuer_url": nowhere})]}, name="kgw-oauth-nokeys")
    assert "started, waiting for" in "\n".join(gw.process.stdout_lines)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(gw.admin_url + "/readyz", timeout=10)
    body = refused.value.read().decode()
    assert refused.value.code == 503 and "oauthbearer keys not ready (none from " in body and nowhere in body, body
    code, message = _raw_login(gw, "x.y.z")  # a login is refused, saying why
    assert code == 58 and "keys are not available" in message, message


def test_a_session_lasts_until_the_token_expires_and_a_client_renewing_it_keeps_producing(gateway, keycloak):
    """KIP-368 with tokens: the session lifetime is the token's remaining life (sooner than
    connections_max_reauth_ms); librdkafka fetches a new token and re-authenticates on the same
    connections, so a producer running across several token lifetimes never fails."""
    token = keycloak.token("svc-short", CLIENTS["svc-short"])
    with RawConnection(gateway.bootstrap) as conn:
        assert conn.call(17, 1, make(request_class(17, 1), mechanism="OAUTHBEARER")).error_code == 0
        auth = conn.call(36, 2, make(request_class(36, 2), auth_bytes=f"n,,\x01auth=Bearer {token}\x01\x01".encode()))
        assert auth.error_code == 0 and 0 < auth.session_lifetime.total_seconds() <= 5
    admin = AdminClient(_conf(gateway, keycloak, "svc-orders"))
    topic = f"oauth-renew-{uuid.uuid4().hex[:8]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    for f in admin.create_acls([_acl(topic, "User:svc-short")]).values():
        f.result(30)
    producer = Producer({**_conf(gateway, keycloak, "svc-short"), "message.timeout.ms": 15000})
    failures: list = []
    until = time.monotonic() + 11  # more than two token lifetimes
    while time.monotonic() < until:  # a steady producer (pacing, not synchronisation)
        producer.produce(topic, b"r", on_delivery=lambda err, _m: failures.append(err) if err else None)
        producer.flush(15)
        time.sleep(0.2)
    assert not failures, failures
    log = gateway.process.stderr_path.read_text()
    assert "re-authenticated as User:svc-short with OAUTHBEARER" in log
    # Every session of a whole token is renewed in time.  librdkafka may re-authenticate with
    # a token in its last second before fetching the next one: a session that short leaves it
    # tens of milliseconds, which a loaded host can miss (a Kafka broker would close it alike).
    lapsed = [int(ms) for ms in re.findall(
        r"SASL session of User:svc-short expired: .* session lifetime of (\d+) ms", log)]
    assert all(ms < 1500 for ms in lapsed), lapsed


@pytest.mark.java
def test_the_java_client_logs_in_with_kafkas_own_oauth_login_handler(gateway, keycloak, tmp_path, java4_check):
    """Kafka's Java client (4.x) with OAuthBearerLoginCallbackHandler (KIP-768 client
    credentials against Keycloak) runs the whole KgwClientCheck program through kgw."""
    from tests.support.processes import run_tool

    settings = tmp_path / "oauth.properties"
    settings.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n"
        f"sasl.oauthbearer.token.endpoint.url={keycloak.token_endpoint}\n"
        "sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler\n"
        "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        f'clientId="svc-orders" clientSecret="{CLIENTS["svc-orders"]}";\n')
    topic = f"oauth-java-{uuid.uuid4().hex[:8]}"
    java, *rest = java4_check  # Kafka 4 clients call only token endpoints they are told to trust
    done = run_tool([java, f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={keycloak.token_endpoint}", *rest,
                     gateway.bootstrap, topic, f"{topic}-group", "2", "20", str(settings)], timeout=170, check=False)
    stdout = done.stdout.decode("utf-8", "replace")
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0 and events and events[-1]["event"] == "done", (
        stdout[-4000:] + done.stderr.decode("utf-8", "replace")[-4000:])
    assert "authenticated as User:svc-orders with OAUTHBEARER" in gateway.process.stderr_path.read_text()
