"""The audit event: one authorization decision as a JSON object, defined once.

The gateway's audit publisher (``gateway.process.audit_publisher``) writes these objects to
the audit topic; the Spark audit job (``kgw_spark.audit_job``) reads them with the
schema :func:`spark_schema` derives from the same table, so the two cannot drift.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping
from typing import Any

__all__ = ["EVENT_FIELDS", "audit_event", "spark_schema"]

_UTC = _dt.timezone.utc

#: every field of an event, in order, with its Spark SQL type (``gateway`` only when the
#: publisher names its gateway)
EVENT_FIELDS: tuple[tuple[str, str], ...] = (
    ("time", "string"),
    ("ts_ms", "long"),
    ("principal", "string"),
    ("allowed", "boolean"),
    ("decision", "string"),
    ("operation", "string"),
    ("resource", "string"),
    ("resource_type", "string"),
    ("pattern_type", "string"),
    ("resource_name", "string"),
    ("listener", "string"),
    ("client_address", "string"),
    ("api", "string"),
    ("client_id", "string"),
    ("correlation_id", "int"),
    ("rule", "string"),
    ("event", "string"),
    ("mechanism", "string"),
    ("reason", "string"),
    ("change", "string"),
    ("gateway", "string"),
    # tamper evidence (authz/audit_chain.py): the chain, its run, the event's number and links
    ("chain", "string"),
    ("run", "string"),
    ("seq", "long"),
    ("prev_hash", "string"),
    ("hash", "string"),
    ("resumes", "string"),
    # "event": "dropped": how many events were offered but never published
    ("count", "long"),
)
_TYPES = dict(EVENT_FIELDS)


def spark_schema(columns: tuple[str, ...] | None = None) -> str:
    """A Spark DDL schema string for ``columns`` (default: every field)."""
    names = columns if columns is not None else tuple(_TYPES)
    return ", ".join(f"{name} {_TYPES[name]}" for name in names)


def _split_resource(text: str) -> tuple[str, str, str]:
    """``Topic:LITERAL:orders`` -> (Topic, LITERAL, orders); names may hold ':'."""
    parts = text.split(":", 2)
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    return "", "", text


def audit_event(fields: Mapping[str, Any], ts: float, gateway: str | None = None) -> dict[str, Any]:
    """The JSON object for one decision (``fields`` = ``authz.audit.log_decision``'s extra)."""
    resource = str(fields.get("kgw_resource", ""))
    rtype, ptype, rname = _split_resource(resource)
    allowed = bool(fields.get("kgw_allowed"))
    ms = int(ts * 1000)
    event = {
        "time": _dt.datetime.fromtimestamp(ms / 1000, tz=_UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "ts_ms": ms,
        "principal": fields.get("kgw_principal"),
        "allowed": allowed,
        "decision": "ALLOWED" if allowed else "DENIED",
        "operation": fields.get("kgw_operation"),
        "resource": resource,
        "resource_type": rtype,
        "pattern_type": ptype,
        "resource_name": rname,
        "listener": fields.get("kgw_listener"),
        "client_address": fields.get("kgw_host"),
        "api": fields.get("kgw_request"),
        "client_id": fields.get("kgw_client_id"),
        "correlation_id": fields.get("kgw_correlation_id"),
        "rule": fields.get("kgw_rule"),
        # "authorization" (a decision), "authentication" (a failed login: operation
        # AUTHENTICATE, the principal the client tried, its mechanism and kgw's reason) or
        # "change" (a change of security state made: authz.audit.ChangeLog, what in "change")
        "event": fields.get("kgw_event", "authorization"),
    }
    if event["event"] == "authentication":
        event["mechanism"] = fields.get("kgw_mechanism")
        event["reason"] = fields.get("kgw_reason")
    elif event["event"] == "change":
        event["change"] = fields.get("kgw_change")
    if gateway is not None:
        event["gateway"] = gateway
    assert event.keys() <= _TYPES.keys()
    return event
