"""SASL: PLAIN and SCRAM mechanisms (sans-IO) and Kafka's SaslHandshake/SaslAuthenticate framing.

The SCRAM client below is written from RFC 5802 for these tests only; it is
checked against RFC 7677's published SCRAM-SHA-256 exchange first.
"""

from __future__ import annotations

import dataclasses
import base64
import hashlib
import hmac
import logging

import pytest
from kio.schema.errors import ErrorCode

from authz.principal import KafkaPrincipal
from authz.principal_builder import (
    DefaultKafkaPrincipalBuilder,
    PlaintextAuthenticationContext,
    SaslAuthenticationContext,
    SslAuthenticationContext,
)
from configs.gateway_config import ListenerConfig, ListenerSaslConfig, SecurityProtocol, UsersConfig
from authz.credentials import PlainCredential, SaslMechanism
from gateway.auth.failures import AuthFailureTracker
from gateway.auth.sasl import PlainServer, SaslSession, SaslState, SaslStateError
from gateway.auth.scram import SaslFailure, ScramServer
from authz.credentials import scram_credential
from protocol.codecs import decode_response, encode, request_class

SHA256, SHA512 = SaslMechanism.SCRAM_SHA_256, SaslMechanism.SCRAM_SHA_512


# --------------------------------------------------------------------------- a test SCRAM client


class ScramClient:
    """RFC 5802 client side, enough to drive the server (and to tamper with messages)."""

    def __init__(self, mechanism: str, user: str, password: str, nonce: str = "fyko+d2lbbFgONRv9qkxdawL",
                 gs2_header: str = "n,,", extensions: str = "") -> None:
        self.hash = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[str(mechanism)]
        self.user, self.password, self.nonce = user, password, nonce
        self.gs2_header = gs2_header
        name = user.replace("=", "=3D").replace(",", "=2C")
        self.client_first_bare = f"n={name},r={nonce}{extensions}"
        self.server_signature = b""

    def first(self) -> bytes:
        return (self.gs2_header + self.client_first_bare).encode()

    def final(self, server_first: bytes, *, nonce: str | None = None, cb: str | None = None) -> bytes:
        text = server_first.decode()
        attrs = dict(item.split("=", 1) for item in text.split(","))
        salted = hashlib.pbkdf2_hmac(self.hash, self.password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
        client_key = hmac.digest(salted, b"Client Key", self.hash)
        stored_key = hashlib.new(self.hash, client_key).digest()
        cb = cb if cb is not None else base64.b64encode(self.gs2_header.encode()).decode()
        without_proof = f"c={cb},r={nonce if nonce is not None else attrs['r']}"
        auth_message = f"{self.client_first_bare},{text},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth_message, self.hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_key = hmac.digest(salted, b"Server Key", self.hash)
        self.server_signature = hmac.digest(server_key, auth_message, self.hash)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify_server_final(self, server_final: bytes) -> bool:
        return server_final == b"v=" + base64.b64encode(self.server_signature)


# --------------------------------------------------------------------------- fixtures


def users() -> UsersConfig:
    return UsersConfig(
        scram=(
            scram_credential("alice", "alice-secret", SHA256),
            scram_credential("alice", "alice-secret", SHA512),
            scram_credential("we,ird=name", "pw", SHA256),
        ),
        plain=(
            PlainCredential(name="bob", password_hash=PlainCredential.hash_password("bob-secret", iterations=1000)),
            PlainCredential(name="carol", password_sha256=hashlib.sha256(b"carol-secret").hexdigest()),
        ),
    )


USERS = users()


def scram(mechanism=SHA256, **kw) -> ScramServer:
    store = {(u.name, str(u.mechanism)): u for u in USERS.scram}
    return ScramServer(str(mechanism), store, **kw)


def plain() -> PlainServer:
    return PlainServer({u.name: u for u in USERS.plain})


# --------------------------------------------------------------------------- SCRAM mechanism


def test_rfc7677_scram_sha_256_test_vector() -> None:
    """RFC 7677 §3: user "user", password "pencil"; the server must answer byte for byte."""
    credential = scram_credential(
        "user", "pencil", SHA256, salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="), iterations=4096)
    server = ScramServer("SCRAM-SHA-256", {("user", "SCRAM-SHA-256"): credential},
                         nonce_factory=lambda: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0")
    server_first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert server_first == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    server_final = server.evaluate(
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert server_final == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    assert server.complete and server.authorization_id == "user"
    # and the test client computes the same client-final
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.final(server_first).endswith(b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")


@pytest.mark.parametrize("mechanism", [SHA256, SHA512])
def test_scram_full_exchange(mechanism) -> None:
    server, client = scram(mechanism), ScramClient(mechanism, "alice", "alice-secret")
    server_first = server.evaluate(client.first())
    assert server_first.startswith(f"r={client.nonce}".encode())
    assert client.verify_server_final(server.evaluate(client.final(server_first)))
    assert server.complete and server.authorization_id == "alice"


def test_scram_user_name_escapes() -> None:
    server, client = scram(), ScramClient(SHA256, "we,ird=name", "pw")
    assert client.verify_server_final(server.evaluate(client.final(server.evaluate(client.first()))))
    assert server.authorization_id == "we,ird=name"


def test_scram_wrong_password() -> None:
    server, client = scram(), ScramClient(SHA256, "alice", "wrong")
    server_first = server.evaluate(client.first())
    with pytest.raises(SaslFailure) as wrong:
        server.evaluate(client.final(server_first))
    assert "invalid credentials" in wrong.value.client_message
    assert "invalid proof" in wrong.value.reason and not server.complete


def test_scram_unknown_user_fails_like_a_wrong_password() -> None:
    server, client = scram(), ScramClient(SHA256, "mallory", "x")
    server_first = server.evaluate(client.first())
    attrs = dict(item.split("=", 1) for item in server_first.decode().split(","))
    assert attrs["i"] == "4096" and len(base64.b64decode(attrs["s"])) == 24
    with pytest.raises(SaslFailure) as unknown:
        server.evaluate(client.final(server_first))
    server2, client2 = scram(), ScramClient(SHA256, "alice", "wrong")
    with pytest.raises(SaslFailure) as wrong:
        server2.evaluate(client2.final(server2.evaluate(client2.first())))
    assert unknown.value.client_message == wrong.value.client_message
    # the fake salt is stable for a name, so probing twice reveals nothing either
    again = scram().evaluate(ScramClient(SHA256, "mallory", "x").first()).decode()
    assert dict(i.split("=", 1) for i in again.split(","))["s"] == attrs["s"]


def test_scram_proof_from_another_mechanism_fails() -> None:
    server, client = scram(SHA512), ScramClient(SHA256, "alice", "alice-secret")
    with pytest.raises(SaslFailure):
        server.evaluate(client.final(server.evaluate(client.first())))


@pytest.mark.parametrize("tamper", ["replayed", "modified", "client-only"])
def test_scram_nonce_must_be_the_combined_nonce(tamper) -> None:
    server, client = scram(), ScramClient(SHA256, "alice", "alice-secret")
    server_first = server.evaluate(client.first())
    combined = server_first.decode().split(",")[0][2:]
    if tamper == "replayed":  # a client-final captured from an earlier exchange
        old_server = scram()
        old = ScramClient(SHA256, "alice", "alice-secret")
        final = old.final(old_server.evaluate(old.first()))
    else:
        nonce = combined[:-1] + ("A" if combined[-1] != "A" else "B") if tamper == "modified" else client.nonce
        final = client.final(server_first, nonce=nonce)
    with pytest.raises(SaslFailure) as exc:
        server.evaluate(final)
    assert "nonce" in exc.value.reason


def test_scram_repeated_client_nonce_of_old_librdkafka_is_refused_and_named() -> None:
    """librdkafka before 2.6.1 sends r=<client nonce><client nonce + server nonce> (#4895).  Kafka 4.x
    refuses it (RFC 5802: equal); so does kgw, naming the library bug and the fix in the reason."""
    server, client = scram(), ScramClient(SHA256, "alice", "alice-secret")
    server_first = server.evaluate(client.first())
    combined = server_first.decode().split(",")[0][2:]
    with pytest.raises(SaslFailure) as exc:
        server.evaluate(client.final(server_first, nonce=client.nonce + combined))
    assert exc.value.cause == "scram_nonce_repeated"
    assert "librdkafka before 2.6.1" in exc.value.reason and "upgrade" in exc.value.reason
    assert exc.value.client_message == "Authentication failed during authentication due to invalid credentials " \
                                       "with SASL mechanism SCRAM-SHA-256"  # what a Kafka 4.x broker says
    server, client = scram(), ScramClient(SHA256, "alice", "wrong")
    with pytest.raises(SaslFailure) as exc:
        server.evaluate(client.final(server.evaluate(client.first())))
    assert exc.value.cause == "credentials"


def test_client_software_from_api_versions() -> None:
    from protocol.apis.api_versions import client_software

    body = encode(req(18, 3, client_software_name="librdkafka", client_software_version="2.0.2"))
    assert client_software(3, body) == ("librdkafka", "2.0.2")
    assert client_software(2, body) is None
    for name in ("", "lib rd", "x" * 65, "-lead"):
        bad = encode(req(18, 3, client_software_name=name, client_software_version="1"))
        assert client_software(3, bad) is None, name
    assert client_software(3, body[:5]) is None


def test_failures_by_client_software_with_bounded_labels() -> None:
    tracker = AuthFailureTracker(software_labels=2)
    s = session(failures=tracker)
    s.client_software = ("librdkafka", "2.0.2")
    s.handle(17, 1, req(17, 1, mechanism="SCRAM-SHA-256"))
    client = ScramClient(SHA256, "alice", "alice-secret")
    first, _ = s.handle(36, 2, req(36, 2, auth_bytes=client.first()))
    combined = bytes(first.auth_bytes).decode().split(",")[0][2:]
    s.handle(36, 2, req(36, 2, auth_bytes=client.final(first.auth_bytes, nonce=client.nonce + combined)))
    for software in ("a/1", "b/2", "c/3"):
        tracker.record_failure("10.0.0.9", listener="SASL", mechanism="PLAIN", client_software=software,
                               cause="credentials")
    value = tracker.registry.get_sample_value
    assert value("kgw_authentication_failures_by_client_total", {
        "listener": "SASL", "client_software": "librdkafka/2.0.2", "cause": "scram_nonce_repeated"}) == 1
    assert value("kgw_authentication_failures_by_client_total", {
        "listener": "SASL", "client_software": "a/1", "cause": "credentials"}) == 1
    assert value("kgw_authentication_failures_by_client_total", {  # the third name is over the bound
        "listener": "SASL", "client_software": "other", "cause": "credentials"}) == 2


@pytest.mark.parametrize(
    ("first", "reason"),
    [
        (b"p=tls-unique,,n=alice,r=abc", "channel binding"),
        (b"x,,n=alice,r=abc", "gs2 header"),
        (b"n,,m=ext,n=alice,r=abc", "m="),
        (b"n,,n=alice", "client-first"),
        (b"n,,n=al=ice,r=abc", "user name"),
        (b"n,,n=alice,r=a,b", "extension"),
        (b"n,,n=alice,r=", "nonce"),
        (b"\xff\xfe", "UTF-8"),
    ],
)
def test_scram_malformed_client_first(first, reason) -> None:
    with pytest.raises(SaslFailure) as exc:
        scram().evaluate(first)
    assert reason in exc.value.reason


def test_scram_y_flag_accepted_and_channel_binding_checked() -> None:
    server, client = scram(), ScramClient(SHA256, "alice", "alice-secret", gs2_header="y,,")
    assert client.verify_server_final(server.evaluate(client.final(server.evaluate(client.first()))))
    server, client = scram(), ScramClient(SHA256, "alice", "alice-secret")
    with pytest.raises(SaslFailure, match="invalid credentials") as exc:
        server.evaluate(client.final(server.evaluate(client.first()), cb="eSws"))
    assert "channel binding" in exc.value.reason


def test_scram_authzid_and_tokenauth() -> None:
    ok = ScramClient(SHA256, "alice", "alice-secret", gs2_header="n,a=alice,")
    server = scram()
    assert ok.verify_server_final(server.evaluate(ok.final(server.evaluate(ok.first()))))
    with pytest.raises(SaslFailure, match="authorization id that is different"):
        scram().evaluate(ScramClient(SHA256, "alice", "x", gs2_header="n,a=bob,").first())
    with pytest.raises(SaslFailure, match="tokenauth"):
        scram().evaluate(ScramClient(SHA256, "alice", "x", extensions=",tokenauth=true").first())
    # unknown extensions are ignored, as in Kafka
    other = ScramClient(SHA256, "alice", "alice-secret", extensions=",foo=bar")
    server = scram()
    assert other.verify_server_final(server.evaluate(other.final(server.evaluate(other.first()))))


def test_scram_no_message_after_completion() -> None:
    server, client = scram(), ScramClient(SHA256, "alice", "alice-secret")
    server.evaluate(client.final(server.evaluate(client.first())))
    with pytest.raises(SaslFailure):
        server.evaluate(b"c=biws")


# --------------------------------------------------------------------------- PLAIN mechanism


@pytest.mark.parametrize(("token", "user"), [(b"\x00bob\x00bob-secret", "bob"), (b"bob\x00bob\x00bob-secret", "bob"),
                                             (b"\x00carol\x00carol-secret", "carol")])
def test_plain_ok(token, user) -> None:
    server = plain()
    assert server.evaluate(token) == b"" and server.complete and server.authorization_id == user


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\x00bob\x00wrong", "Invalid username or password"),
        (b"\x00nobody\x00bob-secret", "Invalid username or password"),
        (b"alice\x00bob\x00bob-secret", "authorization id that is different from username"),
        (b"\x00\x00pw", "username not specified"),
        (b"\x00bob\x00", "password not specified"),
        (b"bob\x00bob-secret", "expected 3 tokens, got 2"),
        (b"a\x00b\x00c\x00d", "expected 3 tokens, got 4"),
    ],
)
def test_plain_failures(token, message) -> None:
    with pytest.raises(SaslFailure, match=message):
        plain().evaluate(token)


def test_plain_unknown_user_and_wrong_password_look_the_same() -> None:
    with pytest.raises(SaslFailure) as unknown:
        plain().evaluate(b"\x00nobody\x00pw")
    with pytest.raises(SaslFailure) as wrong:
        plain().evaluate(b"\x00bob\x00pw")
    assert unknown.value.client_message == wrong.value.client_message
    assert "pw" not in unknown.value.reason and "pw" not in wrong.value.reason


# --------------------------------------------------------------------------- Kafka framing


def listener(mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"), protocol="SASL_PLAINTEXT") -> ListenerConfig:
    return ListenerConfig(
        name="SASL", security_protocol=SecurityProtocol(protocol), broker_port_base=9400,
        advertised_broker_port_base=9400,
        sasl=ListenerSaslConfig(mechanisms=tuple(SaslMechanism(m) for m in mechanisms)),
    )


BASE = PlaintextAuthenticationContext(client_address="10.0.0.7", listener_name="SASL", security_protocol="SASL_PLAINTEXT")


def session(mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN"), base=BASE, builder=None, **kw) -> SaslSession:
    return SaslSession(listener(mechanisms), USERS, builder or DefaultKafkaPrincipalBuilder(), base, **kw)


def req(api_key: int, version: int, **fields):
    return request_class(api_key, version)(**fields)


def roundtrip(response, api_key: int, version: int):
    """Encode and decode a response entity, as the wire would."""
    return decode_response(api_key, version, encode(response), 0)


@pytest.mark.parametrize("auth_version", [0, 1, 2])
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_session_scram_over_sasl_authenticate(mechanism, auth_version) -> None:
    s = session()
    s.gate(18)  # ApiVersions first, as clients do
    s.gate(17)
    response, close = s.handle(17, 1, req(17, 1, mechanism=mechanism))
    response = roundtrip(response, 17, 1)
    assert (response.error_code, close) == (ErrorCode.none, False)
    assert response.mechanisms == ("SCRAM-SHA-256", "SCRAM-SHA-512", "PLAIN")
    client = ScramClient(mechanism, "alice", "alice-secret")
    s.gate(36)
    first, close = s.handle(36, auth_version, req(36, auth_version, auth_bytes=client.first()))
    first = roundtrip(first, 36, auth_version)
    assert (first.error_code, close, s.authenticated, s.principal) == (ErrorCode.none, False, False, None)
    final, close = s.handle(36, auth_version, req(36, auth_version, auth_bytes=client.final(first.auth_bytes)))
    final = roundtrip(final, 36, auth_version)
    assert final.error_code == ErrorCode.none and not close
    assert client.verify_server_final(final.auth_bytes)
    if auth_version >= 1:
        assert final.session_lifetime.total_seconds() == 0
    assert s.authenticated and s.principal == KafkaPrincipal("User", "alice")
    s.gate(3)  # Metadata is allowed now


def test_session_plain_and_failure_counter() -> None:
    tracker = AuthFailureTracker(warn_threshold=2)
    for attempt in range(2):
        s = session(failures=tracker)
        s.handle(17, 1, req(17, 1, mechanism="PLAIN"))
        response, close = s.handle(36, 2, req(36, 2, auth_bytes=b"\x00bob\x00nope"))
        assert (response.error_code, close) == (ErrorCode.sasl_authentication_failed, True)
        assert response.error_message == "Authentication failed: Invalid username or password"
        assert s.state is SaslState.FAILED and not s.authenticated and s.principal is None
    assert tracker.count("10.0.0.7") == 2
    assert tracker.registry.get_sample_value(
        "kgw_authentication_failures_total", {"listener": "SASL", "mechanism": "PLAIN"}) == 2
    s = session(failures=tracker)
    s.handle(17, 1, req(17, 1, mechanism="PLAIN"))
    response, close = s.handle(36, 2, req(36, 2, auth_bytes=b"\x00bob\x00bob-secret"))
    assert (response.error_code, close, s.principal) == (ErrorCode.none, False, KafkaPrincipal("User", "bob"))
    assert tracker.count("10.0.0.7") == 0  # success resets the address


def test_session_unsupported_mechanism() -> None:
    tracker = AuthFailureTracker()
    s = session(mechanisms=("SCRAM-SHA-512",), failures=tracker)
    response, close = s.handle(17, 1, req(17, 1, mechanism="GSSAPI"))
    assert (response.error_code, response.mechanisms, close) == (
        ErrorCode.unsupported_sasl_mechanism, ("SCRAM-SHA-512",), True)
    # the client's text never becomes a label value
    assert tracker.registry.get_sample_value(
        "kgw_authentication_failures_total", {"listener": "SASL", "mechanism": "unknown"}) == 1


def test_session_state_errors() -> None:
    s = session()
    response, close = s.handle(36, 1, req(36, 1, auth_bytes=b"x"))  # SaslAuthenticate before SaslHandshake
    assert (response.error_code, close) == (ErrorCode.illegal_sasl_state, True)
    assert "SaslHandshake" in response.error_message

    s = session()
    s.handle(17, 1, req(17, 1, mechanism="PLAIN"))
    response, close = s.handle(17, 1, req(17, 1, mechanism="PLAIN"))  # a second handshake
    assert (response.error_code, close) == (ErrorCode.illegal_sasl_state, True)

    s = session()
    with pytest.raises(SaslStateError, match="API key 3"):
        s.gate(3)  # Metadata before authenticating
    s = session()
    s.gate(18)
    with pytest.raises(SaslStateError):
        s.gate(18)  # a second ApiVersions during the handshake (Kafka refuses it too)


def test_session_after_completion_answers_illegal_state_but_stays_open() -> None:
    s = session()
    s.handle(17, 1, req(17, 1, mechanism="PLAIN"))
    s.handle(36, 1, req(36, 1, auth_bytes=b"\x00bob\x00bob-secret"))
    assert s.authenticated
    response, close = s.handle(17, 1, req(17, 1, mechanism="PLAIN"))
    assert (response.error_code, close) == (ErrorCode.illegal_sasl_state, False)
    response, close = s.handle(36, 0, req(36, 0, auth_bytes=b""))
    assert (response.error_code, close) == (ErrorCode.illegal_sasl_state, False)
    assert s.principal == KafkaPrincipal("User", "bob")


def test_raw_token_flow_after_handshake_v0() -> None:
    s = session()
    response, close = s.handle(17, 0, req(17, 0, mechanism="SCRAM-SHA-512"))
    assert (response.error_code, close, s.expects_raw_token) == (ErrorCode.none, False, True)
    client = ScramClient("SCRAM-SHA-512", "alice", "alice-secret")
    server_first, close = s.handle_raw_token(client.first())
    assert server_first is not None and not close and s.expects_raw_token
    server_final, close = s.handle_raw_token(client.final(server_first))
    assert client.verify_server_final(server_final) and not close
    assert s.authenticated and not s.expects_raw_token and s.principal.name == "alice"

    s = session()
    s.handle(17, 0, req(17, 0, mechanism="PLAIN"))
    assert s.handle_raw_token(b"\x00bob\x00bob-secret") == (b"", False)  # Kafka sends an empty frame back
    s = session()
    s.handle(17, 0, req(17, 0, mechanism="PLAIN"))
    assert s.handle_raw_token(b"\x00bob\x00wrong") == (None, True)
    assert s.handle_raw_token(b"\x00bob\x00bob-secret") == (None, True)  # FAILED stays failed
    assert session().handle_raw_token(b"token") == (None, True)  # not after a v0 handshake


def test_sasl_ssl_context_reaches_the_builder_with_the_certificate() -> None:
    seen = []

    class Recording:
        def build(self, context):
            seen.append(context)
            return KafkaPrincipal("User", context.authorization_id)

    cert = object()  # stands in for an x509.Certificate
    base = SslAuthenticationContext(client_address="10.0.0.8", listener_name="SASL",
                                    security_protocol="SASL_SSL", peer_certificate=cert)
    s = SaslSession(listener(protocol="SASL_SSL"), USERS, Recording(), base)
    s.handle(17, 1, req(17, 1, mechanism="PLAIN"))
    s.handle(36, 1, req(36, 1, auth_bytes=b"\x00bob\x00bob-secret"))
    (context,) = seen
    assert isinstance(context, SaslAuthenticationContext)
    assert (context.mechanism, context.authorization_id, context.ssl_peer_certificate) == ("PLAIN", "bob", cert)
    assert (context.client_address, context.security_protocol) == ("10.0.0.8", "SASL_SSL")


def test_builder_failure_fails_authentication() -> None:
    class Broken:
        def build(self, context):
            raise RuntimeError("directory down")

    s = session(builder=Broken())
    s.handle(17, 1, req(17, 1, mechanism="PLAIN"))
    response, close = s.handle(36, 1, req(36, 1, auth_bytes=b"\x00bob\x00bob-secret"))
    assert (response.error_code, close, s.authenticated) == (ErrorCode.sasl_authentication_failed, True, False)
    assert "directory down" in s.failure_reason


def test_secrets_are_never_logged(caplog) -> None:
    caplog.set_level(logging.DEBUG)
    s = session()
    s.handle(17, 1, req(17, 1, mechanism="PLAIN"))
    s.handle(36, 1, req(36, 1, auth_bytes=b"\x00bob\x00hunter2-secret"))
    s = session()
    s.handle(17, 1, req(17, 1, mechanism="SCRAM-SHA-256"))
    client = ScramClient(SHA256, "alice", "hunter2-secret")
    first, _ = s.handle(36, 1, req(36, 1, auth_bytes=client.first()))
    final = client.final(first.auth_bytes)
    s.handle(36, 1, req(36, 1, auth_bytes=final))
    proof = final.decode().rsplit("p=", 1)[1]
    assert caplog.records  # failures are logged ...
    assert "hunter2" not in caplog.text and proof not in caplog.text  # ... without secrets


def test_auth_failure_tracker_is_bounded_and_warns(caplog) -> None:
    tracker = AuthFailureTracker(capacity=3, warn_threshold=2)
    for host in ("a", "b", "c", "d"):
        tracker.record_failure((host, 1234), listener="L", mechanism="SSL")
    assert len(tracker) == 3 and tracker.count("a") == 0  # "a" was evicted
    with caplog.at_level(logging.WARNING, logger="kgw.auth"):
        counts = [tracker.record_failure(("d", 999), listener="L", mechanism="SSL") for _ in range(7)]
    assert counts == [2, 3, 4, 5, 6, 7, 8]
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [f"repeated authentication failures from d: {n}" for n in (2, 4, 8)]


# --------------------------------------------------------------------------- KIP-368 re-authentication


def reauth_session(max_reauth_ms: int = 60_000, mechanisms=("PLAIN", "SCRAM-SHA-256")) -> SaslSession:
    config = listener(mechanisms)
    config = dataclasses.replace(config, sasl=dataclasses.replace(config.sasl, connections_max_reauth_ms=max_reauth_ms))
    return SaslSession(config, USERS, DefaultKafkaPrincipalBuilder(), BASE)


def plain_login(s: SaslSession, user: str, password: str):
    handshake, close = s.handle(17, 1, req(17, 1, mechanism="PLAIN"))
    assert handshake.error_code == ErrorCode.none and not close, handshake
    return s.handle(36, 2, req(36, 2, auth_bytes=f"\x00{user}\x00{password}".encode()))


def test_reauthentication_gives_a_lifetime_and_renews_it_with_the_same_principal() -> None:
    s = reauth_session()
    response, close = plain_login(s, "bob", "bob-secret")
    response = roundtrip(response, 36, 2)
    assert response.error_code == ErrorCode.none and not close
    assert response.session_lifetime.total_seconds() == 60  # connections_max_reauth_ms
    first_expiry = s.expires_at
    assert first_expiry is not None and not s.expired(first_expiry - 1) and s.expired(first_expiry)
    handshake, close = s.handle(17, 1, req(17, 1, mechanism="PLAIN"))  # a KIP-368 client, before expiry
    assert handshake.error_code == ErrorCode.none and not close
    assert s.authenticated  # requests go on meanwhile, as the same principal
    response, close = s.handle(36, 2, req(36, 2, auth_bytes=b"\x00bob\x00bob-secret"))
    assert response.error_code == ErrorCode.none and not close and s.expires_at >= first_expiry
    assert s.principal == KafkaPrincipal("User", "bob") and not s.reauthenticating


def test_reauthentication_as_another_principal_or_mechanism_fails() -> None:
    s = reauth_session()
    plain_login(s, "bob", "bob-secret")
    response, close = plain_login(s, "carol", "carol-secret")
    assert response.error_code == ErrorCode.sasl_authentication_failed and close
    assert "re-authentication must keep the principal" in response.error_message
    s = reauth_session()
    plain_login(s, "bob", "bob-secret")
    response, close = s.handle(17, 1, req(17, 1, mechanism="SCRAM-SHA-256"))
    assert response.error_code == ErrorCode.unsupported_sasl_mechanism and close


def test_without_reauthentication_a_session_never_expires() -> None:
    s = reauth_session(max_reauth_ms=0)
    response, _ = plain_login(s, "bob", "bob-secret")
    assert roundtrip(response, 36, 2).session_lifetime.total_seconds() == 0 and s.expires_at is None
    response, close = s.handle(17, 1, req(17, 1, mechanism="PLAIN"))  # as Kafka with re-authentication off
    assert response.error_code == ErrorCode.illegal_sasl_state and not close
