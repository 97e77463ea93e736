"""Property tests: StandardAuthorizer against an obviously-correct reference.

The reference model below is a linear scan written straight from Kafka's
StandardAuthorizerData (authorize) and Authorizer.authorizeByResourceType (KIP-679): no index, no caches, no
early exits.  Hypothesis draws small alphabets of names, principals, hosts and
operations so that prefixes, wildcards and DENY/ALLOW collisions are common.
"""

from __future__ import annotations

import ipaddress
import uuid

from hypothesis import HealthCheck, given, settings, strategies as st

from authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation as Op,
    AclPermissionType as Perm,
    PatternType as PT,
    ResourcePattern,
    ResourceType as RT,
)
from authz.authorizer import Action, AuthorizableRequestContext, AuthorizationResult, Authorizer
from authz.principal import KafkaPrincipal
from authz.standard_authorizer import StandardAuthorizer

ALLOWED, DENIED = AuthorizationResult.ALLOWED, AuthorizationResult.DENIED

NAMES = ["a", "ab", "abc", "abd", "b", "ba", "*", "hardcode", "hard"]
REQUEST_NAMES = NAMES + ["abcd", "c", "*x"]
PRINCIPALS = ["User:alice", "User:bob", "User:*", "Group:ops"]
CALLERS = ["User:alice", "User:bob", "Group:ops"]
HOSTS = ["10.0.0.1", "10.0.0.2"]
OPS = [Op.ALL, Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALTER, Op.CREATE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS]
REQUEST_OPS = [op for op in OPS if op is not Op.ALL]
TYPES = [RT.TOPIC, RT.GROUP]

acl_strategy = st.builds(
    lambda rt, name, pt, principal, host, op, perm: AclBinding(
        ResourcePattern(rt, name, pt), AccessControlEntry(principal, host, op, perm)
    ),
    st.sampled_from(TYPES),
    st.sampled_from(NAMES),
    st.sampled_from([PT.LITERAL, PT.PREFIXED]),
    st.sampled_from(PRINCIPALS),
    st.sampled_from(["*"] + HOSTS),
    st.sampled_from(OPS),
    st.sampled_from([Perm.ALLOW, Perm.DENY]),
)
request_strategy = st.tuples(
    st.sampled_from(CALLERS),
    st.sampled_from(HOSTS),
    st.sampled_from(TYPES),
    st.sampled_from(REQUEST_NAMES),
    st.sampled_from(REQUEST_OPS),
)
config_strategy = st.fixed_dictionaries(
    {
        "allow_everyone": st.booleans(),
        "super_users": st.sets(st.sampled_from(CALLERS), max_size=1),
    }
)


# -- the reference model ------------------------------------------------------------


def ref_authorize(acls, config, caller, host, rt, name, op):
    if caller in config["super_users"]:
        return ALLOWED
    covering = [
        b
        for b in acls
        if b.pattern.resource_type == rt
        and (
            (b.pattern.pattern_type == PT.LITERAL and b.pattern.name in (name, "*"))
            or (b.pattern.pattern_type == PT.PREFIXED and name.startswith(b.pattern.name))
        )
    ]
    applicable = [b for b in covering if b.entry.principal in (caller, "User:*") and b.entry.host in ("*", host)]
    if any(b.entry.permission_type == Perm.DENY and b.entry.operation in (op, Op.ALL) for b in applicable):
        return DENIED

    def allow_covers(granted):
        if granted in (op, Op.ALL):
            return True
        if op == Op.DESCRIBE and granted in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
            return True
        return op == Op.DESCRIBE_CONFIGS and granted == Op.ALTER_CONFIGS

    if any(b.entry.permission_type == Perm.ALLOW and allow_covers(b.entry.operation) for b in applicable):
        return ALLOWED
    if not covering and config["allow_everyone"]:
        return ALLOWED
    return DENIED


def ref_by_type(acls, config, caller, host, rt, op):
    if ref_authorize(acls, config, caller, host, rt, "hardcode", op) == ALLOWED:
        return ALLOWED
    rel = [
        b
        for b in acls
        if b.pattern.resource_type == rt
        and b.entry.principal in (caller, "User:*")
        and b.entry.host in ("*", host)
        and b.entry.operation in (op, Op.ALL)
    ]
    deny = [b.pattern for b in rel if b.entry.permission_type == Perm.DENY]
    allow = [b.pattern for b in rel if b.entry.permission_type == Perm.ALLOW]
    if any(p.pattern_type == PT.LITERAL and p.name == "*" for p in deny):
        return DENIED
    if any(p.pattern_type == PT.LITERAL and p.name == "*" for p in allow):
        return ALLOWED
    deny_lit = {p.name for p in deny if p.pattern_type == PT.LITERAL}
    deny_pre = [p.name for p in deny if p.pattern_type == PT.PREFIXED]
    for p in allow:
        if any(p.name.startswith(d) for d in deny_pre):
            continue
        if p.pattern_type == PT.LITERAL and p.name in deny_lit:
            continue
        return ALLOWED
    return DENIED


# -- helpers --------------------------------------------------------------------------


def authorizer_for(acls, config, cache_size=100_000):
    a = StandardAuthorizer(decision_cache_size=cache_size)
    a.configure(
        {
            "allow.everyone.if.no.acl.found": str(config["allow_everyone"]).lower(),
            "super.users": ";".join(sorted(config["super_users"])),
        }
    )
    a.load_snapshot({uuid.uuid4(): b for b in acls})
    a.complete_initial_load()
    return a


def context(caller, host):
    t, _, n = caller.partition(":")
    return AuthorizableRequestContext("L", "PLAINTEXT", KafkaPrincipal(t, n), ipaddress.ip_address(host), 0, 9, "c", 1)


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- properties -------------------------------------------------------------------------


@SETTINGS
@given(st.lists(acl_strategy, max_size=25), config_strategy, st.lists(request_strategy, min_size=1, max_size=10))
def test_authorize_agrees_with_reference(acls, config, requests):
    cached, uncached = authorizer_for(acls, config), authorizer_for(acls, config, cache_size=0)
    for caller, host, rt, name, op in requests:
        expected = ref_authorize(acls, config, caller, host, rt, name, op)
        for a in (cached, uncached, cached):  # the second cached call is a cache hit
            got = a.authorize(context(caller, host), [Action(ResourcePattern(rt, name, PT.LITERAL), op)])[0]
            assert got == expected, (caller, host, rt, name, op)


@SETTINGS
@given(st.lists(acl_strategy, max_size=25), config_strategy, st.lists(request_strategy, min_size=1, max_size=6))
def test_batch_results_equal_individual_results(acls, config, requests):
    a = authorizer_for(acls, config)
    caller, host = requests[0][0], requests[0][1]
    actions = [Action(ResourcePattern(rt, name, PT.LITERAL), op) for _, _, rt, name, op in requests]
    batch = a.authorize(context(caller, host), actions)
    assert batch == [a.authorize(context(caller, host), [act])[0] for act in actions]


@SETTINGS
@given(st.lists(acl_strategy, max_size=25), config_strategy, request_strategy)
def test_authorize_by_resource_type_agrees_with_reference(acls, config, request):
    caller, host, rt, _, op = request
    a = authorizer_for(acls, config)
    expected = ref_by_type(acls, config, caller, host, rt, op)
    assert a.authorize_by_resource_type(context(caller, host), op, rt) == expected
    # The SPI's interface default (a plain listing scan) gives the same answer.
    assert Authorizer.authorize_by_resource_type(a, context(caller, host), op, rt) == expected


@SETTINGS
@given(st.lists(acl_strategy, max_size=25), config_strategy, request_strategy, st.sampled_from(["*", "exact", "prefix"]))
def test_applicable_deny_always_wins_over_any_allow(acls, config, request, where):
    caller, host, rt, name, op = request
    config = {**config, "super_users": set()}
    if where == "*":
        pattern = ResourcePattern(rt, "*", PT.LITERAL)
    elif where == "exact":
        pattern = ResourcePattern(rt, name, PT.LITERAL)
    else:
        pattern = ResourcePattern(rt, name[:1], PT.PREFIXED)
    deny = AclBinding(pattern, AccessControlEntry(caller, "*", op, Perm.DENY))
    a = authorizer_for(acls + [deny], config)
    assert a.authorize(context(caller, host), [Action(ResourcePattern(rt, name, PT.LITERAL), op)]) == [DENIED]


@SETTINGS
@given(
    st.lists(st.tuples(st.booleans(), acl_strategy, st.integers(0, 30)), max_size=30),
    config_strategy,
    st.lists(request_strategy, min_size=1, max_size=8),
)
def test_incremental_changes_equal_a_fresh_snapshot(steps, config, requests):
    """Copy-on-write ``apply_changes`` must give the same answers, by-type
    included, as indexing the resulting set from scratch."""
    a = authorizer_for([], config)
    current: dict[uuid.UUID, AclBinding] = {}
    ids: list[uuid.UUID] = []
    for is_add, binding, pick in steps:
        if is_add or not ids:
            acl_id = uuid.uuid4()
            ids.append(acl_id)
            current[acl_id] = binding
            a.apply_changes({acl_id: binding}, [])
        else:
            acl_id = ids.pop(pick % len(ids))
            del current[acl_id]
            a.apply_changes({}, [acl_id])
        for caller, host, rt, name, op in requests[:2]:  # interleave reads so caches get exercised
            a.authorize(context(caller, host), [Action(ResourcePattern(rt, name, PT.LITERAL), op)])
            a.authorize_by_resource_type(context(caller, host), op, rt)
    acls = list(current.values())
    assert sorted(map(str, a.acls(AclBindingFilter.ANY))) == sorted(map(str, acls))
    for caller, host, rt, name, op in requests:
        got = a.authorize(context(caller, host), [Action(ResourcePattern(rt, name, PT.LITERAL), op)])[0]
        assert got == ref_authorize(acls, config, caller, host, rt, name, op)
        assert a.authorize_by_resource_type(context(caller, host), op, rt) == ref_by_type(acls, config, caller, host, rt, op)


@SETTINGS
@given(
    st.lists(st.text(alphabet="ab\U0010ffff", min_size=1, max_size=4), max_size=60, unique=True),
    st.sets(st.text(alphabet="ab\U0010ffff", min_size=1, max_size=4), max_size=6),
    st.sets(st.text(alphabet="ab\U0010ffff", min_size=1, max_size=4), max_size=6),
    st.booleans(),
)
def test_survivor_scan_agrees_with_naive_scan(names, deny_prefixes, deny_literals, check_literals):
    """The bisect shortcut of the by-type index (used when many ALLOW names
    face few DENY prefixes) gives the naive answer, even at the top of the
    code-point range."""
    from authz.acl_summaries import GroupSummary, _first_undominated

    names_t = tuple(sorted(names))
    naive = any(
        not (check_literals and n in deny_literals) and not any(n.startswith(p) for p in deny_prefixes)
        for n in names_t
    )
    # Split the DENYs over two groups, as the by-type query sees them.
    half = len(deny_prefixes) // 2
    pre = sorted(deny_prefixes)
    others = []
    for prefixes, literals in ((pre[:half], sorted(deny_literals)[::2]), (pre[half:], sorted(deny_literals)[1::2])):
        acls = [AclBinding(ResourcePattern(RT.TOPIC, p, PT.PREFIXED), AccessControlEntry("User:a", "*", Op.READ, Perm.DENY)) for p in prefixes]
        acls += [AclBinding(ResourcePattern(RT.TOPIC, n, PT.LITERAL), AccessControlEntry("User:a", "*", Op.READ, Perm.DENY)) for n in literals if n != "*"]
        from authz.acl_index import StandardAcl

        others.append(GroupSummary([StandardAcl.from_binding(b) for b in acls]))
    if "*" in deny_literals:
        return  # a literal "*" DENY is the wildcard, handled before this scan
    assert _first_undominated(names_t, others, check_literals) == naive
