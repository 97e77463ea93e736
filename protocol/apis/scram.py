"""SCRAM credential admin APIs answered by kgw: DescribeUserScramCredentials (50), AlterUserScramCredentials (51).

Theory of operation
-------------------
kgw's listeners authenticate SCRAM clients themselves (:mod:`gateway.auth.sasl`), so
the credentials are kgw's, not the upstream's: these APIs never reach the
upstream.  There are two sources of SCRAM credentials:

* **static**: ``users.scram`` in the YAML (read-only over the wire);
* **dynamic**: created, rotated and deleted with AlterUserScramCredentials and
  kept in kgw's metadata log as ``UserScramCredentialRecord`` /
  ``RemoveUserScramCredentialRecord`` (KRaft's records, api keys 11 and 22),
  applied to ``MetadataImage.scram`` (``{(name, mechanism code): record}``).

:class:`~metadata.scram_credentials.MetadataCredentialStore` is the
:class:`~authz.credentials.CredentialStore`
a SASL listener uses: PLAIN users from the YAML, SCRAM lookups in the YAML
first and then in the image, read on every login, so a credential altered
over the wire is usable by the very next SaslAuthenticate (and a deleted one
is refused by it).  Connections already authenticated stay authenticated, as
on a broker (no re-authentication, KIP-368 is off).

Request handling follows Kafka (docs/authorization.md; ScramImage,
ScramControlManager):

DescribeUserScramCredentials
    CLUSTER:DESCRIBE, else CLUSTER_AUTHORIZATION_FAILED (31) at the top level
    and in one result per requested entry, its user name empty (as Kafka's
    ``getErrorResponse``; shown by the parity test).  ``users`` null or empty = every
    user; a user named twice gets DUPLICATE_RESOURCE (92); a user with no
    credential RESOURCE_NOT_FOUND (91).  Each result lists (mechanism,
    iterations); salts and keys are never returned.
AlterUserScramCredentials
    CLUSTER:ALTER, else 31 on every distinct user (sorted), nothing changed.
    A user named twice (deletions and upsertions together) gets
    DUPLICATE_RESOURCE "A user credential cannot be altered twice in the same
    request"; an empty name UNACCEPTABLE_CREDENTIAL (93); a mechanism other
    than 1 (SCRAM-SHA-256) / 2 (SCRAM-SHA-512) UNSUPPORTED_SASL_MECHANISM (33);
    iterations outside 4096..16384 UNACCEPTABLE_CREDENTIAL; deleting an absent
    credential RESOURCE_NOT_FOUND.  kgw addition: a (user, mechanism) defined
    in the YAML cannot be altered or deleted over the wire: INVALID_REQUEST
    (42) saying so.  The server keeps only StoredKey = H(HMAC(SaltedPassword,
    "Client Key")) and ServerKey = HMAC(SaltedPassword, "Server Key") (and the
    client's salt and iteration count), never the salted password.  All valid
    changes of one request are appended in one batch; the response is sent
    only once they are durable.  Alter requests are serialised per gateway.

With no authorizer configured every check passes (as on a broker without
``authorizer.class.name``).  Results are in request order (one per user).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i32

from authz.acl import AclOperation
from metadata.records import RemoveUserScramCredentialRecord, UserScramCredentialRecord
from authz.credentials import ScramCredential
from protocol.apis.base import ApiSpec, RequestInfo
from protocol.apis.generic import inspect_decoded
from protocol.auth_helper import AuthHelper
from protocol.codecs import encode, make, nested, response_class
from protocol.headers import RequestHeader
from protocol.services import LocalServices, store_records
from authz.credentials import scram_keys
from metadata.scram_credentials import MECHANISM_CODES, MECHANISM_CODE_OF, image_scram

__all__ = [
    "SPECS",
    "LOCAL_KEYS",
    "MECHANISM_CODES",
]


DESCRIBE_KEY, ALTER_KEY = 50, 51
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384  # Kafka ScramMechanism min/maxIterations (both mechanisms)

_CLUSTER_DENIED = "Cluster authorization failed."
_TWICE = "A user credential cannot be altered twice in the same request"


# --------------------------------------------------------------------------- helpers


def _static_scram(gw: LocalServices) -> Mapping[tuple[str, str], ScramCredential]:
    return gw.static_scram


def _all_credentials(gw: LocalServices) -> dict[str, dict[int, int]]:
    """user -> {mechanism code: iterations}, YAML and image merged."""
    out: dict[str, dict[int, int]] = {}
    for (name, mechanism), cred in _static_scram(gw).items():
        out.setdefault(name, {})[MECHANISM_CODE_OF[mechanism]] = cred.iterations
    for (name, code), record in image_scram(gw.image).items():
        out.setdefault(name, {}).setdefault(code, record.iterations)
    return out


# --------------------------------------------------------------------------- DescribeUserScramCredentials


async def _describe(gw: LocalServices, auth: AuthHelper, header: RequestHeader, info: RequestInfo) -> bytes:
    request = info.decoded
    cls = response_class(DESCRIBE_KEY, header.api_version)
    result_cls = nested(cls, "results")
    info_cls = nested(result_cls, "credential_infos")
    requested = None if request.users is None else [u.name for u in request.users]

    def response(code: int, message: str | None, results: Any) -> bytes:
        return encode(make(cls, throttle_time=timedelta(0), error_code=ErrorCode(code), error_message=message,
                           results=tuple(results)))

    def result(user: str, code: int = 0, message: str | None = None, infos: Any = ()) -> Any:
        return result_cls(user=user, error_code=ErrorCode(code), error_message=message, credential_infos=tuple(infos))

    if not auth.cluster(AclOperation.DESCRIBE):
        # Kafka's getErrorResponse: one result per requested entry, its user name left empty
        return response(ErrorCode.cluster_authorization_failed, _CLUSTER_DENIED,
                        [result("", ErrorCode.cluster_authorization_failed, _CLUSTER_DENIED) for _ in requested or ()])
    credentials = _all_credentials(gw)
    if not requested:
        names = {name: False for name in sorted(credentials)}
    else:
        names = {}
        for name in requested:
            names[name] = name in names
    results = []
    for name, duplicate in names.items():
        if duplicate:
            results.append(result(name, ErrorCode.duplicate_resource,
                                  f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}"))
            continue
        found = credentials.get(name)
        if not found:
            results.append(result(name, ErrorCode.resource_not_found,
                                  f"Attempt to describe a user credential that does not exist: {name}"))
            continue
        results.append(result(name, infos=[info_cls(mechanism=i8(code), iterations=i32(iterations))
                                           for code, iterations in sorted(found.items())]))
    return response(0, None, results)


# --------------------------------------------------------------------------- AlterUserScramCredentials


async def _alter(gw: LocalServices, auth: AuthHelper, header: RequestHeader, info: RequestInfo) -> bytes:
    request = info.decoded
    cls = response_class(ALTER_KEY, header.api_version)
    result_cls = nested(cls, "results")

    def response(results: list[tuple[str, int, str | None]]) -> bytes:
        return encode(make(cls, throttle_time=timedelta(0), results=tuple(
            result_cls(user=user, error_code=ErrorCode(code), error_message=message)
            for user, code, message in results)))

    if not auth.cluster(AclOperation.ALTER):
        users = sorted({d.name for d in request.deletions} | {u.name for u in request.upsertions})
        return response([(u, ErrorCode.cluster_authorization_failed, _CLUSTER_DENIED) for u in users])

    # ScramControlManager.alterCredentials: one operation per user name
    order: list[str] = []
    deletions: dict[str, Any] = {}
    upsertions: dict[str, Any] = {}
    errors: dict[str, tuple[int, str]] = {}
    for d in request.deletions:
        order.append(d.name)
        if d.name in errors:
            continue
        if deletions.pop(d.name, None) is not None:
            errors[d.name] = (ErrorCode.duplicate_resource, _TWICE)
        else:
            deletions[d.name] = d
    for u in request.upsertions:
        order.append(u.name)
        if u.name in errors:
            continue
        if deletions.pop(u.name, None) is not None or upsertions.pop(u.name, None) is not None:
            errors[u.name] = (ErrorCode.duplicate_resource, _TWICE)
        else:
            upsertions[u.name] = u

    async with gw.scram_changes:
        image = gw.image
        static = _static_scram(gw)
        dynamic = image_scram(image)
        records: list[Any] = []
        for name, d in deletions.items():
            error = _validate_name_and_mechanism(name, d.mechanism) or _read_only(static, name, d.mechanism)
            if error is None and (name, d.mechanism) not in dynamic:
                error = (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")
            if error is not None:
                errors[name] = error
            else:
                records.append(RemoveUserScramCredentialRecord(name=name, mechanism=d.mechanism))
        for name, u in upsertions.items():
            error = _validate_name_and_mechanism(name, u.mechanism) or _read_only(static, name, u.mechanism)
            if error is None and u.iterations < MIN_ITERATIONS:
                error = (ErrorCode.unacceptable_credential, "Too few iterations")
            elif error is None and u.iterations > MAX_ITERATIONS:
                error = (ErrorCode.unacceptable_credential, "Too many iterations")
            if error is not None:
                errors[name] = error
                continue
            stored_key, server_key = scram_keys(MECHANISM_CODES[u.mechanism], bytes(u.salted_password))
            records.append(UserScramCredentialRecord(name=name, mechanism=u.mechanism, salt=bytes(u.salt),
                                                     stored_key=stored_key, server_key=server_key,
                                                     iterations=u.iterations))
        if records:
            failure = await store_records(image, records)
            if failure is not None:
                for r in records:
                    errors[r.name] = failure
                records = []
            for r in records:  # stored: recorded with who made them (never a secret)
                mechanism = MECHANISM_CODES[r.mechanism]
                auth.record_change("ALTER", f"User:LITERAL:{r.name}", (
                    f"upserted {mechanism} credential ({r.iterations} iterations)"
                    if isinstance(r, UserScramCredentialRecord) else f"deleted {mechanism} credential"))
    results = []
    for name in dict.fromkeys(order):
        code, message = errors.get(name, (0, None))
        results.append((name, code, message))
    return response(results)


def _validate_name_and_mechanism(name: str, mechanism: int) -> tuple[int, str] | None:
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism not in MECHANISM_CODES:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return None


def _read_only(static: Mapping[tuple[str, str], ScramCredential], name: str, mechanism: int) -> tuple[int, str] | None:
    if (name, str(MECHANISM_CODES[mechanism])) in static:
        return (ErrorCode.invalid_request,
                f"the {MECHANISM_CODES[mechanism]} credential of user {name!r} is defined in the gateway's "
                "configuration (users.scram) and cannot be altered over the wire")
    return None


SPECS = (
    ApiSpec(DESCRIBE_KEY, "DescribeUserScramCredentials", inspect_decoded, answered_locally=True, answer=_describe, versions=(0, 0)),
    ApiSpec(ALTER_KEY, "AlterUserScramCredentials", inspect_decoded, answered_locally=True, answer=_alter, versions=(0, 0)),
)
LOCAL_KEYS = frozenset(spec.api_key for spec in SPECS)
