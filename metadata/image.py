"""The in-memory image of kgw's metadata log, and the publisher that feeds the authorizer.

Theory of operation
-------------------
The metadata log (:mod:`metadata.directory`) is the truth; this module keeps
what it says in memory and pushes ACL changes to the authorizer, the way
Kafka's ``AclPublisher`` does:

* at start-up :meth:`MetadataImage.load` replays the newest snapshot and then
  every later log record *in log order* (a DENY followed by an ALLOW must never
  be seen reversed), hands the authorizer the whole ACL set in one
  ``load_snapshot`` call (an atomic swap) and completes its initial load, which
  opens the listeners (KIP-504 readiness);
* :meth:`MetadataImage.write_acls` is the authorizer's ``acl_writer``: it turns
  added/removed ACLs into ``AccessControlEntryRecord`` /
  ``RemoveAccessControlEntryRecord`` and returns only once the store has made
  them durable, so a CreateAcls/DeleteAcls is acknowledged only after fsync;
* every ``snapshot_every`` records it writes a snapshot of the full image at
  the offset the image reflects, so start-up does not replay an endless log.

Dynamic configs (``ConfigRecord``) and SCRAM credentials (``UserScramCredentialRecord``)
live in the same image, for the config and SCRAM APIs.
"""

from __future__ import annotations

import logging
import uuid
from typing import Mapping, Sequence

from authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from metadata.store import MetadataStore
from metadata.records import AccessControlEntryRecord, ConfigRecord, RemoveAccessControlEntryRecord, RemoveUserScramCredentialRecord, UserScramCredentialRecord

__all__ = ["MetadataImage", "binding_to_record", "record_to_binding"]

log = logging.getLogger("kgw.metadata")


def binding_to_record(acl_id: uuid.UUID, b: AclBinding) -> AccessControlEntryRecord:
    return AccessControlEntryRecord(
        id=acl_id,
        resource_type=int(b.pattern.resource_type),
        resource_name=b.pattern.name,
        pattern_type=int(b.pattern.pattern_type),
        principal=b.entry.principal,
        host=b.entry.host,
        operation=int(b.entry.operation),
        permission_type=int(b.entry.permission_type),
    )


def record_to_binding(r: AccessControlEntryRecord) -> AclBinding:
    return AclBinding(
        ResourcePattern(ResourceType(r.resource_type), r.resource_name, PatternType(r.pattern_type)),
        AccessControlEntry(r.principal, r.host, AclOperation(r.operation), AclPermissionType(r.permission_type)),
    )


class MetadataImage:
    """ACLs and dynamic configs as of the last applied log offset."""

    def __init__(self, store: MetadataStore, authorizer=None, snapshot_every: int = 10_000) -> None:
        self.store = store
        self.authorizer = authorizer
        self.snapshot_every = snapshot_every
        self.acls: dict[uuid.UUID, AclBinding] = {}
        #: (resource type code, resource name) -> {config name: value}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        #: (user name, SCRAM mechanism code) -> credential (salted keys only, never a password)
        self.scram: dict[tuple[str, int], UserScramCredentialRecord] = {}
        self.offset = -1
        #: what the store's load() returned (for the metadata-shell dump)
        self.loaded_state = None

    async def load(self) -> None:
        state = self.loaded_state = await self.store.load()
        for record in state.records():
            self._apply(record)
        self.offset = state.last_offset
        log.info("metadata log loaded: %d ACLs, %d config entries, last offset %d",
                 len(self.acls), sum(map(len, self.configs.values())), self.offset)
        if self.authorizer is not None:
            if hasattr(self.authorizer, "load_snapshot"):
                self.authorizer.load_snapshot(dict(self.acls))
            if hasattr(self.authorizer, "complete_initial_load"):
                self.authorizer.complete_initial_load()

    def _apply(self, record) -> None:
        if isinstance(record, AccessControlEntryRecord):
            self.acls[record.id] = record_to_binding(record)
        elif isinstance(record, RemoveAccessControlEntryRecord):
            self.acls.pop(record.id, None)
        elif isinstance(record, ConfigRecord):
            entries = self.configs.setdefault((record.resource_type, record.resource_name), {})
            if record.value is None:
                entries.pop(record.name, None)
            else:
                entries[record.name] = record.value
        elif isinstance(record, UserScramCredentialRecord):
            self.scram[(record.name, record.mechanism)] = record
        elif isinstance(record, RemoveUserScramCredentialRecord):
            self.scram.pop((record.name, record.mechanism), None)

    async def append(self, records: Sequence) -> int:
        """Make ``records`` durable, then apply them to the image."""
        if not records:
            return self.offset
        offset = await self.store.append(records)
        for record in records:
            self._apply(record)
        self.offset = max(self.offset, offset)
        await self._maybe_snapshot()
        return offset

    async def write_acls(self, added: Mapping[uuid.UUID, AclBinding], removed: Sequence[uuid.UUID]) -> None:
        """The StandardAuthorizer's ``acl_writer``: returns once the change is durable."""
        records = [binding_to_record(i, b) for i, b in added.items()]
        records += [RemoveAccessControlEntryRecord(id=i) for i in removed]
        await self.append(records)

    async def _maybe_snapshot(self) -> None:
        if self.store.records_since_snapshot < self.snapshot_every:
            return
        records = [binding_to_record(i, b) for i, b in self.acls.items()]
        for (rtype, rname), entries in self.configs.items():
            records += [ConfigRecord(resource_type=rtype, resource_name=rname, name=k, value=v)
                        for k, v in entries.items()]
        records += list(self.scram.values())
        await self.store.snapshot(records, through_offset=self.offset)
        log.info("metadata snapshot written at offset %d (%d records)", self.offset, len(records))
