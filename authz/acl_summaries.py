"""KIP-679 summaries: per (principal, operation) group, the resource names its ALLOW and
DENY ACLs cover, built once when the index is built, so ``authorizeByResourceType``
answers without listing every ACL (Kafka's ``StandardAuthorizerData`` walks them; kgw
precomputes whether some name is allowed and not dominated by a DENY).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from .acl import (
    WILDCARD_RESOURCE,
)
from authz.acl import PatternType
from authz.sharded_map import ShardedMap

class GroupSummary:
    """What one ``(principal, host, operation)`` group of a resource type says
    for KIP-679, precomputed when the index is built and kept up to date by
    :meth:`changed` as ACLs come and go.

    ``survivor_literals`` / ``survivor_prefixes`` (sorted) are the ALLOW names
    not already cancelled by this group's own DENYs; a DENY from another group
    can still cancel them at query time.

    A change costs the names it touches (and, for a DENY prefix, the ALLOW names
    under it), plus C-level copies of the sorted tuples; never a walk of the group
    (a principal may hold 100,000 ACLs of one operation: 146 ms per change when the
    summary was rebuilt, issue 17).  A ``(literal, deny, name)`` present in the sets above
    stands for one ACL; ``extra`` (a ``ShardedMap``, nearly always the shared empty one) holds
    how many more there are when several ACLs of the group have it (an index may hold equal
    ACLs under different ids), so the multiset stays exact without a count per name.
    """

    __slots__ = (
        "wildcard_allow",
        "wildcard_deny",
        "deny_literals",
        "deny_prefixes",
        "deny_prefix_lengths",
        "survivor_literals",
        "survivor_prefixes",
        "allow_literals",
        "allow_prefixes",
        "extra",
    )

    def __init__(self, acls: Sequence[Any]) -> None:  # acls: authz.acl_index.StandardAcl
        allow_lit: set[str] = set()
        allow_pre: set[str] = set()
        deny_lit: set[str] = set()
        deny_pre: set[str] = set()
        wildcard_allow = wildcard_deny = 0  # how many ACLs
        literal_type = PatternType.LITERAL
        # (_kind inlined: a restart builds every group's summary, 32,500 groups at 100k ACLs)
        for acl in acls:
            pattern = acl.binding.pattern
            name = pattern.name
            if pattern.pattern_type is literal_type:
                if name == WILDCARD_RESOURCE:
                    if acl.is_deny:
                        wildcard_deny += 1
                    else:
                        wildcard_allow += 1
                else:
                    (deny_lit if acl.is_deny else allow_lit).add(name)
            else:
                (deny_pre if acl.is_deny else allow_pre).add(name)
        self.wildcard_allow, self.wildcard_deny = wildcard_allow > 0, wildcard_deny > 0
        distinct = len(allow_lit) + len(allow_pre) + len(deny_lit) + len(deny_pre) + self.wildcard_allow \
            + self.wildcard_deny
        self.extra = ShardedMap.empty() if distinct == len(acls) else _repeats(acls)
        # most groups hold no DENY: one shared empty set instead of two per group
        self.deny_literals = frozenset(deny_lit) if deny_lit else _NO_NAMES
        self.deny_prefixes = frozenset(deny_pre) if deny_pre else _NO_NAMES
        lengths = self.deny_prefix_lengths = tuple(sorted({len(p) for p in deny_pre}))
        self.allow_literals = tuple(sorted(allow_lit))
        self.allow_prefixes = tuple(sorted(allow_pre))
        if deny_pre:
            self.survivor_literals = tuple(n for n in self.allow_literals
                                           if n not in deny_lit and not _has_prefix_in(n, deny_pre, lengths))
            self.survivor_prefixes = tuple(n for n in self.allow_prefixes if not _has_prefix_in(n, deny_pre, lengths))
        else:  # without DENY literals every ALLOW literal survives: the same tuple, not a copy
            self.survivor_literals = tuple(n for n in self.allow_literals if n not in deny_lit) if deny_lit \
                else self.allow_literals
            self.survivor_prefixes = self.allow_prefixes

    def _literal_survives(self, name: str) -> bool:
        return name not in self.deny_literals and not _has_prefix_in(name, self.deny_prefixes, self.deny_prefix_lengths)

    def _prefix_survives(self, name: str) -> bool:
        return not _has_prefix_in(name, self.deny_prefixes, self.deny_prefix_lengths)

    def changed(self, adds: Iterable[Any], drops: Iterable[Any]) -> "GroupSummary | None":
        """The summary of this group with ``drops`` taken out and ``adds`` put in (ACLs of this
        group); None when no ACL is left."""
        delta: dict[tuple[bool, bool, str], int] = {}
        for acl, step in [(a, -1) for a in drops] + [(a, 1) for a in adds]:
            key = (acl.pattern_type is PatternType.LITERAL, acl.is_deny, acl.resource_name)
            delta[key] = delta.get(key, 0) + step
        extra = self.extra
        sets: dict[tuple[bool, bool, str], int] = {}
        removes: list[tuple[bool, bool, str]] = []
        appeared: list[tuple[bool, bool, str]] = []
        vanished: list[tuple[bool, bool, str]] = []
        for key, step in delta.items():
            if not step:
                continue
            before = 1 + extra.get(key, 0) if self._has(key) else 0
            after = max(before + step, 0)
            if after > 1:
                sets[key] = after - 1
            elif before > 1:
                removes.append(key)
            if after and not before:
                appeared.append(key)
            elif before and not after:
                vanished.append(key)
        out = GroupSummary.__new__(GroupSummary)
        out.extra = extra.updated(sets, removes) if sets or removes else extra
        out.wildcard_allow, out.wildcard_deny = self.wildcard_allow, self.wildcard_deny
        out.deny_literals, out.deny_prefixes = self.deny_literals, self.deny_prefixes
        out.deny_prefix_lengths = self.deny_prefix_lengths
        allow_lit, allow_pre = self.allow_literals, self.allow_prefixes
        changes: dict[str, dict[str, bool]] = {_ALLOW_LIT: {}, _ALLOW_PRE: {}, _DENY_LIT: {}, _DENY_PRE: {}}
        for key, present in [(k, True) for k in appeared] + [(k, False) for k in vanished]:
            kind = _kind(key)
            if kind == _WILDCARD_ALLOW:
                out.wildcard_allow = present
            elif kind == _WILDCARD_DENY:
                out.wildcard_deny = present
            else:
                changes[kind][key[2]] = present
        allow_lit_changes, allow_pre_changes = changes[_ALLOW_LIT], changes[_ALLOW_PRE]
        deny_lit_changes, deny_pre_changes = changes[_DENY_LIT], changes[_DENY_PRE]
        if deny_lit_changes:
            out.deny_literals = frozenset(
                (self.deny_literals - {n for n, p in deny_lit_changes.items() if not p})
                | {n for n, p in deny_lit_changes.items() if p}) or _NO_NAMES
        if deny_pre_changes:
            out.deny_prefixes = frozenset(
                (self.deny_prefixes - {n for n, p in deny_pre_changes.items() if not p})
                | {n for n, p in deny_pre_changes.items() if p}) or _NO_NAMES
            out.deny_prefix_lengths = tuple(sorted({len(p) for p in out.deny_prefixes}))
        out.allow_literals = _with_changes(allow_lit, allow_lit_changes)
        out.allow_prefixes = _with_changes(allow_pre, allow_pre_changes)
        # The names whose survival may have changed: those added or removed, and the ALLOW
        # names under a DENY prefix that came or went.
        lit_affected = set(allow_lit_changes) | set(deny_lit_changes)
        pre_affected = set(allow_pre_changes)
        for prefix in deny_pre_changes:
            lit_affected.update(_under(out.allow_literals, prefix))
            pre_affected.update(_under(out.allow_prefixes, prefix))
        out.survivor_literals = _fix(self.survivor_literals, lit_affected,
                                     lambda n: _contains(out.allow_literals, n) and out._literal_survives(n))
        out.survivor_prefixes = _fix(self.survivor_prefixes, pre_affected,
                                     lambda n: _contains(out.allow_prefixes, n) and out._prefix_survives(n))
        if not (out.allow_literals or out.allow_prefixes or out.deny_literals or out.deny_prefixes
                or out.wildcard_allow or out.wildcard_deny):
            return None
        return out

    def _has(self, key: tuple[bool, bool, str]) -> bool:
        """Does the group hold at least one ACL ``(literal, deny, name)``?"""
        kind = _kind(key)
        if kind == _ALLOW_LIT:
            return _contains(self.allow_literals, key[2])
        if kind == _ALLOW_PRE:
            return _contains(self.allow_prefixes, key[2])
        if kind == _DENY_LIT:
            return key[2] in self.deny_literals
        if kind == _DENY_PRE:
            return key[2] in self.deny_prefixes
        return self.wildcard_allow if kind == _WILDCARD_ALLOW else self.wildcard_deny


_NO_NAMES: frozenset[str] = frozenset()


def _repeats(acls: Sequence[Any]) -> ShardedMap[tuple[bool, bool, str], int]:
    """``(literal, deny, name) -> how many ACLs beyond the first`` for those held more than once."""
    counts: dict[tuple[bool, bool, str], int] = {}
    for acl in acls:
        key = (acl.pattern_type is PatternType.LITERAL, acl.is_deny, acl.resource_name)
        counts[key] = counts.get(key, 0) + 1
    return ShardedMap.of({k: c - 1 for k, c in counts.items() if c > 1})
_WILDCARD_ALLOW, _WILDCARD_DENY = "wildcard_allow", "wildcard_deny"
_ALLOW_LIT, _ALLOW_PRE, _DENY_LIT, _DENY_PRE = "allow_lit", "allow_pre", "deny_lit", "deny_pre"


def _kind(key: tuple[bool, bool, str]) -> str:
    """What an ACL ``(literal, deny, name)`` is to a summary."""
    literal, deny, name = key
    if literal and name == WILDCARD_RESOURCE:
        return _WILDCARD_DENY if deny else _WILDCARD_ALLOW
    if deny:
        return _DENY_LIT if literal else _DENY_PRE
    return _ALLOW_LIT if literal else _ALLOW_PRE


def _contains(names: tuple[str, ...], name: str) -> bool:
    i = bisect.bisect_left(names, name)
    return i < len(names) and names[i] == name


def _with_changes(names: tuple[str, ...], changes: dict[str, bool]) -> tuple[str, ...]:
    """``names`` (sorted, unique) with each name of ``changes`` put in (True) or taken out."""
    if not changes:
        return names
    out = list(names)  # a C-level copy; the edits below are bisections and memmoves
    for name, present in changes.items():
        i = bisect.bisect_left(out, name)
        there = i < len(out) and out[i] == name
        if present and not there:
            out.insert(i, name)
        elif not present and there:
            del out[i]
    return tuple(out)


def _under(names: tuple[str, ...], prefix: str) -> tuple[str, ...]:
    """The names of sorted ``names`` that start with ``prefix`` (a contiguous run)."""
    lo = bisect.bisect_left(names, prefix)
    upper = _prefix_upper_bound(prefix)
    hi = len(names) if upper is None else bisect.bisect_left(names, upper, lo)
    return names[lo:hi]


def _fix(survivors: tuple[str, ...], affected: set[str], survives: Callable[[str], bool]) -> tuple[str, ...]:
    """``survivors`` with each affected name present exactly when ``survives(name)``."""
    return _with_changes(survivors, {n: survives(n) for n in affected}) if affected else survivors


def _has_prefix_in(name: str, prefixes: frozenset[str] | set[str], lengths: tuple[int, ...]) -> bool:
    """Is some member of ``prefixes`` a prefix of ``name``?  ``lengths`` are
    the distinct lengths of ``prefixes``, ascending: one probe per length."""
    n = len(name)
    for k in lengths:
        if k > n:
            return False
        if name[:k] in prefixes:
            return True
    return False


def _prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string starting with ``prefix``
    (None if there is none)."""
    chars = list(prefix)
    while chars:
        last = ord(chars[-1])
        if last < 0x10FFFF:
            chars[-1] = chr(last + 1)
            return "".join(chars)
        chars.pop()
    return None


def _first_undominated(names: tuple[str, ...], others: list["GroupSummary"], check_literals: bool) -> bool:
    """Does ``names`` (sorted) hold a name that no DENY of ``others`` cancels?

    A name is cancelled by a DENY prefix of any of ``others`` that starts it,
    or (if ``check_literals``) by an equal DENY literal.  Nothing is merged:
    each of the (at most eight) groups is probed with its own precomputed
    sets.  With few deny prefixes and many names, the names each prefix
    cancels are a contiguous run of the sorted tuple, skipped with two
    bisections per prefix instead of probing every name.
    """
    if not names:
        return False
    literal_sets = [o.deny_literals for o in others if o.deny_literals] if check_literals else []
    prefix_groups = [o for o in others if o.deny_prefixes]

    def literal_denied(n: str) -> bool:
        return any(n in lits for lits in literal_sets)

    if not prefix_groups:
        return not literal_sets or any(not literal_denied(n) for n in names)
    prefix_count = sum(len(o.deny_prefixes) for o in prefix_groups)
    if prefix_count * 4 < len(names):
        runs = []
        for o in prefix_groups:
            for p in o.deny_prefixes:
                lo = bisect.bisect_left(names, p)
                upper = _prefix_upper_bound(p)
                hi = len(names) if upper is None else bisect.bisect_left(names, upper, lo)
                if lo < hi:
                    runs.append((lo, hi))
        runs.sort()
        pos = 0
        for lo, hi in runs + [(len(names), len(names))]:
            for i in range(pos, lo):  # names in the gap before this run survive prefixes
                if not literal_denied(names[i]):
                    return True
            pos = max(pos, hi)
        return False
    for n in names:
        if literal_sets and literal_denied(n):
            continue
        if not any(_has_prefix_in(n, o.deny_prefixes, o.deny_prefix_lengths) for o in prefix_groups):
            return True
    return False
