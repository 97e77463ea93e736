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
  A snapshot is housekeeping: the records are durable and applied before it starts,
  so its failure (a full disk) never reaches the writer.  It is logged, counted
  (:attr:`MetadataImage.snapshot_failures`) and tried again after a back-off.

Dynamic configs (``ConfigRecord``), SCRAM credentials (``UserScramCredentialRecord``) and
client quotas (``ClientQuotaRecord``) live in the same image, for the config, SCRAM and
client-quota APIs and the quota manager.
"""

from __future__ import annotations

import logging
import uuid

from collections.abc import Callable, Iterable, Mapping, Sequence
from enum import IntEnum
from typing import Any

import trio

from authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from metadata.store import MetadataLogError, MetadataStore
from metadata.records import AccessControlEntryRecord, ClientQuotaRecord, ConfigRecord, MetadataRecord, RemoveAccessControlEntryRecord, RemoveUserScramCredentialRecord, UserScramCredentialRecord

__all__ = ["MetadataImage", "binding_to_record", "quota_entity", "record_to_binding"]

log = logging.getLogger("kgw.metadata")

#: a failed snapshot is tried again after this back-off, doubling up to the maximum
_SNAPSHOT_RETRY_MIN_S = 5.0
_SNAPSHOT_RETRY_MAX_S = 300.0


def quota_entity(pairs: Iterable[tuple[str, str | None]]) -> tuple[tuple[str, str | None], ...]:
    """A client-quota entity's canonical form: its (type, name) pairs sorted by type."""
    return tuple(sorted(((str(t), n) for t, n in pairs), key=lambda pair: pair[0]))


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


def _codes(enum_type: type[IntEnum]) -> dict[int, Any]:
    return {member.value: member for member in enum_type}


# code -> member: an Enum call costs about 1 us, four per ACL at every start (0.36 s at 100k ACLs)
_RESOURCE_TYPES, _PATTERN_TYPES = _codes(ResourceType), _codes(PatternType)
_OPERATIONS, _PERMISSIONS = _codes(AclOperation), _codes(AclPermissionType)


def record_to_binding(r: AccessControlEntryRecord) -> AclBinding:
    """The ACL a record describes (a code Kafka does not define reads as UNKNOWN, as an Enum call would)."""
    return AclBinding(
        ResourcePattern(_RESOURCE_TYPES.get(r.resource_type) or ResourceType(r.resource_type), r.resource_name,
                        _PATTERN_TYPES.get(r.pattern_type) or PatternType(r.pattern_type)),
        AccessControlEntry(r.principal, r.host, _OPERATIONS.get(r.operation) or AclOperation(r.operation),
                           _PERMISSIONS.get(r.permission_type) or AclPermissionType(r.permission_type)),
    )


class MetadataImage:
    """ACLs, dynamic configs and SCRAM credentials as of the last applied log offset.

    Every record reaches the state through :meth:`_apply_batch`, whichever backend and
    whoever wrote it, and the rules are deterministic so that two instances that applied
    the same offsets hold the same state (the shared Kafka backend):

    * an ACL whose id is present, or whose binding equals a present ACL's (two gateways
      created the same ACL at once), is skipped: the first in log order wins;
    * removing an absent ACL or SCRAM credential is skipped;
    * a ConfigRecord, UserScramCredentialRecord or ClientQuotaRecord sets its key, the last in
      log order wins.

    The authorizer gets each batch's ACL delta in one ``apply_changes`` (an atomic swap),
    and ``config_listeners`` are called with the config resources a batch touched.
    """

    def __init__(self, store: MetadataStore, authorizer: Any = None, snapshot_every: int = 10_000) -> None:
        self.store = store
        self.authorizer = authorizer
        self.snapshot_every = snapshot_every
        self.acls: dict[uuid.UUID, AclBinding] = {}
        #: binding -> id, so an equal ACL written twice is skipped identically everywhere
        self._acl_ids: dict[AclBinding, uuid.UUID] = {}
        #: (resource type code, resource name) -> {config name: value}
        self.configs: dict[tuple[int, str], dict[str, str]] = {}
        #: (user name, SCRAM mechanism code) -> credential (salted keys only, never a password)
        self.scram: dict[tuple[str, int], UserScramCredentialRecord] = {}
        #: client-quota entity ((type, name or None for the default), ... sorted by type) ->
        #: {quota key: value}; ``quota_version`` moves on every change (the quota manager's cue)
        self.quotas: dict[tuple[tuple[str, str | None], ...], dict[str, float]] = {}
        self.quota_version = 0
        self.offset = -1
        #: callables given the set of (resource type, name) a batch of ConfigRecords changed
        self.config_listeners: list[Callable[[set[tuple[int, str]]], None]] = []
        self._offset_changed = trio.Event()
        self._snapshotting = False
        #: snapshots that failed (kgw_metadata_snapshot_failures_total), and when to try again
        self.snapshot_failures = 0
        self._snapshot_backoff = 0.0
        self._snapshot_retry_at = 0.0

    async def load(self) -> None:
        state = await self.store.load()
        for record in state.records():
            self._apply(record)
        self.offset = state.last_offset
        del state  # the records are in the image now; keeping them doubled the memory of 100k ACLs
        log.info("metadata log loaded: %d ACLs, %d config entries, last offset %d",
                 len(self.acls), sum(map(len, self.configs.values())), self.offset)
        if self.authorizer is not None:
            if hasattr(self.authorizer, "load_snapshot"):
                self.authorizer.load_snapshot(dict(self.acls))
            if hasattr(self.authorizer, "complete_initial_load"):
                self.authorizer.complete_initial_load()
        if self.store.shared:
            # no checkpoint since load() returned, so nothing committed since is missed
            self._subscription = self.store.subscribe(max_buffered_batches=100_000)

    async def follow(self, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Apply every batch of a shared log, the instance's own included, in log order
        (run for as long as the gateway runs; a no-op for a local store)."""
        task_status.started()
        if not self.store.shared:
            return
        async for batch in self._subscription:
            self._apply_batch(batch.records, batch.last_offset)

    def _apply(self, record: MetadataRecord) -> tuple[uuid.UUID | None, AclBinding | None, uuid.UUID | None]:
        """Apply one record; returns (added id, its binding, removed id) for ACL records."""
        if isinstance(record, AccessControlEntryRecord):
            if record.id in self.acls:
                return None, None, None
            binding = record_to_binding(record)
            if binding in self._acl_ids:
                return None, None, None
            self.acls[record.id] = binding
            self._acl_ids[binding] = record.id
            return record.id, binding, None
        if isinstance(record, RemoveAccessControlEntryRecord):
            removed = self.acls.pop(record.id, None)
            if removed is None:
                return None, None, None
            self._acl_ids.pop(removed, None)
            return None, None, record.id
        if isinstance(record, ConfigRecord):
            entries = self.configs.setdefault((record.resource_type, record.resource_name), {})
            if record.value is None:
                entries.pop(record.name, None)
            else:
                entries[record.name] = record.value
        elif isinstance(record, UserScramCredentialRecord):
            self.scram[(record.name, record.mechanism)] = record
        elif isinstance(record, RemoveUserScramCredentialRecord):
            self.scram.pop((record.name, record.mechanism), None)
        elif isinstance(record, ClientQuotaRecord):
            entity = quota_entity(record.entity)
            values = self.quotas.setdefault(entity, {})
            if record.remove:
                values.pop(record.key, None)
                if not values:
                    del self.quotas[entity]
            else:
                values[record.key] = record.value
            self.quota_version += 1
        return None, None, None

    def _apply_batch(self, records: Sequence[MetadataRecord], last_offset: int) -> None:
        added: dict[uuid.UUID, AclBinding] = {}
        removed: list[uuid.UUID] = []
        touched: set[tuple[int, str]] = set()
        for record in records:
            acl_id, binding, gone = self._apply(record)
            if acl_id is not None and binding is not None:
                added[acl_id] = binding
            elif gone is not None:
                if added.pop(gone, None) is None:
                    removed.append(gone)
            elif isinstance(record, ConfigRecord):
                touched.add((record.resource_type, record.resource_name))
        self.offset = max(self.offset, last_offset)
        if (added or removed) and self.authorizer is not None and hasattr(self.authorizer, "apply_changes"):
            self.authorizer.apply_changes(added, removed)
        for listener in self.config_listeners if touched else ():
            try:
                listener(touched)
            except Exception:  # noqa: BLE001 - one listener's bug must not stop the log
                log.exception("config listener %r failed on a metadata batch", listener)
        self._offset_changed.set()
        self._offset_changed = trio.Event()

    async def append(self, records: Sequence[MetadataRecord]) -> int:
        """Make ``records`` durable, then apply them to the image (and the authorizer).

        With a shared store the records are applied by :meth:`follow`, in log order among
        everyone's writes; this returns once that happened here (read your own writes)."""
        if not records:
            return self.offset
        offset = await self.store.append(records)
        if self.store.shared:
            while self.offset < offset:
                await self._offset_changed.wait()
        else:
            self._apply_batch(records, offset)
        await self._maybe_snapshot()
        return offset

    async def write_acls(self, added: Mapping[uuid.UUID, AclBinding], removed: Sequence[uuid.UUID]) -> None:
        """The StandardAuthorizer's ``acl_writer``: returns once the change is durable and applied
        (the authorizer learns it through ``apply_changes``)."""
        records: list[MetadataRecord] = [binding_to_record(i, b) for i, b in added.items()]
        records += [RemoveAccessControlEntryRecord(id=i) for i in removed]
        await self.append(records)

    def records(self) -> list[MetadataRecord]:
        """The whole image as records (a snapshot's content, and ``kgw metadata export``)."""
        records: list[MetadataRecord] = [binding_to_record(i, b) for i, b in self.acls.items()]
        for (rtype, rname), entries in self.configs.items():
            records += [ConfigRecord(resource_type=rtype, resource_name=rname, name=k, value=v)
                        for k, v in entries.items()]
        records += list(self.scram.values())
        records += [ClientQuotaRecord(entity=entity, key=k, value=v, remove=False)
                    for entity, values in self.quotas.items() for k, v in values.items()]
        return records

    async def _maybe_snapshot(self) -> None:
        """Snapshot once enough records accumulated.  Called after records are durable and
        applied, so a failure here must not reach the writer: a client told "failed" for a
        change in force would retry or give up on a change that is in fact made.  It is logged
        with its cause, counted, and tried again after a back-off (5 s doubling to 5 min)."""
        if self.store.records_since_snapshot < self.snapshot_every or self._snapshotting:
            return
        if trio.current_time() < self._snapshot_retry_at:
            return
        self._snapshotting = True
        try:
            records, offset = self.records(), self.offset
            await self.store.snapshot(records, through_offset=offset)
        except (OSError, MetadataLogError) as exc:
            self.snapshot_failures += 1
            self._snapshot_backoff = min(max(self._snapshot_backoff * 2, _SNAPSHOT_RETRY_MIN_S), _SNAPSHOT_RETRY_MAX_S)
            self._snapshot_retry_at = trio.current_time() + self._snapshot_backoff
            log.warning("metadata snapshot at offset %d failed (the records are durable and in force; start-up "
                        "replays more of the log until one succeeds); next try in %.0f s: %s",
                        offset, self._snapshot_backoff, exc)
            return
        finally:
            self._snapshotting = False
        self._snapshot_backoff = 0.0
        log.info("metadata snapshot written at offset %d (%d records)", offset, len(records))
