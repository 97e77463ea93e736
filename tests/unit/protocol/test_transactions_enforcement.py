"""Transaction APIs (22, 24, 25, 26, 28, 65, 66) against a real StandardAuthorizer (docs/authorization.md; KIP-679)."""

from __future__ import annotations

import io
import ipaddress
import logging
import uuid
from datetime import datetime, timedelta, timezone

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as H1
from kio.schema.request_header.v2.header import RequestHeader as H2
from kio.serial import entity_writer
from kio.static.primitive import i16, i32, i64

from authz.acl import AccessControlEntry, AclBinding, AclOperation as Op, AclPermissionType as Perm
from authz.acl import PatternType, ResourcePattern, ResourceType as RT
from authz.audit import AUDIT_LOGGER_NAME, TRACE
from authz.authorizer import AuthorizableRequestContext
from authz.principal import KafkaPrincipal
from authz.standard_authorizer import StandardAuthorizer
from protocol.apis.base import FORWARD
from protocol.apis.registry import REGISTRY
from protocol.auth_helper import AuthHelper
from protocol.codecs import decode_response, encode, request_class, response_class
from protocol.headers import is_flexible, parse_request_header

ALICE = "User:alice"


# -- helpers (also used by test_admin_enforcement) ---------------------------


def acl(rt, name, op, principal=ALICE, perm=Perm.ALLOW, pattern=PatternType.LITERAL):
    return AclBinding(ResourcePattern(rt, name, pattern), AccessControlEntry(principal, "*", op, perm))


def authorizer(*bindings, configs=None):
    a = StandardAuthorizer()
    a.configure(configs or {})
    a.load_snapshot({uuid.uuid4(): b for b in bindings})
    a.complete_initial_load()
    return a


def helper(authz, api_key, version, principal=ALICE, protocol="PLAINTEXT"):
    if authz is None:
        return AuthHelper(None, None)
    if isinstance(principal, str):
        t, _, n = principal.partition(":")
        principal = KafkaPrincipal(t, n)
    ctx = AuthorizableRequestContext("EXTERNAL", protocol, principal, ipaddress.ip_address("10.0.0.1"),
                                     api_key, version, "cli", 7)
    return AuthHelper(authz, ctx)


def frame_of(api_key, version, body) -> memoryview:
    header_cls = H2 if is_flexible(api_key, version) else H1
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(request_api_key=i16(api_key), request_api_version=i16(version),
                                              correlation_id=i32(7), client_id="cli"))
    out.write(encode(body))
    return memoryview(out.getvalue())


def enforce(authz, api_key, version, body, **ctx):
    """Run the registry's inspect + enforce; return (decision, auth helper, header)."""
    frame = frame_of(api_key, version, body)
    header = parse_request_header(frame)
    spec = REGISTRY[api_key]
    info = spec.inspect(header, frame)
    auth = helper(authz, api_key, version, **ctx)
    return spec.enforce(auth, header, frame, info), header


def answer(decision, api_key, version):
    assert decision.respond is not None, decision
    return decode_response(api_key, version, decision.respond, 0)


def forwarded_body(decision, api_key, version):
    """Decode the reduced request kgw forwards."""
    from protocol.codecs import decode_request
    return decode_request(api_key, version, decision.request, 0)


def audit(caplog):
    return [r for r in caplog.records if r.name == AUDIT_LOGGER_NAME]


def req(api_key, version, **fields):
    return request_class(api_key, version)(**fields)


# -- InitProducerId (22) -------------------------------------------------------


def init_pid(version=5, txn=None, enable2pc=False):
    fields = dict(transactional_id=txn, transaction_timeout=timedelta(seconds=60), producer_id=i64(-1),
                  producer_epoch=i16(-1))
    if version >= 6:
        fields.update(enable2_pc=enable2pc, keep_prepared_txn=False)
    cls = request_class(22, version)
    return cls(**{k: v for k, v in fields.items() if k in cls.__dataclass_fields__})


@pytest.mark.parametrize("version", [0, 3, 5, 6])
def test_init_producer_id_transactional_allowed_forwards(version):
    a = authorizer(acl(RT.TRANSACTIONAL_ID, "tx", Op.WRITE))
    decision, _ = enforce(a, 22, version, init_pid(version, "tx"))
    assert decision is FORWARD


@pytest.mark.parametrize("version", [0, 4, 6])
def test_init_producer_id_transactional_denied_is_53_whole(version, caplog):
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER_NAME)
    a = authorizer(acl(RT.TRANSACTIONAL_ID, "other", Op.WRITE))
    decision, _ = enforce(a, 22, version, init_pid(version, "tx"))
    r = answer(decision, 22, version)
    assert r.error_code == ErrorCode(53) and r.producer_id == -1 and r.producer_epoch == -1
    (rec,) = audit(caplog)
    assert rec.levelno == logging.INFO and "TransactionalId:LITERAL:tx" in rec.getMessage()
    assert "operation = WRITE" in rec.getMessage() and "for request = InitProducerId" in rec.getMessage()


def test_init_producer_id_two_phase_commit_needs_its_own_acl(caplog):
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER_NAME)
    a = authorizer(acl(RT.TRANSACTIONAL_ID, "tx", Op.WRITE))
    decision, _ = enforce(a, 22, 6, init_pid(6, "tx", enable2pc=True))
    r = answer(decision, 22, 6)
    assert r.error_code == ErrorCode(53) and r.ongoing_txn_producer_id == -1
    (rec,) = audit(caplog)
    assert "operation = TWO_PHASE_COMMIT" in rec.getMessage()
    a2 = authorizer(acl(RT.TRANSACTIONAL_ID, "tx", Op.WRITE), acl(RT.TRANSACTIONAL_ID, "tx", Op.TWO_PHASE_COMMIT))
    assert enforce(a2, 22, 6, init_pid(6, "tx", enable2pc=True))[0] is FORWARD
    # without enable2pc, TWO_PHASE_COMMIT is not consulted
    assert enforce(a, 22, 6, init_pid(6, "tx", enable2pc=False))[0] is FORWARD


def test_init_producer_id_idempotent_with_cluster_idempotent_write(caplog):
    caplog.set_level(TRACE, logger=AUDIT_LOGGER_NAME)
    a = authorizer(acl(RT.CLUSTER, "kafka-cluster", Op.IDEMPOTENT_WRITE))
    assert enforce(a, 22, 4, init_pid(4))[0] is FORWARD
    (rec,) = audit(caplog)
    assert rec.levelno == logging.DEBUG and "Cluster:LITERAL:kafka-cluster" in rec.getMessage()


def test_init_producer_id_idempotent_with_write_on_any_topic_by_resource_type(caplog):
    caplog.set_level(TRACE, logger=AUDIT_LOGGER_NAME)
    a = authorizer(acl(RT.TOPIC, "orders", Op.WRITE))
    assert enforce(a, 22, 4, init_pid(4))[0] is FORWARD
    recs = audit(caplog)
    # IDEMPOTENT_WRITE denied with D=false (TRACE), then the KIP-679 probe on "hardcode" (refCount 0, D=false)
    assert [r.levelno for r in recs] == [TRACE, TRACE]
    assert "operation = IDEMPOTENT_WRITE" in recs[0].getMessage()
    probe = recs[1].getMessage()
    assert "on resource = Topic:LITERAL:hardcode" in probe and "resourceRefCount = 0" in probe
    assert "operation = WRITE" in probe and "for request = InitProducerId" in probe


def test_init_producer_id_prefixed_write_counts_but_read_does_not():
    assert enforce(authorizer(acl(RT.TOPIC, "ord", Op.WRITE, pattern=PatternType.PREFIXED)), 22, 4,
                   init_pid(4))[0] is FORWARD
    # authorizeByResourceType has no implied operations: an ALLOW READ on a topic does not count
    d, _ = enforce(authorizer(acl(RT.TOPIC, "orders", Op.READ)), 22, 4, init_pid(4))
    assert answer(d, 22, 4).error_code == ErrorCode(31)


def test_init_producer_id_idempotent_denied_is_31_and_logs_nothing_at_info(caplog):
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER_NAME)
    a = authorizer(acl(RT.TOPIC, "orders", Op.WRITE, principal="User:bob"))
    decision, _ = enforce(a, 22, 5, init_pid(5))
    r = answer(decision, 22, 5)
    assert r.error_code == ErrorCode(31) and r.producer_id == -1 and r.producer_epoch == -1
    assert audit(caplog) == []  # both checks are D=false


def test_init_producer_id_deny_wins_in_by_resource_type():
    a = authorizer(acl(RT.TOPIC, "orders", Op.WRITE), acl(RT.TOPIC, "*", Op.WRITE, perm=Perm.DENY))
    assert answer(enforce(a, 22, 5, init_pid(5))[0], 22, 5).error_code == ErrorCode(31)


def test_init_producer_id_no_authorizer_forwards():
    assert enforce(None, 22, 5, init_pid(5))[0] is FORWARD


# -- AddPartitionsToTxn (24) -----------------------------------------------------


def add_parts(version, topics, txn="tx"):
    cls = request_class(24, version)
    topic_cls = cls.__dataclass_fields__["v3_and_below_topics"].type.__args__[0]
    return cls(v3_and_below_transactional_id=txn, v3_and_below_producer_id=i64(1), v3_and_below_producer_epoch=i16(0),
               v3_and_below_topics=tuple(topic_cls(name=n, partitions=tuple(i32(p) for p in ps)) for n, ps in topics))


def codes_v3(resp):
    return {(t.name, p.partition_index): int(p.partition_error_code)
            for t in resp.results_by_topic_v3_and_below for p in t.results_by_partition}


@pytest.mark.parametrize("version", [0, 3])
def test_add_partitions_all_allowed_forwards(version):
    a = authorizer(acl(RT.TRANSACTIONAL_ID, "tx", Op.WRITE), acl(RT.TOPIC, "a", Op.WRITE), acl(RT.TOPIC, "b", Op.ALL))
    assert enforce(a, 24, version, add_parts(version, [("a", [0, 1]), ("b", [0])]))[0] is FORWARD


@pytest.mark.parametrize("version", [0, 3])
def test_add_partitions_txn_denied_is_53_on_every_partition(version):
    a = authorizer(acl(RT.TOPIC, "a", Op.WRITE))
    d, _ = enforce(a, 24, version, add_parts(version, [("a", [0, 1]), ("b", [2])]))
    assert codes_v3(answer(d, 24, version)) == {("a", 0): 53, ("a", 1): 53, ("b", 2): 53}


def test_add_partitions_mixed_denied_29_others_55_nothing_forwarded(caplog):
    caplog.set_level(logging.DEBUG, logger=AUDIT_LOGGER_NAME)
    a = authorizer(acl(RT.TRANSACTIONAL_ID, "tx", Op.WRITE), acl(RT.TOPIC, "a", Op.WRITE))
    d, _ = enforce(a, 24, 3, add_parts(3, [("a", [0, 1]), ("b", [0, 1, 2])]))
    assert d.request is None and d.merge is None
    resp = answer(d, 24, 3)
    assert [t.name for t in resp.results_by_topic_v3_and_below] == ["a", "b"]
    assert codes_v3(resp) == {("a", 0): 55, ("a", 1): 55, ("b", 0): 29, ("b", 1): 29, ("b", 2): 29}
    topic_lines = [r.getMessage() for r in audit(caplog) if "Topic:LITERAL" in r.getMessage()]
    assert any("Topic:LITERAL:a" in m and "resourceRefCount = 2" in m for m in topic_lines)
    assert any("Topic:LITERAL:b" in m and "resourceRefCount = 3" in m and "is Denied" in m for m in topic_lines)


def test_add_partitions_internal_topic_always_29_and_never_checked(caplog):
    caplog.set_level(TRACE, logger=AUDIT_LOGGER_NAME)
    a = authorizer(configs={"super.users": ALICE})
    d, _ = enforce(a, 24, 2, add_parts(2, [("a", [0]), ("__consumer_offsets", [3])]))
    assert codes_v3(answer(d, 24, 2)) == {("a", 0): 55, ("__consumer_offsets", 3): 29}
    assert not any("__consumer_offsets" in r.getMessage() for r in audit(caplog))


@pytest.mark.parametrize("version", [4, 5])
def test_add_partitions_broker_form_needs_cluster_action(version):
    cls = request_class(24, version)
    txn_cls = cls.__dataclass_fields__["transactions"].type.__args__[0]
    body = cls(transactions=(txn_cls(transactional_id="tx", producer_id=i64(1), producer_epoch=i16(0),
                                     verify_only=True, topics=()),))
    d, _ = enforce(authorizer(acl(RT.TRANSACTIONAL_ID, "tx", Op.ALL), acl(RT.TOPIC, "*", Op.ALL)), 24, version, body)
    r = answer(d, 24, version)
    assert r.error_code == ErrorCode(31) and r.results_by_transaction == ()
    assert enforce(authorizer(acl(RT.CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION)), 24, version, body)[0] is FORWARD


# -- AddOffsetsToTxn (25) / EndTxn (26) ------------------------------------------


def add_offsets(version):
    return req(25, version, transactional_id="tx", producer_id=i64(1), producer_epoch=i16(0), group_id="g")


@pytest.mark.parametrize("version", [0, 4])
def test_add_offsets_checks_txn_then_group(version, caplog):
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER_NAME)
    d, _ = enforce(authorizer(acl(RT.GROUP, "g", Op.READ)), 25, version, add_offsets(version))
    assert answer(d, 25, version).error_code == ErrorCode(53)
    assert len(audit(caplog)) == 1  # group not consulted after the txn denial
    d, _ = enforce(authorizer(acl(RT.TRANSACTIONAL_ID, "tx", Op.WRITE)), 25, version, add_offsets(version))
    assert answer(d, 25, version).error_code == ErrorCode(30)
    ok = authorizer(acl(RT.TRANSACTIONAL_ID, "tx", Op.WRITE), acl(RT.GROUP, "g", Op.READ))
    assert enforce(ok, 25, version, add_offsets(version))[0] is FORWARD


@pytest.mark.parametrize("version", [0, 5])
def test_end_txn(version):
    body = req(26, version, transactional_id="tx", producer_id=i64(1), producer_epoch=i16(0), committed=True)
    d, _ = enforce(authorizer(acl(RT.TRANSACTIONAL_ID, "tx", Op.DESCRIBE)), 26, version, body)
    r = answer(d, 26, version)
    assert r.error_code == ErrorCode(53)
    if version >= 5:
        assert r.producer_id == -1 and r.producer_epoch == -1
    assert enforce(authorizer(acl(RT.TRANSACTIONAL_ID, "tx", Op.WRITE)), 26, version, body)[0] is FORWARD


# -- TxnOffsetCommit (28) -------------------------------------------------------


def txn_commit(version, topics):
    cls = request_class(28, version)
    topic_cls = cls.__dataclass_fields__["topics"].type.__args__[0]
    part_cls = topic_cls.__dataclass_fields__["partitions"].type.__args__[0]

    def part(p):
        f = dict(partition_index=i32(p), committed_offset=i64(5), committed_leader_epoch=i32(-1),
                 committed_metadata=None)
        return part_cls(**{k: v for k, v in f.items() if k in part_cls.__dataclass_fields__})

    fields = dict(transactional_id="tx", group_id="g", producer_id=i64(1), producer_epoch=i16(0),
                  generation_id=i32(-1), member_id="", group_instance_id=None,
                  topics=tuple(topic_cls(name=n, partitions=tuple(part(p) for p in ps)) for n, ps in topics))
    return cls(**{k: v for k, v in fields.items() if k in cls.__dataclass_fields__})


def codes_28(resp):
    return [(t.name, [(p.partition_index, int(p.error_code)) for p in t.partitions]) for t in resp.topics]


TXN_OK = (acl(RT.TRANSACTIONAL_ID, "tx", Op.WRITE), acl(RT.GROUP, "g", Op.READ))


@pytest.mark.parametrize("version", [0, 3, 5])
def test_txn_offset_commit_whole_request_errors(version):
    body = txn_commit(version, [("a", [0, 1]), ("b", [0])])
    d, _ = enforce(authorizer(acl(RT.GROUP, "g", Op.READ), acl(RT.TOPIC, "*", Op.READ)), 28, version, body)
    assert codes_28(answer(d, 28, version)) == [("a", [(0, 53), (1, 53)]), ("b", [(0, 53)])]
    d, _ = enforce(authorizer(acl(RT.TRANSACTIONAL_ID, "tx", Op.WRITE)), 28, version, body)
    assert codes_28(answer(d, 28, version)) == [("a", [(0, 30), (1, 30)]), ("b", [(0, 30)])]


def test_txn_offset_commit_all_topics_allowed_forwards():
    a = authorizer(*TXN_OK, acl(RT.TOPIC, "a", Op.READ), acl(RT.TOPIC, "b", Op.READ))
    assert enforce(a, 28, 3, txn_commit(3, [("a", [0]), ("b", [0])]))[0] is FORWARD


def test_txn_offset_commit_mixed_topics_reduced_and_merged(caplog):
    caplog.set_level(logging.DEBUG, logger=AUDIT_LOGGER_NAME)
    a = authorizer(*TXN_OK, acl(RT.TOPIC, "a", Op.READ))
    version = 3
    d, _ = enforce(a, 28, version, txn_commit(version, [("b", [0, 1]), ("a", [0]), ("b", [2])]))
    sent = forwarded_body(d, 28, version)
    assert [t.name for t in sent.topics] == ["a"] and sent.transactional_id == "tx" and sent.group_id == "g"
    b_line = [r.getMessage() for r in audit(caplog) if "Topic:LITERAL:b" in r.getMessage()]
    assert len(b_line) == 1 and "resourceRefCount = 2" in b_line[0]  # topic entries, not partitions
    cls = response_class(28, version)
    t_cls = cls.__dataclass_fields__["topics"].type.__args__[0]
    p_cls = t_cls.__dataclass_fields__["partitions"].type.__args__[0]
    upstream = encode(cls(throttle_time=timedelta(0), topics=(
        t_cls(name="a", partitions=(p_cls(partition_index=i32(0), error_code=ErrorCode(0)),)),)))
    merged = decode_response(28, version, d.merge(b"xx" + upstream, 2), 0)
    assert codes_28(merged) == [("b", [(0, 29), (1, 29), (2, 29)]), ("a", [(0, 0)])]


def test_txn_offset_commit_all_topics_denied_answered_locally():
    d, _ = enforce(authorizer(*TXN_OK), 28, 2, txn_commit(2, [("a", [0]), ("b", [1])]))
    assert codes_28(answer(d, 28, 2)) == [("a", [(0, 29)]), ("b", [(1, 29)])]


# -- DescribeTransactions (65) ---------------------------------------------------


def describe_response(states):
    cls = response_class(65, 0)
    s_cls = cls.__dataclass_fields__["transaction_states"].type.__args__[0]
    t_cls = s_cls.__dataclass_fields__["topics"].type.__args__[0]
    return encode(cls(throttle_time=timedelta(0), transaction_states=tuple(
        s_cls(error_code=ErrorCode(0), transactional_id=txn, transaction_state="Ongoing",
              transaction_timeout=timedelta(seconds=60),
              transaction_start_time=datetime.fromtimestamp(1700000000, tz=timezone.utc),
              producer_id=i64(5), producer_epoch=i16(1),
              topics=tuple(t_cls(topic=t, partitions=(i32(0),)) for t in topics))
        for txn, topics in states)))


def test_describe_transactions_per_id_53_and_topic_filter(caplog):
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER_NAME)
    a = authorizer(acl(RT.TRANSACTIONAL_ID, "t1", Op.DESCRIBE), acl(RT.TRANSACTIONAL_ID, "t3", Op.WRITE),
                   acl(RT.TOPIC, "visible", Op.DESCRIBE))
    d, _ = enforce(a, 65, 0, req(65, 0, transactional_ids=("t1", "t2", "t3")))
    assert forwarded_body(d, 65, 0).transactional_ids == ("t1", "t3")
    upstream = describe_response([("t1", ["visible", "hidden"]), ("t3", ["hidden"])])
    r = decode_response(65, 0, d.merge(upstream, 0), 0)
    assert [(s.transactional_id, int(s.error_code), [t.topic for t in s.topics]) for s in r.transaction_states] == [
        ("t1", 0, ["visible"]), ("t2", 53, []), ("t3", 0, [])]
    denied = [m.getMessage() for m in audit(caplog)]
    assert sum("TransactionalId:LITERAL:t2" in m for m in denied) == 1
    assert sum("Topic:LITERAL:hidden" in m for m in denied) == 2  # the topic filter logs its denials


def test_describe_transactions_all_denied_answered_locally():
    d, _ = enforce(authorizer(), 65, 0, req(65, 0, transactional_ids=("t1", "t2")))
    r = answer(d, 65, 0)
    assert [(s.transactional_id, int(s.error_code)) for s in r.transaction_states] == [("t1", 53), ("t2", 53)]


# -- ListTransactions (66) -------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2])
def test_list_transactions_filters_with_denials_logged(version, caplog):
    caplog.set_level(logging.INFO, logger=AUDIT_LOGGER_NAME)
    a = authorizer(acl(RT.TRANSACTIONAL_ID, "mine", Op.WRITE))
    body_fields = dict(state_filters=(), producer_id_filters=(), duration_filter=i64(-1), transactional_id_pattern=None)
    cls = request_class(66, version)
    d, _ = enforce(a, 66, version, cls(**{k: v for k, v in body_fields.items() if k in cls.__dataclass_fields__}))
    assert d.request is None and d.respond is None and d.merge is not None
    rcls = response_class(66, version)
    s_cls = rcls.__dataclass_fields__["transaction_states"].type.__args__[0]
    upstream = encode(rcls(throttle_time=timedelta(0), error_code=ErrorCode(0), unknown_state_filters=(),
                           transaction_states=tuple(s_cls(transactional_id=t, producer_id=i64(1),
                                                          transaction_state="Ongoing") for t in ("mine", "theirs"))))
    r = decode_response(66, version, d.merge(upstream, 0), 0)
    assert [s.transactional_id for s in r.transaction_states] == ["mine"]
    (rec,) = audit(caplog)
    assert rec.levelno == logging.INFO and "TransactionalId:LITERAL:theirs" in rec.getMessage()
