"""SASL/OAUTHBEARER (KIP-255) on a listener, validated as Kafka's broker-side JWT validator
(KIP-768) does: a signed JWT from the organisation's OpenID Connect provider.

Theory of operation
-------------------
**Keys** (:class:`JwksSource`): the provider's signing keys come from a JWKS URL
(``jwks_endpoint_url``), from OpenID Connect discovery (``issuer_url``: its
``/.well-known/openid-configuration`` names the JWKS and the issuer) or from a file
(``jwks_file``, for sites without a route to the provider).  A URL is fetched by the
gateway's background task off the event loop at start-up and every ``jwks_refresh_ms``;
a token signed with a key id the set does not hold triggers one more fetch, at most once
per ``_UNKNOWN_KID_REFETCH_S`` (a key rotation works without a restart, a flood of made-up
key ids costs one fetch per interval).  The set in use is swapped whole.

**A token** (:meth:`OAuthBearerValidator.validate`, on a worker thread in the client
host's turn, like a stretched password hash): the signature with an asymmetric algorithm
(RS256/384/512, PS256/384/512, ES256/384/512; ``alg: none`` and HMAC are refused), then
``exp`` (required), ``nbf`` and ``iat`` with ``clock_skew_seconds``, the issuer and the
audience when configured, and the subject claim (``sub_claim_name``) that names the
principal.  Parsing and signature checks are joserfc's; nothing here reads a JWT by hand.

**The exchange** (:class:`OAuthBearerServer`, RFC 7628): the client's first message is
``n,[a=authzid],^Aauth=Bearer <jwt>^A[key=value^A]*^A``.  A valid token completes the
exchange; an invalid one is answered, as Kafka's ``OAuthBearerSaslServer`` does, with the
error JSON (``{"status":"invalid_token", ...}``), to which the client replies ``^A`` and
the exchange fails with SASL_AUTHENTICATION_FAILED naming the reason.  An authzid other
than the token's principal is refused.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from joserfc import jwt
from joserfc.errors import InvalidKeyIdError, JoseError
from joserfc.jwk import KeySet

from gateway.auth.scram import SaslFailure

__all__ = ["JwksSource", "OAuthBearerServer", "OAuthBearerValidator", "TokenInvalid", "ValidatedToken"]

log = logging.getLogger("kgw.oauthbearer")

#: the signature algorithms a token may use: asymmetric only (a public JWKS key can never
#: verify an HMAC, and "none" is no signature)
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")
#: an unknown key id fetches the JWKS again at most this often
_UNKNOWN_KID_REFETCH_S = 10.0
#: the longest JWKS or discovery document read
_MAX_DOCUMENT_BYTES = 1 << 20
_SEP = "\x01"


class TokenInvalid(Exception):
    """A token that does not authenticate; ``reason`` for the log, ``status`` for the client."""

    def __init__(self, reason: str, status: str = "invalid_token", cause: str = "token_invalid") -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status
        #: a fixed word for metrics (``kgw_authentication_failures_by_client_total{cause}``)
        self.cause = cause


@dataclass(frozen=True)
class ValidatedToken:
    principal_name: str
    scopes: frozenset[str]
    claims: dict[str, Any]
    expires_at: float
    #: the names the configured groups claim lists (``Group:<name>`` principals)
    groups: tuple[str, ...] = ()


def _http_json(url: str, timeout_s: float) -> Any:
    request = urllib.request.Request(url, headers={"Accept": "application/json", "User-Agent": "kgw"})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - a configured URL
        body = response.read(_MAX_DOCUMENT_BYTES + 1)
    if len(body) > _MAX_DOCUMENT_BYTES:
        raise ValueError(f"{url}: larger than {_MAX_DOCUMENT_BYTES} bytes")
    return json.loads(body)


@dataclass
class JwksSource:
    """The provider's verification keys (see the module docstring)."""

    jwks_endpoint_url: str | None = None
    issuer_url: str | None = None
    jwks_file: Path | None = None
    refresh_s: float = 3600.0
    timeout_s: float = 10.0
    keys: KeySet | None = None
    #: the issuer OpenID Connect discovery named (checked when no expected_issuer is set)
    discovered_issuer: str | None = None
    #: why the last fetch failed, None after a success (``/readyz``)
    error: str | None = "not fetched yet"
    fetched_at: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _last_unknown_kid_fetch: float = 0.0

    @classmethod
    def from_config(cls, cfg: Any, timeout_s: float = 10.0) -> "JwksSource":
        """The key source a listener's ``sasl.oauthbearer`` section names."""
        return cls(jwks_endpoint_url=cfg.jwks_endpoint_url, issuer_url=cfg.issuer_url, jwks_file=cfg.jwks_file,
                   refresh_s=cfg.jwks_refresh_ms / 1000, timeout_s=timeout_s)

    @property
    def ready(self) -> bool:
        return self.keys is not None

    def fetch(self) -> None:
        """Read the keys now (blocking: a worker thread or start-up); the set is swapped whole.
        On failure the keys in use stay and ``error`` says why."""
        with self._lock:
            try:
                if self.jwks_file is not None:
                    document = json.loads(Path(self.jwks_file).read_text())
                else:
                    url = self.jwks_endpoint_url
                    if url is None:
                        assert self.issuer_url is not None
                        discovery = _http_json(self.issuer_url.rstrip("/") + "/.well-known/openid-configuration",
                                               self.timeout_s)
                        url = str(discovery["jwks_uri"])
                        self.discovered_issuer = str(discovery.get("issuer") or self.issuer_url)
                    document = _http_json(url, self.timeout_s)
                keys = KeySet.import_key_set(document)
            except (OSError, ValueError, KeyError, TypeError, JoseError) as e:
                self.error = f"{type(e).__name__}: {e}"
                log.warning("OAUTHBEARER keys not fetched: %s (%s)", self.error, self.where)
                return
            self.keys = keys
            self.error = None
            self.fetched_at = time.monotonic()

    @property
    def where(self) -> str:
        return str(self.jwks_file or self.jwks_endpoint_url or self.issuer_url)

    def refetch_for_unknown_kid(self) -> bool:
        """Fetch again for a key id the set does not hold, unless that was done within the
        last ``_UNKNOWN_KID_REFETCH_S``; whether a fetch happened."""
        now = time.monotonic()
        if self.jwks_file is None and now - self._last_unknown_kid_fetch < _UNKNOWN_KID_REFETCH_S:
            return False
        self._last_unknown_kid_fetch = now
        self.fetch()
        return True


def _claim(claims: dict[str, Any], path: str) -> Any:
    """A claim by name, or by a dotted path into nested objects (``realm_access.roles``)."""
    if path in claims:
        return claims[path]
    value: Any = claims
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


@dataclass
class OAuthBearerValidator:
    """Kafka's broker-side JWT checks (KIP-768 config names in the YAML)."""

    keys: JwksSource
    expected_audience: tuple[str, ...] = ()
    expected_issuer: str | None = None
    scope_claim_name: str = "scope"
    sub_claim_name: str = "sub"
    groups_claim: str | None = None
    clock_skew_s: int = 30
    now: Any = time.time

    @classmethod
    def from_config(cls, cfg: Any) -> "OAuthBearerValidator":
        """The validator of a listener's ``sasl.oauthbearer`` section (configs.gateway_config)."""
        return cls(JwksSource.from_config(cfg), expected_audience=tuple(cfg.expected_audience),
                   expected_issuer=cfg.expected_issuer, scope_claim_name=cfg.scope_claim_name,
                   sub_claim_name=cfg.sub_claim_name, groups_claim=cfg.groups_claim,
                   clock_skew_s=cfg.clock_skew_seconds)

    def validate(self, token: str) -> ValidatedToken:
        keys = self.keys.keys
        if keys is None:
            raise TokenInvalid(f"the provider's keys are not available ({self.keys.error})", cause="token_no_keys")
        try:
            decoded = jwt.decode(token, keys, algorithms=ALGORITHMS)
        except InvalidKeyIdError:
            if not self.keys.refetch_for_unknown_kid() or self.keys.keys is None:
                raise TokenInvalid("the token's key id (kid) is not among the provider's keys",
                                   cause="token_unknown_key") from None
            try:
                decoded = jwt.decode(token, self.keys.keys, algorithms=ALGORITHMS)
            except JoseError as e:
                raise TokenInvalid(f"invalid token: {e}") from None
        except (JoseError, ValueError) as e:
            raise TokenInvalid(f"invalid token: {e}", cause="token_signature" if "signature" in str(e).lower()
                               else "token_invalid") from None
        claims = dict(decoded.claims)
        issuer = self.expected_issuer or self.keys.discovered_issuer
        options: dict[str, Any] = {"exp": {"essential": True}}
        if issuer:
            options["iss"] = {"essential": True, "value": issuer}
        if self.expected_audience:
            options["aud"] = {"essential": True, "values": list(self.expected_audience)}
        try:
            jwt.JWTClaimsRegistry(now=int(self.now()), leeway=self.clock_skew_s, **options).validate(claims)
        except JoseError as e:
            claim = str(getattr(e, "claim", "") or "")
            cause = {"exp": "token_expired", "nbf": "token_not_yet_valid", "aud": "token_audience",
                     "iss": "token_issuer"}.get(claim, "token_claims")
            if e.error == "expired_token":
                cause = "token_expired"
            raise TokenInvalid(f"invalid token: {e.error}: {e.description}", cause=cause) from None
        subject = _claim(claims, self.sub_claim_name)
        if not isinstance(subject, str) or not subject:
            raise TokenInvalid(f"the token has no {self.sub_claim_name!r} claim naming its principal")
        scope = _claim(claims, self.scope_claim_name)
        scopes = frozenset(scope.split() if isinstance(scope, str) else scope if isinstance(scope, list) else ())
        groups: tuple[str, ...] = ()
        if self.groups_claim:
            raw = _claim(claims, self.groups_claim)
            names = raw if isinstance(raw, list) else [raw] if isinstance(raw, str) else []
            groups = tuple(dict.fromkeys(str(g).lstrip("/") for g in names if str(g).strip("/")))
        return ValidatedToken(subject, scopes, claims, float(claims["exp"]), groups)


class OAuthBearerServer:
    """The server side of one OAUTHBEARER exchange (RFC 7628; see the module docstring)."""

    mechanism = "OAUTHBEARER"

    def __init__(self, validator: OAuthBearerValidator) -> None:
        self._validator = validator
        self.complete = False
        self.authorization_id: str | None = None
        self.token: ValidatedToken | None = None
        self.attempted_user: str | None = None
        self._error: TokenInvalid | None = None

    def evaluate(self, message: bytes) -> bytes:
        if self._error is not None:  # the client's ^A after the error JSON
            raise SaslFailure(f"Authentication failed: {self._error.reason}", self._error.reason,
                              cause=self._error.cause)
        if self.complete:
            raise SaslFailure("Authentication failed: OAUTHBEARER exchange already complete")
        try:
            text = message.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure("Invalid OAUTHBEARER client first message: not UTF-8") from None
        gs2, sep, rest = text.partition(_SEP)
        if not sep or not gs2.startswith(("n,", "y,")) or not rest.endswith(_SEP * 2):
            raise SaslFailure("Invalid OAUTHBEARER client first message")
        authzid = next((p[2:] for p in gs2.split(",")[1:] if p.startswith("a=")), "")
        auth = next((kv[5:] for kv in rest.split(_SEP) if kv.startswith("auth=")), None)
        if auth is None or not auth.lower().startswith("bearer "):
            raise SaslFailure("Invalid OAUTHBEARER client first message: no auth=Bearer token")
        try:
            token = self._validator.validate(auth[7:].strip())
        except TokenInvalid as e:
            self._error = e
            return json.dumps({"status": e.status, "scope": "", "openid-configuration": ""}).encode()
        self.attempted_user = token.principal_name
        if authzid and authzid != token.principal_name:
            raise SaslFailure("Authentication failed: the authorization id is not the token's principal",
                              f"authzid {authzid[:64]!r} is not the token's principal {token.principal_name!r}")
        self.token = token
        self.authorization_id = token.principal_name
        self.complete = True
        return b""
