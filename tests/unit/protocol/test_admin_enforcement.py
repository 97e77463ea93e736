"""Admin/security APIs (38-41, 55, 57, 71, 72, 74) against a real StandardAuthorizer (docs/authorization.md).

SASL (17, 36) is answered by the connection, the SCRAM APIs (50, 51) by protocol/apis/scram.py
(tests/unit/protocol/test_scram_api.py) and the client-quota APIs (48, 49) by
protocol/apis/quotas.py (tests/unit/protocol/test_quota_api.py): none has an enforcer."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

import pytest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8, i16, i32, i64

from authz.acl import AclOperation as Op, ResourceType as RT
from authz.audit import AUDIT_LOGGER_NAME
from authz.principal import KafkaPrincipal
from protocol.apis.base import FORWARD
from protocol.codecs import decode_response, encode, request_class, response_class
from tests.support.fake_services import FakeServices, FakeUpstream, settle
from tests.unit.protocol.test_transactions_enforcement import (ALICE, acl, answer, audit, authorizer, enforce,
                                                               forwarded_body)

CLUSTER = "kafka-cluster"


def build(api_key, version, **fields):
    cls = request_class(api_key, version)
    return cls(**{k: v for k, v in fields.items() if k in cls.__dataclass_fields__})


def nested_cls(cls, *path):
    for name in path:
        tp = cls.__dataclass_fields__[name].type
        args = getattr(tp, "__args__", None)
        cls = args[0] if args else tp
        if getattr(cls, "__args__", None):  # Optional[tuple[...]]
            cls = cls.__args__[0]
    return cls


# -- cluster-resource checks ------------------------------------------------------


def quorum(version):
    cls = request_class(55, version)
    t = nested_cls(cls, "topics")
    p = nested_cls(t, "partitions")
    return cls(topics=(t(topic_name="__cluster_metadata", partitions=(p(partition_index=i32(0)),)),))


def features(version):
    cls = request_class(57, version)
    f = nested_cls(cls, "feature_updates")
    fields = dict(feature="metadata.version", max_version_level=i16(20), upgrade_type=i8(1), allow_downgrade=False)
    upd = f(**{k: v for k, v in fields.items() if k in f.__dataclass_fields__})
    return build(57, version, timeout=timedelta(seconds=60), feature_updates=(upd,), validate_only=False)


CASES = [
    # (api key, versions, request builder, operation)
    (55, [0, 1, 2], quorum, Op.DESCRIBE),
    (57, [0, 1, 2], features, Op.ALTER),
    (74, [0, 1], lambda v: build(74, v, resource_types=()), Op.DESCRIBE_CONFIGS),
]


@pytest.mark.parametrize("api_key,versions,make_body,op", CASES, ids=[str(c[0]) for c in CASES])
def test_cluster_check_allowed_forwards_and_denied_is_31(api_key, versions, make_body, op, caplog):
    for version in versions:
        assert enforce(authorizer(acl(RT.CLUSTER, CLUSTER, op)), api_key, version, make_body(version))[0] is FORWARD
        assert enforce(authorizer(acl(RT.CLUSTER, CLUSTER, Op.ALL)), api_key, version,
                       make_body(version))[0] is FORWARD
        assert enforce(None, api_key, version, make_body(version))[0] is FORWARD
        caplog.clear()
        caplog.set_level(logging.INFO, logger=AUDIT_LOGGER_NAME)
        d, _ = enforce(authorizer(acl(RT.TOPIC, "*", Op.ALL)), api_key, version, make_body(version))
        assert d.respond is not None and d.request is None and d.merge is None
        (rec,) = audit(caplog)  # T/T: the denial is logged at INFO
        assert rec.levelno == logging.INFO and f"operation = {op.name}" in rec.getMessage()
        assert "Cluster:LITERAL:kafka-cluster" in rec.getMessage()


@pytest.mark.parametrize("version", [0, 2])
def test_describe_quorum_and_update_features_denied_top_level(version):
    r = answer(enforce(authorizer(), 55, version, quorum(version))[0], 55, version)
    assert r.error_code == ErrorCode(31) and r.topics == ()
    r = answer(enforce(authorizer(), 57, version, features(version))[0], 57, version)
    assert r.error_code == ErrorCode(31) and r.error_message == "Cluster authorization failed."
    assert getattr(r, "results", ()) == ()


@pytest.mark.parametrize("version", [0, 1])
def test_list_config_resources_denied(version):
    r = answer(enforce(authorizer(), 74, version, build(74, version, resource_types=()))[0], 74, version)
    assert r.error_code == ErrorCode(31)


# -- no check: telemetry ------------------------------------------------------


def test_telemetry_is_forwarded_without_any_check(caplog):
    import uuid as _uuid
    caplog.set_level(1, logger=AUDIT_LOGGER_NAME)
    a = authorizer()  # nothing allowed
    assert enforce(a, 71, 0, build(71, 0, client_instance_id=_uuid.uuid4()))[0] is FORWARD
    push = build(72, 0, client_instance_id=_uuid.uuid4(), subscription_id=i32(1), terminating=False,
                 compression_type=i8(0), metrics=b"")
    assert enforce(a, 72, 0, push)[0] is FORWARD
    assert audit(caplog) == []


# -- delegation tokens ------------------------------------------------------------------


def create_token(version, owner=None, renewers=(("User", "carol"),)):
    cls = request_class(38, version)
    r = nested_cls(cls, "renewers")
    return build(38, version, owner_principal_type=owner[0] if owner else None,
                 owner_principal_name=owner[1] if owner else None,
                 renewers=tuple(r(principal_type=t, principal_name=n) for t, n in renewers),
                 max_lifetime=timedelta(hours=1))


MINUS_ONE = (-1).to_bytes(8, "big", signed=True)


def token_error_bytes(code, owner, requester):
    """CreateDelegationToken v3 (flexible) error body, as Kafka's prepareResponse writes it."""
    def s(text):
        return bytes([len(text) + 1]) + text.encode()
    return (code.to_bytes(2, "big") + s(owner[0]) + s(owner[1]) + s(requester[0]) + s(requester[1])
            + MINUS_ONE * 3 + s("") + b"\x01" + bytes(4) + b"\x00")


def test_token_apis_refused_on_plaintext_even_for_super_users(caplog):
    caplog.set_level(1, logger=AUDIT_LOGGER_NAME)
    su = authorizer(configs={"super.users": ALICE})
    d, _ = enforce(su, 38, 3, create_token(3))
    # kio cannot decode the -1 timestamps Kafka sends (prepareResponse), so read the bytes
    assert d.respond == token_error_bytes(64, ("User", "alice"), ("User", "alice"))
    for key, body in ((39, build(39, 2, hmac=b"h", renew_period=timedelta(hours=1))),
                      (40, build(40, 2, hmac=b"h", expiry_time_period=timedelta(hours=1)))):
        raw = enforce(su, key, 2, body)[0].respond
        assert raw == (64).to_bytes(2, "big") + MINUS_ONE + bytes(4) + b"\x00"  # code, expiry -1, throttle, tags
    r = answer(enforce(su, 41, 3, build(41, 3, owners=None))[0], 41, 3)
    assert r.error_code == ErrorCode(64) and r.tokens == ()
    assert audit(caplog) == []  # the pre-check consults no ACL


def _at(ms: int):
    from datetime import datetime, timezone
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def token_upstream(*tokens):
    """A fake upstream whose DescribeDelegationToken knows ``tokens``: (hmac, owner, renewers, expired)."""
    up = FakeUpstream(principal="User:kgw")

    def describe(request, node_id):
        now = int(time.time() * 1000)
        rows = [("id-" + h.decode(), owner, "kgw", renewers, now - 1 if expired else now + 3_600_000, h)
                for h, owner, renewers, expired in tokens]
        return decode_response(41, 3, described_tokens(3, rows), 0)

    up.answers[41] = describe
    return FakeServices(up)


def test_token_apis_refuse_anonymous_on_ssl_and_token_authenticated_principals():
    a = authorizer(acl(RT.USER, "*", Op.ALL, principal="User:*"))
    d, _ = enforce(a, 40, 1, build(40, 1, hmac=b"h", expiry_time_period=timedelta(hours=1)),
                   principal="User:ANONYMOUS", protocol="SSL")
    assert d.respond[:2] == (64).to_bytes(2, "big")
    tok = KafkaPrincipal("User", "alice", token_authenticated=True)
    d, _ = enforce(a, 39, 1, build(39, 1, hmac=b"h", renew_period=timedelta(hours=1)),
                   principal=tok, protocol="SASL_SSL")
    assert d.respond[:2] == (64).to_bytes(2, "big")
    # SSL with a certificate principal, and SASL_PLAINTEXT: past the pre-check, to the owner check
    services = token_upstream((b"h", "CN=alice", [], False), (b"a", "alice", [], False))
    d = enforce(a, 39, 1, build(39, 1, hmac=b"h", renew_period=timedelta(hours=1)),
                principal="User:CN=alice", protocol="SSL")[0]
    assert settle(d, services) is FORWARD
    d = enforce(a, 40, 2, build(40, 2, hmac=b"a", expiry_time_period=timedelta(hours=1)), protocol="SASL_PLAINTEXT")[0]
    assert settle(d, services) is FORWARD


@pytest.mark.parametrize("key", [39, 40])
def test_renew_and_expire_only_by_owner_or_renewer(key):
    """The broker sees kgw's account (a renewer of every token kgw created), so kgw applies
    Kafka's controller rule itself: owner or listed renewer, else OWNER_MISMATCH (63)."""
    services = token_upstream((b"own", "alice", [], False), (b"ren", "bob", ["alice"], False),
                              (b"other", "bob", ["kgw"], False), (b"old", "bob", [], True))
    field = {"renew_period": timedelta(hours=1)} if key == 39 else {"expiry_time_period": timedelta(hours=1)}

    def decided(hmac):
        d = enforce(authorizer(), key, 2, build(key, 2, hmac=hmac, **field), protocol="SASL_SSL")[0]
        assert d.then is not None  # nothing is forwarded before the owner is known
        return settle(d, services)

    assert decided(b"own") is FORWARD
    assert decided(b"ren") is FORWARD
    assert decided(b"other").respond[:2] == (63).to_bytes(2, "big")  # kgw's own renewer entry counts for nobody
    # an expired token someone else owns: renewing says expired first, as Kafka's controller
    assert decided(b"old").respond[:2] == ((66 if key == 39 else 63)).to_bytes(2, "big")
    assert decided(b"unknown") is FORWARD  # the broker answers DELEGATION_TOKEN_NOT_FOUND


def test_create_token_for_self_names_the_owner_and_adds_kgw_as_renewer(caplog):
    """Without an owner the broker would make its requester -- kgw's account -- the owner."""
    caplog.set_level(1, logger=AUDIT_LOGGER_NAME)
    d = enforce(authorizer(), 38, 3, create_token(3), protocol="SASL_SSL")[0]
    decided = settle(d, FakeServices(FakeUpstream(principal="User:kgw")))
    sent = forwarded_body(decided, 38, 3)
    assert (sent.owner_principal_type, sent.owner_principal_name) == ("User", "alice")
    assert [(r.principal_type, r.principal_name) for r in sent.renewers] == [("User", "carol"), ("User", "kgw")]
    # the answer names the client as the requester, as Kafka's does
    cls = response_class(38, 3)
    upstream = encode(cls(error_code=ErrorCode(0), principal_type="User", principal_name="alice",
                          token_requester_principal_type="User", token_requester_principal_name="kgw",
                          issue_timestamp=_at(1), expiry_timestamp=_at(2), max_timestamp=_at(3), token_id="t",
                          hmac=b"h", throttle_time=timedelta(0)))
    r = decode_response(38, 3, decided.merge(upstream, 0), 0)
    assert (r.token_requester_principal_type, r.token_requester_principal_name) == ("User", "alice")
    # naming yourself as owner is still "self"
    d = enforce(authorizer(), 38, 3, create_token(3, ("User", "alice")), protocol="SASL_SSL")[0]
    assert forwarded_body(settle(d, FakeServices()), 38, 3).owner_principal_name == "alice"
    assert audit(caplog) == []


def test_create_token_only_v3_is_advertised():
    """Before v3 a request cannot name its owner: the broker would make kgw's account the owner."""
    from protocol.apis.registry import REGISTRY
    assert REGISTRY[38].versions == (3, 3)


def test_create_token_for_other_owner_needs_user_create_tokens(caplog):
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER_NAME)
    d, _ = enforce(authorizer(), 38, 3, create_token(3, ("User", "bob")), protocol="SASL_SSL")
    assert d.respond == token_error_bytes(65, ("User", "bob"), ("User", "alice"))
    (rec,) = audit(caplog)
    assert "operation = CREATE_TOKENS" in rec.getMessage() and "User:LITERAL:User:bob" in rec.getMessage()
    ok = authorizer(acl(RT.USER, "User:bob", Op.CREATE_TOKENS))
    d = enforce(ok, 38, 3, create_token(3, ("User", "bob")), protocol="SASL_SSL")[0]
    assert forwarded_body(settle(d, FakeServices()), 38, 3).owner_principal_name == "bob"


def test_create_token_renewer_must_be_a_user():
    d, _ = enforce(authorizer(), 38, 3, create_token(3, renewers=(("Group", "ops"),)), protocol="SASL_SSL")
    assert d.respond[:2] == (67).to_bytes(2, "big")


def described_tokens(version, tokens):
    cls = response_class(41, version)
    t_cls = nested_cls(cls, "tokens")
    r_cls = nested_cls(t_cls, "renewers")
    out = []
    for token_id, owner, requester, renewers, *rest in tokens:
        expiry, hmac = rest if rest else (2, b"x")
        f = dict(principal_type="User", principal_name=owner, token_requester_principal_type="User",
                 token_requester_principal_name=requester, issue_timestamp=i64(1), expiry_timestamp=i64(expiry),
                 max_timestamp=i64(max(expiry, 3)), token_id=token_id, hmac=hmac,
                 renewers=tuple(r_cls(principal_type="User", principal_name=n) for n in renewers))
        out.append(t_cls(**{k: v for k, v in f.items() if k in t_cls.__dataclass_fields__}))
    return encode(cls(error_code=ErrorCode(0), tokens=tuple(out), throttle_time=timedelta(0)))


def test_describe_tokens_filter(caplog):
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER_NAME)
    a = authorizer(acl(RT.DELEGATION_TOKEN, "t-id-ok", Op.DESCRIBE), acl(RT.USER, "User:erin", Op.DESCRIBE_TOKENS))
    d, _ = enforce(a, 41, 3, build(41, 3, owners=None), protocol="SASL_SSL")
    assert d.request is None and d.respond is None
    upstream = described_tokens(3, [
        ("t-own", "alice", "x", []),        # owner
        ("t-req", "zz", "alice", []),       # requester (v3)
        ("t-ren", "zz", "zz", ["alice"]),   # renewer
        ("t-id-ok", "zz", "zz", []),        # DELEGATION_TOKEN:DESCRIBE on its id
        ("t-erin", "erin", "erin", []),     # USER:DESCRIBE_TOKENS on the owner
        ("t-no", "dan", "dan", []),         # none of these
    ])
    r = decode_response(41, 3, d.merge(upstream, 0), 0)
    assert [t.token_id for t in r.tokens] == ["t-own", "t-req", "t-ren", "t-id-ok", "t-erin"]
    denied = [m.getMessage() for m in audit(caplog)]
    assert any("DelegationToken:LITERAL:t-no" in m for m in denied)
    assert any("User:LITERAL:User:dan" in m and "DESCRIBE_TOKENS" in m for m in denied)


def test_describe_tokens_owner_filter_excludes_unrequested():
    a = authorizer(configs={"super.users": ALICE})
    cls = request_class(41, 2)
    o = nested_cls(cls, "owners")
    d, _ = enforce(a, 41, 2, cls(owners=(o(principal_type="User", principal_name="bob"),)), protocol="SASL_SSL")
    upstream = described_tokens(2, [("t1", "bob", "", []), ("t2", "carol", "", ["bob"]), ("t3", "carol", "", [])])
    r = decode_response(41, 2, d.merge(upstream, 0), 0)
    assert [t.token_id for t in r.tokens] == ["t1", "t2"]
