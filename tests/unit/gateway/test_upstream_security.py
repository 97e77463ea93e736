"""kgw's own upstream identity: TLS and the client side of SASL against an in-process broker.

The "broker" is a trio server that speaks Kafka framing for ApiVersions,
SaslHandshake and SaslAuthenticate and delegates SASL to gateway/auth/sasl.py's
server side (:class:`~gateway.auth.sasl.SaslSession`), the code kgw's own listeners
use.  After authentication it answers one more ApiVersions, so a test can see
that the returned stream is usable.
"""

from __future__ import annotations

import base64
import hashlib
import ssl
from types import SimpleNamespace

import pytest
import trio
from kio.schema.errors import ErrorCode

from authz.principal_builder import DefaultKafkaPrincipalBuilder, PlaintextAuthenticationContext
from configs.gateway_config import ClientAuth, ListenerTlsConfig, SecurityProtocol, UpstreamConfig, UpstreamSaslConfig, UpstreamTlsConfig, UsersConfig
from authz.credentials import PlainCredential, SaslMechanism, ScramCredential
from gateway.auth.sasl import SaslSession
from gateway.auth.tls import server_ssl_context
from gateway.upstream.security import ScramClient, UpstreamSecurityError, _Wire, wrap_upstream
from protocol.codecs import decode_request, encode, request_class, response_class
from protocol.framing import NEED_DATA, FrameDecoder, FrameError
from protocol.headers import parse_request_header, response_header
from tests.unit.gateway.certs import make_pki

SHA256, SHA512 = SaslMechanism.SCRAM_SHA_256, SaslMechanism.SCRAM_SHA_512

USERS = UsersConfig(
    scram=(
        ScramCredential.from_password("kgw", "kgw-secret", SHA256),
        ScramCredential.from_password("kgw", "kgw-secret", SHA512),
        ScramCredential.from_password("we,ird=name", "pw", SHA256),
    ),
    plain=(PlainCredential(name="kgw", password_hash=PlainCredential.hash_password("kgw-secret", iterations=1000)),),
)


class Broker:
    """A minimal SASL broker: records what it saw, serves one connection at a time."""

    def __init__(self, mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"), *, ssl_context=None,
                 versions=None, tamper_server_final=False) -> None:
        self.listener = SimpleNamespace(name="UPSTREAM", sasl=SimpleNamespace(mechanisms=tuple(mechanisms)))
        self.ssl_context = ssl_context
        self.versions = versions or {18: (0, 3), 17: (0, 1), 36: (0, 2)}
        self.tamper = tamper_server_final
        self.port = 0
        self.principals: list = []
        self.peer_certs: list = []
        self.requests: list[tuple[int, int, int]] = []
        self.saw_password_in_clear = False

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started(self)
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream) -> None:
        if self.ssl_context is not None:
            stream = trio.SSLStream(stream, self.ssl_context, server_side=True)
            try:
                await stream.do_handshake()
            except trio.BrokenResourceError:
                return
            self.peer_certs.append(stream.getpeercert())
        session = SaslSession(self.listener, USERS, DefaultKafkaPrincipalBuilder(),
                              PlaintextAuthenticationContext(client_address="127.0.0.1", listener_name="UPSTREAM",
                                                             security_protocol="SASL_PLAINTEXT"))
        decoder = FrameDecoder(1 << 20)
        try:
            while True:
                data = await stream.receive_some(65536)
                if not data:
                    return
                if b"kgw-secret" in data and session.mechanism != "PLAIN":
                    self.saw_password_in_clear = True
                decoder.receive_data(data)
                while (frame := decoder.next_frame()) is not NEED_DATA:
                    body = memoryview(bytes(frame))[4:]
                    header = parse_request_header(body)
                    self.requests.append((header.api_key, header.api_version, header.correlation_id))
                    close = False
                    if header.api_key == 18:
                        lo_hi = self.versions
                        cls = response_class(18, 0)
                        key_cls = cls.__dataclass_fields__["api_keys"].type.__args__[0]
                        response = cls(error_code=ErrorCode.none, api_keys=tuple(
                            key_cls(api_key=k, min_version=lo, max_version=hi) for k, (lo, hi) in lo_hi.items()))
                        version = 0
                    else:
                        request = decode_request(header.api_key, header.api_version, body, header.size)
                        response, close = session.handle(header.api_key, header.api_version, request)
                        version = header.api_version
                        if session.authenticated and session.principal not in self.principals:
                            self.principals.append(session.principal)
                        if self.tamper and header.api_key == 36 and session.authenticated:
                            response = type(response)(**{**_fields(response), "auth_bytes": b"v=" + base64.b64encode(
                                b"\x00" * len(base64.b64decode(bytes(response.auth_bytes)[2:])))})
                    flexible = request_class(header.api_key, version).__flexible__
                    payload = response_header(header.api_key, flexible, header.correlation_id) + encode(response)
                    await stream.send_all(len(payload).to_bytes(4, "big") + payload)
                    if close:
                        return
        except (trio.BrokenResourceError, FrameError):  # FrameError: a TLS client on this plaintext port
            return
        finally:
            await trio.aclose_forcefully(stream)


def _fields(entity) -> dict:
    return {name: getattr(entity, name) for name in entity.__dataclass_fields__ if not name.startswith("__")}


def upstream(protocol: str, mechanism: str | None = None, username: str = "kgw", password: str = "kgw-secret",
             tls: UpstreamTlsConfig | None = None) -> UpstreamConfig:
    sasl = None if mechanism is None else UpstreamSaslConfig(
        mechanism=SaslMechanism(mechanism), username=username, password=password)
    return UpstreamConfig(bootstrap_servers=(), security_protocol=SecurityProtocol(protocol), tls=tls, sasl=sasl,
                          connect_timeout_ms=5000)


async def connect(broker: Broker, config: UpstreamConfig, host: str = "127.0.0.1"):
    stream = await trio.open_tcp_stream("127.0.0.1", broker.port)
    try:
        return await wrap_upstream(stream, host, config)
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise


async def still_usable(stream) -> None:
    """The wrapped stream carries Kafka requests after the handshake."""
    wire = _Wire(stream, "test")
    wire.correlation_id = 100
    response = await wire.call(18, 0, request_class(18, 0)())
    assert response.error_code == 0


# --------------------------------------------------------------------------- SASL


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_sasl_plaintext_authenticates(nursery, mechanism) -> None:
    broker = await nursery.start(Broker().serve)
    stream = await connect(broker, upstream("SASL_PLAINTEXT", mechanism))
    assert [str(p) for p in broker.principals] == ["User:kgw"]
    # ApiVersions v0, SaslHandshake v1, SaslAuthenticate v2 (x1 PLAIN, x2 SCRAM), correlation ids 1..n
    keys = [(k, v) for k, v, _ in broker.requests]
    assert keys[:2] == [(18, 0), (17, 1)]
    assert keys[2:] == [(36, 2)] * (1 if mechanism == "PLAIN" else 2)
    assert [c for _, _, c in broker.requests] == list(range(1, len(keys) + 1))
    assert not broker.saw_password_in_clear
    await still_usable(stream)
    await stream.aclose()


async def test_scram_user_name_is_escaped(nursery) -> None:
    broker = await nursery.start(Broker().serve)
    stream = await connect(broker, upstream("SASL_PLAINTEXT", "SCRAM-SHA-256", "we,ird=name", "pw"))
    assert [p.name for p in broker.principals] == ["we,ird=name"]
    await stream.aclose()


async def test_old_broker_without_sasl_authenticate_v2(nursery) -> None:
    broker = await nursery.start(Broker(versions={18: (0, 2), 17: (0, 1), 36: (0, 1)}).serve)
    stream = await connect(broker, upstream("SASL_PLAINTEXT", "SCRAM-SHA-512"))
    assert {(k, v) for k, v, _ in broker.requests if k == 36} == {(36, 1)}
    await stream.aclose()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256"])
async def test_wrong_password_is_a_clear_error(nursery, mechanism) -> None:
    broker = await nursery.start(Broker().serve)
    with pytest.raises(UpstreamSecurityError) as info:
        await connect(broker, upstream("SASL_PLAINTEXT", mechanism, password="nope"))
    text = str(info.value)
    assert f"SASL {mechanism} authentication as 'kgw'" in text
    assert "SASL_AUTHENTICATION_FAILED (58)" in text
    assert "nope" not in text and "kgw-secret" not in text
    assert broker.principals == []


async def test_unknown_user_fails_like_a_wrong_password(nursery) -> None:
    """The two failures are reported the same way (only the user name differs): the message
    tells an operator nothing a wrong password would not."""
    broker = await nursery.start(Broker().serve)
    with pytest.raises(UpstreamSecurityError) as unknown:
        await connect(broker, upstream("SASL_PLAINTEXT", "SCRAM-SHA-512", username="mallory"))
    with pytest.raises(UpstreamSecurityError) as wrong:
        await connect(broker, upstream("SASL_PLAINTEXT", "SCRAM-SHA-512", password="nope"))
    assert "SASL_AUTHENTICATION_FAILED (58)" in str(unknown.value)
    assert str(unknown.value).replace("'mallory'", "'kgw'") == str(wrong.value)


async def test_mechanism_the_broker_does_not_offer(nursery) -> None:
    broker = await nursery.start(Broker(mechanisms=("PLAIN",)).serve)
    with pytest.raises(UpstreamSecurityError) as info:
        await connect(broker, upstream("SASL_PLAINTEXT", "SCRAM-SHA-256"))
    assert "SCRAM-SHA-256 refused (UNSUPPORTED_SASL_MECHANISM (33))" in str(info.value)
    assert "the broker offers: PLAIN" in str(info.value)


async def test_broker_that_does_not_know_the_password_is_caught(nursery) -> None:
    """SCRAM is mutual: a wrong server signature in server-final fails the connection."""
    broker = await nursery.start(Broker(tamper_server_final=True).serve)
    with pytest.raises(UpstreamSecurityError, match="server signature is wrong"):
        await connect(broker, upstream("SASL_PLAINTEXT", "SCRAM-SHA-256"))


async def test_plaintext_returns_the_stream_untouched(nursery) -> None:
    broker = await nursery.start(Broker().serve)
    raw = await trio.open_tcp_stream("127.0.0.1", broker.port)
    assert await wrap_upstream(raw, "127.0.0.1", upstream("PLAINTEXT")) is raw
    await raw.aclose()


async def test_broker_that_closes_is_an_error_not_a_hang(nursery) -> None:
    async def closer(stream):
        await stream.aclose()

    listeners = await nursery.start(trio.serve_tcp, closer, 0)
    port = listeners[0].socket.getsockname()[1]
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    with pytest.raises(UpstreamSecurityError, match="closed the connection|connection lost"):
        await wrap_upstream(stream, "127.0.0.1", upstream("SASL_PLAINTEXT", "PLAIN"))


async def test_silent_broker_times_out(nursery) -> None:
    async def silent(stream):
        await trio.sleep_forever()

    listeners = await nursery.start(trio.serve_tcp, silent, 0)
    port = listeners[0].socket.getsockname()[1]
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    with pytest.raises(UpstreamSecurityError, match="did not finish within 0.2s"):
        await wrap_upstream(stream, "127.0.0.1", upstream("SASL_PLAINTEXT", "PLAIN"), timeout_s=0.2)
    await stream.aclose()


# --------------------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def _server_context(pki, client_auth: str = "none") -> ssl.SSLContext:
    return server_ssl_context(ListenerTlsConfig(cert_file=pki.server.cert_file, key_file=pki.server.key_file,
                                                ca_file=pki.ca.cert_file, client_auth=ClientAuth(client_auth)))


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
async def test_sasl_ssl(nursery, pki, mechanism) -> None:
    broker = await nursery.start(Broker(ssl_context=_server_context(pki)).serve)
    stream = await connect(broker, upstream("SASL_SSL", mechanism, tls=UpstreamTlsConfig(ca_file=pki.ca.cert_file)),
                           host="localhost")
    assert isinstance(stream, trio.SSLStream)
    assert [str(p) for p in broker.principals] == ["User:kgw"]
    await still_usable(stream)
    await stream.aclose()


async def test_ssl_with_client_certificate(nursery, pki) -> None:
    broker = await nursery.start(Broker(ssl_context=_server_context(pki, "required")).serve)
    tls = UpstreamTlsConfig(ca_file=pki.ca.cert_file, cert_file=pki.client.cert_file, key_file=pki.client.key_file)
    stream = await connect(broker, upstream("SSL", tls=tls), host="localhost")
    await still_usable(stream)  # no SASL on SSL: the broker answers ApiVersions straight away
    # (checked after a round trip: with TLS 1.3 the client finishes its handshake before the server)
    subject = dict(pair[0] for pair in broker.peer_certs[0]["subject"])
    assert subject["commonName"] == "alice"
    await stream.aclose()


async def test_untrusted_broker_certificate(nursery, pki) -> None:
    broker = await nursery.start(Broker(ssl_context=_server_context(pki)).serve)
    tls = UpstreamTlsConfig(ca_file=pki.other_ca.cert_file)
    with pytest.raises(UpstreamSecurityError, match="broker certificate refused.*upstream.tls.ca_file"):
        await connect(broker, upstream("SSL", tls=tls), host="localhost")


async def test_hostname_mismatch_and_check_hostname_off(nursery, pki) -> None:
    broker = await nursery.start(Broker(ssl_context=_server_context(pki)).serve)
    with pytest.raises(UpstreamSecurityError, match="does not name '127.0.0.1'"):
        await connect(broker, upstream("SSL", tls=UpstreamTlsConfig(ca_file=pki.ca.cert_file)), host="127.0.0.1")
    relaxed = UpstreamTlsConfig(ca_file=pki.ca.cert_file, check_hostname=False)
    stream = await connect(broker, upstream("SSL", tls=relaxed), host="127.0.0.1")
    await stream.aclose()


async def test_tls_to_a_plaintext_broker(nursery) -> None:
    broker = await nursery.start(Broker().serve)
    with pytest.raises(UpstreamSecurityError, match="TLS handshake failed|closed the connection during the TLS"):
        await connect(broker, upstream("SSL", tls=UpstreamTlsConfig(check_hostname=False)), host="localhost")


# --------------------------------------------------------------------------- the SCRAM client itself


def test_scram_client_rfc7677_vector() -> None:
    """RFC 7677 §3: the client-final proof for user "user", password "pencil"."""
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.client_first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = client.client_final(
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    client.verify_server_final(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")


@pytest.mark.parametrize("server_first, message", [
    (b"r=other,s=AAAA,i=4096", "does not extend"),
    (b"r=abcXYZ,s=AAAA,i=1000", "fewer than the minimum"),
    (b"r=abcXYZ,s=AAAA", "lacks"),
    (b"e=unknown-user", "server error"),
    (b"m=x,r=abcXYZ,s=AAAA,i=4096", "mandatory extension"),
])
def test_scram_client_refuses_bad_server_first(server_first, message) -> None:
    client = ScramClient("SCRAM-SHA-256", "u", "p", nonce="abc")
    with pytest.raises(ValueError, match=message):
        client.client_final(server_first)


def test_scram_salted_keys_match_the_server_credential() -> None:
    """What the client proves is what ScramCredential.from_password stores (same PBKDF2)."""
    salt = b"0123456789abcdef"
    cred = ScramCredential.from_password("u", "p", SHA512, salt=salt, iterations=4096)
    salted = hashlib.pbkdf2_hmac("sha512", b"p", salt, 4096)
    assert cred.server_key == __import__("hmac").digest(salted, b"Server Key", "sha512")
