"""The immutable ACL index behind StandardAuthorizer (Kafka's AclCache + StandardAcl).

Theory of operation
-------------------
Every ACL is turned, once, into a ``StandardAcl`` when it enters the index:
its enums are checked, its principal text is parsed (never again on the hot
path — the weak spot Kafka's KAFKA-20667 reports), and it keeps the original
``AclBinding`` so listing ACLs builds nothing.  Each ACL is keyed by the UUID
the metadata log gave it (KIP-801).

Layout, for one resource type (a ``_Section``)::

    literal   : {name -> Bucket}          # LITERAL ACLs, including name "*"
    prefixed  : {prefix -> Bucket}        # PREFIXED ACLs
    prefix_lengths : lengths present in ``prefixed``, longest first
    groups    : {(principal, host, op) -> (StandardAcl, ...)}   # KIP-679 only

    Bucket = {(principal text, host text) -> (StandardAcl, ...)}
             or, for a name with a single ACL, that StandardAcl itself

To find the ACLs that may apply to resource name ``n`` the authorizer does a
dict lookup of ``n`` in ``literal``, one dict lookup of ``n[:k]`` in
``prefixed`` for each length ``k`` present in ``prefix_lengths`` (so the cost
is bounded by ``len(n)`` and does not grow with the number of ACLs), and a
lookup of ``"*"`` in ``literal``.  Inside a bucket it makes at most four
lookups — principal in {caller, ``User:*``} × host in {client IP, ``*``} —
so ACLs of other principals or hosts are never visited
(Kafka's StandardAuthorizerData walks them all), yet a non-empty bucket still
tells it "this resource has ACLs", which ``allow.everyone.if.no.acl.found``
needs (docs/authorization.md).

Immutability and swapping
-------------------------
An ``AclIndex`` is never changed after construction.  ``with_changes`` /
``with_added`` / ``with_removed`` return a *new* index that shares every
untouched bucket with the old one (copy-on-write of the dicts along the
changed path only), so readers holding the old index — a batch ``authorize``
call half-way through — keep a consistent view.  The only mutable parts are
caches of values *derived* from the index (``group_summary``); they never
change what the index answers and die with it.

``by_type_decision`` answers the ACL part of KIP-679's
``authorizeByResourceType`` from per-group summaries (see its docstring).
"""

from __future__ import annotations
import uuid
from typing import Iterable, Iterator, Mapping
from .acl import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    ResourceType,
    WILDCARD_HOST,
    WILDCARD_RESOURCE,
)
from .principal import KafkaPrincipal, WILDCARD_PRINCIPAL_KEY
from authz.acl_summaries import GroupSummary, _first_undominated
from authz.standard_acl import Bucket, StandardAcl, bucket_acls, bucket_all, compact_bucket
from authz.sharded_map import ShardedMap

_LITERAL = PatternType.LITERAL


_PREFIXED = PatternType.PREFIXED


_ALL = AclOperation.ALL


_GroupKey = tuple[str, str, AclOperation]


class _Section:
    """The ACLs of one resource type.  Immutable once published.

    ``literal``, ``prefixed``, ``groups`` and ``summaries`` are ``ShardedMap``s, so a change
    copies only the shards it touches; ``prefix_counts`` (prefix length -> how many prefixed
    names have it) is small (one entry per distinct length) and copied whole."""

    __slots__ = ("literal", "prefixed", "prefix_counts", "prefix_lengths", "groups", "summaries", "wildcard")

    def __init__(
        self,
        literal: ShardedMap[str, Bucket],
        prefixed: ShardedMap[str, Bucket],
        prefix_counts: dict[int, int],
        groups: ShardedMap[_GroupKey, int],
        summaries: ShardedMap[_GroupKey, GroupSummary],
    ) -> None:
        self.literal = literal
        #: the LITERAL ``*`` bucket, visited for every name (looked up once, here)
        self.wildcard: Bucket | None = literal.get(WILDCARD_RESOURCE)
        self.prefixed = prefixed
        self.prefix_counts = prefix_counts
        self.prefix_lengths = tuple(sorted(prefix_counts, reverse=True))
        self.groups = groups
        #: derived values, built before publication: every group's KIP-679 summary, so
        #: ``authorize_by_resource_type`` never pays for them on a request
        self.summaries = summaries

    def summary(self, key: _GroupKey) -> GroupSummary | None:
        return self.summaries.get(key)

    def buckets_for(self, name: str) -> Iterator[Bucket]:
        """Buckets whose pattern covers ``name``, in Kafka's walk order: the
        exact literal, then prefixes longest first.  (The ``*`` bucket is not
        included: the authorizer visits it last, and only if no DENY matched.)"""
        literal = self.literal
        bucket = literal.shards[hash(name) & literal.mask].get(name)
        if bucket is not None:
            yield bucket
        shards, mask = self.prefixed.shards, self.prefixed.mask
        n = len(name)
        for k in self.prefix_lengths:
            if k <= n:
                prefix = name[:k]
                bucket = shards[hash(prefix) & mask].get(prefix)
                if bucket is not None:
                    yield bucket


class AclIndex:
    """An immutable, indexed set of ACLs keyed by UUID."""

    __slots__ = ("_by_id", "_sections")

    def __init__(self, by_id: ShardedMap[uuid.UUID, StandardAcl], sections: dict[ResourceType, _Section]) -> None:
        self._by_id = by_id
        self._sections = sections

    # -- construction -------------------------------------------------------

    @classmethod
    def empty(cls) -> "AclIndex":
        return cls(ShardedMap.empty(), {})

    @classmethod
    def build(cls, acls: Mapping[uuid.UUID, StandardAcl]) -> "AclIndex":
        """Index a whole snapshot at once (mutable builders, frozen at the end)."""
        by_id = {acl_id: acl.with_id(acl_id) for acl_id, acl in acls.items()}
        by_type: dict[ResourceType, list[StandardAcl]] = {}
        for acl in by_id.values():
            by_type.setdefault(acl.resource_type, []).append(acl)
        sections = {rt: _build_section(items) for rt, items in by_type.items()}
        return cls(ShardedMap.of(by_id), sections)

    @classmethod
    def from_bindings(cls, bindings: Mapping[uuid.UUID, AclBinding]) -> "AclIndex":
        return cls.build(_to_standard(bindings))

    def with_added(self, acls: Mapping[uuid.UUID, StandardAcl]) -> "AclIndex":
        return self.with_changes(acls, ())

    def with_removed(self, ids: Iterable[uuid.UUID]) -> "AclIndex":
        return self.with_changes({}, ids)

    def with_changes(self, added: Mapping[uuid.UUID, StandardAcl], removed: Iterable[uuid.UUID]) -> "AclIndex":
        """A new index with ``removed`` taken out and ``added`` put in.

        Idempotent, so a change the authorizer applied itself and later sees
        again while the metadata log is replayed is harmless: adding an id
        that is present with the same ACL, or removing an absent id, does
        nothing.  An id both added and removed in one call ends up absent (it
        was created and deleted within one log delta).  Re-adding a present
        id with a *different* ACL replaces it.
        """
        removed_ids = set(removed)
        by_id = self._by_id
        adds: list[StandardAcl] = []
        drops: list[StandardAcl] = []
        for acl_id in removed_ids:
            old = by_id.get(acl_id)
            if old is not None:
                drops.append(old)
        new_entries: dict[uuid.UUID, StandardAcl] = {}
        for acl_id, acl in added.items():
            if acl_id in removed_ids:
                continue
            old = by_id.get(acl_id)
            if old is not None:
                if old.value_key == acl.value_key:
                    continue
                drops.append(old)
            acl = acl.with_id(acl_id)
            adds.append(acl)
            new_entries[acl_id] = acl
        if not adds and not drops:
            return self
        new_by_id = by_id.updated(new_entries, removed_ids)
        sections = dict(self._sections)
        touched = {a.resource_type for a in adds} | {a.resource_type for a in drops}
        for rt in touched:
            sections[rt] = _changed_section(
                sections.get(rt),
                [a for a in adds if a.resource_type is rt],
                [a for a in drops if a.resource_type is rt],
            )
            if not len(sections[rt].groups):
                del sections[rt]
        return AclIndex(new_by_id, sections)

    # -- queries ------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._by_id)

    def get(self, acl_id: uuid.UUID) -> StandardAcl | None:
        return self._by_id.get(acl_id)

    def items(self) -> Iterable[tuple[uuid.UUID, StandardAcl]]:
        return self._by_id.items()

    def section(self, resource_type: ResourceType) -> _Section | None:
        return self._sections.get(resource_type)

    def contains_value(self, acl: StandardAcl) -> bool:
        """Is an ACL equal to ``acl`` (all seven fields) already present?"""
        section = self._sections.get(acl.resource_type)
        if section is None:
            return False
        table = section.literal if acl.pattern_type is _LITERAL else section.prefixed
        bucket = table.get(acl.resource_name)
        if bucket is None:
            return False
        return any(other.value_key == acl.value_key for other in bucket_acls(bucket, acl.bucket_key))

    def matching(self, binding_filter: AclBindingFilter) -> Iterator[tuple[uuid.UUID, StandardAcl]]:
        """(id, acl) pairs matching the filter (Kafka's ``AclBindingFilter`` matching).

        Uses the index to narrow by resource type and name; the filter's own
        ``matches`` is the final word.
        """
        pf = binding_filter.pattern_filter
        if pf.resource_type is ResourceType.ANY:
            sections = list(self._sections.values())
        else:
            section = self._sections.get(pf.resource_type)
            sections = [section] if section is not None else []
        for section in sections:
            for acl in _candidates_in(section, pf.name, pf.pattern_type):
                if binding_filter.matches(acl.binding):
                    yield acl.acl_id, acl  # type: ignore[misc]

    def by_type_decision(
        self, resource_type: ResourceType, principal_key: str, host: str, op: AclOperation
    ) -> bool:
        """The ACL part of KIP-679 (Kafka's ``Authorizer.authorizeByResourceType``): True = ALLOWED.

        Looks only at the ≤8 groups (principal ∈ {caller, ``User:*``}) ×
        (host ∈ {client, ``*``}) × (operation ∈ {op, ALL}) — exact operation,
        no implied operations.  A DENY on LITERAL ``*`` denies; an ALLOW on
        LITERAL ``*`` allows; otherwise an ALLOW name survives if no DENY
        (from any of the groups) cancels it.  Each group's own DENYs were
        applied when its summary was built, so a query only tests the
        survivors against the *other* groups' DENYs.
        """
        section = self._sections.get(resource_type)
        if section is None:
            return False
        principals = (principal_key,) if principal_key == WILDCARD_PRINCIPAL_KEY else (principal_key, WILDCARD_PRINCIPAL_KEY)
        hosts = (host,) if host == WILDCARD_HOST else (host, WILDCARD_HOST)
        ops = (op,) if op is _ALL else (op, _ALL)
        summaries = []
        for p in principals:
            for h in hosts:
                for o in ops:
                    s = section.summary((p, h, o))
                    if s is not None:
                        summaries.append(s)
        if not summaries:
            return False
        if any(s.wildcard_deny for s in summaries):
            return False
        if any(s.wildcard_allow for s in summaries):
            return True
        for s in summaries:
            others = [o for o in summaries if o is not s]
            # A DENY literal cancels an ALLOW literal of the same name only;
            # it never cancels an ALLOW prefix.
            if _first_undominated(s.survivor_literals, others, True):
                return True
            if _first_undominated(s.survivor_prefixes, others, False):
                return True
        return False


def _to_standard(bindings: Mapping[uuid.UUID, AclBinding]) -> dict[uuid.UUID, StandardAcl]:
    out: dict[uuid.UUID, StandardAcl] = {}
    principals: dict[str, KafkaPrincipal] = {}
    for acl_id, binding in bindings.items():
        try:
            out[acl_id] = StandardAcl.from_binding(binding, principals)
        except ValueError as exc:
            raise ValueError(f"ACL {acl_id} cannot be indexed: {exc}") from exc
    return out


def _group_key(acl: StandardAcl) -> _GroupKey:
    return (acl.principal, acl.host, acl.operation)


def _frozen(held: StandardAcl | dict[tuple[str, str], list[StandardAcl]]) -> Bucket:
    """A bucket as built (one ACL, or lists by key) in its stored form."""
    if isinstance(held, StandardAcl):
        return held
    return {key: tuple(acls) for key, acls in held.items()}


def _build_section(acls: list[StandardAcl]) -> _Section:
    literal: dict[str, StandardAcl | dict[tuple[str, str], list[StandardAcl]]] = {}
    prefixed: dict[str, StandardAcl | dict[tuple[str, str], list[StandardAcl]]] = {}
    groups: dict[_GroupKey, list[StandardAcl]] = {}
    bucket_keys: dict[tuple[str, str], tuple[str, str]] = {}  # one tuple per distinct (principal, host)

    def shared_key(acl: StandardAcl) -> tuple[str, str]:
        key = acl.bucket_key
        return bucket_keys.setdefault(key, key)

    for acl in acls:
        pattern = acl.binding.pattern
        name = pattern.name
        table = literal if pattern.pattern_type is _LITERAL else prefixed
        held = table.get(name)
        if held is None:  # a name's first ACL is held as itself (most names keep only one)
            table[name] = acl
        else:
            if type(held) is StandardAcl:
                held = table[name] = {shared_key(held): [held]}
            assert not isinstance(held, StandardAcl)
            bucket_key = shared_key(acl)
            lst = held.get(bucket_key)
            if lst is None:
                held[bucket_key] = [acl]
            else:
                lst.append(acl)
        key = (acl.principal, acl.host, acl.operation)
        g = groups.get(key)
        if g is None:
            groups[key] = [acl]
        else:
            g.append(acl)
    prefix_counts: dict[int, int] = {}
    for name in prefixed:
        prefix_counts[len(name)] = prefix_counts.get(len(name), 0) + 1
    return _Section(
        ShardedMap.of((n, _frozen(b)) for n, b in literal.items()),
        ShardedMap.of((n, _frozen(b)) for n, b in prefixed.items()),
        prefix_counts,
        ShardedMap.of((k, len(v)) for k, v in groups.items()),
        ShardedMap.of((k, GroupSummary(v)) for k, v in groups.items()),
    )


def _changed_section(old: _Section | None, adds: list[StandardAcl], drops: list[StandardAcl]) -> _Section:
    """Copy-on-write: only the buckets and groups the change touches are rebuilt, and only the
    shards holding them are copied; everything else is shared with ``old``."""
    literal = old.literal if old is not None else ShardedMap.empty()
    prefixed = old.prefixed if old is not None else ShardedMap.empty()
    groups = old.groups if old is not None else ShardedMap.empty()
    summaries = old.summaries if old is not None else ShardedMap.empty()
    prefix_counts = dict(old.prefix_counts) if old is not None else {}

    # Gather the change per bucket and per group first, so a large batch
    # costs one copy per touched bucket/group, not one per ACL.
    bucket_changes: dict[tuple[PatternType, str], tuple[list[StandardAcl], set[int]]] = {}
    group_changes: dict[_GroupKey, tuple[list[StandardAcl], list[StandardAcl]]] = {}
    for acl, is_add in [(a, False) for a in drops] + [(a, True) for a in adds]:
        entry = bucket_changes.get((acl.pattern_type, acl.resource_name))
        if entry is None:
            entry = bucket_changes[(acl.pattern_type, acl.resource_name)] = ([], set())
        if is_add:
            entry[0].append(acl)
        else:
            entry[1].add(id(acl))
        group = group_changes.setdefault(_group_key(acl), ([], []))
        (group[0] if is_add else group[1]).append(acl)

    table_sets: dict[PatternType, dict[str, Bucket]] = {_LITERAL: {}, _PREFIXED: {}}
    table_removes: dict[PatternType, list[str]] = {_LITERAL: [], _PREFIXED: []}
    for (pattern_type, name), (to_add, to_drop) in bucket_changes.items():
        table = literal if pattern_type is _LITERAL else prefixed
        per_key: dict[tuple[str, str], list[StandardAcl]] = {}
        for acl in to_add:
            per_key.setdefault(acl.bucket_key, []).append(acl)
        before = table.get(name)
        bucket: dict[tuple[str, str], tuple[StandardAcl, ...]]
        if before is None:
            bucket = {}
        elif isinstance(before, StandardAcl):
            bucket = {before.bucket_key: (before,)}
        else:
            bucket = dict(before)
        touched_keys = set(per_key) | {k for k, acls in bucket.items() if any(id(x) in to_drop for x in acls)}
        for key in touched_keys:
            kept = [a for a in bucket.get(key, ()) if id(a) not in to_drop]
            kept.extend(per_key.get(key, ()))
            if kept:
                bucket[key] = tuple(kept)
            else:
                bucket.pop(key, None)
        if bucket:
            table_sets[pattern_type][name] = compact_bucket(bucket)
        elif before is not None:
            table_removes[pattern_type].append(name)
        if pattern_type is _PREFIXED and bool(bucket) != (before is not None):
            count = prefix_counts.get(len(name), 0) + (1 if bucket else -1)
            if count:
                prefix_counts[len(name)] = count
            else:
                prefix_counts.pop(len(name), None)

    # groups: (principal, host, operation) -> number of ACLs; each group's KIP-679 summary is
    # changed by what this change did to that group, the others are shared as they are.
    group_sets: dict[_GroupKey, int] = {}
    summary_sets: dict[_GroupKey, GroupSummary] = {}
    group_removes: list[_GroupKey] = []
    for group_key, (added, dropped) in group_changes.items():
        count = (groups.get(group_key) or 0) + len(added) - len(dropped)
        summary = summaries.get(group_key)
        summary = GroupSummary(added) if summary is None else summary.changed(added, dropped)
        if count > 0 and summary is not None:
            group_sets[group_key] = count
            summary_sets[group_key] = summary
        elif group_key in groups:
            group_removes.append(group_key)
    return _Section(
        literal.updated(table_sets[_LITERAL], table_removes[_LITERAL]),
        prefixed.updated(table_sets[_PREFIXED], table_removes[_PREFIXED]),
        prefix_counts,
        groups.updated(group_sets, group_removes),
        summaries.updated(summary_sets, group_removes),
    )


def _candidates_in(section: _Section, name: str | None, pattern_type: PatternType) -> Iterator[StandardAcl]:
    """ACLs of a section a pattern filter may select, using the index."""
    tables: list[Bucket] = []
    if name is None:
        if pattern_type in (PatternType.LITERAL, PatternType.ANY, PatternType.MATCH):
            tables.extend(section.literal.values())
        if pattern_type in (PatternType.PREFIXED, PatternType.ANY, PatternType.MATCH):
            tables.extend(section.prefixed.values())
    elif pattern_type is PatternType.LITERAL:
        tables.append(section.literal.get(name, {}))
    elif pattern_type is PatternType.PREFIXED:
        tables.append(section.prefixed.get(name, {}))
    elif pattern_type is PatternType.ANY:
        tables.append(section.literal.get(name, {}))
        tables.append(section.prefixed.get(name, {}))
    elif pattern_type is PatternType.MATCH:
        tables.append(section.literal.get(name, {}))
        if name != WILDCARD_RESOURCE:
            tables.append(section.literal.get(WILDCARD_RESOURCE, {}))
        for k in range(1, len(name) + 1):
            bucket = section.prefixed.get(name[:k])
            if bucket is not None:
                tables.append(bucket)
    for bucket in tables:
        yield from bucket_all(bucket)
