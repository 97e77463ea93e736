"""An ACL change costs the change, not the index (#17 item 5): the index's maps share every shard
a change does not touch, and a group's KIP-679 summary changed incrementally equals one built
from scratch, whatever the sequence of ACLs added and removed."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from authz.acl_index import AclIndex, StandardAcl
from authz.acl_summaries import GroupSummary
from authz.sharded_map import ShardedMap

_FIELDS = ("wildcard_allow", "wildcard_deny", "deny_literals", "deny_prefixes", "deny_prefix_lengths",
           "survivor_literals", "survivor_prefixes", "allow_literals", "allow_prefixes")


def _acl(name: str, prefixed: bool, deny: bool, principal: str = "User:alice") -> StandardAcl:
    return StandardAcl.from_binding(AclBinding(
        ResourcePattern(ResourceType.TOPIC, name, PatternType.PREFIXED if prefixed else PatternType.LITERAL),
        AccessControlEntry(principal, "*", AclOperation.READ,
                           AclPermissionType.DENY if deny else AclPermissionType.ALLOW)))


def _state(summary: GroupSummary | None) -> dict | None:
    if summary is None:
        return None
    return {"extra": sorted(summary.extra.items()), **{f: getattr(summary, f) for f in _FIELDS}}


acl_strategy = st.builds(_acl, st.sampled_from(["*", "a", "ab", "abc", "b", "ba", "bb", "\U0010ffff", "a\U0010ffff"]),
                         st.booleans(), st.booleans())


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), acl_strategy, st.integers(0, 40)), max_size=40))
def test_a_changed_summary_equals_a_fresh_one(steps):
    current: list[StandardAcl] = []
    summary: GroupSummary | None = None
    for is_add, acl, pick in steps:
        if is_add or not current:
            current.append(acl)
            summary = GroupSummary([acl]) if summary is None else summary.changed([acl], [])
        else:
            dropped = current.pop(pick % len(current))  # duplicates included: the multiset counts
            summary = summary.changed([], [dropped]) if summary is not None else None
        assert _state(summary) == _state(GroupSummary(current) if current else None), [str(a) for a in current]


def test_a_change_copies_only_the_shards_it_touches():
    index = AclIndex.build({uuid.uuid4(): _acl(f"topic-{i}", i % 7 == 0, i % 11 == 0, f"User:u{i % 50}")
                            for i in range(20_000)})
    changed = index.with_changes({uuid.uuid4(): _acl("new-topic", False, False, "User:u3")}, ())
    old, new = index.section(ResourceType.TOPIC), changed.section(ResourceType.TOPIC)
    for name in ("literal", "prefixed", "groups", "summaries"):
        copied = sum(a is not b for a, b in zip(getattr(old, name).shards, getattr(new, name).shards))
        assert copied <= 1, f"{name}: {copied} shards copied for one ACL"
    copied = sum(a is not b for a, b in zip(index._by_id.shards, changed._by_id.shards))
    assert copied == 1
    assert len(changed) == len(index) + 1


def test_sharded_map_updates_share_and_count():
    m = ShardedMap.of({f"k{i}": i for i in range(1000)})
    assert len(m) == 1000 and m.get("k5") == 5 and "k999" in m and m.get("nope") is None
    n = m.updated({"k5": 50, "new": 1}, ["k6", "absent"])
    assert (len(n), n["k5"], n.get("k6"), n["new"]) == (1000, 50, None, 1)
    assert (m["k5"], m["k6"], "new" in m) == (5, 6, False)  # the old map is unchanged
    assert m.updated({}, ["absent"]) is m
    assert sorted(n.items()) == sorted({**{f"k{i}": i for i in range(1000) if i != 6}, "k5": 50, "new": 1}.items())


def test_small_maps_stay_small_and_big_ones_reshard_as_they_grow():
    """Thousands of groups each hold a summary with its own map: a small one is one dict (a map
    of 256 shards each cost 5x the index's memory at 100k ACLs)."""
    one = GroupSummary([_acl("a", False, False)])
    assert one.extra is ShardedMap.empty()  # no map per group unless an ACL is there twice
    assert one.deny_literals is one.deny_prefixes  # the one shared empty set
    m = ShardedMap.empty()
    for i in range(5000):
        m = m.updated({i: i})
    assert len(m) == 5000 and all(m[i] == i for i in range(5000))
    assert 5000 / len(m.shards) <= 4 * 128, "a map that grew one key at a time must have re-sharded"
    assert len(ShardedMap.of({i: i for i in range(100_000)}).shards) == 1024


def test_a_name_with_one_acl_is_stored_as_that_acl_and_changes_form_as_acls_come_and_go():
    """Memory (issue 17): a dict and a one-element tuple per resource name were 30 MB of 100,000
    ACLs that each name their own topic; a lone ACL is its own bucket."""
    from authz.acl import ResourceType

    a, b = _acl("orders", False, False), _acl("orders", False, True, "User:bob")
    ids = {a: uuid.uuid4(), b: uuid.uuid4()}

    def stored(index: AclIndex):
        section = index.section(ResourceType.TOPIC)
        return None if section is None else section.literal.get("orders")

    one = AclIndex.build({ids[a]: a})
    assert stored(one) is a
    two = one.with_added({ids[b]: b})
    assert isinstance(stored(two), dict) and set(stored(two)) == {("User:alice", "*"), ("User:bob", "*")}
    assert AclIndex.build({ids[a]: a, ids[b]: b}).section(ResourceType.TOPIC).literal.get("orders") == stored(two)
    back = two.with_removed([ids[b]])
    assert stored(back) is a and back.contains_value(a) and not back.contains_value(b)
    assert stored(back.with_removed([ids[a]])) is None
