"""The decision rules of the StandardAuthorizer, all in one place (Kafka's
``StandardAuthorizerData``): super users, then DENY before ALLOW over the matching ACLs
(the principal's own, then ``User:*``; literal, prefixed and wildcard resources; the
implied operations), then ``allow.everyone.if.no.acl.found``.  Each decision carries the
rule that made it, named in the audit line.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from authz.acl import WILDCARD_HOST, WILDCARD_RESOURCE, AclOperation, PatternType, ResourceType
from authz.acl_index import AclIndex
from authz.standard_acl import StandardAcl
from authz.authorizer import Action, AuthorizationResult, AuthorizerNotReadyError
from authz.principal import WILDCARD_PRINCIPAL_KEY

__all__ = ["ALLOW_OPS_FOR", "DENY_OPS_FOR", "IMPLIED_BY", "AuthorizerData", "MatchingRule", "decide"]

_LITERAL = PatternType.LITERAL
_DENIED = AuthorizationResult.DENIED
_ALLOWED = AuthorizationResult.ALLOWED


class AuthorizerData:
    """Immutable (but for its derived-value caches); replaced, never changed."""

    __slots__ = (
        "index", "super_users", "allow_everyone", "loaded", "no_acl_rule", "cache_size", "decisions", "by_type"
    )

    def __init__(
        self, index: AclIndex, super_users: frozenset[str], allow_everyone: bool, loaded: bool, cache_size: int
    ) -> None:
        self.index = index
        self.super_users = super_users
        self.allow_everyone = allow_everyone
        self.loaded = loaded
        self.no_acl_rule = DefaultAllowRule if allow_everyone else DefaultDenyRule
        self.cache_size = cache_size
        # Derived-value caches; None when caching is off.  Keyed by
        # (principal, host, op, resource type, name) / (principal, host, op, type).
        self.decisions: dict[tuple[str, str, AclOperation, ResourceType, str, tuple[str, ...]], MatchingRule] | None = (
            {} if cache_size > 0 else None)
        self.by_type: dict[tuple[str, str, AclOperation, ResourceType], AuthorizationResult] | None = (
            {} if cache_size > 0 else None)

    def copy_with(self, *, index: AclIndex | None = None, super_users: frozenset[str] | None = None,
                  allow_everyone: bool | None = None, loaded: bool | None = None) -> "AuthorizerData":
        """The same data with the named parts replaced (and empty caches)."""
        return AuthorizerData(
            self.index if index is None else index,
            self.super_users if super_users is None else super_users,
            self.allow_everyone if allow_everyone is None else allow_everyone,
            self.loaded if loaded is None else loaded,
            self.cache_size,
        )

class MatchingRule:
    __slots__ = ("result",)
    result: AuthorizationResult


class _NamedRule(MatchingRule):
    __slots__ = ("_name",)

    def __init__(self, name: str, result: AuthorizationResult) -> None:
        self._name = name
        self.result = result

    def __str__(self) -> str:
        return self._name

    __repr__ = __str__


SuperUserRule = _NamedRule("SuperUser", _ALLOWED)


DefaultAllowRule = _NamedRule("DefaultAllow", _ALLOWED)


DefaultDenyRule = _NamedRule("DefaultDeny", _DENIED)


class MatchingAclRule(MatchingRule):
    """The ACL that decided; ALLOWED or DENIED as the ACL's permission says."""

    __slots__ = ("acl",)

    def __init__(self, acl: StandardAcl) -> None:
        self.acl = acl
        self.result = _DENIED if acl.is_deny else _ALLOWED

    def __str__(self) -> str:
        return f"MatchingAcl(acl={self.acl})"

    __repr__ = __str__


def _rule_of(acl: StandardAcl) -> MatchingAclRule:
    rule = acl.matching_rule
    if rule is None:
        rule = acl.matching_rule = MatchingAclRule(acl)
    return rule  # type: ignore[return-value]


_Op = AclOperation

#: The operations an ALLOW ACL implies beyond its own (Kafka's ``AclEntry`` /
#: ``StandardAuthorizerData``): READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS
#: implies DESCRIBE_CONFIGS.  Nothing else implies anything (CREATE does not imply DESCRIBE),
#: and ALL allows every operation.
IMPLIED_BY: Mapping[AclOperation, frozenset[AclOperation]] = MappingProxyType({
    _Op.DESCRIBE: frozenset({_Op.READ, _Op.WRITE, _Op.DELETE, _Op.ALTER}),
    _Op.DESCRIBE_CONFIGS: frozenset({_Op.ALTER_CONFIGS}),
})

#: Which ACL operations an **ALLOW** ACL may carry to allow a requested operation.
ALLOW_OPS_FOR: Mapping[AclOperation, frozenset[AclOperation]] = MappingProxyType({
    op: frozenset({op, _Op.ALL, *IMPLIED_BY.get(op, ())}) for op in AclOperation
})

#: A **DENY** ACL needs the same operation or ALL: implication never widens a DENY.
DENY_OPS_FOR: Mapping[AclOperation, frozenset[AclOperation]] = MappingProxyType({
    op: frozenset({op, _Op.ALL}) for op in AclOperation
})


def decide(data: "AuthorizerData", principal_key: str, host: str, action: Action,
           groups: tuple[str, ...] = ()) -> MatchingRule:
    """Decide one action.  Steps follow Kafka's ``StandardAuthorizerData``:

    0. The resource pattern must be LITERAL (the request layer only asks
       about concrete resources).
    1. The principal is reduced to its ``Type:Name`` text (done by the caller).
    2. A super user is ALLOWED (``SuperUser``) — before the readiness check.
    3. Before the initial ACL load completes: ``AuthorizerNotReadyError``.
    4. Candidate principals: the caller and ``User:*``.  Host: the client IP
       as the JVM writes it, or an ACL host of ``*``.
    5. Candidate ACLs: same resource type; LITERAL with the exact name,
       PREFIXED whose text starts the name, LITERAL ``*``.  Any candidate,
       whatever its principal/host/operation, means "the resource has ACLs".
    6. An ACL applies if its principal and host match and its operation
       matches (``ALLOW_OPS_FOR`` / ``DENY_OPS_FOR``).
    7. The first applicable DENY decides (``MatchingAcl``); the ``*`` bucket
       is only visited when the name and prefix buckets held no DENY.
    8. Else an applicable ALLOW decides (the last one found, as Kafka reports
       it).  Else, if the resource had no ACLs at all,
       ``allow.everyone.if.no.acl.found`` picks ``DefaultAllow`` or
       ``DefaultDeny``.  Else ``DefaultDeny``.

    ``groups``: ``Group:<name>`` principals the caller also holds (an OAUTHBEARER token's
    groups claim): they are candidate principals beside the caller's own in step 4 (a DENY on
    a group beats an ALLOW on the user, as any DENY does) and may be super users.
    """
    pattern = action.resource_pattern
    if pattern.pattern_type is not _LITERAL:
        raise ValueError(f"Only literal resources are supported. Got: {pattern.pattern_type.name}")
    if principal_key in data.super_users or (groups and not data.super_users.isdisjoint(groups)):
        return SuperUserRule
    if not data.loaded:
        raise AuthorizerNotReadyError("The authorizer has not completed its initial ACL load")

    op = action.operation
    cache_key = (principal_key, host, op, pattern.resource_type, pattern.name, groups)
    cache = data.decisions
    if cache is not None:
        rule = cache.get(cache_key)
        if rule is not None:
            return rule

    section = data.index.section(pattern.resource_type)
    rule = None
    if section is not None:
        # The (principal, host) keys that may apply, looked up in each bucket.
        keys: tuple[tuple[str, str], ...]
        if principal_key == WILDCARD_PRINCIPAL_KEY:
            keys = ((principal_key, host), (principal_key, WILDCARD_HOST))
            principals: tuple[str, ...] = (principal_key,)
        else:
            keys = (
                (principal_key, host),
                (principal_key, WILDCARD_HOST),
                (WILDCARD_PRINCIPAL_KEY, host),
                (WILDCARD_PRINCIPAL_KEY, WILDCARD_HOST),
            )
            principals = (principal_key, WILDCARD_PRINCIPAL_KEY)
        if groups:
            keys = (*keys, *((g, h) for g in groups for h in (host, WILDCARD_HOST)))
            principals = (*principals, *groups)
        hosts = (host, WILDCARD_HOST)
        allow_ops = ALLOW_OPS_FOR[op]
        deny_ops = DENY_OPS_FOR[op]
        has_acls = False
        allow: StandardAcl | None = None
        buckets = list(section.buckets_for(pattern.name))
        wildcard = section.wildcard
        if wildcard is not None and pattern.name != WILDCARD_RESOURCE:
            buckets.append(wildcard)  # visited last (step 7)
        for bucket in buckets:
            has_acls = True
            if type(bucket) is StandardAcl:  # a name with one ACL (acl_index.Bucket): the same test
                acl = bucket
                if acl.principal in principals and acl.host in hosts:
                    if acl.is_deny:
                        if acl.operation in deny_ops:
                            rule = _rule_of(acl)
                            break
                    elif acl.operation in allow_ops:
                        allow = acl
                continue
            for key in keys:
                for acl in bucket.get(key, ()):
                    if acl.is_deny:
                        if acl.operation in deny_ops:
                            rule = _rule_of(acl)
                            break
                    elif acl.operation in allow_ops:
                        allow = acl
                if rule is not None:
                    break
            if rule is not None:
                break
        if rule is None:
            if allow is not None:
                rule = _rule_of(allow)
            elif not has_acls:
                rule = data.no_acl_rule
            else:
                rule = DefaultDenyRule
    else:
        rule = data.no_acl_rule

    if cache is not None:
        if len(cache) >= data.cache_size:
            cache.clear()
        cache[cache_key] = rule
    return rule
