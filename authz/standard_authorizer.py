"""StandardAuthorizer: Kafka's KIP-801 authorizer, for kgw.

Theory of operation
-------------------
This class is a thin shell (config, lifecycle, ACL writes, metrics, audit);
the decision rules are ``authz.acl_rules.decide``, with the implication table beside
them, and the ACL index is ``authz.acl_index.AclIndex``.

State.  Everything ``authorize`` reads — the immutable ``AclIndex``, the
super users, ``allow.everyone.if.no.acl.found`` and the "initial load done"
flag — lives in one immutable ``AuthorizerData`` object.  The authorizer holds one
reference to it, replaced by a single assignment whenever ACLs or configs
change; ``authorize`` reads the reference once per call, so a whole batch sees
one snapshot and never a half-applied change.  ``AuthorizerData`` also carries two
caches of *derived* values (decisions, by-type answers): they live and die
with the snapshot, so a swap invalidates them without any bookkeeping.

The ACL store is not this class's business.  Whoever owns the metadata log
feeds it:

* ``load_snapshot(acls)`` — a whole new set of ACLs, indexed off to the side
  and swapped in at once (never half-built);
* ``apply_changes(added, removed)`` — one log delta, in log order (a DENY
  followed by an ALLOW must never be seen the other way round);
* ``complete_initial_load()`` — once the first snapshot is in; sets the
  readiness event of every non-early-start listener returned by ``start``.

``create_acls`` / ``delete_acls`` validate and call the injected
``acl_writer(added, removed)``, which returns once the change is durable *and*
has been fed back through ``apply_changes`` by the log's owner - in log order
among every gateway's writes when the log is shared, so the index never holds
an ACL the log does not (``metadata.image.MetadataImage``).  Without a writer
(in-memory ACLs) they apply the change themselves.  Writes are serialised by a
``trio.Lock`` so duplicate detection sees this gateway's earlier writes.

Readiness (KIP-801): before ``complete_initial_load`` every ``authorize``
raises ``AuthorizerNotReadyError`` — except for super users, who are checked
first.
"""

from __future__ import annotations
import logging
import uuid
from typing import Any, Awaitable, Callable, Collection, Iterable, Mapping
import trio
from .acl import (
    INVALID_REQUEST,
    REQUEST_TIMED_OUT,
    MAX_ACLS_PER_REQUEST,
    POLICY_VIOLATION,
    UNKNOWN_SERVER_ERROR,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    validate_acl_binding_for_create,
)
from .acl_index import AclIndex
from .standard_acl import StandardAcl
from .audit import AuditLevels, AuditSink, api_name, audit_logger, log_decision
from .authorizer import (
    DecisionMemo,
    StoreUnavailableError,
    AclBindingDeleteResult,
    AclCreateResult,
    AclDeleteResult,
    Action,
    AuthorizableRequestContext,
    AuthorizationResult,
    Authorizer,
    AuthorizerServerInfo,
    ConfigError,
    Endpoint,
    Monitorable,
    Reconfigurable,
    ReadinessEvent,
    check_by_resource_type_args,
    HARDCODE_RESOURCE_NAME,
)
from .metrics import AuthorizerMetrics
from .principal import KafkaPrincipal, parse_principal
from authz.acl_rules import AuthorizerData, decide

_TOPIC = ResourceType.TOPIC

SUPER_USERS_CONFIG = "super.users"


ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG = "allow.everyone.if.no.acl.found"


#: ``async (added, removed) -> None``; returns once the change is durable.
AclWriter = Callable[[dict[uuid.UUID, AclBinding], list[uuid.UUID]], Awaitable[None]]








#: Default decision-cache bound: when full it is cleared (a cache, never semantics).
DEFAULT_DECISION_CACHE_SIZE = 100_000


log = logging.getLogger(__name__)


_ALLOWED = AuthorizationResult.ALLOWED
_DENIED = AuthorizationResult.DENIED


def _parse_super_users(value: Any) -> frozenset[str]:
    """``super.users``: ``;``-separated ``Type:Name`` entries, trimmed,
    compared case-sensitively with the caller's ``Type:Name``.

    Stricter than Kafka's parser where Kafka would silently accept a principal nobody can
    be: an empty type or name (``User:``, ``:admin``), a control character (a NUL inside a
    name), or a ``,``-separated list (Kafka separates with ``;``) are refused."""
    if value is None:
        return frozenset()
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [str(v) for v in value]
    else:
        items = str(value).split(";")
    users = set()
    for item in items:
        item = item.strip()
        if not item:
            continue
        try:
            principal = parse_principal(item)
        except ValueError as exc:
            raise ConfigError(f"{SUPER_USERS_CONFIG}: {exc}") from exc
        if not principal.principal_type or not principal.name:
            raise ConfigError(f"{SUPER_USERS_CONFIG}: `{item}` has an empty principal type or name")
        if any(ord(c) < 0x20 or c == "\x7f" for c in item):
            raise ConfigError(f"{SUPER_USERS_CONFIG}: `{item!r}` contains a control character")
        if "," in principal.name and ":" in principal.name.split(",", 1)[1]:
            raise ConfigError(f"{SUPER_USERS_CONFIG}: `{item}` looks like a comma-separated list; "
                              "separate super users with ';'")
        users.add(principal.key)
    return frozenset(users)


def _boolean_text(key: str, value: Any) -> Any:
    """``value`` when it is a boolean or absent; a YAML value that is neither (``nope``) is a
    mistake (Java's parseBoolean would read it as false, and allow nobody)."""
    if value is None or isinstance(value, bool) or str(value).strip().lower() in ("true", "false"):
        return value
    raise ConfigError(f"{key}: {value!r} is not true or false")


def _parse_java_boolean(value: Any) -> bool:
    """Java's ``Boolean.parseBoolean`` after trimming: only "true" (any case) is true."""
    if isinstance(value, bool):
        return value
    return value is not None and str(value).strip().lower() == "true"


#: audit lines written for one authorize call (one request); the decisions beyond it are
#: summarised in one line per (operation, resource type, outcome) with their count, so a
#: request naming 200k topics cannot write 200k lines
MAX_AUDITED_ACTIONS_PER_CALL = 100

#: allowed actions one connection's decision memo keeps at most (the names are the client's:
#: past this it is emptied and fills again)
MEMO_ACTIONS = 256


def _log_suppressed(principal_key: str, context: AuthorizableRequestContext,
                    suppressed: dict[tuple[str, str, bool], int]) -> None:
    for (operation, resource_type, was_allowed), count in suppressed.items():
        audit_logger.log(
            logging.INFO,
            "Principal = %s is %s operation = %s from host = %s on %d more %s resources for request = %s "
            "(not logged one by one: over %d audited actions in one request) (clientId = %s, correlationId = %s)",
            principal_key, "Allowed" if was_allowed else "Denied", operation, context.host_address, count,
            resource_type, api_name(context.request_type), MAX_AUDITED_ACTIONS_PER_CALL, context.client_id,
            context.correlation_id,
            extra={"kgw_principal": principal_key, "kgw_allowed": was_allowed, "kgw_operation": operation,
                   "kgw_suppressed": count, "kgw_resource_type": resource_type})


class StandardAuthorizer(Authorizer, Reconfigurable, Monitorable):
    """Kafka's StandardAuthorizer semantics over an in-memory ``AclIndex``.

    Args:
        acl_writer: the durable store's write function, which returns once the
            change is durable and fed back through ``apply_changes``; or None for
            in-memory-only ACLs (tests, demos).  May also be set later as the
            ``acl_writer`` attribute, before the first ``create_acls``.
        decision_cache_size: bound of the per-snapshot decision cache; 0
            turns caching off (every call walks the index).
    """

    def __init__(self, acl_writer: AclWriter | None = None, decision_cache_size: int = DEFAULT_DECISION_CACHE_SIZE) -> None:
        self.acl_writer = acl_writer
        self._data = AuthorizerData(AclIndex.empty(), frozenset(), False, False, decision_cache_size)
        self._initial_load = trio.Event()
        self._write_lock = trio.Lock()
        self._metrics: AuthorizerMetrics | None = None
        #: callables given every audited decision's fields, whatever the log level (the audit
        #: topic publisher); a tuple replaced on change, read without a lock from any thread
        self.audit_sinks: tuple[AuditSink, ...] = ()
        self._node_id: int | None = None

    # -- lifecycle ------------------------------------------------------------

    @staticmethod
    def config_keys() -> Collection[str]:
        """Every key :meth:`configure` reads (kgw refuses others in ``authorizer.config``)."""
        return frozenset({SUPER_USERS_CONFIG, ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG, "node.id", "broker.id"})

    def configure(self, configs: Mapping[str, Any]) -> None:
        super_users = _parse_super_users(configs.get(SUPER_USERS_CONFIG))
        allow_everyone = _parse_java_boolean(_boolean_text(ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG,
                                                           configs.get(ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG)))
        node_id = configs.get("node.id", configs.get("broker.id"))
        self._node_id = int(node_id) if node_id is not None else None
        self._data = self._data.copy_with(super_users=super_users, allow_everyone=allow_everyone)

    def start(self, server_info: AuthorizerServerInfo) -> dict[Endpoint, ReadinessEvent]:
        self._node_id = server_info.broker_id
        ready: dict[Endpoint, ReadinessEvent] = {}
        for endpoint in server_info.endpoints:
            if endpoint.listener_name in server_info.early_start_listeners:
                early = trio.Event()
                early.set()
                ready[endpoint] = early
            else:
                ready[endpoint] = self._initial_load
        return ready

    def close(self) -> None:
        pass

    # -- feeding ACLs (called by the metadata-log owner) ----------------------

    def load_snapshot(self, acls: Mapping[uuid.UUID, AclBinding]) -> None:
        """Replace all ACLs with ``acls`` at once.

        The new index is built completely before it is published, so no
        reader ever sees a partial snapshot.  :raises ValueError: (and keeps
        the old ACLs) if an ACL cannot be indexed.
        """
        index = AclIndex.from_bindings(acls)
        self._data = self._data.copy_with(index=index)
        log.info("%s loaded a snapshot of %d ACLs", self._log_prefix(), len(index))

    def apply_changes(self, added: Mapping[uuid.UUID, AclBinding], removed: Iterable[uuid.UUID]) -> None:
        """Apply one metadata-log delta (idempotent; see ``AclIndex.with_changes``)."""
        standard = {acl_id: StandardAcl.from_binding(b) for acl_id, b in added.items()}
        self._apply(standard, list(removed))

    def _apply(self, added: Mapping[uuid.UUID, StandardAcl], removed: list[uuid.UUID]) -> None:
        data = self._data
        index = data.index.with_changes(added, removed)
        if index is not data.index:
            self._data = data.copy_with(index=index)

    def complete_initial_load(self) -> None:
        """Mark the initial load done: ``authorize`` starts answering and every
        non-early-start listener's readiness event is set."""
        self._data = self._data.copy_with(loaded=True)
        self._initial_load.set()
        log.info("%s completed its initial ACL load", self._log_prefix())


    def _log_prefix(self) -> str:
        return f"[StandardAuthorizer {self._node_id if self._node_id is not None else '?'}]"

    # -- authorization ----------------------------------------------------------

    def add_audit_sink(self, sink: AuditSink) -> None:
        """Give ``sink(fields)`` every audited decision (allowed ones too), whatever the log level."""
        self.audit_sinks = (*self.audit_sinks, sink)

    def decision_memo(self, context: AuthorizableRequestContext) -> "StandardDecisionMemo | None":
        if type(self).authorize is not StandardAuthorizer.authorize:  # a subclass decides its own way
            return None
        return StandardDecisionMemo(self, context)

    def authorize(self, context: AuthorizableRequestContext, actions: Iterable[Action]) -> list[AuthorizationResult]:
        data = self._data  # one snapshot for the whole batch
        principal = context.principal
        if type(principal) is KafkaPrincipal:
            principal_key = principal.key
        else:  # a builder's own principal class
            principal_key = f"{principal.principal_type}:{principal.name}"
        groups = getattr(principal, "group_keys", ())  # a builder's own principal class may lack it
        host = context.host_address
        sinks = self.audit_sinks
        # the levels are sampled when a decision may be logged (one check when none can: the usual call)
        levels: AuditLevels | None = None
        allowed_silent = AuditLevels.allowed_silent_now(sinks)
        results: list[AuthorizationResult] = []
        allowed = 0
        logged = 0
        suppressed: dict[tuple[str, str, bool], int] | None = None
        denied_topics: list[str] | None = None
        for action in actions:
            rule = decide(data, principal_key, host, action, groups)
            result = rule.result
            results.append(result)
            if result is _ALLOWED:
                allowed += 1
                if allowed_silent:
                    continue
            if levels is None:
                levels = AuditLevels.current(sinks)
            if result is _ALLOWED:
                level = levels.level_for(True, action)
            else:
                level = levels.level_for(False, action)
                if action.log_if_denied and action.resource_pattern.resource_type is _TOPIC:
                    if denied_topics is None:
                        denied_topics = []
                    denied_topics.append(action.resource_pattern.name)
            if level:
                if logged >= MAX_AUDITED_ACTIONS_PER_CALL:
                    if suppressed is None:
                        suppressed = {}
                    key = (action.operation.name, action.resource_pattern.resource_type.pascal_name, result is _ALLOWED)
                    suppressed[key] = suppressed.get(key, 0) + 1
                    continue
                logged += 1
                log_decision(level, principal_key, result is _ALLOWED, action, context, rule, sinks)
        if suppressed:
            _log_suppressed(principal_key, context, suppressed)
        metrics = self._metrics
        if metrics is not None:
            metrics.record(context.listener_name, allowed, len(results) - allowed, principal_key, denied_topics)
        return results

    def authorize_by_resource_type(
        self, context: AuthorizableRequestContext, op: AclOperation, resource_type: ResourceType
    ) -> AuthorizationResult:
        """KIP-679 with the interface default's exact semantics (Kafka's
        ``Authorizer.authorizeByResourceType``), answered from the index instead of listing every ACL."""
        check_by_resource_type_args(op, resource_type)
        probe = Action(
            _hardcode_pattern(resource_type), op, resource_reference_count=0, log_if_allowed=True, log_if_denied=False
        )
        if self.authorize(context, [probe])[0] is _ALLOWED:
            return _ALLOWED
        data = self._data
        principal = context.principal
        key = (f"{principal.principal_type}:{principal.name}", context.host_address, op, resource_type)
        memo = data.by_type
        result = memo.get(key) if memo is not None else None
        if result is None:
            allowed = data.index.by_type_decision(resource_type, key[0], key[1], op)
            result = _ALLOWED if allowed else _DENIED
            if memo is not None:
                if len(memo) >= data.cache_size:
                    memo.clear()
                memo[key] = result
        return result

    # -- ACL administration -------------------------------------------------------

    def acls(self, binding_filter: AclBindingFilter) -> list[AclBinding]:
        index = self._data.index
        return [acl.binding for _, acl in index.matching(binding_filter)]

    async def create_acls(
        self, context: AuthorizableRequestContext | None, bindings: list[AclBinding]
    ) -> list[AclCreateResult]:
        """Validate (``validate_acl_binding_for_create``), skip ACLs equal to an
        existing one or to an earlier one of the request (success, no-op),
        persist through ``acl_writer``, then apply.  One result per binding."""
        bindings = list(bindings)
        checks = [validate_acl_binding_for_create(b) for b in bindings]
        if any(c is not None and c[0] == UNKNOWN_SERVER_ERROR for c in checks):
            # Kafka cannot even build such a binding: the whole request fails.
            return [AclCreateResult(UNKNOWN_SERVER_ERROR, None) for _ in bindings]
        async with self._write_lock:
            index = self._data.index
            results: list[AclCreateResult] = []
            new: dict[uuid.UUID, StandardAcl] = {}
            seen: set[tuple[ResourceType, str, PatternType, str, str, AclOperation, AclPermissionType]] = set()
            for binding, check in zip(bindings, checks):
                if check is not None:
                    results.append(AclCreateResult(check[0], check[1]))
                    continue
                acl = StandardAcl.from_binding(binding)
                if acl.value_key not in seen and not index.contains_value(acl):
                    seen.add(acl.value_key)
                    acl_id = uuid.uuid4()
                    while index.get(acl_id) is not None or acl_id in new:
                        acl_id = uuid.uuid4()
                    new[acl_id] = acl
                results.append(AclCreateResult.SUCCESS)  # type: ignore[attr-defined]
            if len(new) > MAX_ACLS_PER_REQUEST:
                message = f"Cannot create more than {MAX_ACLS_PER_REQUEST} ACLs in a single request"
                return [AclCreateResult(POLICY_VIOLATION, message) for _ in bindings]
            if new:
                try:
                    await self._persist({acl_id: acl.binding for acl_id, acl in new.items()}, [])
                except Exception as exc:  # the store failed: nothing was created
                    log.warning("%s failed to persist new ACLs: %r", self._log_prefix(), exc)
                    message = f"Unknown error while trying to create ACL: {exc}"
                    return [r if not r.ok else AclCreateResult(self._write_error(exc), message) for r in results]
                if self.acl_writer is None:
                    self._apply(new, [])
            return results

    async def delete_acls(
        self, context: AuthorizableRequestContext | None, filters: list[AclBindingFilter]
    ) -> list[AclDeleteResult]:
        """Each filter is applied on its own to the ACLs present when the
        request started and reports what it matched (a binding matched by two
        filters is reported by both).  Filters with UNKNOWN fields get 42."""
        filters = list(filters)
        async with self._write_lock:
            index = self._data.index
            per_filter: list[AclDeleteResult | list[StandardAcl]] = []
            doomed: dict[uuid.UUID, None] = {}
            for f in filters:
                if f.pattern_filter.is_unknown:
                    per_filter.append(AclDeleteResult(INVALID_REQUEST, "Unknown patternFilter."))
                    continue
                if f.entry_filter.is_unknown:
                    per_filter.append(AclDeleteResult(INVALID_REQUEST, "Unknown entryFilter."))
                    continue
                matched = [acl for _, acl in index.matching(f)]
                for acl in matched:
                    doomed[acl.acl_id] = None  # type: ignore[index]
                per_filter.append(matched)
            if len(doomed) > MAX_ACLS_PER_REQUEST:
                message = f"Cannot delete more than {MAX_ACLS_PER_REQUEST} ACLs in a single request"
                return [AclDeleteResult(INVALID_REQUEST, message) for _ in filters]
            failure: str | None = None
            failure_code = UNKNOWN_SERVER_ERROR
            if doomed:
                try:
                    await self._persist({}, list(doomed))
                except Exception as exc:
                    log.warning("%s failed to persist ACL removals: %r", self._log_prefix(), exc)
                    failure = f"Unknown error while trying to delete ACLs: {exc}"
                    failure_code = self._write_error(exc)
                else:
                    if self.acl_writer is None:
                        self._apply({}, list(doomed))
            results = []
            for item in per_filter:
                if isinstance(item, AclDeleteResult):
                    results.append(item)
                elif failure is not None and item:
                    results.append(AclDeleteResult(failure_code, failure))
                else:
                    results.append(AclDeleteResult(deleted=tuple(AclBindingDeleteResult(a.binding) for a in item)))
            return results

    @staticmethod
    def _write_error(exc: Exception) -> int:
        """REQUEST_TIMED_OUT (retriable) when the store could not take the write in time, else
        UNKNOWN_SERVER_ERROR."""
        return REQUEST_TIMED_OUT if isinstance(exc, StoreUnavailableError) else UNKNOWN_SERVER_ERROR

    async def _persist(self, added: dict[uuid.UUID, AclBinding], removed: list[uuid.UUID]) -> None:
        if self.acl_writer is not None:
            await self.acl_writer(added, removed)

    # -- Reconfigurable -------------------------------------------------------------

    def reconfigurable_configs(self) -> Collection[str]:
        return frozenset({SUPER_USERS_CONFIG, ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG})

    def validate_reconfiguration(self, configs: Mapping[str, Any]) -> None:
        _parse_super_users(configs.get(SUPER_USERS_CONFIG))

    def authorize_with_configs(self, configs: Mapping[str, Any], context: AuthorizableRequestContext,
                               actions: Iterable[Action]) -> list[AuthorizationResult]:
        """What :meth:`authorize` would answer once ``configs`` were applied (super users,
        allow-everyone), with the current ACLs; nothing is logged or counted.  Used to refuse a
        configuration change that would lock its own caller out."""
        changes: dict[str, Any] = {}
        if SUPER_USERS_CONFIG in configs:
            changes["super_users"] = _parse_super_users(configs[SUPER_USERS_CONFIG])
        if ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG in configs:
            changes["allow_everyone"] = _parse_java_boolean(configs[ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG])
        data = self._data.copy_with(**changes)
        principal = context.principal
        key = f"{principal.principal_type}:{principal.name}"
        return [decide(data, key, context.host_address, action).result for action in actions]

    def reconfigure(self, configs: Mapping[str, Any]) -> None:
        changes: dict[str, Any] = {}
        if SUPER_USERS_CONFIG in configs:
            changes["super_users"] = _parse_super_users(configs[SUPER_USERS_CONFIG])
        if ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG in configs:
            changes["allow_everyone"] = _parse_java_boolean(configs[ALLOW_EVERYONE_IF_NO_ACL_FOUND_CONFIG])
        if changes:
            self._data = self._data.copy_with(**changes)

    # -- Monitorable ------------------------------------------------------------------

    def monitor(self, registry: Any) -> None:
        metrics = AuthorizerMetrics(lambda: len(self._data.index), class_name=type(self).__name__)
        metrics.register(registry)
        self._metrics = metrics


#: The KIP-679 probe resource per type, built once.
_HARDCODE_PATTERNS: dict[ResourceType, ResourcePattern] = {
    rt: ResourcePattern(rt, HARDCODE_RESOURCE_NAME, PatternType.LITERAL) for rt in ResourceType
}


def _hardcode_pattern(resource_type: ResourceType) -> ResourcePattern:
    return _HARDCODE_PATTERNS[resource_type]


class StandardDecisionMemo(DecisionMemo):
    """The actions :class:`StandardAuthorizer` allowed one connection's principal (from its one
    host), kept for the requests that name them again.

    An action is remembered only when it was allowed without a trace: neither the audit logger
    at DEBUG nor an audit sink took the decision.  A remembered action answers only while that
    is still so and while the authorizer holds the snapshot it was decided in (its ACLs, super
    users, ``allow.everyone.if.no.acl.found``, readiness): every change swaps the snapshot, and
    the memo is emptied when it next remembers.  A decision is remembered with the snapshot
    current when it began: one decided across a swap never answers.  Denials are never
    remembered: :meth:`StandardAuthorizer.authorize` logs and counts them each time.  What the
    memo answers is counted in the authorizer's metrics as ``authorize`` counts it (on the data
    plane once the request is written upstream, before its answer can be read).  Actions
    are held by identity (the request layer reuses one ``Action`` per resource, operation and
    flags), at most :data:`MEMO_ACTIONS`.  One connection uses it from one thread at a time;
    the snapshot reference it compares is swapped atomically."""

    __slots__ = ("_authorizer", "_listener", "_principal", "_host", "_data", "_allowed")

    def __init__(self, authorizer: StandardAuthorizer, context: AuthorizableRequestContext) -> None:
        self._authorizer = authorizer
        self._listener = context.listener_name
        #: whose decisions these are: a request of another principal or host is decided, not remembered
        self._principal = context.principal
        self._host = context.host_address
        self._data: AuthorizerData | None = None
        #: id(action) -> action (held: its id cannot be another's while it is here)
        self._allowed: dict[int, Action] = {}

    def __len__(self) -> int:
        return len(self._allowed)

    def allows(self, action: Action, later: list[Any] | None = None) -> bool:
        authorizer = self._authorizer
        if (self._allowed.get(id(action)) is not action or authorizer._data is not self._data
                or not AuditLevels.allowed_silent_now(authorizer.audit_sinks)):
            return False
        metrics = authorizer._metrics
        if metrics is not None:
            if later is None:
                metrics.record(self._listener, 1, 0)
            else:
                later.append(self)  # counted by inc(), off the request's way
        return True

    def inc(self) -> None:
        """Count one allowance :meth:`allows` answered and put off to its ``later``."""
        metrics = self._authorizer._metrics
        if metrics is not None:
            metrics.record(self._listener, 1, 0)

    def decide(self, context: AuthorizableRequestContext, action: Action) -> bool:
        authorizer = self._authorizer
        data = authorizer._data
        allowed = authorizer.authorize(context, (action,))[0] is _ALLOWED
        if (allowed and context.principal is self._principal
                and context.host_address == self._host and AuditLevels.allowed_silent_now(authorizer.audit_sinks)):
            if self._data is not data or len(self._allowed) >= MEMO_ACTIONS:
                self._data = data
                self._allowed = {}
            self._allowed[id(action)] = action
        return allowed
