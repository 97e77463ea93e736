"""Admin and security APIs that name no topic, group or transaction (docs/authorization.md).

Theory of operation
-------------------
Each request is decoded whole and checked through
:class:`~protocol.auth_helper.AuthHelper`; a denial is answered by kgw with the
request's own error-response shape (Kafka's ``getErrorResponse`` or the
handler's explicit response), and nothing is forwarded (the client-quota APIs are kgw's own:
:mod:`protocol.apis.quotas`):

=======================================  ==================================  =====================================
API                                      check                               denied
=======================================  ==================================  =====================================
DescribeUserScramCredentials (50)        CLUSTER:DESCRIBE                    top-level 31 + 31 per requested user
AlterUserScramCredentials (51)           CLUSTER:ALTER                       31 per distinct user, sorted
DescribeQuorum (55)                      CLUSTER:DESCRIBE                    top-level 31 + default text
UpdateFeatures (57)                      CLUSTER:ALTER                       top-level 31 + text, no results
ListConfigResources (74)                 CLUSTER:DESCRIBE_CONFIGS            top-level 31
=======================================  ==================================  =====================================

Delegation tokens (38-41) first refuse, with DELEGATION_TOKEN_REQUEST_NOT_ALLOWED
(64), token-authenticated principals, PLAINTEXT listeners and ANONYMOUS on SSL
(Kafka's ``allowTokenRequests``).  CreateDelegationToken for another owner needs
USER:CREATE_TOKENS on ``Type:Name`` of the owner (65); renewers must be of type
``User`` (67).  The broker sees kgw's account as the requester, so kgw always names
the owner in what it forwards (v3 only: before it a request cannot), adds its own
account as a renewer, and makes the controller's renew/expire rule itself (owner or
a renewer the owner named: 63) after looking the token up.  DescribeDelegationToken
filters the answer: a token stays when the caller owns, requested or renews it, else
when DELEGATION_TOKEN:DESCRIBE on its id or USER:DESCRIBE_TOKENS on its owner is
allowed (Kafka's ``filterToken``).

SaslHandshake (17), SaslAuthenticate (36), GetTelemetrySubscriptions (71) and
PushTelemetry (72) have no authorization check: they are forwarded.

Messages: where Kafka throws ``ClusterAuthorizationException("Request … is not
authorized.")`` (a text naming the broker's request object), kgw uses the
error's default text, "Cluster authorization failed.".
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from kio.schema.errors import ErrorCode

from authz.acl import AclOperation, ResourceType
from authz.principal import USER_TYPE
from protocol.apis.base import FORWARD, ApiSpec, Decision, RequestInfo
from protocol.apis.generic import inspect_decoded
from protocol.auth_helper import AuthHelper
from protocol.codecs import decode_response, encode, make, nested, request_class, response_class
from protocol.errors import CLUSTER_AUTHORIZATION_FAILED, DELEGATION_TOKEN_AUTHORIZATION_FAILED, UNKNOWN_SERVER_ERROR
from protocol.headers import RequestHeader
from protocol.services import LocalServices

__all__ = ["SPECS", "allow_token_requests"]

DELEGATION_TOKEN_OWNER_MISMATCH = 63
DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
DELEGATION_TOKEN_EXPIRED = 66
INVALID_PRINCIPAL_TYPE = 67

_T = ResourceType
_Op = AclOperation
_ZERO = timedelta(0)
_CLUSTER_DENIED = "Cluster authorization failed."
#: Kafka's ErrorTimestamp / "no timestamp" (-1 ms) as the datetime kio writes as -1
_NO_TIME = datetime.fromtimestamp(-0.001, tz=timezone.utc)


def _ec(code: int) -> ErrorCode:
    return ErrorCode(code)


def _forward(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """No authorization at this layer (SASL is handled before the registry; telemetry has no ACL)."""
    return FORWARD


# --------------------------------------------------------------------------- cluster-resource checks


def _cluster_check(op: AclOperation, error_body: Callable[..., bytes]) -> Any:
    """An enforcer: ``op`` on the cluster, else ``error_body(version, request)``."""

    def enforce(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
        if not auth.enabled or auth.cluster(op):
            return FORWARD
        return Decision(respond=error_body(header.api_version, info.decoded))

    return enforce


def _describe_quorum_error(version: int, request: Any) -> bytes:
    cls = response_class(55, version)
    return encode(make(cls, error_code=_ec(CLUSTER_AUTHORIZATION_FAILED), error_message=_CLUSTER_DENIED, topics=(),
                       nodes=()))


def _update_features_error(version: int, request: Any) -> bytes:
    cls = response_class(57, version)
    return encode(make(cls, throttle_time=_ZERO, error_code=_ec(CLUSTER_AUTHORIZATION_FAILED),
                       error_message=_CLUSTER_DENIED, results=()))


def _list_config_resources_error(version: int, request: Any) -> bytes:
    cls = response_class(74, version)
    return encode(make(cls, throttle_time=_ZERO, error_code=_ec(CLUSTER_AUTHORIZATION_FAILED), config_resources=(),
                       client_metrics_resources=()))


# --------------------------------------------------------------------------- delegation tokens (38-41)


def allow_token_requests(auth: AuthHelper) -> bool:
    """Kafka's ``allowTokenRequests``: no token APIs for token-authenticated principals,
    on PLAINTEXT listeners, or for ANONYMOUS on one-way SSL."""
    ctx = auth.context
    principal = ctx.principal
    if getattr(principal, "token_authenticated", False):
        return False
    protocol = str(ctx.security_protocol).upper()
    if protocol == "PLAINTEXT":
        return False
    if protocol == "SSL" and principal.principal_type == USER_TYPE and principal.name == "ANONYMOUS":
        return False
    return True


def _create_token_response(version: int, code: int, owner: tuple[str, str], requester: tuple[str, str]) -> bytes:
    """``CreateDelegationTokenResponse.prepareResponse`` with no token."""
    cls = response_class(38, version)
    return encode(make(cls, throttle_time=_ZERO, error_code=_ec(code), principal_type=owner[0],
                       principal_name=owner[1], token_requester_principal_type=requester[0],
                       token_requester_principal_name=requester[1], issue_timestamp=_NO_TIME,
                       expiry_timestamp=_NO_TIME, max_timestamp=_NO_TIME, token_id="", hmac=b""))


def _principal_pair(text: str | None) -> tuple[str, str] | None:
    if not text or ":" not in text:
        return None
    kind, _, name = text.partition(":")
    return kind, name


def _enforce_create_token(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """CreateDelegationToken: Kafka's broker-side checks, then forwarded with the owner *named*:
    a request without an owner makes the broker's requester -- kgw's own account -- the owner,
    so kgw always names the client (or the owner it may create tokens for).  kgw adds its own
    account as a renewer, so that it can renew and expire the token for its owner
    (:func:`_renew_or_expire`), and answers with the client as the requester, as Kafka does."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    version = header.api_version
    principal = auth.context.principal
    requester = (principal.principal_type, principal.name)
    owner_name = getattr(request, "owner_principal_name", None)
    if not owner_name:
        owner = requester
    else:
        owner_type = getattr(request, "owner_principal_type", None)
        if owner_type is None:  # Kafka's KafkaPrincipal constructor throws: UNKNOWN_SERVER_ERROR
            return Decision(respond=_create_token_response(version, UNKNOWN_SERVER_ERROR, ("User", "ANONYMOUS"),
                                                           ("User", "ANONYMOUS")))
        owner = (owner_type, owner_name)
    if not allow_token_requests(auth):
        return Decision(respond=_create_token_response(version, DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, owner, requester))
    if owner != requester and not auth.allowed(_T.USER, f"{owner[0]}:{owner[1]}", _Op.CREATE_TOKENS):
        return Decision(respond=_create_token_response(version, DELEGATION_TOKEN_AUTHORIZATION_FAILED, owner, requester))
    if any(r.principal_type != USER_TYPE for r in request.renewers):
        return Decision(respond=_create_token_response(version, INVALID_PRINCIPAL_TYPE, owner, requester))

    async def then(services: LocalServices) -> Decision:
        renewers = request.renewers
        kgw = _principal_pair(services.upstream.principal)
        if kgw is not None and kgw[0] == USER_TYPE and all(
                (r.principal_type, r.principal_name) != kgw for r in renewers):
            renewer_cls = nested(type(request), "renewers")
            renewers = (*renewers, renewer_cls(principal_type=kgw[0], principal_name=kgw[1]))
        forwarded = dataclasses.replace(request, owner_principal_type=owner[0], owner_principal_name=owner[1],
                                        renewers=renewers)

        def merge(buf: memoryview | bytes, off: int) -> bytes:
            response = decode_response(38, version, buf, off)
            return encode(dataclasses.replace(response, token_requester_principal_type=requester[0],
                                              token_requester_principal_name=requester[1]))

        return Decision(request=encode(forwarded), merge=merge)

    return Decision(then=then)


async def _token_of(services: LocalServices, hmac: bytes) -> Any:
    """The token whose HMAC is ``hmac``, as kgw's own account describes it, or None."""
    version = services.upstream.version(41)
    if version is None:
        return None
    cls = request_class(41, version)
    response = await services.upstream.call(41, make(cls, owners=None))
    if response.error_code != 0:
        return None  # tokens disabled or not supported: the broker gives the client its own answer
    return next((t for t in response.tokens if bytes(t.hmac) == bytes(hmac)), None)


def _renew_or_expire(api_key: int) -> Any:
    """Renew (39) / ExpireDelegationToken (40): Kafka's broker-side check, then the controller's rule
    made by kgw, since the broker sees kgw's account, not the client: only the token's owner or one
    of its renewers may renew or expire it (DELEGATION_TOKEN_OWNER_MISMATCH otherwise; an expired
    token is refused as expired first when renewing, as Kafka's controller does).  A token the
    upstream does not know, or tokens disabled, are forwarded: the broker's answer is Kafka's."""

    def error(version: int, code: int) -> Decision:
        cls = response_class(api_key, version)
        return Decision(respond=encode(make(cls, throttle_time=_ZERO, error_code=_ec(code), expiry_timestamp=_NO_TIME)))

    def enforce(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
        if not auth.enabled:
            return FORWARD
        version = header.api_version
        if not allow_token_requests(auth):
            return error(version, DELEGATION_TOKEN_REQUEST_NOT_ALLOWED)
        principal = auth.context.principal
        me = (principal.principal_type, principal.name)
        hmac = info.decoded.hmac

        async def then(services: LocalServices) -> Decision:
            token = await _token_of(services, hmac)
            if token is None:
                return FORWARD
            kgw = _principal_pair(services.upstream.principal)
            renewers = {(r.principal_type, r.principal_name) for r in token.renewers} - {kgw}
            if me == (token.principal_type, token.principal_name) or me in renewers:
                return FORWARD
            now_ms = int(time.time() * 1000)
            if api_key == 39 and (token.max_timestamp < now_ms or token.expiry_timestamp < now_ms):
                return error(version, DELEGATION_TOKEN_EXPIRED)
            return error(version, DELEGATION_TOKEN_OWNER_MISMATCH)

        return Decision(then=then)

    return enforce


def _enforce_describe_tokens(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    if not auth.enabled:
        return FORWARD
    version = header.api_version
    if not allow_token_requests(auth):
        cls = response_class(41, version)
        return Decision(respond=encode(make(cls, throttle_time=_ZERO,
                                            error_code=_ec(DELEGATION_TOKEN_REQUEST_NOT_ALLOWED), tokens=())))
    owners = info.decoded.owners
    wanted = None if owners is None else [(o.principal_type, o.principal_name) for o in owners]
    principal = auth.context.principal
    me = (principal.principal_type, principal.name)

    def eligible(token: Any) -> bool:
        people = {(token.principal_type, token.principal_name)}
        requester_type = getattr(token, "token_requester_principal_type", None)
        if requester_type is not None:
            people.add((requester_type, token.token_requester_principal_name))
        people.update((r.principal_type, r.principal_name) for r in token.renewers)
        if wanted is not None and not any(o in people for o in wanted):
            return False
        if me in people:
            return True
        return (auth.allowed(_T.DELEGATION_TOKEN, token.token_id, _Op.DESCRIBE)
                or auth.allowed(_T.USER, f"{token.principal_type}:{token.principal_name}", _Op.DESCRIBE_TOKENS))

    def merge(buf: memoryview | bytes, off: int) -> bytes:
        response = decode_response(41, version, buf, off)
        kept = tuple(t for t in response.tokens if eligible(t))
        if len(kept) == len(response.tokens):
            return bytes(buf[off:])
        return encode(dataclasses.replace(response, tokens=kept))

    return Decision(merge=merge)


SPECS = (
    # SASL is answered by the connection itself (gateway/auth/sasl.py), never enforced or forwarded:
    # these specs only register the APIs and the versions kgw speaks
    ApiSpec(17, "SaslHandshake", inspect_decoded, versions=(0, 1)),
    ApiSpec(36, "SaslAuthenticate", inspect_decoded, versions=(0, 2)),
    # v3 only: before it, a request cannot name the token's owner and the broker makes its
    # requester -- kgw's own account -- the owner
    ApiSpec(38, "CreateDelegationToken", inspect_decoded, enforce=_enforce_create_token, versions=(3, 3)),
    ApiSpec(39, "RenewDelegationToken", inspect_decoded, enforce=_renew_or_expire(39), versions=(1, 2)),
    ApiSpec(40, "ExpireDelegationToken", inspect_decoded, enforce=_renew_or_expire(40), versions=(1, 2)),
    ApiSpec(41, "DescribeDelegationToken", inspect_decoded, enforce=_enforce_describe_tokens, versions=(1, 3)),
    ApiSpec(55, "DescribeQuorum", inspect_decoded, enforce=_cluster_check(_Op.DESCRIBE, _describe_quorum_error), versions=(0, 2)),
    ApiSpec(57, "UpdateFeatures", inspect_decoded, enforce=_cluster_check(_Op.ALTER, _update_features_error), versions=(0, 2)),
    ApiSpec(71, "GetTelemetrySubscriptions", inspect_decoded, enforce=_forward, versions=(0, 0)),
    ApiSpec(72, "PushTelemetry", inspect_decoded, enforce=_forward, versions=(0, 0)),
    ApiSpec(74, "ListConfigResources", inspect_decoded,
            enforce=_cluster_check(_Op.DESCRIBE_CONFIGS, _list_config_resources_error), versions=(0, 1)),
)
