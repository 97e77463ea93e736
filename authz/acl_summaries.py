"""KIP-679 summaries: per (principal, operation) group, the resource names its ALLOW and
DENY ACLs cover, built once when the index is built, so ``authorizeByResourceType``
answers without listing every ACL (Kafka's ``StandardAuthorizerData`` walks them; kgw
precomputes whether some name is allowed and not dominated by a DENY).
"""

from __future__ import annotations

from typing import Any
import bisect
from typing import Iterable
from .acl import (
    WILDCARD_RESOURCE,
)
from authz.acl import PatternType

class GroupSummary:
    """What one ``(principal, host, operation)`` group of a resource type says
    for KIP-679, precomputed once per index.

    ``survivor_literals`` / ``survivor_prefixes`` (sorted) are the ALLOW names
    not already cancelled by this group's own DENYs; a DENY from another group
    can still cancel them at query time.
    """

    __slots__ = (
        "wildcard_allow",
        "wildcard_deny",
        "deny_literals",
        "deny_prefixes",
        "deny_prefix_lengths",
        "survivor_literals",
        "survivor_prefixes",
    )

    def __init__(self, acls: Iterable[Any]) -> None:  # acls: authz.acl_index.StandardAcl
        allow_lit: set[str] = set()
        allow_pre: set[str] = set()
        deny_lit: set[str] = set()
        deny_pre: set[str] = set()
        self.wildcard_allow = False
        self.wildcard_deny = False
        for acl in acls:
            literal = acl.pattern_type is PatternType.LITERAL
            if literal and acl.resource_name == WILDCARD_RESOURCE:
                if acl.is_deny:
                    self.wildcard_deny = True
                else:
                    self.wildcard_allow = True
            elif acl.is_deny:
                (deny_lit if literal else deny_pre).add(acl.resource_name)
            else:
                (allow_lit if literal else allow_pre).add(acl.resource_name)
        self.deny_literals = frozenset(deny_lit)
        self.deny_prefixes = frozenset(deny_pre)
        self.deny_prefix_lengths = tuple(sorted({len(p) for p in deny_pre}))
        self.survivor_literals = tuple(
            sorted(n for n in allow_lit if n not in deny_lit and not _has_prefix_in(n, deny_pre, self.deny_prefix_lengths))
        )
        self.survivor_prefixes = tuple(
            sorted(n for n in allow_pre if not _has_prefix_in(n, deny_pre, self.deny_prefix_lengths))
        )


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
