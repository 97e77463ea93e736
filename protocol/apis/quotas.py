"""Client-quota APIs answered by kgw: DescribeClientQuotas (48), AlterClientQuotas (49).

Theory of operation
-------------------
kgw talks to the brokers with its own account, so a quota the brokers enforce would limit
kgw, not the client: kgw enforces client quotas itself (gateway/connection/quotas.py) and keeps
them in its metadata log as ``ClientQuotaRecord`` (KRaft's record, api key 14), applied to
``MetadataImage.quotas``, shared by every gateway on the log.  These APIs never reach the
upstream.  Request handling follows Kafka 4.x (``ClientQuotasImage.describe``,
``ClientQuotaControlManager.alterClientQuotas``), messages included:

DescribeClientQuotas
    CLUSTER:DESCRIBE_CONFIGS, else CLUSTER_AUTHORIZATION_FAILED (31), no message, entries null.
    Each filter component names an entity type at most once (INVALID_REQUEST otherwise); a type
    other than ``user``, ``client-id``, ``ip`` is UNSUPPORTED_VERSION (35); match type 0
    (exact) needs a name, 1 (default) and 2 (specified: any name, the default included) none;
    ``ip`` goes with no other type.  An entity matches when it has every exact component with
    that name and every specified type; ``strict``: and no other type.  Entries are sorted.
AlterClientQuotas
    CLUSTER:ALTER_CONFIGS, else 31 on every entry.  Per entry, the first error wins and nothing
    of that entity changes: an empty entity, an unknown type ("Unhandled client quota entity
    type"), an empty name ("Empty user not supported"), ``ip`` with another type, an ip that is
    not an address, a key twice, an unknown key ("Invalid configuration key"), a value <= 0, a
    fractional or too large value for an integral key.  A removal of a key not set is no
    change; a value equal to the current one writes nothing.  An entity named twice in one
    request is altered once and reported with "Ignoring duplicate entity" (as Kafka's
    controller does).  ``validate_only`` writes nothing.  The changes of one request are
    appended in one batch and answered once durable; each changed entity is recorded (audit).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from authz.acl import AclOperation
from metadata.client_quotas import CLIENT_ID, CLIENT_KEYS, ENTITY_TYPES, IP, IP_KEYS, USER, entity_order
from metadata.image import quota_entity
from metadata.records import ClientQuotaRecord
from protocol.apis.base import ApiSpec, RequestInfo
from protocol.apis.generic import inspect_decoded
from protocol.auth_helper import AuthHelper
from protocol.codecs import encode, make, nested, response_class
from protocol.errors import CLUSTER_AUTHORIZATION_FAILED
from protocol.headers import RequestHeader
from protocol.services import LocalServices, store_records

__all__ = ["LOCAL_KEYS", "SPECS", "entity_text"]

DESCRIBE_KEY, ALTER_KEY = 48, 49
_ZERO = timedelta(0)
_CLUSTER_DENIED = "Cluster authorization failed."
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
_LIMITS = {"LONG": (9.223372036854776e18, "a LONG"), "INT": (2147483647.0, "an INT"), "SHORT": (32767.0, "a SHORT")}


class _Invalid(Exception):
    def __init__(self, message: str, code: int = ErrorCode.invalid_request) -> None:
        super().__init__(message)
        self.code = code


def entity_text(entity: Any) -> str:
    """``user=alice,client-id=<default>``: an entity as kafka-configs names it."""
    return ",".join(f"{t}={'<default>' if n is None else n}" for t, n in entity)


def _number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def _java_entity(entity: dict[str, str | None]) -> str:
    """Kafka's ``ClientQuotaEntity.toString()`` (its messages name the entity so)."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{t}={n}" for t, n in entity.items()) + "})"


# --------------------------------------------------------------------------- DescribeClientQuotas


def _filter(request: Any) -> tuple[dict[str, str | None], set[str]]:
    exact: dict[str, str | None] = {}
    specified: set[str] = set()
    for component in request.components:
        etype = component.entity_type
        if not etype:
            raise _Invalid("Invalid empty entity type.")
        if etype in exact or etype in specified:
            raise _Invalid(f"Entity type {etype} cannot appear more than once in the filter.")
        if etype not in ENTITY_TYPES:
            raise _Invalid(f"Unsupported entity type {etype}", ErrorCode.unsupported_version)
        match_type = int(component.match_type)
        if match_type == MATCH_EXACT:
            if component.match is None:
                raise _Invalid("Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[etype] = component.match
        elif match_type == MATCH_DEFAULT:
            if component.match is not None:
                raise _Invalid("Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[etype] = None
        elif match_type == MATCH_SPECIFIED:
            if component.match is not None:
                raise _Invalid("Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            specified.add(etype)
        else:
            raise _Invalid(f"Unknown match type {match_type}")
    if (IP in exact or IP in specified) and ({USER, CLIENT_ID} & (exact.keys() | specified)):
        raise _Invalid("Invalid entity filter component combination. IP filter component should not be used with "
                       "user or clientId filter component.")
    return exact, specified


def _matches(entity: dict[str, str | None], exact: dict[str, str | None], specified: set[str], strict: bool) -> bool:
    if strict and len(entity) != len(exact) + len(specified):
        return False
    return all(t in entity and entity[t] == n for t, n in exact.items()) and all(t in entity for t in specified)


async def _describe(gw: LocalServices, auth: AuthHelper, header: RequestHeader, info: RequestInfo) -> bytes:
    request = info.decoded
    cls = response_class(DESCRIBE_KEY, header.api_version)
    entry_cls = nested(cls, "entries")
    entity_cls = nested(entry_cls, "entity")
    value_cls = nested(entry_cls, "values")

    def response(code: int, message: str | None, entries: Any) -> bytes:
        return encode(make(cls, throttle_time=_ZERO, error_code=ErrorCode(code), error_message=message,
                           entries=entries))

    if not auth.cluster(AclOperation.DESCRIBE_CONFIGS):
        return response(CLUSTER_AUTHORIZATION_FAILED, None, None)
    try:
        exact, specified = _filter(request)
    except _Invalid as e:
        return response(e.code, str(e), None)
    quotas = gw.image.quotas if gw.image is not None else {}
    entries = []
    for entity, values in sorted(quotas.items(), key=lambda kv: entity_order(kv[0])):
        if values and _matches(dict(entity), exact, specified, bool(request.strict)):
            entries.append(entry_cls(
                entity=tuple(entity_cls(entity_type=t, entity_name=n) for t, n in entity),
                values=tuple(value_cls(key=k, value=float(v)) for k, v in sorted(values.items()))))
    return response(0, None, tuple(entries))


# --------------------------------------------------------------------------- AlterClientQuotas


def _valid_keys(entity: dict[str, str | None]) -> dict[str, str]:
    """Kafka's validateEntity + configKeysForEntityType: the keys this entity may set."""
    if not entity:
        raise _Invalid("Invalid empty client quota entity")
    for etype, name in entity.items():
        if etype not in ENTITY_TYPES:
            raise _Invalid(f"Unhandled client quota entity type: {etype}")
        if name is not None and name == "":
            raise _Invalid(f"Empty {etype} not supported")
    if IP in entity:
        if USER in entity or CLIENT_ID in entity:
            raise _Invalid("Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId")
        address = entity[IP]
        if address is not None:
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise _Invalid(f"{entity[IP]} is not a valid IP or resolvable host.") from None
        return IP_KEYS
    return CLIENT_KEYS


def _check_value(keys: dict[str, str], key: str, value: float) -> None:
    """Kafka's validateQuotaKeyValue."""
    ctype = keys.get(key)
    if ctype is None:
        raise _Invalid(f"Invalid configuration key {key}")
    if not value > 0:
        raise _Invalid(f"Quota {key} must be greater than 0")
    if ctype in _LIMITS:
        limit, what = _LIMITS[ctype]
        if value > limit:
            raise _Invalid(f"Proposed value for {key} is too large for {what}.")
        if abs(value - math.floor(value)) > 1e-6:
            raise _Invalid(f"{key} cannot be a fractional value.")


def _alteration(entity: dict[str, str | None], pairs: tuple[tuple[str, str | None], ...], entry_ops: Any,
                current: Mapping[Any, Mapping[str, float]]) -> list[ClientQuotaRecord]:
    """One entry's records (``pairs``: the entity's canonical form), or an :class:`_Invalid`."""
    ops: dict[str, float | None] = {}
    for op in entry_ops:
        if op.key in ops:
            raise _Invalid(f"Duplicate quota key {op.key} not updating quota for this entity {_java_entity(entity)}")
        ops[op.key] = None if op.remove else float(op.value)
    keys = _valid_keys(entity)
    existing = current.get(pairs, {})
    records = []
    for key, value in ops.items():
        if value is None:
            if key in existing:
                records.append(ClientQuotaRecord(entity=pairs, key=key, value=0.0, remove=True))
            continue
        _check_value(keys, key, value)
        if existing.get(key) != value:
            records.append(ClientQuotaRecord(entity=pairs, key=key, value=value, remove=False))
    return records


async def _alter(gw: LocalServices, auth: AuthHelper, header: RequestHeader, info: RequestInfo) -> bytes:
    request = info.decoded
    cls = response_class(ALTER_KEY, header.api_version)
    entry_cls = nested(cls, "entries")
    entity_cls = nested(entry_cls, "entity")

    def entry(entity: Any, code: int, message: str | None) -> Any:
        return entry_cls(error_code=ErrorCode(code), error_message=message,
                         entity=tuple(entity_cls(entity_type=t, entity_name=n) for t, n in entity))

    if not auth.cluster(AclOperation.ALTER_CONFIGS):
        return encode(make(cls, throttle_time=_ZERO, entries=tuple(
            entry([(e.entity_type, e.entity_name) for e in x.entity], CLUSTER_AUTHORIZATION_FAILED, _CLUSTER_DENIED)
            for x in request.entries)))
    # one result per distinct entity, in request order (Kafka keys its results by entity)
    results: dict[tuple[Any, ...], tuple[list[Any], int, str | None]] = {}
    changes: list[tuple[tuple[Any, ...], list[ClientQuotaRecord]]] = []
    async with gw.quota_changes:
        image = gw.image
        current = image.quotas if image is not None else {}
        for x in request.entries:
            shown = [(e.entity_type, e.entity_name) for e in x.entity]
            # Kafka builds the entity as a map: a type named twice, the last wins
            entity = {e.entity_type: e.entity_name for e in x.entity}
            key = quota_entity(entity.items())
            if key in results:
                results[key] = (results[key][0], ErrorCode.invalid_request,
                                f"Ignoring duplicate entity {_java_entity(dict(key))}")
                continue
            try:
                records = _alteration(entity, key, x.ops, current)
            except _Invalid as e:
                results[key] = (shown, e.code, str(e))
                continue
            results[key] = (shown, 0, None)
            if records:
                changes.append((key, records))
        records = [r for _k, rs in changes for r in rs]
        if records and not request.validate_only:
            failure = await store_records(image, records)
            for key, rs in changes:
                if failure is not None:
                    results[key] = (results[key][0], *failure)
                elif results[key][1] == 0 or (results[key][2] or "").startswith("Ignoring duplicate"):
                    auth.record_change("ALTER_CONFIGS", f"ClientQuota:LITERAL:{entity_text(key)}", ", ".join(
                        f"removed {r.key}" if r.remove else f"set {r.key}={_number(r.value)}" for r in rs))
    return encode(make(cls, throttle_time=_ZERO, entries=tuple(
        entry(shown, code, message) for shown, code, message in results.values())))


SPECS = (
    ApiSpec(DESCRIBE_KEY, "DescribeClientQuotas", inspect_decoded, answered_locally=True, answer=_describe,
            versions=(0, 1)),
    ApiSpec(ALTER_KEY, "AlterClientQuotas", inspect_decoded, answered_locally=True, answer=_alter, versions=(0, 1)),
)
LOCAL_KEYS = frozenset(spec.api_key for spec in SPECS)
