"""kgw's own OAUTHBEARER login upstream, its parts without a broker: the client-credentials token
(against an in-process token endpoint: a stand-in for the provider, which the integration test
tests/integration/test_upstream_oauthbearer.py replaces with Keycloak), the RFC 7628 exchange
when the broker refuses the token, and the YAML that configures it."""

from __future__ import annotations

import base64
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
import trio
from kio.schema.errors import ErrorCode

from configs.gateway_config import ConfigError, UpstreamOAuthConfig
from configs.yaml_reader import parse_config
from gateway.upstream.oauth_token import ClientCredentialsToken, TokenUnavailable
from gateway.upstream.security import UpstreamSecurityError, _oauthbearer


class TokenEndpoint:
    """Issues ``token-<n>`` to client ``kgw`` / secret ``s3cret`` with ``expires_in`` seconds."""

    def __init__(self, expires_in: float = 300) -> None:
        self.expires_in = expires_in
        self.requests: list[dict] = []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                form = urllib.parse.parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
                basic = base64.b64decode(self.headers.get("Authorization", "Basic ").split(" ", 1)[1]).decode()
                endpoint.requests.append({"form": form, "basic": basic})
                if basic != "kgw:s3cret":
                    self._reply(401, {"error": "unauthorized_client", "error_description": "Invalid client secret"})
                else:
                    self._reply(200, {"access_token": f"token-{len(endpoint.requests)}", "token_type": "Bearer",
                                      "expires_in": endpoint.expires_in})

            def do_GET(self) -> None:  # noqa: N802
                self._reply(200, {"issuer": endpoint.url, "token_endpoint": f"{endpoint.url}/token"})

            def _reply(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def endpoint():
    server = TokenEndpoint()
    yield server
    server.server.shutdown()
    server.server.server_close()


def _config(endpoint: TokenEndpoint, secret: str = "s3cret", **kw) -> UpstreamOAuthConfig:
    kw.setdefault("token_endpoint_url", f"{endpoint.url}/token")
    return UpstreamOAuthConfig(client_id="kgw", client_secret=secret, **kw)


async def test_a_token_is_kept_until_most_of_its_life_has_passed(endpoint):
    endpoint.expires_in = 300
    source = ClientCredentialsToken(_config(endpoint, scope="kafka"))
    assert await source.token() == "token-1"
    assert await source.token() == "token-1"  # reused: one request to the provider
    assert len(endpoint.requests) == 1
    assert endpoint.requests[0]["form"] == {"grant_type": ["client_credentials"], "scope": ["kafka"]}
    endpoint.expires_in = 0.05  # a token whose refresh window has passed by the next login
    source2 = ClientCredentialsToken(_config(endpoint))
    first = await source2.token()
    await trio.sleep(0.06)  # the token's own lifetime passes (not synchronisation)
    assert await source2.token() != first
    assert source2.fetches == 2


async def test_discovery_finds_the_token_endpoint(endpoint):
    source = ClientCredentialsToken(_config(endpoint, token_endpoint_url=None, issuer_url=endpoint.url))
    assert await source.token() == "token-1"


async def test_a_refused_secret_names_the_providers_reason_and_never_the_secret(endpoint):
    source = ClientCredentialsToken(_config(endpoint, secret="wrong-secret"))
    with pytest.raises(TokenUnavailable) as refused:
        await source.token()
    message = str(refused.value)
    assert "HTTP 401" in message and "unauthorized_client: Invalid client secret" in message and "'kgw'" in message
    assert "wrong-secret" not in message


class _RefusingBroker:
    """A wire whose broker refuses the token as Kafka does (RFC 7628: error JSON as a challenge,
    then the failure once the client answered %x01)."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    async def call(self, api_key, version, body):
        self.sent.append(bytes(body.auth_bytes))
        if len(self.sent) == 1:
            return SimpleNamespace(error_code=ErrorCode.none, error_message=None,
                                   auth_bytes=b'{"status":"invalid_token"}')
        return SimpleNamespace(error_code=ErrorCode.sasl_authentication_failed,
                               error_message="Authentication failed during authentication due to invalid "
                                             "credentials with SASL mechanism OAUTHBEARER", auth_bytes=b"")


async def test_a_refused_token_gets_the_rfc7628_reply_and_the_brokers_reason(endpoint):
    wire = _RefusingBroker()
    with pytest.raises(UpstreamSecurityError) as refused:
        await _oauthbearer(wire, 2, _config(endpoint), "upstream b1", 5.0)
    assert wire.sent == [b"n,,\x01auth=Bearer token-1\x01\x01", b"\x01"]
    message = str(refused.value)
    assert "invalid_token" in message and "SASL_AUTHENTICATION_FAILED" in message and "client 'kgw'" in message


def _raw(sasl: dict) -> dict:
    return {"listeners": [{"name": "T", "port": 0, "broker_port_base": 20000}], "admin": None,
            "upstream": {"bootstrap_servers": ["127.0.0.1:9092"], "security_protocol": "SASL_SSL", "sasl": sasl}}


def test_the_yaml_of_an_oauthbearer_login_upstream():
    oauth = {"token_endpoint_url": "https://idp.example.com/token", "client_id": "kgw", "client_secret": "s3cr3t-value"}
    config = parse_config(_raw({"mechanism": "OAUTHBEARER", "oauthbearer": oauth}))
    assert config.upstream.sasl.oauthbearer.client_id == "kgw" and config.upstream.sasl.username is None
    assert "s3cr3t-value" not in repr(config.upstream.sasl)
    for sasl, error in (
            ({"mechanism": "OAUTHBEARER", "oauthbearer": oauth, "username": "u"}, "upstream.sasl.username: not used"),
            ({"mechanism": "OAUTHBEARER"}, "upstream.sasl.oauthbearer"),
            ({"mechanism": "PLAIN", "username": "u", "password": "p", "oauthbearer": oauth},
             "upstream.sasl.oauthbearer: only with mechanism OAUTHBEARER"),
            ({"mechanism": "OAUTHBEARER", "oauthbearer": {**oauth, "issuer_url": "https://idp.example.com"}},
             "exactly one of token_endpoint_url and issuer_url")):
        with pytest.raises(ConfigError) as refused:
            parse_config(_raw(sasl))
        assert error in str(refused.value), (sasl, str(refused.value))
