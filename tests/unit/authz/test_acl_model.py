"""ACL value types: wire codes, filters (Kafka's ``AclBindingFilter`` matching), create validation
(Kafka's ``AclControlManager``), KIP-430 bitfields, principal parsing (KafkaPrincipal)."""

from __future__ import annotations

import pytest

from authz.acl import (
    AUTHORIZED_OPERATIONS_OMITTED,
    SUPPORTED_OPERATIONS,
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation as Op,
    AclPermissionType as Perm,
    PatternType as PT,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType as RT,
    authorized_operations_bitfield,
    validate_acl_binding_for_create,
)
from authz.principal import ANONYMOUS, WILDCARD_PRINCIPAL, KafkaPrincipal, parse_principal


def binding(name="orders", rt=RT.TOPIC, pt=PT.LITERAL, principal="User:alice", host="*", op=Op.READ, perm=Perm.ALLOW):
    return AclBinding(ResourcePattern(rt, name, pt), AccessControlEntry(principal, host, op, perm))


def pfilter(name, pt, rt=RT.TOPIC):
    return ResourcePatternFilter(rt, name, pt)


# -- enums -----------------------------------------------------------------------


def test_wire_codes():
    assert [int(x) for x in (RT.UNKNOWN, RT.ANY, RT.TOPIC, RT.GROUP, RT.CLUSTER, RT.TRANSACTIONAL_ID, RT.DELEGATION_TOKEN, RT.USER)] == list(range(8))
    assert [int(x) for x in (PT.UNKNOWN, PT.ANY, PT.MATCH, PT.LITERAL, PT.PREFIXED)] == list(range(5))
    assert int(Op.TWO_PHASE_COMMIT) == 15 and int(Op.IDEMPOTENT_WRITE) == 12 and int(Op.ALL) == 2
    assert [int(x) for x in (Perm.UNKNOWN, Perm.ANY, Perm.DENY, Perm.ALLOW)] == [0, 1, 2, 3]


def test_unrecognised_codes_read_as_unknown():
    assert RT(99) is RT.UNKNOWN and PT(42) is PT.UNKNOWN and Op(16) is Op.UNKNOWN and Perm(-3) is Perm.UNKNOWN


def test_value_types_are_frozen():
    b = binding()
    with pytest.raises(AttributeError):
        b.pattern.name = "x"  # type: ignore[misc]


def test_audit_text_of_pattern():
    assert ResourcePattern(RT.TRANSACTIONAL_ID, "tx1", PT.LITERAL).audit_text() == "TransactionalId:LITERAL:tx1"
    assert ResourcePattern(RT.CLUSTER, "kafka-cluster", PT.LITERAL).audit_text() == "Cluster:LITERAL:kafka-cluster"


# -- resource pattern filters (AclBindingFilter) --------------------------------------------------


def test_filter_any_type_and_null_name_match_everything():
    f = ResourcePatternFilter.ANY
    for pat in (binding().pattern, binding(pt=PT.PREFIXED, rt=RT.GROUP).pattern):
        assert f.matches(pat)


def test_filter_exact_resource_type():
    assert not pfilter("orders", PT.LITERAL, RT.GROUP).matches(binding().pattern)


def test_filter_pattern_any_requires_exact_name():
    f = pfilter("orders", PT.ANY)
    assert f.matches(binding(pt=PT.LITERAL).pattern)
    assert f.matches(binding(pt=PT.PREFIXED).pattern)
    assert not f.matches(binding(name="ord", pt=PT.PREFIXED).pattern)
    assert not f.matches(binding(name="*").pattern)


def test_filter_match_selects_acls_that_apply_to_the_name():
    f = pfilter("orders", PT.MATCH)
    assert f.matches(binding(name="orders").pattern)
    assert f.matches(binding(name="*").pattern)
    assert f.matches(binding(name="ord", pt=PT.PREFIXED).pattern)
    assert f.matches(binding(name="orders", pt=PT.PREFIXED).pattern)
    assert not f.matches(binding(name="orders-x", pt=PT.PREFIXED).pattern)
    assert not f.matches(binding(name="order").pattern)
    assert not f.matches(binding(name="*", pt=PT.PREFIXED).pattern)


def test_filter_match_without_name_selects_everything_of_the_type():
    f = pfilter(None, PT.MATCH)
    assert f.matches(binding(name="x").pattern) and f.matches(binding(name="y", pt=PT.PREFIXED).pattern)


def test_filter_literal_and_prefixed_are_exact():
    assert pfilter("orders", PT.LITERAL).matches(binding().pattern)
    assert not pfilter("orders", PT.PREFIXED).matches(binding().pattern)
    assert not pfilter("orders", PT.LITERAL).matches(binding(name="*").pattern)
    wildcard_only = pfilter("*", PT.LITERAL)
    assert wildcard_only.matches(binding(name="*").pattern)
    assert not wildcard_only.matches(binding(name="orders").pattern)


def test_entry_filter_exact_text_and_any():
    e = binding(principal="User:*", host="*").entry
    assert AccessControlEntryFilter("User:*", "*", Op.READ, Perm.ALLOW).matches(e)
    assert not AccessControlEntryFilter("User:alice", None, Op.ANY, Perm.ANY).matches(e)
    assert AccessControlEntryFilter(None, None, Op.ANY, Perm.ANY).matches(e)
    # no implied operations in filters
    assert not AccessControlEntryFilter(None, None, Op.DESCRIBE, Perm.ANY).matches(e)
    assert not AccessControlEntryFilter(None, None, Op.READ, Perm.DENY).matches(e)


def test_binding_filter_needs_both_parts():
    f = AclBindingFilter(pfilter("orders", PT.LITERAL), AccessControlEntryFilter("User:bob", None, Op.ANY, Perm.ANY))
    assert not f.matches(binding())
    assert binding().to_filter().matches(binding())


def test_find_indefinite_field_order_and_wording():
    assert AclBindingFilter.ANY.find_indefinite_field() == "Resource type is ANY."
    assert pfilter(None, PT.LITERAL).find_indefinite_field() == "Resource name is NULL."
    assert pfilter("x", PT.MATCH).find_indefinite_field() == "Resource pattern type is MATCH."
    assert pfilter("x", PT.UNKNOWN).find_indefinite_field() == "Resource pattern type is UNKNOWN."
    assert pfilter("x", PT.LITERAL, RT.UNKNOWN).find_indefinite_field() == "Resource type is UNKNOWN."
    assert pfilter("x", PT.ANY).find_indefinite_field() is None  # as in Kafka
    e = AccessControlEntryFilter
    assert e(None, "*", Op.READ, Perm.ALLOW).find_indefinite_field() == "Principal is NULL"
    assert e("User:a", None, Op.READ, Perm.ALLOW).find_indefinite_field() == "Host is NULL"
    assert e("User:a", "*", Op.ANY, Perm.ALLOW).find_indefinite_field() == "Operation is ANY"
    assert e("User:a", "*", Op.UNKNOWN, Perm.ALLOW).find_indefinite_field() == "Operation is UNKNOWN"
    assert e("User:a", "*", Op.READ, Perm.ANY).find_indefinite_field() == "Permission type is ANY"
    assert e("User:a", "*", Op.READ, Perm.UNKNOWN).find_indefinite_field() == "Permission type is UNKNOWN"
    full = binding().to_filter()
    assert full.find_indefinite_field() is None and full.matches_at_most_one()
    assert not AclBindingFilter(full.pattern_filter, e(None, "*", Op.READ, Perm.ALLOW)).matches_at_most_one()


def test_is_unknown():
    assert AclBindingFilter(pfilter("x", PT.UNKNOWN), AccessControlEntryFilter.ANY).is_unknown
    assert AclBindingFilter(ResourcePatternFilter.ANY, AccessControlEntryFilter(None, None, Op.UNKNOWN, Perm.ANY)).is_unknown
    assert not AclBindingFilter.ANY.is_unknown


# -- CreateAcls validation (Kafka's ``AclControlManager``) ------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        binding(pt=PT.ANY),
        binding(pt=PT.MATCH),
        binding(rt=RT.ANY),
        binding(op=Op.ANY),
        binding(perm=Perm.ANY),
    ],
)
def test_any_or_match_fields_are_unknown_server_error(bad):
    assert validate_acl_binding_for_create(bad) == (-1, None)


def test_valid_binding_passes():
    assert validate_acl_binding_for_create(binding()) is None
    assert validate_acl_binding_for_create(binding(name="kafka-cluster", rt=RT.CLUSTER, op=Op.ALTER)) is None
    assert validate_acl_binding_for_create(binding(host="not-an-ip")) is None  # hosts are not validated


def test_cluster_name_checked_before_empty_name():
    assert validate_acl_binding_for_create(binding(name="", rt=RT.CLUSTER)) == (
        42,
        "The only valid name for the CLUSTER resource is kafka-cluster",
    )


def test_empty_name_checked_before_unknown_codes():
    assert validate_acl_binding_for_create(binding(name="", op=Op.UNKNOWN)) == (42, "Invalid empty resource name")


@pytest.mark.parametrize(
    "bad, message",
    [
        (binding(rt=RT.UNKNOWN), "Invalid resourceType UNKNOWN"),
        (binding(pt=PT.UNKNOWN), "Invalid patternType UNKNOWN"),
        (binding(op=Op.UNKNOWN), "Invalid operation UNKNOWN"),
        (binding(perm=Perm.UNKNOWN), "Invalid permissionType UNKNOWN"),
    ],
)
def test_unknown_codes_are_invalid_request(bad, message):
    assert validate_acl_binding_for_create(bad) == (42, message)


def test_principal_without_colon_is_invalid_request():
    code, message = validate_acl_binding_for_create(binding(principal="alice"))
    assert code == 42
    assert message == (
        "Could not parse principal from `alice` (no colon is present separating the principal type "
        "from the principal name)"
    )


# -- KIP-430 ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rt, bits", [(RT.TOPIC, 3576), (RT.GROUP, 3400), (RT.CLUSTER, 8096), (RT.TRANSACTIONAL_ID, 33040), (RT.DELEGATION_TOKEN, 256), (RT.USER, 24576)]
)
def test_all_allowed_bitfields(rt, bits):
    assert authorized_operations_bitfield(SUPPORTED_OPERATIONS[rt]) == bits


def test_bitfield_never_sets_all_and_omitted_value():
    assert authorized_operations_bitfield([Op.ALL, Op.READ]) == 1 << 3
    assert AUTHORIZED_OPERATIONS_OMITTED == -2147483648


# -- principals (KafkaPrincipal) -------------------------------------------------------------------------


def test_parse_splits_at_first_colon():
    p = parse_principal("User:CN=a:b")
    assert (p.principal_type, p.name, str(p)) == ("User", "CN=a:b", "User:CN=a:b")


def test_parse_accepts_empty_parts_like_kafka():
    assert parse_principal("User:").name == ""


@pytest.mark.parametrize("text", ["alice", ""])
def test_parse_errors_are_clear(text):
    with pytest.raises(ValueError, match="principal"):
        parse_principal(text)


def test_parse_error_names_the_input():
    with pytest.raises(ValueError, match="`alice` \\(no colon is present"):
        parse_principal("alice")


def test_equality_ignores_token_flag_and_subclass_fields():
    class Rich(KafkaPrincipal):
        pass

    r = Rich("User", "alice")
    r.groups = ("ops",)
    assert KafkaPrincipal("User", "alice", token_authenticated=True) == KafkaPrincipal("User", "alice")
    assert r == KafkaPrincipal("User", "alice") and len({r, KafkaPrincipal("User", "alice")}) == 1
    assert KafkaPrincipal("User", "alice") != KafkaPrincipal("Group", "alice")


def test_principal_base_fields_are_read_only():
    p = KafkaPrincipal("User", "alice")
    with pytest.raises(AttributeError):
        p.name = "bob"  # type: ignore[misc]


def test_well_known_principals():
    assert str(ANONYMOUS) == "User:ANONYMOUS" and str(WILDCARD_PRINCIPAL) == "User:*"
