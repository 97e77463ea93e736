"""``kgw metadata export`` / ``import``: the image as one JSON document, and back.

The document is a backup and the way to move state between backends (the directory log
of one gateway -> the shared Kafka topic of several).  It holds the *state* (what a
snapshot holds), not the history::

    {"format": "kgw-metadata", "version": 2, "offset": 41,
     "acls": [{"id": "Yp70OUOpRKadAAmh9zByrw", "resourceType": "TOPIC", "resourceName": "orders",
               "patternType": "LITERAL", "principal": "User:alice", "host": "*",
               "operation": "READ", "permissionType": "ALLOW"}, ...],
     "configs": [{"resourceType": 4, "resourceName": "", "name": "...", "value": "..."}, ...],
     "scramCredentials": [{"name": "bob", "mechanism": "SCRAM-SHA-256", "iterations": 8192,
                           "salt": "<base64>", "storedKey": "<base64>", "serverKey": "<base64>"}],
     "clientQuotas": [{"entity": [{"entityType": "user", "entityName": "alice"}],
                       "key": "producer_byte_rate", "value": 1048576.0}, ...]}

(``entityName`` null: the entity type's default; a document without ``clientQuotas`` has none.)

An ACL reads as in ``kgw acls dump`` and Kafka's metadata shell: the same id (Kafka's
``Uuid`` text) and the field names of Kafka's record JSON.  Version 1 documents (snake_case
names, ids as RFC 4122 text) are still read.

Lists are sorted, so two instances that applied the same offset export byte-identical
documents (the convergence check of the shared backend compares exports).  SCRAM entries
carry salted keys, never passwords, but they are still secrets: the file is as sensitive
as the metadata log itself.

:func:`plan_import` turns a document into the records that make a target image equal to
it: what is missing is added; with ``replace`` what the document lacks is removed too.
Applying the plan twice is a no-op the second time.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Mapping, Sequence
from enum import IntEnum
from typing import Any

from authz.acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from metadata.client_quotas import entity_order
from metadata.image import binding_to_record, quota_entity, record_to_binding
from metadata.records import (
    AccessControlEntryRecord,
    ClientQuotaRecord,
    ConfigRecord,
    MetadataRecord,
    RemoveAccessControlEntryRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from metadata.scram_credentials import MECHANISM_CODE_OF, MECHANISM_CODES
from metadata.shell import acl_json

__all__ = ["FORMAT", "VERSION", "MetadataDocumentError", "export_document", "parse_document", "plan_import"]

FORMAT = "kgw-metadata"
VERSION = 2
#: the field names of each version this kgw reads (version 1: snake_case)
_NAMES = {
    2: {k: k for k in ("resourceType", "resourceName", "patternType", "permissionType", "storedKey", "serverKey",
                       "scramCredentials")},
    1: {"resourceType": "resource_type", "resourceName": "resource_name", "patternType": "pattern_type",
        "permissionType": "permission_type", "storedKey": "stored_key", "serverKey": "server_key",
        "scramCredentials": "scram_credentials"},
}


class MetadataDocumentError(ValueError):
    """The document is not a kgw metadata export this version can read (the message says where)."""


def export_document(acls: Mapping[uuid.UUID, Any], configs: Mapping[tuple[int, str], Mapping[str, str]],
                    scram: Mapping[tuple[str, int], UserScramCredentialRecord], offset: int,
                    quotas: Mapping[tuple[tuple[str, str | None], ...], Mapping[str, float]] | None = None
                    ) -> dict[str, Any]:
    """The state (an image's ``acls``/``configs``/``scram``/``quotas``) as a JSON-ready document."""
    acl_entries = [acl_json(binding_to_record(acl_id, binding), "kafka") for acl_id, binding in acls.items()]
    acl_entries.sort(key=lambda e: (e["resourceType"], e["resourceName"], e["patternType"], e["principal"],
                                    e["host"], e["operation"], e["permissionType"], e["id"]))
    config_entries = sorted(
        ({"resourceType": rtype, "resourceName": rname, "name": k, "value": v}
         for (rtype, rname), entries in configs.items() for k, v in entries.items()),
        key=lambda e: (e["resourceType"], e["resourceName"], e["name"]))
    scram_entries = sorted(
        ({"name": r.name, "mechanism": str(MECHANISM_CODES.get(r.mechanism, r.mechanism)), "iterations": r.iterations,
          "salt": _b64(r.salt), "storedKey": _b64(r.stored_key), "serverKey": _b64(r.server_key)}
         for r in scram.values()),
        key=lambda e: (e["name"], e["mechanism"]))
    quota_entries = [{"entity": [{"entityType": t, "entityName": n} for t, n in entity], "key": k, "value": v}
                     for entity, values in sorted((quotas or {}).items(), key=lambda kv: entity_order(kv[0]))
                     for k, v in sorted(values.items())]
    return {"format": FORMAT, "version": VERSION, "offset": offset, "acls": acl_entries,
            "configs": config_entries, "scramCredentials": scram_entries, "clientQuotas": quota_entries}


def _b64(data: bytes) -> str:
    return base64.b64encode(bytes(data)).decode("ascii")


def _field(entry: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in entry:
        raise MetadataDocumentError(f"{where}: missing {key!r}")
    value = entry[key]
    if kind is str and value is None:
        raise MetadataDocumentError(f"{where}: {key!r} must not be null")
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise MetadataDocumentError(f"{where}: {key!r} must be a {kind.__name__}, not {type(value).__name__}")
    return value


def _enum(enum_cls: type[IntEnum], entry: Mapping[str, Any], key: str, where: str, *, wild: tuple[str, ...] = ()) -> int:
    text = _field(entry, key, str, where)
    member = enum_cls.__members__.get(text)
    if member is None or member.name in ("ANY", "UNKNOWN", "MATCH", *wild):
        raise MetadataDocumentError(f"{where}: {key} {text!r} is not a concrete {enum_cls.__name__}")
    return int(member)


def _bytes(entry: Mapping[str, Any], key: str, where: str) -> bytes:
    try:
        return base64.b64decode(_field(entry, key, str, where), validate=True)
    except (binascii.Error, ValueError):
        raise MetadataDocumentError(f"{where}: {key!r} is not base64") from None


def parse_document(doc: Any) -> list[MetadataRecord]:
    """The records a document describes (ACLs, configs, SCRAM credentials, client quotas), validated."""
    if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
        raise MetadataDocumentError(f"not a kgw metadata export (expected \"format\": {FORMAT!r})")
    version = doc.get("version")
    names = _NAMES.get(version) if isinstance(version, int) else None
    if names is None:
        raise MetadataDocumentError(f"export version {version!r}: this kgw reads versions "
                                    f"{', '.join(map(str, sorted(_NAMES)))}")
    n = names.__getitem__
    records: list[MetadataRecord] = []
    for i, e in enumerate(_list(doc, "acls")):
        where = f"acls[{i}]"
        acl_id = _acl_id(_field(e, "id", str, where), where)
        records.append(AccessControlEntryRecord(
            id=acl_id, resource_type=_enum(ResourceType, e, n("resourceType"), where),
            resource_name=_field(e, n("resourceName"), str, where),
            pattern_type=_enum(PatternType, e, n("patternType"), where),
            principal=_field(e, "principal", str, where), host=_field(e, "host", str, where),
            operation=_enum(AclOperation, e, "operation", where),
            permission_type=_enum(AclPermissionType, e, n("permissionType"), where)))
    for i, e in enumerate(_list(doc, "configs")):
        where = f"configs[{i}]"
        records.append(ConfigRecord(resource_type=_field(e, n("resourceType"), int, where),
                                    resource_name=_field(e, n("resourceName"), str, where),
                                    name=_field(e, "name", str, where), value=_field(e, "value", str, where)))
    for i, e in enumerate(_list(doc, n("scramCredentials"))):
        where = f"{n('scramCredentials')}[{i}]"
        mechanism = MECHANISM_CODE_OF.get(_field(e, "mechanism", str, where))
        if mechanism is None:
            raise MetadataDocumentError(f"{where}: mechanism {e['mechanism']!r}: one of {sorted(MECHANISM_CODE_OF)}")
        iterations = _field(e, "iterations", int, where)
        if iterations < 1:
            raise MetadataDocumentError(f"{where}: iterations must be positive")
        records.append(UserScramCredentialRecord(
            name=_field(e, "name", str, where), mechanism=mechanism, salt=_bytes(e, "salt", where),
            stored_key=_bytes(e, n("storedKey"), where), server_key=_bytes(e, n("serverKey"), where),
            iterations=iterations))
    for i, e in enumerate(_list(doc, "clientQuotas")):
        where = f"clientQuotas[{i}]"
        entity = _field(e, "entity", list, where)
        if not entity or not all(isinstance(x, Mapping) and isinstance(x.get("entityType"), str)
                                 and (x.get("entityName") is None or isinstance(x.get("entityName"), str))
                                 for x in entity):
            raise MetadataDocumentError(f"{where}: 'entity' must be a non-empty list of "
                                        "{\"entityType\": string, \"entityName\": string or null}")
        value = e.get("value")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise MetadataDocumentError(f"{where}: 'value' must be a number, not {type(value).__name__}")
        records.append(ClientQuotaRecord(entity=quota_entity((x["entityType"], x.get("entityName")) for x in entity),
                                         key=_field(e, "key", str, where), value=float(value), remove=False))
    return records


def _acl_id(text: str, where: str) -> uuid.UUID:
    """An ACL id: Kafka's ``Uuid`` text (22 characters of URL-safe base64) or RFC 4122 text."""
    try:
        if len(text) == 22:
            return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
        return uuid.UUID(text)
    except (ValueError, binascii.Error):
        raise MetadataDocumentError(f"{where}: 'id' {text!r} is not a Kafka Uuid") from None


def _list(doc: Mapping[str, Any], key: str) -> Sequence[Mapping[str, Any]]:
    value = doc.get(key, [])
    if not isinstance(value, list) or not all(isinstance(e, Mapping) for e in value):
        raise MetadataDocumentError(f"{key!r} must be a list of objects")
    return value


def plan_import(target: Any, records: Sequence[MetadataRecord], *, replace: bool = False) -> list[MetadataRecord]:
    """The records that make ``target`` (a :class:`~metadata.image.MetadataImage`) hold
    what ``records`` (from :func:`parse_document`) describe.  ACLs are matched by binding
    (an ACL already present under another id is kept); configs and credentials by key."""
    wanted_acls: dict[AclBinding, AccessControlEntryRecord] = {}
    wanted_configs: dict[tuple[int, str, str], str] = {}
    wanted_scram: dict[tuple[str, int], UserScramCredentialRecord] = {}
    wanted_quotas: dict[tuple[Any, str], float] = {}
    for r in records:
        if isinstance(r, AccessControlEntryRecord):
            wanted_acls.setdefault(record_to_binding(r), r)
        elif isinstance(r, ConfigRecord):
            wanted_configs[(r.resource_type, r.resource_name, r.name)] = r.value  # type: ignore[assignment]
        elif isinstance(r, UserScramCredentialRecord):
            wanted_scram[(r.name, r.mechanism)] = r
        elif isinstance(r, ClientQuotaRecord):
            wanted_quotas[(r.entity, r.key)] = r.value
    plan: list[MetadataRecord] = []
    present = {binding: acl_id for acl_id, binding in target.acls.items()}
    for binding, r in wanted_acls.items():
        if binding not in present:
            if r.id in target.acls:  # the id is taken by another ACL in the target: a new one
                r = AccessControlEntryRecord(**{**_fields(r), "id": uuid.uuid4()})
            plan.append(r)
    for (rtype, rname, name), value in wanted_configs.items():
        if target.configs.get((rtype, rname), {}).get(name) != value:
            plan.append(ConfigRecord(resource_type=rtype, resource_name=rname, name=name, value=value))
    for key, r in wanted_scram.items():
        if target.scram.get(key) != r:
            plan.append(r)
    target_quotas = getattr(target, "quotas", {})
    for (entity, quota_key), quota in wanted_quotas.items():
        if target_quotas.get(entity, {}).get(quota_key) != quota:
            plan.append(ClientQuotaRecord(entity=entity, key=quota_key, value=quota, remove=False))
    if replace:
        plan += [RemoveAccessControlEntryRecord(id=acl_id) for binding, acl_id in present.items()
                 if binding not in wanted_acls]
        plan += [ConfigRecord(resource_type=rtype, resource_name=rname, name=name, value=None)
                 for (rtype, rname), entries in target.configs.items() for name in entries
                 if (rtype, rname, name) not in wanted_configs]
        plan += [RemoveUserScramCredentialRecord(name=name, mechanism=mech) for (name, mech) in target.scram
                 if (name, mech) not in wanted_scram]
        plan += [ClientQuotaRecord(entity=entity, key=key, value=0.0, remove=True)
                 for entity, values in target_quotas.items() for key in values if (entity, key) not in wanted_quotas]
    return plan


def _fields(r: AccessControlEntryRecord) -> dict[str, Any]:
    return {f: getattr(r, f) for f in r.__dataclass_fields__}
