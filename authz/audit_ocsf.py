"""The audit event in OCSF, the Open Cybersecurity Schema Framework (``audit.format: ocsf``).

:func:`to_ocsf` turns one kgw audit event (``authz.audit_events.audit_event``) into the OCSF
1.3.0 event a SIEM ingests as is:

* an authorization decision -> **API Activity** (class 6003, category 6 Application Activity):
  ``activity_id`` from the Kafka operation (Read: READ, DESCRIBE, DESCRIBE_CONFIGS; Create: WRITE,
  CREATE, IDEMPOTENT_WRITE; Update: ALTER, ALTER_CONFIGS; Delete: DELETE; Other otherwise),
  ``status`` Success (allowed) or Failure (denied, severity Medium), ``actor.user`` the principal,
  ``actor.app_name`` the client id, ``api.operation`` the Kafka API, ``api.request.uid`` the
  correlation id, ``src_endpoint.ip`` the client address, ``dst_endpoint.svc_name`` the listener,
  ``resources[0]`` the resource (``type``, ``name``, ``uid`` = ``Topic:LITERAL:orders``), and
  ``status_detail`` the matching rule;
* a failed login -> **Authentication** (class 3002, category 3 Identity & Access Management),
  activity Logon, status Failure, ``user`` the principal tried, ``auth_protocol`` the mechanism
  (OAUTHBEARER as OAuth 2.0, the others as Other with their name), ``status_detail`` kgw's reason;
* a change of security state -> **API Activity**, activity from the request (Create*, Delete*,
  otherwise Update), status Success, ``message`` the exact change;
* a ``dropped`` record (events never published) -> **Base Event** (class 0), activity Other.

kgw's own fields with no OCSF attribute (the kind of event, the Kafka operation, the decision, the
pattern type, the rule, the gateway) are under ``unmapped``; the hash chain's fields (``chain``, ``run``, ``seq``,
``prev_hash``, ``hash``, ``resumes``) stay at the top level, an extension the verifier reads in
either format (docs/operations.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["OCSF_VERSION", "to_ocsf"]

OCSF_VERSION = "1.3.0"
_PRODUCT = {"name": "kgw", "vendor_name": "kgw"}
_ACTIVITIES = {1: "Create", 2: "Read", 3: "Update", 4: "Delete", 99: "Other"}
_OPERATION_ACTIVITY = {"READ": 2, "DESCRIBE": 2, "DESCRIBE_CONFIGS": 2, "WRITE": 1, "CREATE": 1,
                       "IDEMPOTENT_WRITE": 1, "ALTER": 3, "ALTER_CONFIGS": 3, "DELETE": 4}
_SEVERITIES = {1: "Informational", 3: "Medium"}
_AUTH_PROTOCOLS = {"OAUTHBEARER": (6, "OAUTH 2.0")}


def _user(principal: Any) -> dict[str, Any]:
    text = str(principal or "")
    kind, sep, name = text.partition(":")
    return {"name": name if sep else text, "uid": text, "type": kind if sep else "Unknown"}


def _base(event: Mapping[str, Any], class_uid: int, class_name: str, category_uid: int, category_name: str,
          activity_id: int, success: bool | None, activity_name: str | None = None) -> dict[str, Any]:
    severity = 1 if success is not False else 3
    activity_name = activity_name or _ACTIVITIES.get(activity_id, "Other")
    out: dict[str, Any] = {
        "category_uid": category_uid, "category_name": category_name,
        "class_uid": class_uid, "class_name": class_name,
        "activity_id": activity_id, "activity_name": activity_name,
        "type_uid": class_uid * 100 + activity_id,
        "type_name": f"{class_name}: {activity_name}",
        "severity_id": severity, "severity": _SEVERITIES[severity],
        "time": event.get("ts_ms"),
        "metadata": {"version": OCSF_VERSION, "product": dict(_PRODUCT), "log_name": "kgw-audit"},
    }
    if success is not None:
        out.update(status_id=1 if success else 2, status="Success" if success else "Failure")
    return out


def _endpoints(event: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if event.get("client_address"):
        out["src_endpoint"] = {"ip": event["client_address"]}
    if event.get("listener"):
        out["dst_endpoint"] = {"svc_name": event["listener"]}
    return out


def to_ocsf(event: Mapping[str, Any]) -> dict[str, Any]:
    """The OCSF event for one kgw audit event (see the module doc)."""
    kind = event.get("event", "authorization")
    unmapped = {k: event[k] for k in ("event", "gateway", "operation", "decision", "pattern_type", "rule")
                if event.get(k) is not None}
    if kind == "authentication":
        out = _base(event, 3002, "Authentication", 3, "Identity & Access Management", 1, False, "Logon")
        mechanism = str(event.get("mechanism") or "unknown")
        protocol_id, protocol = _AUTH_PROTOCOLS.get(mechanism, (99, mechanism))
        out.update(user=_user(event.get("principal")), auth_protocol_id=protocol_id, auth_protocol=protocol,
                   status_detail=event.get("reason"), **_endpoints(event))
    elif kind == "change":
        api = str(event.get("api") or "")
        activity = 1 if api.startswith("Create") else 4 if api.startswith("Delete") else 3
        out = _base(event, 6003, "API Activity", 6, "Application Activity", activity, True)
        out.update(actor={"user": _user(event.get("principal")), "app_name": event.get("client_id")},
                   api={"operation": api, "request": {"uid": str(event.get("correlation_id"))}},
                   resources=[_resource(event)], message=event.get("change"), **_endpoints(event))
    elif kind == "dropped":
        out = _base(event, 0, "Base Event", 0, "Uncategorized", 99, None)
        out["message"] = f"{event.get('count')} audit event(s) offered but not published"
        unmapped["count"] = event.get("count")
    else:
        allowed = bool(event.get("allowed"))
        activity = _OPERATION_ACTIVITY.get(str(event.get("operation")), 99)
        out = _base(event, 6003, "API Activity", 6, "Application Activity", activity, allowed)
        out.update(actor={"user": _user(event.get("principal")), "app_name": event.get("client_id")},
                   api={"operation": event.get("api"), "request": {"uid": str(event.get("correlation_id"))}},
                   resources=[_resource(event)],
                   status_detail=f"{event.get('decision')} by {event.get('rule')}", **_endpoints(event))
    if unmapped:
        out["unmapped"] = unmapped
    return out


def _resource(event: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": event.get("resource_type") or None, "name": event.get("resource_name") or None,
            "uid": event.get("resource")}
