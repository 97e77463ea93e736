"""SASL on client connections: sans-IO mechanisms and Kafka's SASL framing state machine.

Theory of operation
-------------------
Two layers, neither of which touches a socket.

**Mechanisms** (:class:`PlainServer`, :class:`ScramServer`) follow the SASL
server model: ``evaluate(token) -> challenge`` until ``complete``; any
failure raises :class:`SaslFailure`.

* PLAIN (RFC 4616): one message ``[authzid] NUL authcid NUL passwd``.  The
  password is checked with ``PlainCredential.verify`` (constant time).  An
  unknown user costs the same PBKDF2 work as a wrong password and gets the
  same message.  An authzid other than empty or the user name is refused
  (Kafka ``PlainSaslServer``).
* SCRAM-SHA-256/512 (RFC 5802, RFC 7677): client-first (gs2 header + bare
  message) → server-first (``r=<client nonce><server nonce>,s=<salt>,i=<n>``)
  → client-final (``c=,r=,p=``) → server-final (``v=<ServerSignature>``).
  The server holds only StoredKey and ServerKey, never the password, and
  checks a proof without PBKDF2::

      ClientSignature = HMAC(StoredKey, AuthMessage)
      ClientKey       = ClientProof XOR ClientSignature
      valid           ⇔ H(ClientKey) == StoredKey      (constant-time compare)

  Unknown users are not revealed: they get a server-first with a salt derived
  from the name (stable across attempts) and 4096 iterations, and fail at
  client-final exactly like a wrong password.  Channel-binding flag ``p`` is
  refused (kgw offers no ``-PLUS`` mechanism); ``n`` and ``y`` are accepted
  and ``c=`` must echo the gs2 header.  The reserved ``m=`` attribute is
  refused (RFC 5802 §5.1).  The ``tokenauth`` extension (Kafka delegation
  tokens) is refused; other extensions are ignored, as in Kafka.

**Framing** (:class:`SaslSession`) is Kafka's ``SaslServerAuthenticator``
state machine for one connection::

    INITIAL ──ApiVersions──▶ HANDSHAKE
    INITIAL / HANDSHAKE ──SaslHandshake v1──▶ AUTHENTICATE ──SaslAuthenticate*──▶ COMPLETE
    INITIAL / HANDSHAKE ──SaslHandshake v0──▶ RAW_TOKENS   ──raw token frames*──▶ COMPLETE
    any failure ──▶ FAILED (the connection is closed after the response)

The connection calls :meth:`SaslSession.gate` for every request frame before
dispatching it; before COMPLETE only ApiVersions, SaslHandshake and
SaslAuthenticate pass.  SaslHandshake and SaslAuthenticate go to
:meth:`SaslSession.handle`, which returns the response entity and whether
to close the connection after sending it.  In the RAW_TOKENS state
(``expects_raw_token``) frames carry bare SASL tokens without a request
header, and go to :meth:`SaslSession.handle_raw_token`.

Error responses (codes from ``kio.schema.errors.ErrorCode``):

* SaslHandshake with a mechanism not enabled on the listener:
  UNSUPPORTED_SASL_MECHANISM (33) listing the enabled mechanisms, then close;
* SaslHandshake or SaslAuthenticate out of order: ILLEGAL_SASL_STATE (34),
  then close; after a successful authentication the same code, connection
  kept (what Kafka's request handler answers when re-authentication is off);
* a failed exchange: SASL_AUTHENTICATION_FAILED (58) with a message, then
  close.  The message never says whether the user exists.

**Re-authentication** (KIP-368, ``sasl.connections_max_reauth_ms`` > 0): a successful
SaslAuthenticate tells the client its session lifetime, the setting or, for OAUTHBEARER, the
time until the token expires if sooner.  Before then the client sends SaslHandshake and
SaslAuthenticate again on the same connection, with the same mechanism; other requests go on
meanwhile with the session's principal (until the session expires).  A re-authentication that
establishes another principal fails and the connection is closed (Kafka: principals cannot
change).  The first request other than those after the session expired closes the connection
(``expired``, checked by the connection core).  With the setting 0 the lifetime is 0 and a
session never expires, as on a Kafka broker with re-authentication off.

Secrets (passwords, proofs, keys) are never logged nor put in messages;
failure reasons kept for the log (``failure_reason``) name the user at most.

PLAIN with ``password_hash`` runs PBKDF2 (100 000 iterations by default, tens
of milliseconds) inside ``handle``, unless the password was verified recently for
the same stored hash (``VerifiedPasswords``); :meth:`SaslSession.needs_hashing`
tells the connection which requests hash, and those run on a worker thread in
their client host's turn (``gateway/auth/password_hashing.py``).  SCRAM costs a few
HMACs and runs inline.
"""

from __future__ import annotations
import base64
import enum
import logging
import os
from collections.abc import Callable, Mapping
import time
from datetime import timedelta
from typing import Any
from kio.schema.errors import ErrorCode
from kio.static.primitive import i64Timedelta
from authz.principal import KafkaPrincipal
from authz.principal_builder import AuthenticationContext, KafkaPrincipalBuilder, SaslAuthenticationContext
from authz.credentials import PlainCredential, SaslMechanism, VerifiedPasswords
from protocol.codecs import response_class
from authz.credentials import CredentialStore
from gateway.auth.scram import ScramServer, _default_nonce
from gateway.auth.scram import SaslFailure
from gateway.auth.oauthbearer import OAuthBearerServer, OAuthBearerValidator

log = logging.getLogger("kgw.sasl")


SASL_HANDSHAKE = 17


SASL_AUTHENTICATE = 36


API_VERSIONS = 18




class SaslStateError(Exception):
    """A request arrived that the SASL state does not allow; close without a response."""


def _dummy_plain() -> PlainCredential:
    """A credential no password matches, with the default PBKDF2 cost (no PBKDF2 run to make it)."""
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return PlainCredential(name="", password_hash=f"pbkdf2_sha256$100000${b64(os.urandom(16))}${b64(os.urandom(32))}")


_DUMMY_PLAIN = _dummy_plain()


class PlainServer:
    """SASL/PLAIN server (RFC 4616) with Kafka's checks and messages."""

    mechanism = "PLAIN"

    def __init__(self, users: Mapping[str, PlainCredential], verified: VerifiedPasswords | None = None) -> None:
        self.attempted_user: str | None = None  # the user name the client gave (audit of failures)
        self._users = users
        self._verified = verified
        self.complete = False
        self.authorization_id: str | None = None

    def needs_hashing(self, token: bytes) -> bool:
        """Whether evaluating ``token`` runs the stretched hash: not for a password this
        process verified recently for the same stored credential (nor for a token refused
        before any hashing)."""
        try:
            _authzid, username, password = _plain_tokens(token)
        except SaslFailure:
            return False
        if not username or not password:
            return False
        credential = self._users.get(username)
        return credential is None or self._verified is None or not self._verified.known(credential, password)

    def evaluate(self, token: bytes) -> bytes:
        if self.complete:
            raise SaslFailure("Authentication failed: PLAIN exchange already complete")
        authzid, username, password = _plain_tokens(token)
        self.attempted_user = username or None
        if not username:
            raise SaslFailure("Authentication failed: username not specified")
        if not password:
            raise SaslFailure("Authentication failed: password not specified")
        credential = self._users.get(username)
        if credential is None:
            ok = _DUMMY_PLAIN.verify(password)  # the same cost as a wrong password
        elif self._verified is not None:
            ok = self._verified.verify(credential, password)
        else:
            ok = credential.verify(password)
        if credential is None or not ok:
            why = "unknown user" if credential is None else "wrong password"
            raise SaslFailure("Authentication failed: Invalid username or password", f"{why} {username!r}",
                              cause="credentials")
        if authzid and authzid != username:
            raise SaslFailure(
                "Authentication failed: Client requested an authorization id that is different from username",
                f"user {username!r} asked for authorization id {authzid!r}",
            )
        self.authorization_id = username
        self.complete = True
        return b""


def _plain_tokens(token: bytes) -> tuple[str, str, str]:
    """Kafka PlainSaslServer.extractTokens: exactly three NUL-separated UTF-8 fields."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslFailure("Invalid SASL/PLAIN response: not UTF-8") from None
    parts = text.split("\x00", 3)
    if len(parts) != 3:
        raise SaslFailure(f"Invalid SASL/PLAIN response: expected 3 tokens, got {min(len(parts), 4)}")
    return parts[0], parts[1], parts[2]


class SaslState(enum.Enum):
    INITIAL = "initial"
    """Nothing received: ApiVersions or SaslHandshake expected."""
    HANDSHAKE = "handshake"
    """ApiVersions answered: SaslHandshake expected."""
    AUTHENTICATE = "authenticate"
    """SaslHandshake v1 accepted: SaslAuthenticate requests carry the tokens."""
    RAW_TOKENS = "raw_tokens"
    """SaslHandshake v0 accepted: the next frames are bare tokens."""
    COMPLETE = "complete"
    FAILED = "failed"


_NO_LIFETIME = i64Timedelta.parse(timedelta(0))


class SaslSession:
    """Kafka's server-side SASL framing for one connection (see the module docstring).

    Args:
        listener_config: the ``ListenerConfig`` (its ``name`` and
            ``sasl.mechanisms``; ``security_protocol`` must use SASL).
        users: a ``UsersConfig`` or a :class:`CredentialStore`.
        principal_builder: builds the principal once authentication completes.
        auth_context_base: the connection's accept-time context
            (``PlaintextAuthenticationContext`` or ``SslAuthenticationContext``);
            its address, listener and TLS certificate go into the
            ``SaslAuthenticationContext``.
        failures: optional ``AuthFailureTracker`` told about every failure
            (and success, which resets the client's count).
        nonce_factory: SCRAM server nonce source (tests).
    """

    def __init__(
        self, listener_config: Any, users: Any, principal_builder: KafkaPrincipalBuilder,
        auth_context_base: AuthenticationContext, *, failures: Any = None,
        nonce_factory: Callable[[], str] = _default_nonce, verified: VerifiedPasswords | None = None,
        oauthbearer: OAuthBearerValidator | None = None,
    ) -> None:
        sasl = getattr(listener_config, "sasl", None)
        if sasl is None or not sasl.mechanisms:
            raise ValueError(f"listener {getattr(listener_config, 'name', '?')} has no SASL mechanisms")
        self.listener_name: str = listener_config.name
        self.enabled_mechanisms: tuple[str, ...] = tuple(str(m) for m in sasl.mechanisms)
        self._store = CredentialStore.of(users)
        self._builder = principal_builder
        self._base = auth_context_base
        self._failures = failures
        self._nonce_factory = nonce_factory
        self._verified = verified
        self._oauthbearer = oauthbearer
        #: connections.max.reauth.ms of the listener (0: sessions never expire)
        self.max_reauth_ms: int = int(getattr(sasl, "connections_max_reauth_ms", 0) or 0)
        #: time.monotonic() after which the session has expired (None: it never does)
        self.expires_at: float | None = None
        #: a re-authentication is under way (the previous principal must come out again)
        self.reauthenticating = False
        self._lifetime_ms = 0
        self.state = SaslState.INITIAL
        self.mechanism: str | None = None
        self.failure_reason: str | None = None
        self._server: PlainServer | ScramServer | OAuthBearerServer | None = None
        self._principal: KafkaPrincipal | None = None
        #: (name, version) of the client library from its ApiVersions request (KIP-511), if it said
        self.client_software: tuple[str, str] | None = None

    # -- queries ------------------------------------------------------------------

    @property
    def authenticated(self) -> bool:
        """Logged in; also while a re-authentication is under way (requests go on with the
        session's principal until it completes or the session expires)."""
        return self.state is SaslState.COMPLETE or (self.reauthenticating and self.state is SaslState.AUTHENTICATE)

    @property
    def principal(self) -> KafkaPrincipal | None:
        """The builder's principal (the exact object it returned) once authenticated, else None."""
        return self._principal

    @property
    def expects_raw_token(self) -> bool:
        """True when the next frame is a bare SASL token (after SaslHandshake v0)."""
        return self.state is SaslState.RAW_TOKENS

    # -- entry points ---------------------------------------------------------------

    def gate(self, api_key: int) -> None:
        """Check a request's API key before dispatch (not used for raw tokens).

        :raises SaslStateError: the request is not allowed now; close the
            connection without a response (Kafka does the same).
        """
        state = self.state
        if state is SaslState.COMPLETE or api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
            return
        if state is SaslState.INITIAL and api_key == API_VERSIONS:
            self.state = SaslState.HANDSHAKE
            return
        self._set_failed(f"unexpected request (API key {api_key}) in SASL state {state.value}", record=False)
        raise SaslStateError(self.failure_reason)

    def handle(self, api_key: int, version: int, request: Any) -> tuple[Any, bool]:
        """Answer a SaslHandshake (17) or SaslAuthenticate (36) request.

        Returns ``(response_entity, close_after)``: send the response, then
        close the connection if ``close_after``.
        """
        if api_key == SASL_HANDSHAKE:
            return self._handshake(version, request.mechanism)
        if api_key == SASL_AUTHENTICATE:
            return self._authenticate(version, bytes(request.auth_bytes))
        raise ValueError(f"SaslSession.handle: API key {api_key} is not SaslHandshake or SaslAuthenticate")

    def needs_hashing(self, api_key: int, request: Any = None, token: bytes | None = None) -> bool:
        """Whether answering this SaslAuthenticate request (or bare token) runs a stretched
        password hash, which must then run on a worker thread in its client host's turn."""
        if isinstance(self._server, OAuthBearerServer):  # a signature check, maybe a key fetch
            return not self._server.complete and (token is not None or (
                api_key == SASL_AUTHENTICATE and self.state is SaslState.AUTHENTICATE))
        if not isinstance(self._server, PlainServer) or self._server.complete:
            return False
        if token is None:
            if api_key != SASL_AUTHENTICATE or self.state is not SaslState.AUTHENTICATE:
                return False
            token = bytes(request.auth_bytes)
        return self._server.needs_hashing(token)

    def handle_raw_token(self, token: bytes) -> tuple[bytes | None, bool]:
        """Evaluate a bare token (SaslHandshake v0 flow).

        Returns ``(reply, close_after)``: on success ``reply`` is the token to
        send back as one size-prefixed frame (possibly empty, as Kafka does
        for PLAIN); on failure ``(None, True)``: close without a reply, as
        Kafka does (the v0 flow has no way to carry an error).
        """
        if self.state is not SaslState.RAW_TOKENS:
            self._set_failed(f"raw SASL token in state {self.state.value}", record=False)
            return None, True
        try:
            reply = self._evaluate(token)
        except SaslFailure:
            return None, True
        return reply, False

    # -- SaslHandshake --------------------------------------------------------------

    @property
    def lifetime_ms(self) -> int:
        """The current session's lifetime as told to the client (0: it does not expire)."""
        return self._lifetime_ms

    def expired(self, now: float) -> bool:
        """Whether the session's lifetime is over (KIP-368: the connection must be closed at
        the first request other than SaslHandshake/SaslAuthenticate)."""
        return self.expires_at is not None and now >= self.expires_at

    def _handshake(self, version: int, mechanism: str) -> tuple[Any, bool]:
        if self.state is SaslState.COMPLETE and self.max_reauth_ms > 0 and version >= 1:
            if mechanism != self.mechanism:  # Kafka: the same mechanism, or the connection goes
                self._set_failed(f"re-authentication with {mechanism[:64]!r} instead of {self.mechanism}")
                return self._handshake_response(version, ErrorCode.unsupported_sasl_mechanism,
                                                self.enabled_mechanisms), True
            self.reauthenticating = True
            self._server = self._new_server(mechanism)
            self.state = SaslState.AUTHENTICATE
            return self._handshake_response(version, ErrorCode.none, self.enabled_mechanisms), False
        if self.state is SaslState.COMPLETE:
            return self._handshake_response(version, ErrorCode.illegal_sasl_state, ()), False
        if self.state not in (SaslState.INITIAL, SaslState.HANDSHAKE):
            self._set_failed(f"SaslHandshake in state {self.state.value}", record=False)
            return self._handshake_response(version, ErrorCode.illegal_sasl_state, ()), True
        if mechanism not in self.enabled_mechanisms:
            # self.mechanism stays None: client text must not become a metric label
            self._set_failed(f"unsupported SASL mechanism {mechanism[:64]!r}")
            return self._handshake_response(version, ErrorCode.unsupported_sasl_mechanism, self.enabled_mechanisms), True
        self.mechanism = mechanism
        self._server = self._new_server(mechanism)
        self.state = SaslState.AUTHENTICATE if version >= 1 else SaslState.RAW_TOKENS
        return self._handshake_response(version, ErrorCode.none, self.enabled_mechanisms), False

    def _new_server(self, mechanism: str) -> PlainServer | ScramServer | OAuthBearerServer:
        if mechanism == SaslMechanism.PLAIN:
            return PlainServer(self._store.plain, self._verified)
        if mechanism == SaslMechanism.OAUTHBEARER:
            assert self._oauthbearer is not None, "OAUTHBEARER offered without a validator"
            return OAuthBearerServer(self._oauthbearer)
        return ScramServer(mechanism, self._store.scram, nonce_factory=self._nonce_factory)

    @staticmethod
    def _handshake_response(version: int, code: ErrorCode, mechanisms: tuple[str, ...]) -> Any:
        return response_class(SASL_HANDSHAKE, version)(error_code=code, mechanisms=tuple(mechanisms))

    # -- SaslAuthenticate -----------------------------------------------------------

    def _authenticate(self, version: int, token: bytes) -> tuple[Any, bool]:
        if self.state is SaslState.COMPLETE:
            message = "SaslAuthenticate request received after successful authentication"
            return self._authenticate_response(version, ErrorCode.illegal_sasl_state, message), False
        if self.state is not SaslState.AUTHENTICATE:
            self._set_failed(f"SaslAuthenticate in state {self.state.value}", record=False)
            message = f"Unexpected SaslAuthenticate request in SASL state {self.state.value}: send SaslHandshake v1 first"
            return self._authenticate_response(version, ErrorCode.illegal_sasl_state, message), True
        try:
            reply = self._evaluate(token)
        except SaslFailure as exc:
            return self._authenticate_response(version, ErrorCode.sasl_authentication_failed, exc.client_message), True
        lifetime_ms = self._lifetime_ms if self.state is SaslState.COMPLETE else 0
        return self._authenticate_response(version, ErrorCode.none, None, reply, lifetime_ms), False

    @staticmethod
    def _authenticate_response(version: int, code: ErrorCode, message: str | None, auth_bytes: bytes = b"",
                               lifetime_ms: int = 0) -> Any:
        cls = response_class(SASL_AUTHENTICATE, version)
        if version >= 1:
            lifetime = i64Timedelta.parse(timedelta(milliseconds=lifetime_ms)) if lifetime_ms else _NO_LIFETIME
            return cls(error_code=code, error_message=message, auth_bytes=auth_bytes, session_lifetime=lifetime)
        return cls(error_code=code, error_message=message, auth_bytes=auth_bytes)

    def _start_session(self, server: Any) -> None:
        """The session's lifetime (KIP-368): ``connections_max_reauth_ms``, or until the
        OAUTHBEARER token expires if sooner; 0 and no expiry when re-authentication is off."""
        self._lifetime_ms = 0
        self.expires_at = None
        if self.max_reauth_ms <= 0:
            return
        lifetime_ms = self.max_reauth_ms
        token = getattr(server, "token", None)
        if token is not None:
            lifetime_ms = min(lifetime_ms, int((token.expires_at - time.time()) * 1000))
        self._lifetime_ms = max(lifetime_ms, 1)
        self.expires_at = time.monotonic() + self._lifetime_ms / 1000

    # -- shared ---------------------------------------------------------------------

    def _evaluate(self, token: bytes) -> bytes:
        """Run the mechanism; on completion build the principal.  Raises SaslFailure (state FAILED)."""
        server = self._server
        assert server is not None
        try:
            reply = server.evaluate(token)
            if server.complete:
                principal = self._build_principal(server)
                if self.reauthenticating and principal != self._principal:
                    raise SaslFailure("Authentication failed: re-authentication must keep the principal",
                                      f"re-authentication as {principal} on a connection of {self._principal}")
                self._principal = principal
                self.reauthenticating = False
                self._start_session(server)
                self.state = SaslState.COMPLETE
                if self._failures is not None:
                    self._failures.forget(self._base.client_address)
                    self._failures.succeeded(self.listener_name, server.mechanism)
        except SaslFailure as exc:
            self._set_failed(exc.reason, cause=exc.cause)
            raise
        return reply

    def _build_principal(self, server: PlainServer | ScramServer | OAuthBearerServer) -> KafkaPrincipal:
        token = getattr(server, "token", None)  # a custom builder may read its claims and scopes
        context = SaslAuthenticationContext.from_base(
            self._base, mechanism=server.mechanism, authorization_id=server.authorization_id or "", token=token)
        try:
            principal = self._builder.build(context)
            if token is not None and token.groups and not getattr(principal, "group_keys", ()):
                principal.group_keys = tuple(f"Group:{g}" for g in token.groups)
            return principal
        except Exception as exc:
            raise SaslFailure(
                "Authentication failed: no principal could be built for this user",
                f"principal builder failed: {exc!r}",
            ) from exc

    def _set_failed(self, reason: str, *, record: bool = True, cause: str = "other") -> None:
        self.state = SaslState.FAILED
        self.failure_reason = reason
        user = getattr(self._server, "attempted_user", None)
        self._server = None
        software = "/".join(self.client_software) if self.client_software else "unknown"
        log.info(
            "SASL authentication failed: %s", reason,
            extra={"kgw": {"listener": self.listener_name, "client": self._base.client_address,
                           "mechanism": self.mechanism, "client_software": software}},
        )
        if record and self._failures is not None:
            self._failures.record_failure(
                self._base.client_address, listener=self.listener_name, mechanism=self.mechanism or "unknown",
                client_software=software, cause=cause, user=user, reason=reason)
