"""Audit events in OCSF 1.3.0 (authz/audit_ocsf.py): decisions as API Activity, failed logins as
Authentication, changes of security state as API Activity with the change, each with the
attributes OCSF requires of its class and kgw's own fields under ``unmapped``."""

from __future__ import annotations

import pytest

from authz.audit_events import audit_event
from authz.audit_ocsf import OCSF_VERSION, to_ocsf

TS = 1_795_000_000.123


def _decision(allowed: bool, operation: str = "READ") -> dict:
    return audit_event({"kgw_principal": "User:alice", "kgw_allowed": allowed, "kgw_operation": operation,
                        "kgw_host": "10.1.2.3", "kgw_resource": "Topic:LITERAL:orders", "kgw_request": "Fetch",
                        "kgw_client_id": "c1", "kgw_correlation_id": 7, "kgw_listener": "EXTERNAL",
                        "kgw_rule": "DefaultDeny" if not allowed else "ACL 1"}, TS, "gw1")


def _required(event: dict) -> None:
    for key in ("category_uid", "class_uid", "activity_id", "type_uid", "severity_id", "time", "metadata"):
        assert key in event, key
    assert event["type_uid"] == event["class_uid"] * 100 + event["activity_id"]
    assert event["metadata"]["version"] == OCSF_VERSION and event["metadata"]["product"]["name"] == "kgw"
    assert event["time"] == 1_795_000_000_123


@pytest.mark.parametrize("operation, activity", [("READ", 2), ("WRITE", 1), ("ALTER_CONFIGS", 3), ("DELETE", 4),
                                                 ("CLUSTER_ACTION", 99)])
def test_a_decision_is_api_activity(operation, activity):
    denied = to_ocsf(_decision(False, operation))
    _required(denied)
    assert (denied["class_uid"], denied["category_uid"], denied["activity_id"]) == (6003, 6, activity)
    assert (denied["status_id"], denied["status"], denied["severity_id"]) == (2, "Failure", 3)
    assert denied["actor"] == {"user": {"name": "alice", "uid": "User:alice", "type": "User"}, "app_name": "c1"}
    assert denied["api"] == {"operation": "Fetch", "request": {"uid": "7"}}
    assert denied["src_endpoint"] == {"ip": "10.1.2.3"} and denied["dst_endpoint"] == {"svc_name": "EXTERNAL"}
    assert denied["resources"] == [{"type": "Topic", "name": "orders", "uid": "Topic:LITERAL:orders"}]
    assert denied["unmapped"]["operation"] == operation and denied["unmapped"]["event"] == "authorization"
    assert denied["status_detail"] == "DENIED by DefaultDeny"
    allowed = to_ocsf(_decision(True, operation))
    assert (allowed["status_id"], allowed["severity_id"]) == (1, 1)


@pytest.mark.parametrize("mechanism, protocol", [("OAUTHBEARER", (6, "OAUTH 2.0")), ("PLAIN", (99, "PLAIN")),
                                                 ("SCRAM-SHA-512", (99, "SCRAM-SHA-512"))])
def test_a_failed_login_is_authentication(mechanism, protocol):
    event = to_ocsf(audit_event({"kgw_event": "authentication", "kgw_principal": "User:mallory",
                                 "kgw_operation": "AUTHENTICATE", "kgw_host": "10.9.9.9", "kgw_listener": "SASL",
                                 "kgw_mechanism": mechanism, "kgw_reason": "wrong password"}, TS, "gw1"))
    _required(event)
    assert (event["class_uid"], event["category_uid"], event["activity_id"], event["activity_name"]) == (
        3002, 3, 1, "Logon")
    assert (event["auth_protocol_id"], event["auth_protocol"]) == protocol
    assert event["user"]["uid"] == "User:mallory" and event["status"] == "Failure"
    assert event["status_detail"] == "wrong password" and event["src_endpoint"] == {"ip": "10.9.9.9"}


def test_a_change_is_api_activity_with_the_change():
    event = to_ocsf(audit_event({"kgw_event": "change", "kgw_principal": "User:admin", "kgw_allowed": True,
                                 "kgw_operation": "CREATE", "kgw_request": "CreateAcls", "kgw_host": "10.0.0.5",
                                 "kgw_resource": "Topic:LITERAL:orders", "kgw_correlation_id": 3,
                                 "kgw_change": "created ACL (principal=User:bob, operation=READ)"}, TS, "gw1"))
    _required(event)
    assert (event["class_uid"], event["activity_id"], event["status_id"]) == (6003, 1, 1)
    assert event["message"] == "created ACL (principal=User:bob, operation=READ)"
    assert event["unmapped"]["event"] == "change"
    deleted = to_ocsf({**audit_event({"kgw_event": "change", "kgw_request": "DeleteAcls"}, TS), "api": "DeleteAcls"})
    assert deleted["activity_id"] == 4
