"""Authorization audit log (Kafka's ``kafka.authorizer.logger``).

Theory of operation
-------------------
Every action an authorizer decides produces at most one line on the
dedicated logger ``kgw.authorizer``.  The level follows Kafka (Kafka's ``kafka.authorizer.logger``):

=========================  ==========================
decision                   level
=========================  ==========================
allowed, log_if_allowed    DEBUG
denied, log_if_denied      INFO
otherwise                  TRACE (5; Python has none)
=========================  ==========================

So with the logger at INFO — Kafka's default — only explicit denials appear.
Route the logger to its own file/handler and set ``propagate = False`` to get
Kafka's separate ``kafka-authorizer.log``.

Line layout: Kafka's StandardAuthorizer line, field for field, followed by
the client id and correlation id in parentheses (Kafka's line omits them; kgw
adds them at the end so that Kafka-line parsers still read the prefix)::

    Principal = User:alice is Denied operation = READ from host = 10.1.2.3
    on resource = Topic:LITERAL:orders for request = Fetch with
    resourceRefCount = 3 based on rule DefaultDeny (clientId = c1, correlationId = 7)

(one line; wrapped here).  The same fields are attached to the record as
``extra`` attributes (``kgw_principal``, ``kgw_allowed`` …) for structured
handlers.

Cost: ``AuditLevels.current()`` asks the logger once per ``authorize`` batch
which levels are enabled; a decision whose level is disabled costs one
attribute test and builds no string.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.index import api_key_map

if TYPE_CHECKING:  # pragma: no cover
    from .authorizer import Action, AuthorizableRequestContext

__all__ = ["AUDIT_LOGGER_NAME", "CHANGE_LOGGER_NAME", "TRACE", "AuditSink", "ChangeLog", "audit_logger", "AuditLevels",
           "api_name", "format_audit_line", "log_decision"]

#: given the fields of every audited decision (the audit topic publisher)
AuditSink = Callable[[dict[str, Any]], None]

AUDIT_LOGGER_NAME = "kgw.authorizer"
TRACE = 5
if logging.getLevelName(TRACE) != "TRACE":
    logging.addLevelName(TRACE, "TRACE")

audit_logger = logging.getLogger(AUDIT_LOGGER_NAME)

#: a level below TRACE: the decision goes to the authorizer's audit sinks only (callables given
#: every DEBUG/INFO-class decision's fields, whatever the logger's level; e.g. the audit topic
#: publisher), not to the log
PUBLISH = 1


def _pascal(snake: str) -> str:
    return "".join(part.capitalize() for part in snake.split("_"))


#: API key -> Kafka's request name (``ApiKeys`` name in Pascal case), e.g.
#: 22 -> ``InitProducerId``.
_API_NAMES: dict[int, str] = {key: _pascal(name) for key, name in api_key_map.items()}


def api_name(api_key: int) -> str:
    """``Fetch`` for 1; the number itself for a key kio does not know."""
    return _API_NAMES.get(api_key, str(api_key))


class AuditLevels:
    """Which audit levels are enabled, sampled once per authorize call."""

    __slots__ = ("trace", "debug", "info", "sinks")

    def __init__(self, trace: bool, debug: bool, info: bool, sinks: tuple[AuditSink, ...] = ()) -> None:
        self.trace = trace
        self.debug = debug
        self.info = info
        self.sinks = sinks

    @staticmethod
    def allowed_silent_now(sinks: tuple[AuditSink, ...] = ()) -> bool:
        """True when no allowed decision can be logged now (the default INFO setup, no sink): the
        hot path then skips the levels for allowed actions.  One level check: TRACE is below
        DEBUG, so an audit logger that logs no DEBUG logs no TRACE either."""
        return not sinks and not audit_logger.isEnabledFor(logging.DEBUG)

    @classmethod
    def current(cls, sinks: tuple[AuditSink, ...] = ()) -> "AuditLevels":
        is_on = audit_logger.isEnabledFor
        return cls(is_on(TRACE), is_on(logging.DEBUG), is_on(logging.INFO), sinks)

    def level_for(self, allowed: bool, action: "Action") -> int:
        """The level this decision is logged at, or 0 if that level is off."""
        if allowed:
            if action.log_if_allowed:
                return logging.DEBUG if self.debug else (PUBLISH if self.sinks else 0)
        elif action.log_if_denied:
            return logging.INFO if self.info else (PUBLISH if self.sinks else 0)
        return TRACE if self.trace else 0


def format_audit_line(
    principal_key: str, allowed: bool, action: "Action", context: "AuthorizableRequestContext", rule: object
) -> str:
    return (
        f"Principal = {principal_key} is {'Allowed' if allowed else 'Denied'} "
        f"operation = {action.operation.name} from host = {context.host_address} "
        f"on resource = {action.resource_pattern.audit_text()} "
        f"for request = {api_name(context.request_type)} "
        f"with resourceRefCount = {action.resource_reference_count} based on rule {rule} "
        f"(clientId = {context.client_id}, correlationId = {context.correlation_id})"
    )


def log_decision(
    level: int,
    principal_key: str,
    allowed: bool,
    action: "Action",
    context: "AuthorizableRequestContext",
    rule: object,
    sinks: tuple[AuditSink, ...] = (),
) -> None:
    """Write one audit line at ``level`` (already known to be enabled), and give its fields to
    ``sinks``."""
    fields = {
            "kgw_principal": principal_key,
            "kgw_allowed": allowed,
            "kgw_operation": action.operation.name,
            "kgw_host": context.host_address,
            "kgw_resource": action.resource_pattern.audit_text(),
            "kgw_request": api_name(context.request_type),
            "kgw_client_id": context.client_id,
            "kgw_correlation_id": context.correlation_id,
            "kgw_listener": context.listener_name,
            "kgw_rule": str(rule),
    }
    if level != TRACE:
        for sink in sinks:
            sink(fields)
    if level != PUBLISH:
        audit_logger.log(level, format_audit_line(principal_key, allowed, action, context, rule), extra=fields)


#: the logger of security-state changes (ACLs, SCRAM credentials, configs, quotas): INFO, one
#: line per change, whatever the authorizer's audit level
CHANGE_LOGGER_NAME = "kgw.changes"
_change_logger = logging.getLogger(CHANGE_LOGGER_NAME)
#: the longest change text an event carries (a config value comes from the client)
_CHANGE_TEXT_MAX = 2048


class ChangeLog:
    """Where every change of security state made through the gateway is recorded: who
    (principal), from where (listener, client address), with which request (API, client id,
    correlation id), and exactly what changed -- secrets never (a SCRAM change names the user,
    mechanism and iterations; a sensitive config's value is ``[hidden]``).

    Each change is one INFO line on ``kgw.changes`` and, with ``audit.publish``, an audit
    event ``"event": "change"`` (``authz.audit_events``) for every sink added."""

    __slots__ = ("sinks",)

    def __init__(self) -> None:
        self.sinks: tuple[AuditSink, ...] = ()

    def add_sink(self, sink: AuditSink) -> None:
        self.sinks = (*self.sinks, sink)

    def record(self, context: "AuthorizableRequestContext | None", operation: str, resource: str, change: str) -> None:
        """One change: ``operation`` (CREATE, DELETE, ALTER, ALTER_CONFIGS), ``resource`` as an
        audit resource text (``Topic:LITERAL:orders``), ``change`` what was done to it.
        ``context``: the request's (None only where no request made it, e.g. start-up)."""
        change = change[:_CHANGE_TEXT_MAX]
        if context is not None:
            principal = str(context.principal)
            fields = {
                "kgw_event": "change", "kgw_principal": principal, "kgw_allowed": True, "kgw_operation": operation,
                "kgw_resource": resource, "kgw_change": change, "kgw_listener": context.listener_name,
                "kgw_host": context.host_address, "kgw_request": api_name(context.request_type),
                "kgw_client_id": context.client_id, "kgw_correlation_id": context.correlation_id,
            }
            # the message says what changed; who, from where and with which request are its
            # fields (text logs append them as key=value, JSON logs as members)
            _change_logger.info("%s on %s", change, resource, extra={"kgw": {
                "principal": principal, "operation": operation, "listener": context.listener_name,
                "client_address": context.host_address, "api": fields["kgw_request"],
                "client_id": context.client_id, "correlation_id": context.correlation_id}})
        else:
            fields = {"kgw_event": "change", "kgw_principal": None, "kgw_allowed": True, "kgw_operation": operation,
                      "kgw_resource": resource, "kgw_change": change}
            _change_logger.info("%s on %s", change, resource, extra={"kgw": {"operation": operation}})
        for sink in self.sinks:
            sink(fields)
