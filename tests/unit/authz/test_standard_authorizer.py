"""StandardAuthorizer, one test per behaviour (after Kafka's StandardAuthorizerTest).

Kafka references: StandardAuthorizerData's decision procedure and its consequences,
Authorizer.authorizeByResourceType (KIP-679), the kafka.authorizer.logger audit log, KIP-877 metrics.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import uuid

import prometheus_client
import pytest
import trio

from authz.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation as Op,
    AclPermissionType as Perm,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType as RT,
)
from authz.audit import AUDIT_LOGGER_NAME, TRACE
from authz.authorizer import (
    Action,
    AuthorizableRequestContext,
    AuthorizationResult,
    AuthorizerNotReadyError,
    AuthorizerServerInfo,
    ConfigError,
    Endpoint,
    jvm_host_address,
)
from authz.loader import AuthorizerLoadError, load_authorizer
from authz.principal import KafkaPrincipal
from authz.standard_authorizer import StandardAuthorizer

ALLOWED = AuthorizationResult.ALLOWED
DENIED = AuthorizationResult.DENIED
ALLOW, DENY = Perm.ALLOW, Perm.DENY
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED


# -- helpers -----------------------------------------------------------------


def acl(name, principal="User:alice", op=Op.READ, perm=ALLOW, pattern=LIT, rt=RT.TOPIC, host="*"):
    return AclBinding(ResourcePattern(rt, name, pattern), AccessControlEntry(principal, host, op, perm))


def ctx(principal="User:alice", host="10.1.2.3", api_key=1, listener="PLAIN", client_id="c1", correlation_id=7):
    if isinstance(principal, str):
        t, _, n = principal.partition(":")
        principal = KafkaPrincipal(t, n)
    return AuthorizableRequestContext(
        listener, "PLAINTEXT", principal, ipaddress.ip_address(host), api_key, 12, client_id, correlation_id
    )


def action(name, op=Op.READ, rt=RT.TOPIC, **kw):
    return Action(ResourcePattern(rt, name, LIT), op, **kw)


def make(*bindings, configs=None, loaded=True):
    authorizer = StandardAuthorizer()
    authorizer.configure(configs or {})
    authorizer.load_snapshot({uuid.uuid4(): b for b in bindings})
    if loaded:
        authorizer.complete_initial_load()
    return authorizer


def check(authorizer, name, op=Op.READ, rt=RT.TOPIC, **ctx_kw):
    return authorizer.authorize(ctx(**ctx_kw), [action(name, op, rt)])[0]


# -- basic rules (StandardAuthorizerData) ---------------------------------------------------------


def test_literal_allow_matches_exact_name_only():
    a = make(acl("orders"))
    assert check(a, "orders") is ALLOWED
    assert check(a, "orders2") is DENIED
    assert check(a, "order") is DENIED


def test_no_matching_acl_is_default_deny():
    a = make(acl("orders", principal="User:bob"))
    assert check(a, "orders") is DENIED


def test_results_in_same_order_as_actions():
    a = make(acl("b"), acl("d"))
    results = a.authorize(ctx(), [action(n) for n in "abcde"])
    assert results == [DENIED, ALLOWED, DENIED, ALLOWED, DENIED]


def test_prefixed_acl_matches_names_it_starts():
    a = make(acl("fin-", pattern=PRE))
    assert check(a, "fin-ledger") is ALLOWED
    assert check(a, "fin-") is ALLOWED
    assert check(a, "fin") is DENIED
    assert check(a, "xfin-ledger") is DENIED


def test_several_prefix_lengths_all_considered():
    a = make(acl("f", pattern=PRE, op=Op.WRITE), acl("fin-led", pattern=PRE, perm=DENY), acl("fin", pattern=PRE))
    assert check(a, "fin-ledger") is DENIED  # the longer DENY prefix
    assert check(a, "fin-other") is ALLOWED
    assert check(a, "fx", op=Op.WRITE) is ALLOWED


def test_wildcard_resource_matches_every_name_of_its_type():
    a = make(acl("*"))
    assert check(a, "anything") is ALLOWED
    assert check(a, "anything", rt=RT.GROUP) is DENIED


def test_prefixed_star_is_not_a_wildcard():
    a = make(acl("*", pattern=PRE))
    assert check(a, "orders") is DENIED
    assert check(a, "*orders") is ALLOWED


def test_user_wildcard_principal_matches_everyone():
    a = make(acl("orders", principal="User:*"))
    assert check(a, "orders", principal="User:bob") is ALLOWED
    assert check(a, "orders", principal="Group:ops") is ALLOWED


def test_only_user_star_is_a_wildcard_principal():
    a = make(acl("orders", principal="Group:*"))
    assert check(a, "orders", principal="Group:ops") is DENIED
    assert check(a, "orders", principal="Group:*") is ALLOWED


def test_host_must_be_star_or_exact_client_ip():
    a = make(acl("orders", host="10.1.2.3"))
    assert check(a, "orders", host="10.1.2.3") is ALLOWED
    assert check(a, "orders", host="10.1.2.4") is DENIED


def test_ipv6_host_uses_jvm_text_form():
    a = make(acl("orders", host="0:0:0:0:0:0:0:1"), acl("other", host="::1"))
    assert check(a, "orders", host="::1") is ALLOWED
    assert check(a, "other", host="::1") is DENIED  # a broker never prints "::1"


def test_jvm_host_address_formats():
    assert jvm_host_address(ipaddress.ip_address("10.0.0.1")) == "10.0.0.1"
    assert jvm_host_address(ipaddress.ip_address("2001:db8::ff")) == "2001:db8:0:0:0:0:0:ff"
    assert jvm_host_address(ipaddress.ip_address("::ffff:10.0.0.1")) == "10.0.0.1"
    assert jvm_host_address(ipaddress.ip_address("fe80::1%eth0")) == "fe80:0:0:0:0:0:0:1%eth0"


def test_a_context_copied_for_another_request_has_every_field_of_one_built_for_it():
    """``for_request`` sets the slots one by one: a field added to the context and not copied
    would be missing (or stale) in every authorized request's context."""
    principal = KafkaPrincipal("User", "copy")
    base = AuthorizableRequestContext("L", "SASL_SSL", principal, ipaddress.ip_address("2001:db8::7"), 3, 12,
                                      "first", 1)
    copy = base.for_request(0, 9, "second", 2)
    built = AuthorizableRequestContext("L", "SASL_SSL", principal, ipaddress.ip_address("2001:db8::7"), 0, 9,
                                       "second", 2)
    names = [f.name for f in dataclasses.fields(AuthorizableRequestContext)]
    assert [getattr(copy, n) for n in names] == [getattr(built, n) for n in names]
    assert copy.host_address == "2001:db8:0:0:0:0:0:7"
    with pytest.raises(dataclasses.FrozenInstanceError):
        copy.correlation_id = 3


def test_resource_type_must_match():
    a = make(acl("orders", rt=RT.GROUP))
    assert check(a, "orders", rt=RT.TOPIC) is DENIED
    assert check(a, "orders", rt=RT.GROUP) is ALLOWED


def test_non_literal_action_is_rejected():
    a = make()
    with pytest.raises(ValueError):
        a.authorize(ctx(), [Action(ResourcePattern(RT.TOPIC, "x", PRE), Op.READ)])


# -- DENY precedence ----------------------------------------------------------


def test_deny_beats_allow_on_same_resource():
    a = make(acl("orders"), acl("orders", perm=DENY))
    assert check(a, "orders") is DENIED


def test_deny_beats_allow_across_pattern_types():
    a = make(acl("sec", principal="User:*", op=Op.ALL, perm=DENY, pattern=PRE), acl("secret"))
    assert check(a, "secret") is DENIED


def test_wildcard_deny_beats_literal_allow():
    a = make(acl("*", perm=DENY), acl("orders"))
    assert check(a, "orders") is DENIED


def test_deny_of_other_operation_does_not_deny_implied_describe():
    # DENY alice READ + ALLOW alice ALL; DESCRIBE is allowed.
    a = make(acl("orders", perm=DENY), acl("orders", op=Op.ALL))
    assert check(a, "orders", op=Op.DESCRIBE) is ALLOWED
    assert check(a, "orders", op=Op.READ) is DENIED


def test_deny_all_denies_every_operation():
    a = make(acl("orders", op=Op.ALL, perm=DENY), acl("orders", op=Op.ALL))
    for op in (Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS):
        assert check(a, "orders", op=op) is DENIED


def test_deny_for_other_host_does_not_apply():
    a = make(acl("orders"), acl("orders", perm=DENY, host="10.9.9.9"))
    assert check(a, "orders") is ALLOWED


# -- implied operations ---------------------------------------------------------


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE, Op.ALL])
def test_allow_implies_describe(granted):
    a = make(acl("orders", op=granted))
    assert check(a, "orders", op=Op.DESCRIBE) is ALLOWED


@pytest.mark.parametrize("granted", [Op.CREATE, Op.CLUSTER_ACTION, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS])
def test_other_operations_do_not_imply_describe(granted):
    a = make(acl("orders", op=granted))
    assert check(a, "orders", op=Op.DESCRIBE) is DENIED


def test_alter_configs_implies_describe_configs():
    a = make(acl("orders", op=Op.ALTER_CONFIGS))
    assert check(a, "orders", op=Op.DESCRIBE_CONFIGS) is ALLOWED
    assert check(a, "orders", op=Op.ALTER_CONFIGS) is ALLOWED
    assert check(a, "orders", op=Op.DESCRIBE) is DENIED


def test_implication_never_widens_a_deny():
    # DENY READ does not deny DESCRIBE; DENY ALTER_CONFIGS does not deny DESCRIBE_CONFIGS.
    a = make(
        acl("orders", op=Op.DESCRIBE),
        acl("orders", op=Op.READ, perm=DENY),
        acl("orders", op=Op.DESCRIBE_CONFIGS),
        acl("orders", op=Op.ALTER_CONFIGS, perm=DENY),
    )
    assert check(a, "orders", op=Op.DESCRIBE) is ALLOWED
    assert check(a, "orders", op=Op.DESCRIBE_CONFIGS) is ALLOWED


def test_allow_all_allows_everything():
    a = make(acl("orders", op=Op.ALL))
    for op in (Op.READ, Op.WRITE, Op.CREATE, Op.DESCRIBE, Op.TWO_PHASE_COMMIT):
        assert check(a, "orders", op=op) is ALLOWED


# -- super users ------------------------------------------------------------------


def test_super_user_is_allowed_despite_deny():
    a = make(acl("orders", principal="User:admin", op=Op.ALL, perm=DENY), configs={"super.users": "User:admin"})
    assert check(a, "orders", principal="User:admin") is ALLOWED


def test_super_users_list_is_semicolon_separated_trimmed_and_case_sensitive():
    a = make(configs={"super.users": " User:admin ; User:ops;;"})
    assert check(a, "x", principal="User:admin") is ALLOWED
    assert check(a, "x", principal="User:ops") is ALLOWED
    assert check(a, "x", principal="User:Admin") is DENIED


def test_super_user_checked_before_readiness():
    a = make(configs={"super.users": "User:admin"}, loaded=False)
    assert check(a, "x", principal="User:admin") is ALLOWED
    with pytest.raises(AuthorizerNotReadyError):
        check(a, "x")


def test_malformed_super_users_is_a_config_error():
    with pytest.raises(ConfigError, match="admin"):
        StandardAuthorizer().configure({"super.users": "admin"})


# -- allow.everyone.if.no.acl.found (KAFKA-14435) -------------------------------------


def test_allow_everyone_when_no_acl_covers_resource():
    a = make(acl("other"), configs={"allow.everyone.if.no.acl.found": "true"})
    assert check(a, "logs") is ALLOWED


def test_allow_everyone_does_not_apply_when_other_principals_have_acls():
    a = make(acl("orders", principal="User:bob"), configs={"allow.everyone.if.no.acl.found": "true"})
    assert check(a, "orders") is DENIED


def test_allow_everyone_blocked_by_prefix_or_wildcard_acl_of_anyone():
    a = make(acl("lo", principal="User:bob", pattern=PRE), configs={"allow.everyone.if.no.acl.found": " TRUE "})
    assert check(a, "logs") is DENIED
    b = make(acl("*", principal="User:bob", op=Op.WRITE), configs={"allow.everyone.if.no.acl.found": "true"})
    assert check(b, "anything") is DENIED
    assert check(b, "anything", rt=RT.GROUP) is ALLOWED


def test_allow_everyone_defaults_to_false():
    a = make(acl("other"))
    assert check(a, "logs") is DENIED


def test_allow_everyone_must_say_true_or_false():
    """Java's parseBoolean reads "yes" as false; kgw refuses it rather than guess (the YAML
    author meant something), naming the key.  Any case and surrounding blanks are fine."""
    with pytest.raises(ConfigError, match=r"allow.everyone.if.no.acl.found: 'yes' is not true or false"):
        make(acl("other"), configs={"allow.everyone.if.no.acl.found": "yes"})
    assert check(make(acl("other"), configs={"allow.everyone.if.no.acl.found": " TRUE "}), "logs") is ALLOWED


def test_allow_everyone_still_respects_deny():
    a = make(acl("logs", perm=DENY), configs={"allow.everyone.if.no.acl.found": "true"})
    assert check(a, "logs") is DENIED


# -- readiness and lifecycle ----------------------------------------------------------


def test_not_ready_before_initial_load():
    a = make(acl("orders"), loaded=False)
    with pytest.raises(AuthorizerNotReadyError):
        check(a, "orders")
    a.complete_initial_load()
    assert check(a, "orders") is ALLOWED


async def test_start_returns_one_readiness_per_endpoint_and_early_listeners_are_ready():
    a = StandardAuthorizer()
    a.configure({})
    ctrl = Endpoint("CONTROLLER", "PLAINTEXT", "localhost", 9093)
    plain = Endpoint("PLAIN", "PLAINTEXT", "localhost", 9092)
    ready = a.start(AuthorizerServerInfo("c1", 1, (ctrl, plain), plain, frozenset({"CONTROLLER"})))
    assert set(ready) == {ctrl, plain}
    assert ready[ctrl].is_set() and not ready[plain].is_set()
    a.load_snapshot({})
    assert not ready[plain].is_set()
    a.complete_initial_load()
    with trio.fail_after(1):
        await ready[plain].wait()


def test_loader_resolves_both_spellings_and_names_the_path_on_error():
    assert load_authorizer("authz.standard_authorizer:StandardAuthorizer") is StandardAuthorizer
    assert load_authorizer("authz.standard_authorizer.StandardAuthorizer") is StandardAuthorizer
    with pytest.raises(AuthorizerLoadError, match="no.such.module:X"):
        load_authorizer("no.such.module:X")
    with pytest.raises(AuthorizerLoadError, match="authz.acl:AclBinding"):
        load_authorizer("authz.acl:AclBinding")
    with pytest.raises(AuthorizerLoadError, match="authz.acl:Nope"):
        load_authorizer("authz.acl:Nope")


def test_reconfigure_swaps_super_users_and_allow_everyone():
    a = make(acl("other"))
    assert check(a, "logs") is DENIED
    assert set(a.reconfigurable_configs()) == {"super.users", "allow.everyone.if.no.acl.found"}
    with pytest.raises(ConfigError):
        a.validate_reconfiguration({"super.users": "nocolon"})
    a.reconfigure({"allow.everyone.if.no.acl.found": "true", "super.users": "User:root"})
    assert check(a, "logs") is ALLOWED
    assert check(a, "other", principal="User:root") is ALLOWED


# -- KIP-111 ------------------------------------------------------------------------


class TenantPrincipal(KafkaPrincipal):
    def __init__(self, name, tenant):
        super().__init__("User", name)
        self.tenant = tenant


def test_custom_principal_reaches_authorize_unchanged_and_matches_by_type_and_name():
    seen = []

    class Recording(StandardAuthorizer):
        def authorize(self, context, actions):
            seen.append(context.principal)
            return super().authorize(context, actions)

    a = Recording()
    a.configure({})
    a.load_snapshot({uuid.uuid4(): acl("orders")})
    a.complete_initial_load()
    p = TenantPrincipal("alice", tenant="t1")
    assert a.authorize(ctx(principal=p), [action("orders")]) == [ALLOWED]
    assert seen[0] is p and seen[0].tenant == "t1"
    assert p == KafkaPrincipal("User", "alice") and hash(p) == hash(KafkaPrincipal("User", "alice"))


# -- ACL changes and snapshots ---------------------------------------------------------


def test_apply_changes_adds_and_removes_in_order():
    a = make()
    allow_id, deny_id = uuid.uuid4(), uuid.uuid4()
    a.apply_changes({allow_id: acl("orders")}, [])
    assert check(a, "orders") is ALLOWED
    a.apply_changes({deny_id: acl("orders", perm=DENY)}, [])
    assert check(a, "orders") is DENIED
    a.apply_changes({}, [deny_id])
    assert check(a, "orders") is ALLOWED
    a.apply_changes({}, [deny_id, uuid.uuid4()])  # idempotent: unknown ids are ignored
    a.apply_changes({allow_id: acl("orders")}, [])  # replaying an applied add is a no-op
    assert len(a.acls(AclBindingFilter.ANY)) == 1


def test_snapshot_swap_is_atomic_and_batch_sees_one_snapshot():
    old = {uuid.uuid4(): acl(f"t{i}") for i in range(50)}
    new = {uuid.uuid4(): acl(f"t{i}", perm=DENY, op=Op.ALL) for i in range(50)}
    a = make(*old.values())

    class Swapping(list):
        """Actions that swap the whole snapshot half-way through iteration."""

        def __iter__(self):
            for i, item in enumerate(list.__iter__(self)):
                if i == 25:
                    a.load_snapshot(new)
                yield item

    results = a.authorize(ctx(), Swapping(action(f"t{i}") for i in range(50)))
    assert results == [ALLOWED] * 50  # the batch kept the snapshot it started with
    assert a.authorize(ctx(), [action(f"t{i}") for i in range(50)]) == [DENIED] * 50


def test_failed_snapshot_load_keeps_old_acls():
    a = make(acl("orders"))
    bad = {uuid.uuid4(): acl("x"), uuid.uuid4(): acl("y", principal="nocolon")}
    with pytest.raises(ValueError):
        a.load_snapshot(bad)
    assert check(a, "orders") is ALLOWED
    assert len(a.acls(AclBindingFilter.ANY)) == 1


def test_decision_cache_is_invalidated_by_swap():
    a = make(acl("orders"))
    assert check(a, "orders") is ALLOWED
    assert check(a, "orders") is ALLOWED  # now cached
    a.apply_changes({uuid.uuid4(): acl("orders", perm=DENY)}, [])
    assert check(a, "orders") is DENIED


async def test_create_acls_validates_skips_duplicates_persists_then_applies():
    writes = []

    async def writer(added, removed):  # the log's owner feeds the change back, as MetadataImage does
        writes.append((dict(added), list(removed)))
        a.apply_changes(added, removed)

    a = make()
    a.acl_writer = writer
    results = await a.create_acls(
        None,
        [
            acl("orders"),
            acl("orders"),  # duplicate within the request: success, no-op
            acl("", op=Op.READ),  # empty name
            acl("bad", rt=RT.CLUSTER),
            acl("x", principal="nocolon"),
        ],
    )
    assert [r.error_code for r in results] == [0, 0, 42, 42, 42]
    assert results[2].message == "Invalid empty resource name"
    assert results[3].message == "The only valid name for the CLUSTER resource is kafka-cluster"
    assert results[4].message.startswith("Could not parse principal from `nocolon`")
    assert len(writes) == 1 and list(writes[0][0].values()) == [acl("orders")]
    assert check(a, "orders") is ALLOWED
    again = await a.create_acls(None, [acl("orders")])  # already exists
    assert again[0].ok and len(writes) == 1


async def test_create_acls_with_any_or_match_fails_whole_request():
    a = make()
    results = await a.create_acls(None, [acl("ok"), acl("x", pattern=PatternType.MATCH)])
    assert [(r.error_code, r.message) for r in results] == [(-1, None), (-1, None)]
    assert a.acls(AclBindingFilter.ANY) == []


async def test_create_acls_store_failure_creates_nothing():
    async def broken(added, removed):
        raise OSError("disk full")

    a = make()
    a.acl_writer = broken
    results = await a.create_acls(None, [acl("orders"), acl("")])
    assert results[0].error_code == -1 and "disk full" in results[0].message
    assert results[1].error_code == 42
    assert a.acls(AclBindingFilter.ANY) == []


async def test_delete_acls_per_filter_results_with_matching_bindings():
    removed_ids = []

    async def writer(added, removed):
        removed_ids.extend(removed)
        a.apply_changes(added, removed)

    a = make(acl("orders"), acl("orders", op=Op.WRITE), acl("logs"), acl("fin-", pattern=PRE))
    a.acl_writer = writer
    f_orders = AclBindingFilter(ResourcePatternFilter(RT.TOPIC, "orders", LIT), AccessControlEntryFilter.ANY)
    f_read = AclBindingFilter(ResourcePatternFilter.ANY, AccessControlEntryFilter(None, None, Op.READ, Perm.ANY))
    f_unknown = AclBindingFilter(ResourcePatternFilter(RT.UNKNOWN, None, LIT), AccessControlEntryFilter.ANY)
    results = await a.delete_acls(None, [f_orders, f_read, f_unknown])
    assert {d.binding for d in results[0].deleted} == {acl("orders"), acl("orders", op=Op.WRITE)}
    assert {d.binding for d in results[1].deleted} == {acl("orders"), acl("logs"), acl("fin-", pattern=PRE)}
    assert (results[2].error_code, results[2].message) == (42, "Unknown patternFilter.")
    assert len(removed_ids) == 4
    assert a.acls(AclBindingFilter.ANY) == []


def test_acls_listing_uses_filter_semantics():
    a = make(acl("orders"), acl("*"), acl("ord", pattern=PRE), acl("other"), acl("orders", rt=RT.GROUP))
    match = AclBindingFilter(ResourcePatternFilter(RT.TOPIC, "orders", PatternType.MATCH), AccessControlEntryFilter.ANY)
    assert set(a.acls(match)) == {acl("orders"), acl("*"), acl("ord", pattern=PRE)}
    any_pt = AclBindingFilter(ResourcePatternFilter(RT.ANY, "orders", PatternType.ANY), AccessControlEntryFilter.ANY)
    assert set(a.acls(any_pt)) == {acl("orders"), acl("orders", rt=RT.GROUP)}
    assert len(a.acls(AclBindingFilter.ANY)) == 5


# -- authorize_by_resource_type (KIP-679) -------------------------------------------------


def by_type(a, op=Op.WRITE, rt=RT.TOPIC, **kw):
    return a.authorize_by_resource_type(ctx(**kw), op, rt)


def test_by_type_rejects_any_and_unknown():
    a = make()
    for op, rt in [(Op.ANY, RT.TOPIC), (Op.UNKNOWN, RT.TOPIC), (Op.READ, RT.ANY), (Op.READ, RT.UNKNOWN)]:
        with pytest.raises(ValueError):
            a.authorize_by_resource_type(ctx(), op, rt)


def test_by_type_no_acls_denied():
    assert by_type(make()) is DENIED


def test_by_type_literal_allow():
    assert by_type(make(acl("t1", op=Op.WRITE))) is ALLOWED


def test_by_type_super_user_allowed_despite_wildcard_deny():
    a = make(acl("*", principal="User:*", op=Op.ALL, perm=DENY), configs={"super.users": "User:alice"})
    assert by_type(a) is ALLOWED


def test_by_type_allow_everyone_when_hardcode_uncovered():
    assert by_type(make(acl("t", principal="User:bob"), configs={"allow.everyone.if.no.acl.found": "true"})) is ALLOWED


def test_by_type_wildcard_deny_wins():
    assert by_type(make(acl("t1", op=Op.WRITE), acl("*", op=Op.WRITE, perm=DENY))) is DENIED


def test_by_type_wildcard_allow():
    assert by_type(make(acl("*", op=Op.WRITE), acl("t1", op=Op.WRITE, perm=DENY))) is ALLOWED


def test_by_type_literal_deny_cancels_same_literal_allow():
    assert by_type(make(acl("t1", op=Op.WRITE), acl("t1", op=Op.WRITE, perm=DENY))) is DENIED


def test_by_type_deny_prefix_cancels_literal_and_shorter_prefix_is_dominant():
    a = make(acl("fin-ledger", op=Op.WRITE), acl("fin-a", op=Op.WRITE, pattern=PRE), acl("fin", op=Op.WRITE, perm=DENY, pattern=PRE))
    assert by_type(a) is DENIED
    b = make(acl("fin", op=Op.WRITE, pattern=PRE), acl("fin-a", op=Op.WRITE, perm=DENY, pattern=PRE))
    assert by_type(b) is ALLOWED  # a longer DENY prefix does not cancel a shorter ALLOW prefix


def test_by_type_literal_deny_does_not_cancel_prefix_allow():
    assert by_type(make(acl("fin", op=Op.WRITE, pattern=PRE), acl("fin", op=Op.WRITE, perm=DENY))) is ALLOWED


def test_by_type_has_no_implied_operations():
    assert by_type(make(acl("t1", op=Op.WRITE)), op=Op.DESCRIBE) is DENIED
    assert by_type(make(acl("t1", op=Op.ALL)), op=Op.DESCRIBE) is ALLOWED


def test_by_type_other_principal_host_or_type_ignored():
    assert by_type(make(acl("t1", op=Op.WRITE, principal="User:bob"))) is DENIED
    assert by_type(make(acl("t1", op=Op.WRITE, host="10.9.9.9"))) is DENIED
    assert by_type(make(acl("t1", op=Op.WRITE, rt=RT.GROUP))) is DENIED
    assert by_type(make(acl("t1", op=Op.WRITE, principal="User:*", host="10.1.2.3"))) is ALLOWED


def test_by_type_deny_from_wildcard_principal_cancels_callers_allow():
    a = make(acl("t1", op=Op.WRITE), acl("t", op=Op.WRITE, perm=DENY, principal="User:*", pattern=PRE))
    assert by_type(a) is DENIED


def test_by_type_probe_allowed_through_implied_operation_on_wildcard():
    # The 'hardcode' probe uses normal authorize semantics, so ALLOW READ on
    # LITERAL * allows DESCRIBE through the probe although step 2 has no implication.
    assert by_type(make(acl("*", op=Op.READ)), op=Op.DESCRIBE) is ALLOWED


def test_by_type_probe_is_audited_with_hardcode_resource(caplog):
    caplog.set_level(TRACE, logger=AUDIT_LOGGER_NAME)
    by_type(make(acl("t", principal="User:bob")), op=Op.WRITE)
    assert "on resource = Topic:LITERAL:hardcode" in caplog.text
    assert "resourceRefCount = 0" in caplog.text
    assert [r.levelno for r in caplog.records if r.name == AUDIT_LOGGER_NAME] == [TRACE]  # D=false


def test_by_type_answer_changes_after_acl_change():
    a = make()
    assert by_type(a) is DENIED
    a.apply_changes({uuid.uuid4(): acl("t1", op=Op.WRITE)}, [])
    assert by_type(a) is ALLOWED


# -- audit (Kafka's ``kafka.authorizer.logger``) ----------------------------------------------------------------------------


def audit_records(caplog):
    return [r for r in caplog.records if r.name == AUDIT_LOGGER_NAME]


def test_denied_logged_at_info_with_kafka_layout(caplog):
    caplog.set_level(logging.DEBUG, logger=AUDIT_LOGGER_NAME)
    a = make(acl("other"))
    a.authorize(ctx(), [action("orders", resource_reference_count=3)])
    (record,) = audit_records(caplog)
    assert record.levelno == logging.INFO
    assert record.getMessage() == (
        "Principal = User:alice is Denied operation = READ from host = 10.1.2.3 on resource = "
        "Topic:LITERAL:orders for request = Fetch with resourceRefCount = 3 based on rule DefaultDeny "
        "(clientId = c1, correlationId = 7)"
    )


def test_allowed_logged_at_debug_naming_the_matching_acl(caplog):
    caplog.set_level(logging.DEBUG, logger=AUDIT_LOGGER_NAME)
    a = make(acl("orders"))
    a.authorize(ctx(api_key=22), [action("orders")])
    (record,) = audit_records(caplog)
    assert record.levelno == logging.DEBUG
    msg = record.getMessage()
    assert "is Allowed operation = READ" in msg and "for request = InitProducerId" in msg
    assert msg.endswith(
        "based on rule MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=orders, patternType=LITERAL, "
        "principal=User:alice, host=*, operation=READ, permissionType=ALLOW)) (clientId = c1, correlationId = 7)"
    )


def test_log_flags_off_go_to_trace(caplog):
    caplog.set_level(logging.DEBUG, logger=AUDIT_LOGGER_NAME)
    a = make(acl("orders"))
    a.authorize(ctx(), [action("orders", log_if_allowed=False), action("x", log_if_denied=False)])
    assert audit_records(caplog) == []
    caplog.set_level(TRACE, logger=AUDIT_LOGGER_NAME)
    a.authorize(ctx(), [action("orders", log_if_allowed=False), action("x", log_if_denied=False)])
    assert [r.levelno for r in audit_records(caplog)] == [TRACE, TRACE]


def test_super_user_and_default_allow_rules_are_named(caplog):
    caplog.set_level(logging.DEBUG, logger=AUDIT_LOGGER_NAME)
    a = make(configs={"super.users": "User:admin", "allow.everyone.if.no.acl.found": "true"})
    a.authorize(ctx(principal="User:admin"), [action("x")])
    a.authorize(ctx(), [action("x")])
    texts = [r.getMessage() for r in audit_records(caplog)]
    assert "based on rule SuperUser" in texts[0] and "based on rule DefaultAllow" in texts[1]


def test_audit_principal_is_normalised_type_and_name(caplog):
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER_NAME)
    a = make()
    a.authorize(ctx(principal=TenantPrincipal("alice", "t1")), [action("x")])
    assert audit_records(caplog)[0].getMessage().startswith("Principal = User:alice is Denied")


def test_only_denials_at_default_info_level(caplog):
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER_NAME)
    a = make(acl("orders"))
    a.authorize(ctx(), [action("orders"), action("x")])
    assert [r.levelno for r in audit_records(caplog)] == [logging.INFO]


def test_sinks_get_allowed_decisions_whatever_the_log_level(caplog):
    """An audit sink (the audit topic publisher) gets every audited decision, allowed ones too,
    while the log at its default INFO level shows only the denial; an action whose allowed
    decision is not to be logged reaches neither."""
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER_NAME)
    a = make(acl("orders"))
    published = []
    a.add_audit_sink(published.append)
    a.authorize(ctx(), [action("orders"), action("orders", log_if_allowed=False), action("x")])
    assert [(f["kgw_allowed"], f["kgw_resource"]) for f in published] == [
        (True, "Topic:LITERAL:orders"), (False, "Topic:LITERAL:x")]
    assert [r.levelno for r in audit_records(caplog)] == [logging.INFO]
    published.clear()
    a.authorize(ctx(), [action("orders")])  # an allowed call alone
    assert [f["kgw_allowed"] for f in published] == [True]


# -- metrics (KIP-877) -----------------------------------------------------------------------------


def test_metrics_count_per_action_per_listener_and_acl_total():
    registry = prometheus_client.CollectorRegistry()
    a = make(acl("orders"), acl("logs"))
    a.monitor(registry)
    a.authorize(ctx(listener="PLAIN"), [action("orders"), action("x"), action("logs")])
    a.authorize(ctx(listener="SSL"), [action("x")])
    a.authorize_by_resource_type(ctx(listener="SSL"), Op.READ, RT.TOPIC)  # probe counts too

    def value(name, **labels):
        return registry.get_sample_value(name, labels or None)

    kafka = {"class": "StandardAuthorizer", "config": "authorizer.class.name", "role": "broker"}
    assert value("kafka_server_plugins_acls_total_count", **kafka) == 2
    assert value("kgw_authorizer_authorization_requests_total", listener="PLAIN") == 3
    assert value("kgw_authorizer_authorization_allowed_total", listener="PLAIN") == 2
    assert value("kgw_authorizer_authorization_denied_total", listener="PLAIN") == 1
    assert value("kgw_authorizer_authorization_requests_total", listener="SSL") == 2
    assert value("kgw_authorizer_authorization_denied_total", listener="SSL") == 2
    # Kafka's windowed rates: 5 actions (2 allowed, 3 denied) within the first 30 s window,
    # divided by at least one window (30 s): per minute, twice the counts
    assert value("kafka_server_plugins_authorization_request_rate_per_minute", **kafka) == pytest.approx(10, rel=0.1)
    assert value("kafka_server_plugins_authorization_allowed_rate_per_minute", **kafka) == pytest.approx(4, rel=0.1)
    assert value("kafka_server_plugins_authorization_denied_rate_per_minute", **kafka) == pytest.approx(6, rel=0.1)
    a.apply_changes({uuid.uuid4(): acl("more")}, [])
    assert value("kafka_server_plugins_acls_total_count", **kafka) == 3


def test_metrics_count_the_topics_a_client_was_refused():
    """kgw_authorizer_denied_by_topic_total: a TOPIC action denied with log_if_denied (a request
    refused, a named topic hidden) counts for its topic; allowed actions, KIP-430 probes and
    silent filtering (log_if_denied off) and denials of other resource types do not."""
    registry = prometheus_client.CollectorRegistry()
    a = make(acl("orders"))
    a.monitor(registry)
    a.authorize(ctx(listener="PLAIN"), [action("orders"), action("payroll"), action("payroll"),
                                        action("hidden", log_if_denied=False),
                                        action("payroll", rt=RT.GROUP)])
    a.authorize(ctx(listener="SSL"), [action("payroll", Op.WRITE)])
    a.authorize_by_resource_type(ctx(listener="SSL"), Op.WRITE, RT.TOPIC)  # a denied probe

    def value(**labels):
        return registry.get_sample_value("kgw_authorizer_denied_by_topic_total", labels)

    assert value(listener="PLAIN", topic="payroll") == 2
    assert value(listener="SSL", topic="payroll") == 1
    assert value(listener="PLAIN", topic="orders") is None
    assert value(listener="PLAIN", topic="hidden") is None
    assert value(listener="SSL", topic="*") is None
    assert value(listener="SSL", topic="hardcode") is None


def test_one_request_denied_on_many_resources_writes_a_bounded_audit(caplog):
    """200k denied topics in one request must not write 200k lines (hostile-client finding 7):
    the first MAX_AUDITED_ACTIONS_PER_CALL are logged one by one, the rest counted in one line."""
    from authz.audit import AUDIT_LOGGER_NAME
    from authz.standard_authorizer import MAX_AUDITED_ACTIONS_PER_CALL

    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER_NAME)
    a = make()
    n = MAX_AUDITED_ACTIONS_PER_CALL + 5000
    actions = [action(f"t{i}", Op.DESCRIBE, log_if_denied=True) for i in range(n)]
    results = a.authorize(ctx(), actions)
    assert len(results) == n and all(r.name == "DENIED" for r in results)  # every action still decided
    lines = [r.getMessage() for r in caplog.records if r.name == AUDIT_LOGGER_NAME]
    assert len(lines) == MAX_AUDITED_ACTIONS_PER_CALL + 1
    assert "Denied operation = DESCRIBE" in lines[-1] and "on 5000 more Topic resources" in lines[-1]


async def test_create_acls_refuses_names_a_metadata_record_cannot_hold():
    """A 40,000-character resource name used to fail in the log write (UNKNOWN_SERVER_ERROR,
    logged as an error); it is an invalid request, named as such, and nothing is stored."""
    a = make()
    long_name = "t" * 40_000
    results = await a.create_acls(None, [acl(long_name), acl("fine")])
    assert results[0].error_code == 42 and "resource name is 40000 UTF-8 bytes" in results[0].message
    assert results[1].error_code == 0


def test_the_implication_table_is_data_stated_once_and_immutable():
    """Kafka's implications (READ, WRITE, DELETE, ALTER imply DESCRIBE; ALTER_CONFIGS implies
    DESCRIBE_CONFIGS) live in authz.acl_rules, whole on import, and cannot be patched."""
    import subprocess
    import sys

    from authz.acl_rules import ALLOW_OPS_FOR, DENY_OPS_FOR, IMPLIED_BY

    op = Op
    assert dict(IMPLIED_BY) == {op.DESCRIBE: {op.READ, op.WRITE, op.DELETE, op.ALTER},
                                op.DESCRIBE_CONFIGS: {op.ALTER_CONFIGS}}
    assert ALLOW_OPS_FOR[op.DESCRIBE] == {op.DESCRIBE, op.ALL, op.READ, op.WRITE, op.DELETE, op.ALTER}
    assert ALLOW_OPS_FOR[op.CREATE] == {op.CREATE, op.ALL}
    assert all(DENY_OPS_FOR[o] == {o, op.ALL} for o in op)
    for table in (IMPLIED_BY, ALLOW_OPS_FOR, DENY_OPS_FOR):
        with pytest.raises(TypeError):
            table[op.DESCRIBE] = frozenset()  # type: ignore[index]
    # the rules alone, without the authorizer module ever imported, already imply
    code = ("import sys; from authz.acl_rules import ALLOW_OPS_FOR as A; from authz.acl import AclOperation as O; "
            "assert 'authz.standard_authorizer' not in sys.modules; assert O.ALTER_CONFIGS in A[O.DESCRIBE_CONFIGS]")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


# -- Group principals (an OAUTHBEARER token's groups claim) ---------------------------------------


def _member(*groups: str) -> KafkaPrincipal:
    p = KafkaPrincipal("User", "carol")
    p.group_keys = tuple(f"Group:{g}" for g in groups)
    return p


def test_group_principals_match_beside_the_user_and_a_group_deny_wins():
    a = make(acl("pay-", principal="Group:payments", pattern=PRE),
             acl("pay-ledger", principal="Group:contractors", perm=DENY),
             acl("pay-ledger", principal="User:carol"))
    assert check(a, "pay-orders", principal=_member("payments")) is ALLOWED  # by the group
    assert check(a, "pay-orders", principal=_member()) is DENIED  # not a member: no ALLOW applies
    assert check(a, "pay-ledger", principal=_member()) is ALLOWED  # the user's own ALLOW
    assert check(a, "pay-ledger", principal=_member("payments", "contractors")) is DENIED  # DENY on a group wins
    assert check(a, "pay-orders", principal="User:payments") is DENIED  # a user named like a group is not it
    # the decision cache keeps members and non-members apart
    assert check(a, "pay-orders", principal=_member("payments")) is ALLOWED
    assert check(a, "pay-orders", principal=_member()) is DENIED


def test_a_group_may_be_a_super_user():
    a = make(configs={"super.users": "Group:platform"})
    assert check(a, "anything", principal=_member("platform")) is ALLOWED
    assert check(a, "anything", principal=_member("payments")) is DENIED
