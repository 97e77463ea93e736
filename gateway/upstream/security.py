"""kgw's own identity towards the upstream cluster: TLS and the client side of SASL.

Theory of operation
-------------------
Every upstream connection kgw opens (bootstrap, per-broker, metadata refresh)
is kgw's own: clients' credentials are never passed upstream, whoever the
client is.  :func:`wrap_upstream` runs on a freshly connected TCP stream, before
any client byte is forwarded, and returns the stream to use from then on:

* ``security_protocol`` SSL / SASL_SSL: a TLS client handshake with
  :func:`gateway.auth.tls.client_ssl_context` (TLS 1.2+, the configured CA bundle or
  the system store, hostname checking unless ``check_hostname: false``, an
  optional client certificate for mTLS).  ``host`` is the name the broker
  certificate is checked against (SNI too).
* SASL_PLAINTEXT / SASL_SSL: Kafka's client-side SASL framing, then the
  mechanism's exchange:

  1. ApiVersions v0 to learn which SaslHandshake / SaslAuthenticate versions
     the broker speaks (as Kafka clients do); a broker that refuses it is
     tried with SaslHandshake v1 and SaslAuthenticate v1;
  2. SaslHandshake v1 naming the mechanism; an error (UNSUPPORTED_SASL_MECHANISM
     lists what the broker offers) ends the attempt;
  3. SaslAuthenticate requests carrying the tokens:

     * PLAIN (RFC 4616): one token ``NUL user NUL password``;
     * OAUTHBEARER (RFC 7628, KIP-255/768): one token ``n,,\x01auth=Bearer <token>\x01\x01``
       carrying an access token from the provider's client-credentials grant
       (:mod:`gateway.upstream.oauth_token`); a broker that refuses it answers with its error
       JSON, kgw replies ``\x01`` as RFC 7628 asks and reports the broker's reason;
     * SCRAM-SHA-256/512 (RFC 5802, RFC 7677): client-first
       (``n,,n=<user>,r=<nonce>``) → server-first (``r=,s=,i=``; the nonce
       must extend ours and ``i`` be at least 4096, Kafka clients' minimum)
       → client-final with the proof → server-final, whose ``v=`` server
       signature is checked (constant time) so a broker that does not know
       the password cannot pass itself off as the cluster.  The PBKDF2 runs
       in a worker thread.

The broker's SaslAuthenticate (v1+) says how long the session lasts (KIP-368
``connections.max.reauth.ms``, or the token's expiry); :func:`upstream_session` gives it for
the stream returned, with the SASL versions spoken.  A connection that outlives its session
must log in again on the same connection before it expires (the broker closes it at the
first request after): :func:`reauthenticate` runs the same exchange again, without
ApiVersions, over a connection whose responses its owner routes to it
(``gateway.connection.upstream_side``).

Every failure raises :class:`UpstreamSecurityError` whose message says what
went wrong (upstream address, mechanism, user name, the broker's error
message); it never contains the password or any key.  The caller
(``gateway.upstream.cluster.open_upstream``) turns it into ``UpstreamUnavailable``
and closes the socket; on failure this function does *not* close ``stream``.

The requests use correlation ids 1, 2, … on the fresh connection; nothing
else has been sent on it, so the client's requests that follow are
unaffected (the gateway forwards client correlation ids unchanged, and the
broker does not require them to be increasing).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import io
import secrets
import ssl
import struct
import time
import weakref
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import trio
from kio.schema.request_header.v1.header import RequestHeader as RequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as RequestHeaderV2
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from gateway.auth.tls import client_ssl_context, release_tls_stream
from gateway.upstream.oauth_token import TokenUnavailable, token_source
from protocol.codecs import CodecError, decode_response, encode, request_class
from protocol.framing import NEED_DATA, FrameDecoder
from protocol.headers import read_uvarint

__all__ = ["UpstreamSecurityError", "UpstreamSession", "wrap_upstream", "reauthenticate", "upstream_session",
           "session_ending",
           "ScramClient", "plain_token", "SCRAM_MIN_ITERATIONS"]

_I32 = struct.Struct(">i")
API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
SCRAM_MIN_ITERATIONS = 4096
_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_CLIENT_ID = "kgw"
DEFAULT_TIMEOUT_S = 10.0


class UpstreamSecurityError(Exception):
    """TLS or SASL towards an upstream broker failed; the message is safe to log."""


@dataclass(frozen=True, slots=True)
class UpstreamSession:
    """kgw's SASL session on one upstream connection."""

    mechanism: str
    #: seconds the broker gives the session (KIP-368); None: it does not expire
    lifetime_s: float | None
    #: (SaslHandshake, SaslAuthenticate) versions the broker speaks, for re-authentication
    versions: tuple[int, int]
    #: time.monotonic() at the end of the exchange
    started: float

    @property
    def expires(self) -> float | None:
        return None if self.lifetime_s is None else self.started + self.lifetime_s


_SESSIONS: "weakref.WeakKeyDictionary[Any, UpstreamSession]" = weakref.WeakKeyDictionary()


def session_ending(stream: Any) -> bool:
    """True when kgw's session on ``stream`` has used 85% of its lifetime: a connection kgw keeps
    for its own requests is then replaced rather than used (the broker closes it at expiry)."""
    session = upstream_session(stream)
    return (session is not None and session.lifetime_s is not None
            and time.monotonic() >= session.started + 0.85 * session.lifetime_s)


def upstream_session(stream: Any) -> UpstreamSession | None:
    """The SASL session of a stream :func:`wrap_upstream` returned (None without SASL)."""
    try:
        return _SESSIONS.get(stream)
    except TypeError:  # not weak-referenceable: not one of ours
        return None


# --------------------------------------------------------------------------- entry point


async def wrap_upstream(stream: trio.abc.Stream, host: str, upstream_config: Any, *,
                        timeout_s: float | None = None) -> trio.abc.Stream:
    """TLS and/or SASL on a fresh upstream connection, per ``upstream_config`` (``UpstreamConfig``).

    Returns ``stream`` itself for PLAINTEXT, else the ``trio.SSLStream`` (SSL,
    SASL_SSL) or ``stream`` after a successful SASL exchange.

    :raises UpstreamSecurityError: handshake or authentication failed, or took
        longer than ``timeout_s`` (default: the config's connect timeout).
    """
    protocol = str(getattr(upstream_config, "security_protocol", "PLAINTEXT"))
    if protocol == "PLAINTEXT":
        return stream
    if timeout_s is None:
        timeout_s = getattr(upstream_config, "connect_timeout_ms", DEFAULT_TIMEOUT_S * 1000) / 1000.0
    where = f"upstream {host}"
    try:
        with trio.fail_after(timeout_s):
            if protocol in ("SSL", "SASL_SSL"):
                stream = await _tls(stream, host, upstream_config.tls, where)
            if protocol in ("SASL_PLAINTEXT", "SASL_SSL"):
                sasl = upstream_config.sasl
                if sasl is None:
                    raise UpstreamSecurityError(f"{where}: security_protocol {protocol} needs upstream.sasl")
                _SESSIONS[stream] = await _sasl(_Wire(stream, where), sasl, where, timeout_s)
    except trio.TooSlowError:
        raise UpstreamSecurityError(f"{where}: {protocol} handshake did not finish within {timeout_s:g}s") from None
    return stream


async def reauthenticate(stream: trio.abc.Stream, receive_frame: Callable[[], Awaitable[bytes]],
                         upstream_config: Any, session: UpstreamSession, host: str,
                         timeout_s: float) -> UpstreamSession:
    """Log in again on an authenticated connection (KIP-368): SaslHandshake and SaslAuthenticate
    at the versions of the first login, no ApiVersions.  The caller makes sure nothing else is
    in flight on the connection and hands over every frame the broker sends meanwhile
    (``receive_frame``).  Returns the new session.

    :raises UpstreamSecurityError: refused, or not done within ``timeout_s``.
    """
    where = f"upstream {host}"
    try:
        with trio.fail_after(timeout_s):
            new = await _sasl(_Wire(stream, where, receive_frame), upstream_config.sasl, where, timeout_s,
                              versions=session.versions)
    except trio.TooSlowError:
        raise UpstreamSecurityError(f"{where}: re-authentication did not finish within {timeout_s:g}s") from None
    return new


# --------------------------------------------------------------------------- TLS


async def _tls(stream: trio.abc.Stream, host: str, tls_config: Any, where: str) -> trio.SSLStream:
    context = client_ssl_context(tls_config)  # TlsConfigError (a config mistake) propagates as is
    ssl_stream = trio.SSLStream(stream, context, server_hostname=host.strip("[]"), https_compatible=False)
    try:
        await ssl_stream.do_handshake()
    except trio.BrokenResourceError as exc:
        release_tls_stream(ssl_stream)
        cause = exc.__cause__
        if isinstance(cause, ssl.SSLCertVerificationError):
            reason = f"broker certificate refused: {cause.verify_message}"
            if "hostname" in (cause.verify_message or "").lower() or "IP address mismatch" in str(cause):
                reason += f" (the certificate does not name {host!r}; see upstream.tls.check_hostname)"
            else:
                reason += " (is it issued by upstream.tls.ca_file?)"
        elif isinstance(cause, ssl.SSLError):
            reason = f"TLS handshake failed: {getattr(cause, 'reason', None) or cause}"
        else:
            reason = "the broker closed the connection during the TLS handshake (is its listener TLS?)"
        raise UpstreamSecurityError(f"{where}: {reason}") from None
    return ssl_stream


# --------------------------------------------------------------------------- Kafka framing


class _Wire:
    """Request/response on a fresh connection, correlation ids 1, 2, …"""

    def __init__(self, stream: trio.abc.Stream, where: str,
                 receive_frame: Callable[[], Awaitable[bytes]] | None = None) -> None:
        self.stream = stream
        self.where = where
        self.correlation_id = 0
        self.decoder = FrameDecoder(1 << 24)
        #: where responses come from when another task reads the connection (re-authentication)
        self.receive_frame = receive_frame

    async def call(self, api_key: int, version: int, body: Any) -> Any:
        self.correlation_id += 1
        cls = request_class(api_key, version)
        out = io.BytesIO()
        header_cls = RequestHeaderV2 if cls.__flexible__ else RequestHeaderV1
        entity_writer(header_cls)(out, header_cls(
            request_api_key=i16(api_key), request_api_version=i16(version),
            correlation_id=i32(self.correlation_id), client_id=_CLIENT_ID))
        out.write(encode(body))
        data = out.getvalue()
        try:
            await self.stream.send_all(_I32.pack(len(data)) + data)
            frame = await (self._frame() if self.receive_frame is None else self.receive_frame())
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise UpstreamSecurityError(f"{self.where}: connection lost during SASL: {exc}") from None
        (correlation_id,) = _I32.unpack_from(frame, 4)
        if correlation_id != self.correlation_id:
            raise UpstreamSecurityError(
                f"{self.where}: answer to correlation id {correlation_id}, expected {self.correlation_id}")
        off = 8
        if cls.__flexible__ and api_key != API_VERSIONS:
            count, off = read_uvarint(frame, off)
            for _ in range(count):
                _tag, off = read_uvarint(frame, off)
                size, off = read_uvarint(frame, off)
                off += size
        try:
            return decode_response(api_key, version, frame, off)
        except CodecError as exc:
            raise UpstreamSecurityError(f"{self.where}: malformed response to API {api_key} v{version}: {exc}") from None

    async def _frame(self) -> memoryview:
        while (frame := self.decoder.next_frame()) is NEED_DATA:
            data = await self.stream.receive_some(65536)
            if not data:
                raise UpstreamSecurityError(f"{self.where}: the broker closed the connection during SASL")
            self.decoder.receive_data(data)
        return frame


async def _versions(wire: _Wire) -> tuple[int, int]:
    """(SaslHandshake version, SaslAuthenticate version) to use: v1 and the highest of v0-v2 both speak."""
    response = await wire.call(API_VERSIONS, 0, request_class(API_VERSIONS, 0)())
    if response.error_code != 0:
        return 1, 1
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    if SASL_HANDSHAKE not in ranges or not ranges[SASL_HANDSHAKE][0] <= 1 <= ranges[SASL_HANDSHAKE][1]:
        raise UpstreamSecurityError(f"{wire.where}: the broker does not offer SaslHandshake v1 (is its listener SASL?)")
    lo, hi = ranges.get(SASL_AUTHENTICATE, (0, -1))
    version = min(2, hi)
    if version < max(lo, 0):
        raise UpstreamSecurityError(f"{wire.where}: the broker offers no SaslAuthenticate version kgw speaks")
    return 1, version


async def _sasl(wire: _Wire, sasl: Any, where: str, timeout_s: float,
                versions: tuple[int, int] | None = None) -> UpstreamSession:
    if versions is None:
        versions = await _versions(wire)
    handshake_version, auth_version = versions
    mechanism = str(sasl.mechanism)
    response = await wire.call(SASL_HANDSHAKE, handshake_version,
                               request_class(SASL_HANDSHAKE, handshake_version)(mechanism=mechanism))
    if response.error_code != 0:
        offered = ", ".join(response.mechanisms) or "none"
        raise UpstreamSecurityError(
            f"{where}: SASL mechanism {mechanism} refused ({_error_name(response.error_code)}); "
            f"the broker offers: {offered}")
    if mechanism == "OAUTHBEARER":
        last = await _oauthbearer(wire, auth_version, sasl.oauthbearer, where, timeout_s)
    elif mechanism == "PLAIN":
        who = f"{where}: SASL PLAIN authentication as {sasl.username!r}"
        last = await _authenticate(wire, auth_version, plain_token(sasl.username, sasl.password), who)
    elif mechanism in _HASHES:
        last = await _scram(wire, auth_version, mechanism, sasl.username, sasl.password, where)
    else:
        raise UpstreamSecurityError(f"{where}: SASL mechanism {mechanism} is not supported by kgw")
    lifetime = getattr(last, "session_lifetime", None)  # v1+: a timedelta; 0 = no expiry
    lifetime_s = lifetime.total_seconds() if lifetime is not None else 0.0
    return UpstreamSession(mechanism, lifetime_s if lifetime_s > 0 else None, versions, time.monotonic())


async def _scram(wire: _Wire, auth_version: int, mechanism: str, username: str, password: str, where: str) -> Any:
    who = f"{where}: SASL {mechanism} authentication as {username!r}"
    client = ScramClient(mechanism, username, password)
    server_first = await _authenticate(wire, auth_version, client.client_first(), who)
    try:
        client_final = await trio.to_thread.run_sync(client.client_final, bytes(server_first.auth_bytes))
    except ValueError as exc:
        raise UpstreamSecurityError(f"{who} failed: {exc}") from None
    server_final = await _authenticate(wire, auth_version, client_final, who)
    try:
        client.verify_server_final(bytes(server_final.auth_bytes))
    except ValueError as exc:
        raise UpstreamSecurityError(f"{who} failed: {exc}") from None
    return server_final


async def _oauthbearer(wire: _Wire, auth_version: int, oauth: Any, where: str, timeout_s: float) -> Any:
    who = f"{where}: SASL OAUTHBEARER authentication as client {oauth.client_id!r}"
    try:
        token = await token_source(oauth, timeout_s).token()
    except TokenUnavailable as exc:
        raise UpstreamSecurityError(f"{who} failed: {exc}") from None
    response = await _authenticate(wire, auth_version, oauthbearer_token(token), who)
    challenge = bytes(response.auth_bytes)
    if challenge:
        # RFC 7628 3.2.2: the server's error as a challenge; the client answers %x01 and the
        # server ends the exchange with its failure.
        reason = challenge.decode("utf-8", errors="replace")
        try:
            await _authenticate(wire, auth_version, b"\x01", who)
        except UpstreamSecurityError as exc:
            raise UpstreamSecurityError(f"{exc} (the broker's OAUTHBEARER error: {reason})") from None
        raise UpstreamSecurityError(f"{who} failed: {reason}")
    return response


async def _authenticate(wire: _Wire, version: int, token: bytes, who: str) -> Any:
    cls = request_class(SASL_AUTHENTICATE, version)
    response = await wire.call(SASL_AUTHENTICATE, version, cls(auth_bytes=token))
    if response.error_code != 0:
        message = response.error_message or "no message"
        raise UpstreamSecurityError(f"{who} failed ({_error_name(response.error_code)}): {message}")
    return response


def _error_name(code: Any) -> str:
    name = getattr(code, "name", None)
    return f"{name.upper()} ({int(code)})" if name else f"error {int(code)}"


# --------------------------------------------------------------------------- mechanisms


def plain_token(username: str, password: str) -> bytes:
    """RFC 4616 message with an empty authorization id."""
    return b"\x00" + username.encode() + b"\x00" + password.encode()


def oauthbearer_token(token: str) -> bytes:
    """RFC 7628 client initial response with an empty authorization id."""
    return b"n,,\x01auth=Bearer " + token.encode() + b"\x01\x01"


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramClient:
    """The client side of SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802), sans-IO.

    ``client_first()`` → (server-first) → ``client_final(server_first)`` →
    (server-final) → ``verify_server_final(server_final)``.  Failures raise
    ``ValueError`` with a message that holds no secret.
    """

    GS2_HEADER = "n,,"

    def __init__(self, mechanism: str, username: str, password: str, *, nonce: str | None = None) -> None:
        if mechanism not in _HASHES:
            raise ValueError(f"{mechanism} is not a SCRAM mechanism")
        self.mechanism = mechanism
        self._hash = _HASHES[mechanism]
        self._password = password
        self.nonce = nonce or secrets.token_urlsafe(24)
        self._client_first_bare = f"n={_saslname(username)},r={self.nonce}"
        self._server_signature: bytes | None = None

    def client_first(self) -> bytes:
        return (self.GS2_HEADER + self._client_first_bare).encode()

    def client_final(self, server_first: bytes) -> bytes:
        try:
            text = server_first.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("server-first message is not UTF-8") from None
        if text.startswith("e="):
            raise ValueError(f"server error: {text[2:]}")
        attrs: dict[str, str] = {}
        for item in text.split(","):
            key, sep, value = item.partition("=")
            if not sep or len(key) != 1:
                raise ValueError("malformed server-first message")
            attrs.setdefault(key, value)
        if "m" in attrs:
            raise ValueError("server-first message has a mandatory extension kgw does not know")
        nonce, salt_b64, iterations_text = attrs.get("r"), attrs.get("s"), attrs.get("i")
        if nonce is None or salt_b64 is None or iterations_text is None:
            raise ValueError("server-first message lacks r=, s= or i=")
        if not nonce.startswith(self.nonce) or len(nonce) == len(self.nonce):
            raise ValueError("server nonce does not extend the client nonce")
        try:
            salt = base64.b64decode(salt_b64, validate=True)
            iterations = int(iterations_text)
        except (binascii.Error, ValueError):
            raise ValueError("malformed salt or iteration count in server-first message") from None
        if iterations < SCRAM_MIN_ITERATIONS:
            raise ValueError(f"server asked for {iterations} iterations, fewer than the minimum {SCRAM_MIN_ITERATIONS}")
        salted = hashlib.pbkdf2_hmac(self._hash, self._password.encode(), salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", self._hash)
        stored_key = hashlib.new(self._hash, client_key).digest()
        channel_binding = base64.b64encode(self.GS2_HEADER.encode()).decode()
        without_proof = f"c={channel_binding},r={nonce}"
        auth_message = f"{self._client_first_bare},{text},{without_proof}".encode()
        signature = hmac.digest(stored_key, auth_message, self._hash)
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        server_key = hmac.digest(salted, b"Server Key", self._hash)
        self._server_signature = hmac.digest(server_key, auth_message, self._hash)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        if self._server_signature is None:
            raise ValueError("server-final before client-final")
        text = server_final.decode("utf-8", errors="replace")
        if text.startswith("e="):
            raise ValueError(f"server error: {text[2:]}")
        if not text.startswith("v="):
            raise ValueError("malformed server-final message")
        try:
            signature = base64.b64decode(text[2:].split(",", 1)[0], validate=True)
        except binascii.Error:
            raise ValueError("malformed server signature") from None
        if not hmac.compare_digest(signature, self._server_signature):
            raise ValueError("the broker's server signature is wrong (it does not know the credential)")
