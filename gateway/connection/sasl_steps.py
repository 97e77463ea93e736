"""The SASL steps of a client connection on the Trio driver: SaslHandshake and SaslAuthenticate
answered by kgw (never forwarded), the bare tokens of the v0 flow, and Kafka's delay before a
failed login is answered.  The driver performs the core's ``NeedLogin``/``NeedRawToken`` steps
with these functions, passing the connection: they queue the answer through it and set its
principal (functions, not a mixin, so nothing here holds the connection)."""

from __future__ import annotations

import logging
from datetime import timedelta

import trio
from kio.schema.errors import ErrorCode

from authz.principal import ANONYMOUS
from gateway.connection.core import CloseConnection
from protocol.apis.base import ApiSpec
from protocol.codecs import CodecError, decode_request, encode, make, response_class
from protocol.headers import RequestHeader

__all__ = ["login", "raw_token"]

log = logging.getLogger("kgw.connection")


def _not_a_sasl_listener(header: RequestHeader):
    """Kafka answers SASL requests on a non-SASL listener with ILLEGAL_SASL_STATE (34)."""
    cls = response_class(header.api_key, header.api_version)
    return make(cls, error_code=ErrorCode.illegal_sasl_state, error_message="SASL is not enabled on this listener",
                mechanisms=(), auth_bytes=b"", session_lifetime=timedelta(0))


async def login(conn, session, header: RequestHeader, spec: ApiSpec, body: memoryview) -> None:
    """SaslHandshake / SaslAuthenticate: answered by kgw, never forwarded upstream."""
    try:
        request = decode_request(header.api_key, header.api_version, body, header.size)
    except CodecError as e:
        raise CloseConnection(f"malformed {spec.name} request: {e}", "decode") from None
    if session is None:
        response, close = _not_a_sasl_listener(header), False
    elif session.needs_hashing(header.api_key, request):
        # a stretched password hash: on a worker thread, in this client host's turn
        # (gateway/auth/password_hashing.py); a password verified recently needs none
        response, close = await conn.gw.password_hashing.run(
            conn.peer[0], session.handle, header.api_key, header.api_version, request)
    else:
        response, close = session.handle(header.api_key, header.api_version, request)
    if close:
        await _failed_authentication_delay(conn)
    await conn._answer_locally(header, spec, encode(response))
    if session is not None and session.authenticated and conn.principal is not session.principal:
        first = conn.principal is ANONYMOUS
        conn.principal = session.principal  # a re-authentication may bring other groups
        if first:
            conn._authenticated_now()
        log.info("%s as %s with %s", "authenticated" if first else "re-authenticated", conn.principal,
                 session.mechanism, extra=conn.log_fields(header))
    if close:
        raise CloseConnection(f"SASL authentication failed: {session.failure_reason}", "authentication",
                              answered=True)


async def _failed_authentication_delay(conn) -> None:
    """Kafka's connection.failed.authentication.delay.ms: the failure is answered (and the
    connection closed) only after a delay, so a client cannot retry passwords at full
    speed; the wait holds no thread."""
    delay = conn._limits.failed_authentication_delay_ms
    if delay:
        await trio.sleep(delay / 1000.0)


async def raw_token(conn, session, token: bytes) -> None:
    """A bare SASL token after SaslHandshake v0; the reply is a bare frame."""
    if session.needs_hashing(0, token=token):
        reply, close = await conn.gw.password_hashing.run(conn.peer[0], session.handle_raw_token, token)
    else:
        reply, close = session.handle_raw_token(token)
    if reply is None or close:
        await _failed_authentication_delay(conn)
        raise CloseConnection(f"SASL authentication failed: {session.failure_reason}", "authentication")
    conn.queue_answer(None, None, reply)
    await conn._flush()
    if session.authenticated:
        conn.principal = session.principal
        conn._authenticated_now()
