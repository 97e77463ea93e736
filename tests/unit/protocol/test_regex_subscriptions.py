"""KIP-848 regular-expression subscriptions are resolved by kgw with the member's authority
(protocol/regex_subscriptions.py): the broker is never sent an expression it would resolve
with kgw's super-user account."""

from __future__ import annotations

import ipaddress
import logging
import time
from datetime import timedelta

import pytest

from authz.acl import AclOperation as Op, AclPermissionType, PatternType, ResourceType as RT
from authz.audit import AUDIT_LOGGER_NAME
from authz.authorizer import AuthorizableRequestContext
from authz.principal import KafkaPrincipal
from protocol.apis.base import FORWARD
from protocol.apis.registry import REGISTRY
from protocol.auth_helper import AuthHelper
from protocol.codecs import decode_request, decode_response
from protocol.headers import parse_request_header
from protocol import regex_subscriptions
from protocol.regex_subscriptions import InvalidRegex, RegexSubscriptions, compile_regex
from tests.support.fake_services import FakeServices, FakeUpstream, settle
from tests.unit.protocol.test_groups_enforcement import acl, authorizer, frame_of, req

TOPICS = ["victim-a", "victim-b", "mine-1", "mine-2", "__consumer_offsets", "other"]


class Member:
    """One member's heartbeats through one gateway (its gateway-wide state shared by all)."""

    def __init__(self, authz, state: dict, principal: str = "alice", member_id: str = "m1", group: str = "g",
                 upstream: FakeUpstream | None = None) -> None:
        self.authz, self.state, self.principal = authz, state, principal
        self.member_id, self.group = member_id, group
        self.services = FakeServices(upstream if upstream is not None else FakeUpstream(TOPICS))

    def heartbeat(self, epoch: int, names=None, regex=None, version: int = 1):
        body = req(68, version, group_id=self.group, member_id=self.member_id, member_epoch=epoch,
                   rebalance_timeout=timedelta(seconds=10), subscribed_topic_names=names,
                   subscribed_topic_regex=regex, topic_partitions=() if epoch == 0 else None)
        frame = frame_of(68, version, body)
        header = parse_request_header(frame)
        spec = REGISTRY[68]
        info = spec.inspect(header, frame)
        ctx = AuthorizableRequestContext("EXTERNAL", "SASL_PLAINTEXT", KafkaPrincipal("User", self.principal),
                                         ipaddress.ip_address("10.0.0.1"), 68, version, "c1", 7)
        auth = AuthHelper(self.authz, ctx, gateway_state=self.state)
        return settle(spec.enforce(auth, header, frame, info), self.services)

    def forwarded(self, decision):
        """(names, regex) of what goes to the broker; None when forwarded as it came."""
        if decision is FORWARD:
            return None
        assert decision.request is not None and decision.respond is None, decision
        sent = decode_request(68, 1, decision.request, 0)
        return sent.subscribed_topic_names, sent.subscribed_topic_regex


def alice_acls(*extra):
    return authorizer(acl(RT.GROUP, "g", Op.READ), acl(RT.TOPIC, "mine-", Op.DESCRIBE, pattern=PatternType.PREFIXED),
                      *extra)


def test_regex_is_resolved_with_the_members_authority_and_forwarded_as_names(caplog):
    caplog.set_level(1, logger=AUDIT_LOGGER_NAME)
    m = Member(alice_acls(), {})
    names, regex = m.forwarded(m.heartbeat(0, regex=".*"))
    # never __consumer_offsets nor a victim's topic: only what alice may DESCRIBE
    assert names == ("mine-1", "mine-2") and regex is None
    # the coordinator's flags: allowed logged (DEBUG), denied only at TRACE (a listing filter)
    denied = [r for r in caplog.records if r.name == AUDIT_LOGGER_NAME and "Denied" in r.getMessage()
              and "Topic:LITERAL:" in r.getMessage()]
    assert denied and all(r.levelno < logging.DEBUG for r in denied)
    assert any("Allowed operation = DESCRIBE" in r.getMessage() and "mine-1" in r.getMessage()
               for r in caplog.records if r.name == AUDIT_LOGGER_NAME)


def test_partition_stealing_regex_resolves_to_nothing():
    """Another member joins the victim's group with ``victim-.*``: Kafka resolves it with that
    member's authority (nothing), so it is assigned none of the victim's partitions."""
    m = Member(alice_acls(), {}, member_id="thief")
    assert m.forwarded(m.heartbeat(0, regex="victim-.*")) == ((), None)


def test_anonymous_with_group_read_only_gets_no_topic():
    a = authorizer(acl(RT.GROUP, "g", Op.READ, principal="User:ANONYMOUS"))
    m = Member(a, {}, principal="ANONYMOUS")
    assert m.forwarded(m.heartbeat(0, regex=".*")) == ((), None)


def test_explicit_names_beside_the_expression_are_kept():
    m = Member(alice_acls(acl(RT.TOPIC, "other", Op.DESCRIBE)), {})
    assert m.forwarded(m.heartbeat(0, names=("other",), regex="mine-1")) == (("mine-1", "other"), None)


def test_invalid_expression_answered_invalid_regular_expression():
    m = Member(alice_acls(), {})
    d = m.heartbeat(0, regex="mine-(")
    assert d.respond is not None and d.request is None
    r = decode_response(68, 1, d.respond, 0)
    assert r.error_code == 128 and "is not a valid regular expression" in r.error_message
    with pytest.raises(InvalidRegex):
        compile_regex("(?<=x)y")  # RE2 (Kafka's RE2/J) has no look-behind


def test_group_read_and_named_topics_checked_before_the_expression():
    m = Member(authorizer(), {})
    r = decode_response(68, 1, m.heartbeat(0, regex=".*").respond, 0)
    assert r.error_code == 30


def test_later_heartbeats_resolve_again_once_the_listing_is_old(monkeypatch):
    """A topic created later, or an ACL granted or revoked later, changes the names forwarded;
    until the listing is older than Kafka's 10 s between resolutions, heartbeats go as they are."""
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    up = FakeUpstream(TOPICS)
    a = alice_acls()
    state: dict = {}
    m = Member(a, state, upstream=up)
    assert m.forwarded(m.heartbeat(0, regex="mine-.*")) == (("mine-1", "mine-2"), None)
    up.topics.add("mine-3")
    assert m.heartbeat(1) is FORWARD  # resolved 0 s ago
    clock[0] += regex_subscriptions.REFRESH_MIN_INTERVAL_S + 1
    assert m.forwarded(m.heartbeat(1)) == (("mine-1", "mine-2", "mine-3"), None)
    clock[0] += regex_subscriptions.REFRESH_MIN_INTERVAL_S + 1
    assert m.heartbeat(1) is FORWARD  # nothing changed: nothing injected
    # an ACL revoked (a DENY added): the topic leaves the subscription at the next resolution
    from tests.unit.protocol.test_groups_enforcement import acl as make_acl
    import uuid
    a.apply_changes({uuid.uuid4(): make_acl(RT.TOPIC, "mine-2", Op.DESCRIBE, AclPermissionType.DENY)}, [])
    clock[0] += regex_subscriptions.REFRESH_MIN_INTERVAL_S + 1
    assert m.forwarded(m.heartbeat(1)) == (("mine-1", "mine-3"), None)


def test_leaving_rejoining_without_expression_and_empty_expression_forget_the_member():
    state: dict = {}
    m = Member(alice_acls(acl(RT.TOPIC, "other", Op.DESCRIBE)), state)
    m.heartbeat(0, names=("other",), regex="mine-.*")
    table = RegexSubscriptions.of(state)
    assert table.get("g", "m1") is not None
    # the empty expression: only the explicit names remain at the broker
    assert m.forwarded(m.heartbeat(3, regex="")) == (("other",), "")
    assert table.get("g", "m1") is None
    m.heartbeat(0, regex="mine-.*")
    assert m.heartbeat(-1) is FORWARD and table.get("g", "m1") is None
    m.heartbeat(0, regex="mine-.*")
    assert m.heartbeat(0, names=("other",)) is FORWARD and table.get("g", "m1") is None


def test_version_0_has_no_expression_and_is_forwarded():
    m = Member(alice_acls(), {})
    assert m.heartbeat(0, names=("mine-1",), version=0) is FORWARD


def test_the_member_table_is_bounded():
    table = RegexSubscriptions(max_members=3)
    for i in range(10):
        table.put("g", f"m{i}", regex_subscriptions.RegexMember(".*", (), (), 1, 0.0))
    assert len(table) == 3 and table.get("g", "m9") is not None and table.get("g", "m0") is None


def test_invalid_expressions_are_not_logged_by_re2(capfd):
    with pytest.raises(InvalidRegex):
        compile_regex("a(")
    assert "re2" not in capfd.readouterr().err


def test_a_different_principal_heartbeating_as_the_member_resolves_with_its_own_authority():
    """Kafka resolves with the context of the heartbeat that triggered the refresh."""
    state: dict = {}
    a = authorizer(acl(RT.GROUP, "g", Op.READ), acl(RT.GROUP, "g", Op.READ, principal="User:mallory"),
                   acl(RT.TOPIC, "mine-", Op.DESCRIBE, pattern=PatternType.PREFIXED))
    alice = Member(a, state)
    assert alice.forwarded(alice.heartbeat(0, regex="mine-.*"))[0] == ("mine-1", "mine-2")
    mallory = Member(a, state, principal="mallory")
    assert mallory.forwarded(mallory.heartbeat(0, regex="mine-.*")) == ((), None)

