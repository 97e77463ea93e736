"""OAUTHBEARER token validation and the SASL exchange, from the attacker's side: every token
that must not authenticate is refused with its reason, a valid one names its principal and
groups, and a rotated key is picked up by one rate-limited fetch.  Keys are made here (joserfc)
and served from a JWKS file; the wire test against Keycloak is tests/integration/test_oauthbearer.py."""

from __future__ import annotations

import base64
import json
import time

import pytest
from joserfc import jwt
from joserfc.jwk import ECKey, KeySet, OctKey, RSAKey

from authz.principal import KafkaPrincipal
from authz.principal_builder import DefaultKafkaPrincipalBuilder, PlaintextAuthenticationContext
from gateway.auth.oauthbearer import JwksSource, OAuthBearerServer, OAuthBearerValidator, TokenInvalid
from gateway.auth.sasl import SaslSession
from gateway.auth.scram import SaslFailure

ISSUER = "https://idp.example/realms/kgw"


class Provider:
    """An identity provider's keys, published as a JWKS file."""

    def __init__(self, path) -> None:
        self.path = path
        self.keys = [RSAKey.generate_key(2048, parameters={"kid": "rsa-1", "alg": "RS256", "use": "sig"})]
        self.publish()

    def publish(self) -> None:
        self.path.write_text(json.dumps(KeySet(self.keys).as_dict(private=False)))

    def token(self, claims: dict | None = None, *, kid: str = "rsa-1", alg: str = "RS256", key=None, **extra) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": "kgw", "sub": "alice", "exp": now + 300, "iat": now,
                "scope": "kafka produce", **(claims or {}), **extra}
        body = {k: v for k, v in body.items() if v is not None}
        signer = key or next(k for k in self.keys if k.kid == kid)
        return jwt.encode({"alg": alg, "kid": kid}, body, signer)


@pytest.fixture
def provider(tmp_path):
    return Provider(tmp_path / "jwks.json")


def validator(provider: Provider, **kw) -> OAuthBearerValidator:
    keys = JwksSource(jwks_file=provider.path)
    keys.fetch()
    return OAuthBearerValidator(keys, **{"expected_audience": ("kgw",), "expected_issuer": ISSUER, **kw})


def test_a_valid_token_names_its_principal_scopes_and_groups(provider):
    v = validator(provider, groups_claim="realm.groups")
    token = v.validate(provider.token(realm={"groups": ["/payments", "analytics", "payments"]}))
    assert token.principal_name == "alice" and token.scopes == {"kafka", "produce"}
    assert token.groups == ("payments", "analytics")
    assert validator(provider, sub_claim_name="azp").validate(provider.token(azp="svc-orders")).principal_name == "svc-orders"


def _unsigned(claims: dict) -> str:
    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{enc({'alg': 'none', 'typ': 'JWT'})}.{enc(claims)}."


@pytest.mark.parametrize("case, reason", [
    ("expired", "expired"),
    ("not yet valid", "not yet valid"),
    ("issued in the future", "invalid_claim"),
    ("wrong audience", "aud"),
    ("no audience", "aud"),
    ("wrong issuer", "iss"),
    ("no expiry", "exp"),
    ("no subject", "'sub' claim"),
    ("bad signature", "invalid token"),
    ("another provider's key", "kid"),
    ("alg none", "invalid token"),
    ("HMAC with the public key as secret", "invalid token"),
    ("not a JWT", "invalid token"),
])
def test_tokens_that_must_not_authenticate_are_refused_with_their_reason(provider, case, reason):
    now = int(time.time())
    v = validator(provider, clock_skew_s=30)
    stranger = RSAKey.generate_key(2048, parameters={"kid": "rsa-1"})
    public = provider.keys[0].as_dict(private=False)
    token = {
        "expired": lambda: provider.token(exp=now - 120),
        "not yet valid": lambda: provider.token(nbf=now + 120),
        "issued in the future": lambda: provider.token(iat=now + 3600),
        "wrong audience": lambda: provider.token(aud="another-service"),
        "no audience": lambda: provider.token(aud=None),
        "wrong issuer": lambda: provider.token(iss="https://evil.example/realms/kgw"),
        "no expiry": lambda: provider.token(exp=None),
        "no subject": lambda: provider.token(sub=None),
        "bad signature": lambda: provider.token(key=stranger),
        "another provider's key": lambda: provider.token(kid="rsa-9", key=RSAKey.generate_key(2048)),
        "alg none": lambda: _unsigned({"iss": ISSUER, "aud": "kgw", "sub": "mallory", "exp": now + 300}),
        "HMAC with the public key as secret": lambda: jwt.encode(
            {"alg": "HS256", "kid": "rsa-1"}, {"iss": ISSUER, "aud": "kgw", "sub": "mallory", "exp": now + 300},
            OctKey.import_key(json.dumps(public).encode())),
        "not a JWT": lambda: "not.a.jwt",
    }[case]()
    with pytest.raises(TokenInvalid, match=reason):
        v.validate(token)


def test_a_rotated_key_is_fetched_once_and_a_flood_of_unknown_kids_is_not(provider, monkeypatch):
    url_keys = JwksSource(jwks_endpoint_url="https://idp.example/jwks")
    fetched = []

    def fetch_from(url, timeout):
        fetched.append(url)
        return json.loads(provider.path.read_text())

    monkeypatch.setattr("gateway.auth.oauthbearer._http_json", fetch_from)
    url_keys.fetch()
    v = OAuthBearerValidator(url_keys, expected_audience=("kgw",), expected_issuer=ISSUER)
    assert v.validate(provider.token()).principal_name == "alice" and len(fetched) == 1
    provider.keys.append(ECKey.generate_key("P-256", parameters={"kid": "ec-2", "alg": "ES256", "use": "sig"}))
    provider.publish()  # the provider rotates: a new key signs from now on
    assert v.validate(provider.token(kid="ec-2", alg="ES256")).principal_name == "alice"
    assert len(fetched) == 2  # one fetch for the unknown kid
    for i in range(20):  # made-up kids: no fetch until the interval has passed
        with pytest.raises(TokenInvalid, match="kid"):
            v.validate(provider.token(kid=f"made-up-{i}", key=RSAKey.generate_key(2048)))
    assert len(fetched) == 2


def test_without_keys_every_token_is_refused_and_the_reason_is_kept(tmp_path):
    keys = JwksSource(jwks_file=tmp_path / "missing.json")
    keys.fetch()
    assert not keys.ready and "missing.json" in keys.error
    with pytest.raises(TokenInvalid, match="keys are not available"):
        OAuthBearerValidator(keys).validate("x.y.z")


def _first_message(token: str, authzid: str = "") -> bytes:
    return f"n,{'a=' + authzid if authzid else ''},\x01host=kgw\x01auth=Bearer {token}\x01\x01".encode()


def test_the_exchange_answers_a_bad_token_with_kafkas_error_json_then_fails(provider):
    server = OAuthBearerServer(validator(provider))
    challenge = server.evaluate(_first_message(provider.token(aud="other")))
    assert json.loads(challenge)["status"] == "invalid_token" and not server.complete
    with pytest.raises(SaslFailure, match="aud"):
        server.evaluate(b"\x01")
    with pytest.raises(SaslFailure, match="authorization id"):
        OAuthBearerServer(validator(provider)).evaluate(_first_message(provider.token(), authzid="admin"))
    with pytest.raises(SaslFailure, match="no auth=Bearer"):
        OAuthBearerServer(validator(provider)).evaluate(b"n,,\x01host=kgw\x01\x01")


def test_a_session_builds_the_principal_with_its_groups(provider):
    class Listener:
        name = "OAUTH"

        class sasl:
            mechanisms = ("OAUTHBEARER",)

    base = PlaintextAuthenticationContext(client_address="10.0.0.7", listener_name="OAUTH",
                                          security_protocol="SASL_PLAINTEXT")
    session = SaslSession(Listener, {}, DefaultKafkaPrincipalBuilder(), base,
                          oauthbearer=validator(provider, groups_claim="groups"))
    session.gate(17)
    from protocol.codecs import request_class

    session.handle(17, 1, request_class(17, 1)(mechanism="OAUTHBEARER"))
    request = request_class(36, 2)(auth_bytes=_first_message(provider.token(groups=["payments"])))
    assert session.needs_hashing(36, request)  # validated on a worker thread, not the event loop
    response, close = session.handle(36, 2, request)
    assert not close and response.error_code == 0 and session.authenticated
    assert session.principal == KafkaPrincipal("User", "alice") and session.principal.group_keys == ("Group:payments",)


def _check(tmp_path, capsys, oauthbearer: dict) -> tuple[int, str]:
    import yaml

    from gateway.cli.main import main

    path = tmp_path / "kgw.yaml"
    path.write_text(yaml.safe_dump({
        "listeners": [{"name": "OAUTH", "security_protocol": "SASL_PLAINTEXT", "port": 0, "broker_port_base": 20000,
                       "sasl": {"mechanisms": ["OAUTHBEARER"], "oauthbearer": oauthbearer}}],
        "upstream": {"bootstrap_servers": ["127.0.0.1:9092"]}, "admin": None,
        "metadata": {"path": str(tmp_path / "metadata")}}))
    code = main(["check", "--no-ports", "--config", str(path)])
    return code, capsys.readouterr().err


def test_kgw_check_refuses_a_key_file_without_keys_and_warns_of_a_url_without_answer(provider, tmp_path, capsys):
    from tests.support.ports import free_port

    code, err = _check(tmp_path, capsys, {"jwks_file": str(tmp_path / "missing.json")})
    assert code == 2 and "listeners[0].sasl.oauthbearer.jwks_file: no keys in" in err, err
    assert _check(tmp_path, capsys, {"jwks_file": str(provider.path)})[0] == 0
    nowhere = f"http://127.0.0.1:{free_port()}/realms/kgw"
    code, err = _check(tmp_path, capsys, {"issuer_url": nowhere})
    assert code == 0 and f"warning: listeners[0].sasl.oauthbearer: no keys from {nowhere} now" in err, err
    code, err = _check(tmp_path, capsys, {"issuer_url": nowhere, "jwks_file": str(provider.path)})
    assert code == 2 and "exactly one of jwks_endpoint_url, issuer_url and jwks_file" in err, err
