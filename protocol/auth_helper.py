"""The request layer's questions to the authorizer (Kafka's ``AuthHelper``).

Theory of operation
-------------------
API modules never build :class:`~authz.authorizer.Action` objects by hand;
they ask one of these questions, each matching a call site pattern of Kafka's
request layer (Kafka's ``AuthHelper``):

* :meth:`AuthHelper.allowed` — a single check on one LITERAL resource;
* :meth:`AuthHelper.filter` — the batch filter: one action per *distinct*
  name with ``resource_reference_count`` = how many request entries name it,
  in one ``authorize`` call, returning the allowed names;
* :meth:`AuthHelper.authorized_operations` — the KIP-430 bitfield, with both
  log flags off;
* :meth:`AuthHelper.by_resource_type` — KIP-679.

With no authorizer configured every check passes and authorized operations
are "all supported", as on a broker with an empty ``authorizer.class.name``.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from authz.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    AclOperation,
    PatternType,
    ResourcePattern,
    ResourceType,
    authorized_operations_bitfield,
)
from authz.audit import ChangeLog
from authz.authorizer import Action, AuthorizableRequestContext, AuthorizationResult, Authorizer, DecisionMemo
from protocol.headers import RequestHeader
from protocol.topic_ids import TopicCache

__all__ = ["AuthHelper", "literal_action", "literal_actions"]

_ALLOWED = AuthorizationResult.ALLOWED

#: Actions are immutable and the same few recur on every request (one topic, WRITE, ...):
#: built once, reused, and the table emptied (in place, never replaced: the dispatcher's express
#: path in C holds it, see :func:`literal_actions`) when it grows past its bound.
_ACTIONS: dict[tuple[Any, ...], Action] = {}
_ACTIONS_MAX = 65536


def literal_action(resource_type: ResourceType, name: str, op: AclOperation, count: int = 1,
                   log_if_allowed: bool = True, log_if_denied: bool = True) -> Action:
    """The one :class:`Action` on a LITERAL resource that :meth:`AuthHelper.allowed` asks about
    (the same object each time: a decision memo holds actions by identity)."""
    key = (resource_type, name, op, count, log_if_allowed, log_if_denied)
    action = _ACTIONS.get(key)
    if action is None:
        if len(_ACTIONS) >= _ACTIONS_MAX:
            _ACTIONS.clear()
        action = _ACTIONS[key] = Action(ResourcePattern(resource_type, name, PatternType.LITERAL), op, count,
                                        log_if_allowed, log_if_denied)
    return action


def literal_actions() -> dict[tuple[Any, ...], Action]:
    """The table :func:`literal_action` keeps, by its key (resource type, name, operation, count,
    log_if_allowed, log_if_denied): gateway/connection/_plane_steps.c's express dispatch looks the
    usual Produce request's action up in it, and takes the request only when it is there."""
    return _ACTIONS


class AuthHelper:
    __slots__ = ("authorizer", "_context", "_base", "_header", "memo", "connection_state", "topics",
                 "gateway_state", "changes")

    def __init__(self, authorizer: Authorizer | None, context: AuthorizableRequestContext | None,
                 connection_state: dict[Any, Any] | None = None, topics: TopicCache | None = None,
                 gateway_state: dict[Any, Any] | None = None, changes: ChangeLog | None = None,
                 base: AuthorizableRequestContext | None = None, header: RequestHeader | None = None,
                 memo: DecisionMemo | None = None) -> None:
        self.authorizer = authorizer
        #: where a change of security state this request makes is recorded (None: not recorded,
        #: unit tests of enforcement alone)
        self.changes = changes
        #: the request's context, or (``context`` None) the connection's ``base`` and the request's
        #: ``header`` it is made from when first asked for (:attr:`context`)
        self._context = context
        self._base = base
        self._header = header
        #: the authorizer's memo of single actions it allowed this connection
        #: (:meth:`authz.authorizer.Authorizer.decision_memo`), or None: each goes to ``authorize``
        self.memo = memo
        #: state an API keeps for the client connection (e.g. Fetch sessions); lives as long as it
        self.connection_state = connection_state if connection_state is not None else {}
        #: state an API keeps across connections, for the whole gateway (e.g. the members of a
        #: regular-expression subscription); each API bounds what it keeps there
        self.gateway_state = gateway_state if gateway_state is not None else {}
        #: the topic names and ids the gateway learned from upstream responses (an empty cache
        #: without one: every topic id is unknown, requests by id fail closed)
        self.topics = topics if topics is not None else TopicCache()

    @property
    def enabled(self) -> bool:
        return self.authorizer is not None

    @property
    def context(self) -> AuthorizableRequestContext:
        """The request's context.  None only without an authorizer on the forwarded path, where
        nothing reads it (``enabled`` is False); a local answer always has one (who made a change)."""
        context = self._context
        if context is None and self._base is not None:
            h = self._header
            assert h is not None
            context = self._context = self._base.for_request(h.api_key, h.api_version, h.client_id,
                                                             h.correlation_id)
        return context  # type: ignore[return-value]

    def record_change(self, operation: str, resource: str, change: str) -> None:
        """A change of security state this request made (:class:`authz.audit.ChangeLog`)."""
        if self.changes is not None:
            self.changes.record(self.context, operation, resource, change)

    def allowed(self, resource_type: ResourceType, name: str, op: AclOperation,
                log_if_allowed: bool = True, log_if_denied: bool = True, ref_count: int = 1) -> bool:
        """``authorize`` of one action: from the memo when it knows it."""
        if self.authorizer is None:
            return True
        action = literal_action(resource_type, name, op, ref_count, log_if_allowed, log_if_denied)
        memo = self.memo
        if memo is None:
            return self.authorizer.authorize(self.context, (action,))[0] is _ALLOWED
        return memo.allows(action) or memo.decide(self.context, action)

    def cluster(self, op: AclOperation, log_if_allowed: bool = True, log_if_denied: bool = True) -> bool:
        return self.allowed(ResourceType.CLUSTER, CLUSTER_NAME, op, log_if_allowed, log_if_denied)

    def filter(self, resource_type: ResourceType, op: AclOperation, names: Mapping[str, int] | Iterable[str],
               log_if_allowed: bool = True, log_if_denied: bool = True) -> set[str]:
        """The names (of ``names``: name -> reference count, or an iterable) that are allowed."""
        if type(names) is not dict and not isinstance(names, Mapping):  # (the ABC check costs ~0.7 us)
            counts: dict[str, int] = {}
            for n in names:
                counts[n] = counts.get(n, 0) + 1
            names = counts
        if self.authorizer is None or not names:
            return set(names)
        if len(names) == 1:  # the usual Produce or Fetch: one topic
            ((name, count),) = names.items()
            return {name} if self.allowed(resource_type, name, op, log_if_allowed, log_if_denied, count) else set()
        ordered = list(names.items())
        actions = [literal_action(resource_type, name, op, count, log_if_allowed, log_if_denied)
                   for name, count in ordered]
        results = self.authorizer.authorize(self.context, actions)
        return {name for (name, _), result in zip(ordered, results) if result is _ALLOWED}

    def authorized_operations(self, resource_type: ResourceType, name: str) -> int:
        supported = tuple(SUPPORTED_OPERATIONS[resource_type])
        if self.authorizer is None:
            return authorized_operations_bitfield(supported)
        pattern = ResourcePattern(resource_type, name, PatternType.LITERAL)
        actions = [Action(pattern, op, 1, False, False) for op in supported]
        results = self.authorizer.authorize(self.context, actions)
        return authorized_operations_bitfield(op for op, r in zip(supported, results) if r is _ALLOWED)

    def topic_name(self, topic_id: Any) -> str | None:
        """The name of a topic id learned from upstream responses, or None."""
        return self.topics.name_of(topic_id)

    def by_resource_type(self, op: AclOperation, resource_type: ResourceType) -> bool:
        if self.authorizer is None:
            return True
        return self.authorizer.authorize_by_resource_type(self.context, op, resource_type) is _ALLOWED
