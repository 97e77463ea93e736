"""Consumer-group family enforcement (protocol/apis/groups.py) against a real StandardAuthorizer.

docs/authorization.md, group rows: resources, operations, error codes,
log flags (audit levels on ``kgw.authorizer``), reference counts and merge order.
"""

from __future__ import annotations

import io
import ipaddress
import re
import uuid
from datetime import timedelta

import pytest
from kio.serial import entity_writer
from kio.static.primitive import i16, i32, i64

from authz.acl import AccessControlEntry, AclBinding, AclOperation as Op, AclPermissionType, PatternType
from authz.acl import ResourcePattern, ResourceType as RT
from authz.audit import AUDIT_LOGGER_NAME, TRACE
from authz.authorizer import AuthorizableRequestContext
from authz.principal import KafkaPrincipal
from authz.standard_authorizer import StandardAuthorizer
from protocol.apis.base import FORWARD
from protocol.apis.registry import REGISTRY
from protocol.auth_helper import AuthHelper
from protocol.apis.group_common import nested
from protocol.codecs import decode_request, decode_response, encode, request_class, response_class
from protocol.headers import parse_request_header

ALICE = "User:alice"
MIN_OPS = -(2**31)


# -- helpers -----------------------------------------------------------------------------------


def acl(rt, name, op, perm=AclPermissionType.ALLOW, pattern=PatternType.LITERAL, principal=ALICE):
    return AclBinding(ResourcePattern(rt, name, pattern), AccessControlEntry(principal, "*", op, perm))


def authorizer(*bindings):
    a = StandardAuthorizer()
    a.configure({})
    a.load_snapshot({uuid.uuid4(): b for b in bindings})
    a.complete_initial_load()
    return a


class Resolving(AuthHelper):
    """An AuthHelper with the optional topic-id resolver groups.py looks for."""

    __slots__ = ("names",)

    def __init__(self, authz, context, names):
        super().__init__(authz, context)
        self.names = names

    def topic_name(self, topic_id):
        return self.names.get(topic_id)


def frame_of(api_key, version, body):
    header_cls = type(body).__header_schema__
    out = io.BytesIO()
    fields = dict(request_api_key=i16(api_key), request_api_version=i16(version), correlation_id=i32(7))
    if "client_id" in header_cls.__dataclass_fields__:
        fields["client_id"] = "c1"
    entity_writer(header_cls)(out, header_cls(**fields))
    out.write(encode(body))
    return memoryview(out.getvalue())


def enforce(api_key, version, body, authz, names=None):
    frame = frame_of(api_key, version, body)
    header = parse_request_header(frame)
    spec = REGISTRY[api_key]
    info = spec.inspect(header, frame)
    ctx = AuthorizableRequestContext("EXTERNAL", "PLAINTEXT", KafkaPrincipal("User", "alice"),
                                     ipaddress.ip_address("10.0.0.1"), api_key, version, "c1", 7)
    auth = AuthHelper(authz, ctx) if names is None else Resolving(authz, ctx, names)
    return spec.enforce(auth, header, frame, info)


def responded(api_key, version, decision):
    assert decision.respond is not None and decision.request is None and decision.close is None
    return decode_response(api_key, version, decision.respond, 0)


def forwarded(api_key, version, decision):
    assert decision.request is not None and decision.respond is None
    return decode_request(api_key, version, decision.request, 0)


def merged(api_key, version, decision, upstream):
    assert decision.merge is not None
    out = decision.merge(encode(upstream), 0)
    return decode_response(api_key, version, out, 0)


def req(api_key, version, **fields):
    return _make(request_class(api_key, version), fields)


def resp(api_key, version, **fields):
    from protocol.apis.group_common import _blank

    return _blank(response_class(api_key, version), **fields)


def _make(cls, fields):
    from protocol.apis.group_common import _blank

    return _blank(cls, **fields)


def sub(cls, field, **fields):
    return _make(nested(cls, field), fields)


_LINE = re.compile(r"is (Allowed|Denied) operation = (\w+) .* on resource = (\S+) .* resourceRefCount = (\d+)")


@pytest.fixture
def audit(caplog):
    caplog.set_level(TRACE, logger=AUDIT_LOGGER_NAME)

    def lines():
        out = []
        for r in caplog.records:
            if r.name != AUDIT_LOGGER_NAME:
                continue
            m = _LINE.search(r.getMessage())
            out.append((r.levelname, m.group(1), m.group(2), m.group(3), int(m.group(4))))
        return out

    return lines


def codes(entries, attr="error_code"):
    return [int(getattr(e, attr)) for e in entries]


# -- disabled ------------------------------------------------------------------------------------


def test_no_authorizer_forwards_everything():
    frame = frame_of(11, 5, req(11, 5, group_id="g", session_timeout=timedelta(seconds=6),
                                rebalance_timeout=timedelta(seconds=6), member_id="", protocol_type="consumer"))
    header = parse_request_header(frame)
    spec = REGISTRY[11]
    assert spec.enforce(AuthHelper(None, None), header, frame, spec.inspect(header, frame)) is FORWARD


# -- JoinGroup / Heartbeat / LeaveGroup / SyncGroup --------------------------------------------------


def join(v):
    return req(11, v, group_id="g1", session_timeout=timedelta(seconds=6), rebalance_timeout=timedelta(seconds=10),
               member_id="", protocol_type="consumer")


def test_join_group_allowed_forwards_and_keeps_broker_wait(audit):
    a = authorizer(acl(RT.GROUP, "g1", Op.READ))
    assert enforce(11, 9, join(9), a) is FORWARD
    assert audit() == [("DEBUG", "Allowed", "READ", "Group:LITERAL:g1", 1)]


@pytest.mark.parametrize("v,protocol_name", [(5, ""), (7, None), (9, None)])
def test_join_group_denied_whole_request_30(audit, v, protocol_name):
    r = responded(11, v, enforce(11, v, join(v), authorizer(acl(RT.GROUP, "g1", Op.DESCRIBE))))
    assert r.error_code == 30 and r.generation_id == -1 and r.protocol_name == protocol_name
    assert r.leader == "" and r.member_id == "" and r.members == ()
    assert audit() == [("INFO", "Denied", "READ", "Group:LITERAL:g1", 1)]


def test_heartbeat_and_leave_group_denied_30():
    a = authorizer()
    hb = responded(12, 4, enforce(12, 4, req(12, 4, group_id="g", generation_id=i32(1), member_id="m"), a))
    assert hb.error_code == 30
    lv = responded(13, 5, enforce(13, 5, req(13, 5, group_id="g", members=(
        sub(request_class(13, 5), "members", member_id="m"),)), a))
    assert lv.error_code == 30 and lv.members == ()
    assert enforce(12, 4, req(12, 4, group_id="g", generation_id=i32(1), member_id="m"),
                   authorizer(acl(RT.GROUP, "g", Op.READ))) is FORWARD


def test_sync_group_missing_protocol_is_82_before_auth(audit):
    body = req(14, 5, group_id="g", generation_id=i32(1), member_id="m", protocol_type=None, protocol_name="range")
    r = responded(14, 5, enforce(14, 5, body, authorizer()))
    assert r.error_code == 82 and r.assignment == b""
    assert audit() == []  # not authorized at all


def test_sync_group_denied_30_and_allowed_forwards():
    body = req(14, 5, group_id="g", generation_id=i32(1), member_id="m", protocol_type="consumer", protocol_name="range")
    r = responded(14, 5, enforce(14, 5, body, authorizer(acl(RT.GROUP, "g", Op.DESCRIBE))))
    assert r.error_code == 30 and r.protocol_type is None and r.protocol_name is None
    assert enforce(14, 5, body, authorizer(acl(RT.GROUP, "g", Op.ALL))) is FORWARD


# -- OffsetCommit --------------------------------------------------------------------------------------


def commit(v, topics):
    cls = request_class(8, v)
    t_cls = nested(cls, "topics")
    p_cls = nested(t_cls, "partitions")
    return req(8, v, group_id="g", generation_id_or_member_epoch=i32(1), member_id="m", topics=tuple(
        _make(t_cls, dict(name=name, partitions=tuple(
            _make(p_cls, dict(partition_index=i32(p), committed_offset=i64(5), committed_metadata=""))
            for p in parts)))
        for name, parts in topics))


def test_offset_commit_group_denied_30_on_every_partition(audit):
    r = responded(8, 8, enforce(8, 8, commit(8, [("a", [0, 1]), ("b", [0])]), authorizer()))
    assert [(t.name, codes(t.partitions)) for t in r.topics] == [("a", [30, 30]), ("b", [30])]
    assert audit() == [("INFO", "Denied", "READ", "Group:LITERAL:g", 1)]


def test_offset_commit_mixed_topics_reduced_and_merged_in_request_order(audit):
    a = authorizer(acl(RT.GROUP, "g", Op.READ), acl(RT.TOPIC, "ok", Op.READ))
    d = enforce(8, 8, commit(8, [("no", [0, 1]), ("ok", [0]), ("no", [2])]), a)
    fwd = forwarded(8, 8, d)
    assert [t.name for t in fwd.topics] == ["ok"] and fwd.group_id == "g" and fwd.member_id == "m"
    cls = response_class(8, 8)
    t_cls, p_cls = nested(cls, "topics"), nested(nested(cls, "topics"), "partitions")
    up = resp(8, 8, topics=(_make(t_cls, dict(name="ok", partitions=(_make(p_cls, dict(partition_index=i32(0))),))),))
    out = merged(8, 8, d, up)
    assert [(t.name, codes(t.partitions)) for t in out.topics] == [("no", [29, 29]), ("ok", [0]), ("no", [29])]
    # one batch call: refCount = topic entries naming the topic
    assert sorted(audit()[1:]) == [("DEBUG", "Allowed", "READ", "Topic:LITERAL:ok", 1),
                                   ("INFO", "Denied", "READ", "Topic:LITERAL:no", 2)]


def test_offset_commit_all_topics_denied_answered_by_kgw():
    a = authorizer(acl(RT.GROUP, "g", Op.READ))
    r = responded(8, 2, enforce(8, 2, commit(2, [("x", [0])]), a))
    assert [(t.name, codes(t.partitions)) for t in r.topics] == [("x", [29])]


def test_offset_commit_all_allowed_forwards():
    a = authorizer(acl(RT.GROUP, "g", Op.READ), acl(RT.TOPIC, "*", Op.READ))
    assert enforce(8, 9, commit(9, [("x", [0])]), a) is FORWARD


def test_offset_commit_v10_topic_ids_unresolvable_fail_closed_with_100():
    tid = uuid.uuid4()
    cls = request_class(8, 10)
    t_cls, p_cls = nested(cls, "topics"), nested(nested(cls, "topics"), "partitions")
    body = req(8, 10, group_id="g", member_id="m", topics=(_make(t_cls, dict(topic_id=tid, partitions=(
        _make(p_cls, dict(partition_index=i32(0), committed_offset=i64(1), committed_metadata=None)),))),))
    a = authorizer(acl(RT.GROUP, "g", Op.READ), acl(RT.TOPIC, "*", Op.READ))
    r = responded(8, 10, enforce(8, 10, body, a))
    assert r.topics[0].topic_id == tid and codes(r.topics[0].partitions) == [100]
    # with a resolver the name is authorized as usual
    assert enforce(8, 10, body, a, names={tid: "t"}) is FORWARD


# -- OffsetFetch ----------------------------------------------------------------------------------------


def fetch_single(v, topics):
    cls = request_class(9, v)
    t_cls = nested(cls, "topics")
    return req(9, v, group_id="g", topics=None if topics is None else tuple(
        _make(t_cls, dict(name=n, partition_indexes=tuple(i32(p) for p in ps))) for n, ps in topics))


def test_offset_fetch_v1_group_denied_30_on_each_partition():
    r = responded(9, 1, enforce(9, 1, fetch_single(1, [("a", [0, 1])]), authorizer()))
    assert codes(r.topics[0].partitions) == [30, 30]
    assert [p.committed_offset for p in r.topics[0].partitions] == [-1, -1]
    assert r.topics[0].partitions[0].metadata == ""


def test_offset_fetch_v7_group_denied_top_level_30():
    r = responded(9, 7, enforce(9, 7, fetch_single(7, [("a", [0])]), authorizer()))
    assert r.error_code == 30 and r.topics == ()


def test_offset_fetch_v7_named_topics_mixed(audit):
    a = authorizer(acl(RT.GROUP, "g", Op.DESCRIBE), acl(RT.TOPIC, "ok", Op.DESCRIBE))
    d = enforce(9, 7, fetch_single(7, [("no", [0]), ("ok", [3])]), a)
    assert [t.name for t in forwarded(9, 7, d).topics] == ["ok"]
    cls = response_class(9, 7)
    t_cls, p_cls = nested(cls, "topics"), nested(nested(cls, "topics"), "partitions")
    up = resp(9, 7, topics=(_make(t_cls, dict(name="ok", partitions=(_make(p_cls, dict(
        partition_index=i32(3), committed_offset=i64(42), metadata="")),))),))
    out = merged(9, 7, d, up)
    assert [t.name for t in out.topics] == ["no", "ok"]
    no = out.topics[0].partitions[0]
    assert (no.error_code, no.committed_offset, no.committed_leader_epoch) == (29, -1, -1)
    assert out.topics[1].partitions[0].committed_offset == 42
    assert ("INFO", "Denied", "DESCRIBE", "Topic:LITERAL:no", 1) in audit()


def test_offset_fetch_all_topics_filters_coordinator_answer_and_logs_denials(audit):
    a = authorizer(acl(RT.GROUP, "g", Op.DESCRIBE), acl(RT.TOPIC, "ok", Op.READ))
    d = enforce(9, 7, fetch_single(7, None), a)
    assert d.request is None and d.respond is None
    cls = response_class(9, 7)
    t_cls = nested(cls, "topics")
    up = resp(9, 7, topics=(_make(t_cls, dict(name="secret")), _make(t_cls, dict(name="ok"))))
    out = merged(9, 7, d, up)
    assert [t.name for t in out.topics] == ["ok"]
    assert ("INFO", "Denied", "DESCRIBE", "Topic:LITERAL:secret", 1) in audit()  # F, but D=true


def test_offset_fetch_v8_multi_group():
    a = authorizer(acl(RT.GROUP, "g1", Op.DESCRIBE), acl(RT.GROUP, "g3", Op.DESCRIBE), acl(RT.TOPIC, "ok", Op.DESCRIBE))
    cls = request_class(9, 8)
    g_cls = nested(cls, "groups")
    t_cls = nested(g_cls, "topics")
    body = req(9, 8, groups=(
        _make(g_cls, dict(group_id="g1", topics=(_make(t_cls, dict(name="ok", partition_indexes=(i32(0),))),
                                                 _make(t_cls, dict(name="no", partition_indexes=(i32(1),)))))),
        _make(g_cls, dict(group_id="g2", topics=None)),
        _make(g_cls, dict(group_id="g3", topics=None)),
    ))
    d = enforce(9, 8, body, a)
    fwd = forwarded(9, 8, d)
    assert [(g.group_id, None if g.topics is None else [t.name for t in g.topics]) for g in fwd.groups] == [
        ("g1", ["ok"]), ("g3", None)]
    rcls = response_class(9, 8)
    rg, rt = nested(rcls, "groups"), nested(nested(rcls, "groups"), "topics")
    rp = nested(rt, "partitions")
    up = resp(9, 8, groups=(
        _make(rg, dict(group_id="g1", topics=(_make(rt, dict(name="ok", partitions=(
            _make(rp, dict(partition_index=i32(0), committed_offset=i64(7), metadata="")),))),))),
        _make(rg, dict(group_id="g3", topics=(_make(rt, dict(name="ok")), _make(rt, dict(name="hidden"))))),
    ))
    out = merged(9, 8, d, up)
    assert [(g.group_id, int(g.error_code), [t.name for t in g.topics]) for g in out.groups] == [
        ("g1", 0, ["ok", "no"]), ("g2", 30, []), ("g3", 0, ["ok"])]
    assert codes(out.groups[0].topics[1].partitions) == [29]


def test_offset_fetch_v8_all_groups_denied_answered_locally():
    cls = request_class(9, 8)
    g_cls = nested(cls, "groups")
    body = req(9, 8, groups=(_make(g_cls, dict(group_id="a", topics=None)), _make(g_cls, dict(group_id="b", topics=()))))
    r = responded(9, 8, enforce(9, 8, body, authorizer()))
    assert [(g.group_id, int(g.error_code)) for g in r.groups] == [("a", 30), ("b", 30)]


# -- FindCoordinator ------------------------------------------------------------------------------------


def test_find_coordinator_v3_group_denied_top_level(audit):
    r = responded(10, 3, enforce(10, 3, req(10, 3, key="g", key_type=0), authorizer()))
    assert (r.error_code, r.error_message, r.node_id, r.host, r.port) == (30, "Group authorization failed.", -1, "", -1)
    assert audit() == [("INFO", "Denied", "DESCRIBE", "Group:LITERAL:g", 1)]


def test_find_coordinator_v1_transaction_denied_53_and_v0_group_allowed():
    r = responded(10, 1, enforce(10, 1, req(10, 1, key="tx", key_type=1), authorizer()))
    assert r.error_code == 53 and r.error_message == "Transactional Id authorization failed."
    assert enforce(10, 0, req(10, 0, key="g"), authorizer(acl(RT.GROUP, "g", Op.READ))) is FORWARD  # READ implies DESCRIBE


def test_find_coordinator_v4_batched_keys_mixed():
    a = authorizer(acl(RT.GROUP, "ok", Op.DESCRIBE))
    d = enforce(10, 4, req(10, 4, key_type=0, coordinator_keys=("no", "ok")), a)
    assert forwarded(10, 4, d).coordinator_keys == ("ok",)
    c_cls = nested(response_class(10, 4), "coordinators")
    up = resp(10, 4, coordinators=(_make(c_cls, dict(key="ok", node_id=i32(1), host="gw", port=i32(9))),))
    out = merged(10, 4, d, up)
    assert [(c.key, int(c.error_code), c.node_id, c.host) for c in out.coordinators] == [
        ("no", 30, -1, ""), ("ok", 0, 1, "gw")]


def test_find_coordinator_v6_share_keys_need_cluster_action():
    r = responded(10, 6, enforce(10, 6, req(10, 6, key_type=2, coordinator_keys=("g:t:0", "g:t:1")), authorizer()))
    assert [(c.key, int(c.error_code), c.error_message) for c in r.coordinators] == [
        ("g:t:0", 31, "Cluster authorization failed."), ("g:t:1", 31, "Cluster authorization failed.")]
    a = authorizer(acl(RT.CLUSTER, "kafka-cluster", Op.CLUSTER_ACTION))
    assert enforce(10, 6, req(10, 6, key_type=2, coordinator_keys=("g:t:0",)), a) is FORWARD


# -- DescribeGroups / ListGroups / DeleteGroups ------------------------------------------------------------


def test_describe_groups_mixed_with_authorized_operations(audit):
    a = authorizer(acl(RT.GROUP, "ok", Op.READ))
    d = enforce(15, 5, req(15, 5, groups=("no", "ok"), include_authorized_operations=True), a)
    assert forwarded(15, 5, d).groups == ("ok",)
    g_cls = nested(response_class(15, 5), "groups")
    up = resp(15, 5, groups=(_make(g_cls, dict(group_id="ok", group_state="Stable", authorized_operations=i32(0))),))
    out = merged(15, 5, d, up)
    assert [(g.group_id, int(g.error_code)) for g in out.groups] == [("no", 30), ("ok", 0)]
    assert out.groups[0].authorized_operations == MIN_OPS and out.groups[0].members == ()
    assert out.groups[1].authorized_operations == (1 << 3) | (1 << 8)  # READ implies DESCRIBE
    # ops computed with both flags off: TRACE lines only
    assert all(level == "TRACE" for level, *_ in audit()[2:])


def test_describe_groups_ops_not_requested_are_omitted():
    d = enforce(15, 5, req(15, 5, groups=("ok",), include_authorized_operations=False),
                authorizer(acl(RT.GROUP, "ok", Op.DESCRIBE)))
    g_cls = nested(response_class(15, 5), "groups")
    out = merged(15, 5, d, resp(15, 5, groups=(_make(g_cls, dict(group_id="ok", authorized_operations=i32(3400))),)))
    assert out.groups[0].authorized_operations == MIN_OPS


def test_describe_groups_v0_all_denied():
    r = responded(15, 0, enforce(15, 0, req(15, 0, groups=("a", "b")), authorizer()))
    assert [(g.group_id, int(g.error_code), g.group_state) for g in r.groups] == [("a", 30, ""), ("b", 30, "")]


def test_list_groups_cluster_describe_returns_all(audit):
    a = authorizer(acl(RT.CLUSTER, "kafka-cluster", Op.ALTER))  # ALTER implies DESCRIBE
    assert enforce(16, 4, req(16, 4, states_filter=()), a) is FORWARD


def test_list_groups_filters_per_group_without_logging_denials(audit):
    a = authorizer(acl(RT.GROUP, "mine-", Op.DESCRIBE, pattern=PatternType.PREFIXED))
    d = enforce(16, 5, req(16, 5), a)
    assert d.request is None and d.respond is None and d.merge is not None
    g_cls = nested(response_class(16, 5), "groups")
    up = resp(16, 5, groups=tuple(_make(g_cls, dict(group_id=g, protocol_type="consumer"))
                                  for g in ("mine-1", "other", "mine-2")))
    out = merged(16, 5, d, up)
    assert [g.group_id for g in out.groups] == ["mine-1", "mine-2"]
    lines = audit()
    assert ("TRACE", "Denied", "DESCRIBE", "Cluster:LITERAL:kafka-cluster", 1) in lines
    assert ("TRACE", "Denied", "DESCRIBE", "Group:LITERAL:other", 1) in lines
    assert not [line for line in lines if line[0] == "INFO"]


def test_delete_groups_distinct_refcount_one_and_merge(audit):
    a = authorizer(acl(RT.GROUP, "ok", Op.DELETE))
    d = enforce(42, 2, req(42, 2, groups_names=("no", "ok", "no")), a)
    assert forwarded(42, 2, d).groups_names == ("ok",)
    r_cls = nested(response_class(42, 2), "results")
    out = merged(42, 2, d, resp(42, 2, results=(_make(r_cls, dict(group_id="ok")),)))
    assert [(r.group_id, int(r.error_code)) for r in out.results] == [("no", 30), ("ok", 0)]
    assert sorted(audit()) == [("DEBUG", "Allowed", "DELETE", "Group:LITERAL:ok", 1),
                               ("INFO", "Denied", "DELETE", "Group:LITERAL:no", 1)]


def test_delete_groups_all_denied():
    r = responded(42, 0, enforce(42, 0, req(42, 0, groups_names=("a",)), authorizer()))
    assert [(x.group_id, int(x.error_code)) for x in r.results] == [("a", 30)]


# -- OffsetDelete -------------------------------------------------------------------------------------------


def offset_delete(topics):
    cls = request_class(47, 0)
    t_cls = nested(cls, "topics")
    p_cls = nested(t_cls, "partitions")
    return req(47, 0, group_id="g", topics=tuple(_make(t_cls, dict(name=n, partitions=tuple(
        _make(p_cls, dict(partition_index=i32(p))) for p in ps))) for n, ps in topics))


def test_offset_delete_group_needs_delete_top_level_30():
    r = responded(47, 0, enforce(47, 0, offset_delete([("t", [0])]), authorizer(acl(RT.GROUP, "g", Op.READ))))
    assert r.error_code == 30 and r.topics == ()


def test_offset_delete_topics_read_filter_and_top_level_error_wins():
    a = authorizer(acl(RT.GROUP, "g", Op.DELETE), acl(RT.TOPIC, "ok", Op.READ))
    d = enforce(47, 0, offset_delete([("no", [0]), ("ok", [1])]), a)
    assert [t.name for t in forwarded(47, 0, d).topics] == ["ok"]
    cls = response_class(47, 0)
    t_cls, p_cls = nested(cls, "topics"), nested(nested(cls, "topics"), "partitions")
    up = resp(47, 0, topics=(_make(t_cls, dict(name="ok", partitions=(_make(p_cls, dict(partition_index=i32(1))),))),))
    out = merged(47, 0, d, up)
    assert [(t.name, codes(t.partitions)) for t in out.topics] == [("no", [29]), ("ok", [0])]
    assert merged(47, 0, d, resp(47, 0, error_code=69)).topics == ()  # GROUP_ID_NOT_FOUND replaces all


def test_offset_delete_every_topic_denied_still_asks_the_coordinator():
    d = enforce(47, 0, offset_delete([("no", [0])]), authorizer(acl(RT.GROUP, "g", Op.DELETE)))
    assert forwarded(47, 0, d).topics == ()


# -- KIP-848 consumer groups -----------------------------------------------------------------------------------


def cgh(names):
    return req(68, 0, group_id="g", member_id="m", member_epoch=i32(0), rebalance_timeout=timedelta(seconds=10),
               subscribed_topic_names=names, topic_partitions=None)


def test_consumer_group_heartbeat(audit):
    assert responded(68, 0, enforce(68, 0, cgh(("a",)), authorizer())).error_code == 30
    a = authorizer(acl(RT.GROUP, "g", Op.READ), acl(RT.TOPIC, "a", Op.DESCRIBE))
    r = responded(68, 0, enforce(68, 0, cgh(("a", "b", "a")), a))
    assert r.error_code == 29 and r.member_id is None and r.assignment is None
    assert enforce(68, 0, cgh(("a", "a")), a) is FORWARD
    assert enforce(68, 0, cgh(None), a) is FORWARD
    assert ("INFO", "Denied", "DESCRIBE", "Topic:LITERAL:b", 1) in audit()


def cgd_group(cls, group_id, topics, target=()):
    g_cls = nested(cls, "groups")
    m_cls = nested(g_cls, "members")
    a_cls = nested(m_cls, "assignment")
    tp_cls = nested(a_cls, "topic_partitions")
    assign = lambda names: _make(a_cls, dict(topic_partitions=tuple(  # noqa: E731
        _make(tp_cls, dict(topic_id=uuid.uuid4(), topic_name=n, partitions=(i32(0),))) for n in names)))
    member = _make(m_cls, dict(member_id="m", client_id="c", client_host="/h", assignment=assign(topics),
                               target_assignment=assign(target)))
    return _make(g_cls, dict(group_id=group_id, group_state="Stable", members=(member,), authorized_operations=i32(0)))


def test_consumer_group_describe_group_and_topic_checks():
    a = authorizer(acl(RT.GROUP, "*", Op.DESCRIBE), acl(RT.GROUP, "no", Op.DESCRIBE, AclPermissionType.DENY),
                   acl(RT.TOPIC, "ok", Op.DESCRIBE))
    d = enforce(69, 1, req(69, 1, group_ids=("no", "g1", "g2"), include_authorized_operations=True), a)
    assert forwarded(69, 1, d).group_ids == ("g1", "g2")
    cls = response_class(69, 1)
    up = resp(69, 1, groups=(cgd_group(cls, "g1", ["ok"]), cgd_group(cls, "g2", ["ok"], target=["secret"])))
    out = merged(69, 1, d, up)
    assert [(g.group_id, int(g.error_code)) for g in out.groups] == [("no", 30), ("g1", 0), ("g2", 29)]
    assert out.groups[1].authorized_operations == 1 << 8
    assert out.groups[2].error_message == (
        "The group has described topic(s) that the client is not authorized to describe.")
    assert out.groups[2].members == () and out.groups[2].authorized_operations == MIN_OPS


# -- share groups ---------------------------------------------------------------------------------------------------


def test_share_group_heartbeat():
    body = req(76, 1, group_id="g", member_id="m" * 22, member_epoch=i32(0), subscribed_topic_names=("t",))
    assert responded(76, 1, enforce(76, 1, body, authorizer())).error_code == 30
    a = authorizer(acl(RT.GROUP, "g", Op.READ))
    assert responded(76, 1, enforce(76, 1, body, a)).error_code == 29
    bad = req(76, 1, group_id="g", member_id="", member_epoch=i32(0), subscribed_topic_names=None)
    r = responded(76, 1, enforce(76, 1, bad, a))
    assert r.error_code == 42 and r.error_message == "Invalid member id in the request."
    assert enforce(76, 1, body, authorizer(acl(RT.GROUP, "g", Op.READ), acl(RT.TOPIC, "t", Op.READ))) is FORWARD


def test_share_group_describe_checks_assignment_topics():
    a = authorizer(acl(RT.GROUP, "g", Op.DESCRIBE))
    d = enforce(77, 1, req(77, 1, group_ids=("g",)), a)
    cls = response_class(77, 1)
    g_cls = nested(cls, "groups")
    m_cls = nested(g_cls, "members")
    a_cls = nested(m_cls, "assignment")
    tp_cls = nested(a_cls, "topic_partitions")
    member = _make(m_cls, dict(member_id="m", assignment=_make(a_cls, dict(topic_partitions=(
        _make(tp_cls, dict(topic_id=uuid.uuid4(), topic_name="t", partitions=(i32(0),))),)))))
    out = merged(77, 1, d, resp(77, 1, groups=(_make(g_cls, dict(group_id="g", members=(member,))),)))
    assert int(out.groups[0].error_code) == 29


def share_fetch(tids):
    cls = request_class(78, 1)
    t_cls = nested(cls, "topics")
    p_cls = nested(t_cls, "partitions")
    return req(78, 1, group_id="g", member_id="m", share_session_epoch=i32(0), max_wait=timedelta(0),
               topics=tuple(_make(t_cls, dict(topic_id=t, partitions=(_make(p_cls, dict(partition_index=i32(0))),)))
                            for t in tids), forgotten_topics_data=())


def test_share_fetch_group_read_and_topic_ids():
    t1, t2 = uuid.uuid4(), uuid.uuid4()
    assert responded(78, 1, enforce(78, 1, share_fetch([t1]), authorizer())).error_code == 30
    a = authorizer(acl(RT.GROUP, "g", Op.READ), acl(RT.TOPIC, "ok", Op.READ))
    # no resolver: ids are unknown, fail closed with 100
    d = enforce(78, 1, share_fetch([t1]), a)
    assert forwarded(78, 1, d).topics == ()
    out = merged(78, 1, d, resp(78, 1))
    assert [(t.topic_id, codes(t.partitions)) for t in out.responses] == [(t1, [100])]
    # with a resolver: TOPIC:READ per topic, partial forwarding
    d = enforce(78, 1, share_fetch([t1, t2]), a, names={t1: "ok", t2: "no"})
    assert [t.topic_id for t in forwarded(78, 1, d).topics] == [t1]
    assert enforce(78, 1, share_fetch([t1]), a, names={t1: "ok"}) is FORWARD


def test_share_acknowledge_all_denied_answered_locally():
    t1 = uuid.uuid4()
    cls = request_class(79, 1)
    t_cls = nested(cls, "topics")
    p_cls = nested(t_cls, "partitions")
    body = req(79, 1, group_id="g", member_id="m", share_session_epoch=i32(1), topics=(
        _make(t_cls, dict(topic_id=t1, partitions=(_make(p_cls, dict(partition_index=i32(2))),))),))
    r = responded(79, 1, enforce(79, 1, body, authorizer(acl(RT.GROUP, "g", Op.READ)), names={t1: "x"}))
    assert [(t.topic_id, codes(t.partitions)) for t in r.responses] == [(t1, [29])]


def test_share_group_offsets_apis():
    a = authorizer(acl(RT.GROUP, "g", Op.DESCRIBE), acl(RT.TOPIC, "ok", Op.DESCRIBE))
    cls = request_class(90, 1)
    g_cls = nested(cls, "groups")
    t_cls = nested(g_cls, "topics")
    body = req(90, 1, groups=(_make(g_cls, dict(group_id="g", topics=(
        _make(t_cls, dict(topic_name="no", partitions=(i32(0),))),))), _make(g_cls, dict(group_id="x", topics=None))))
    d = enforce(90, 1, body, a)
    assert [(g.group_id, g.topics) for g in forwarded(90, 1, d).groups] == [("g", ())]
    rg = nested(response_class(90, 1), "groups")
    out = merged(90, 1, d, resp(90, 1, groups=(_make(rg, dict(group_id="g")),)))
    assert [(g.group_id, int(g.error_code)) for g in out.groups] == [("g", 0), ("x", 30)]
    p = out.groups[0].topics[0].partitions[0]
    assert (int(p.error_code), p.error_message, p.start_offset) == (29, "Topic authorization failed.", -1)
    # Alter: GROUP:READ; Delete: GROUP:DELETE, whole-request 30 with message
    alter = request_class(91, 0)
    r = responded(91, 0, enforce(91, 0, req(91, 0, group_id="g", topics=()), a))
    assert (int(r.error_code), r.error_message) == (30, "Group authorization failed.")
    r = responded(92, 0, enforce(92, 0, req(92, 0, group_id="g", topics=()), a))
    assert int(r.error_code) == 30
    b = authorizer(acl(RT.GROUP, "g", Op.DELETE), acl(RT.TOPIC, "ok", Op.READ))
    dt = nested(request_class(92, 0), "topics")
    d = enforce(92, 0, req(92, 0, group_id="g", topics=(_make(dt, dict(topic_name="no")), _make(dt, dict(topic_name="ok")))), b)
    assert [t.topic_name for t in forwarded(92, 0, d).topics] == ["ok"]
    rt = nested(response_class(92, 0), "responses")
    out = merged(92, 0, d, resp(92, 0, responses=(_make(rt, dict(topic_name="ok")),)))
    assert [(t.topic_name, int(t.error_code)) for t in out.responses] == [("no", 29), ("ok", 0)]
    assert alter is not None


# -- streams groups ----------------------------------------------------------------------------------------------


def streams_heartbeat(source_topics):
    cls = request_class(88, 0)
    topo_cls = nested(cls, "topology")
    sub_cls = nested(topo_cls, "subtopologies")
    topology = _make(topo_cls, dict(epoch=i32(1), subtopologies=(_make(sub_cls, dict(
        subtopology_id="0", source_topics=tuple(source_topics))),)))
    return req(88, 0, group_id="app", member_id="m", member_epoch=i32(0), rebalance_timeout=timedelta(seconds=10),
               topology=topology)


def test_streams_group_heartbeat():
    assert responded(88, 0, enforce(88, 0, streams_heartbeat(["in"]), authorizer())).error_code == 30
    a = authorizer(acl(RT.GROUP, "app", Op.READ), acl(RT.TOPIC, "in", Op.DESCRIBE))
    r = responded(88, 0, enforce(88, 0, streams_heartbeat(["in", "__consumer_offsets"]), a))
    assert r.error_code == 130 and "__consumer_offsets" in r.error_message
    r = responded(88, 0, enforce(88, 0, streams_heartbeat(["in", "bad name"]), a))
    assert r.error_code == 130 and r.error_message == "Topic names bad name are not valid topic names."
    assert responded(88, 0, enforce(88, 0, streams_heartbeat(["in", "out"]), a)).error_code == 29
    assert enforce(88, 0, streams_heartbeat(["in"]), a) is FORWARD


def test_streams_group_describe_topology_topics():
    a = authorizer(acl(RT.GROUP, "app", Op.DESCRIBE))
    d = enforce(89, 0, req(89, 0, group_ids=("app",)), a)
    cls = response_class(89, 0)
    g_cls = nested(cls, "groups")
    topo_cls = nested(g_cls, "topology")
    sub_cls = nested(topo_cls, "subtopologies")
    topo = _make(topo_cls, dict(epoch=i32(1), subtopologies=(_make(sub_cls, dict(subtopology_id="0",
                                                                                  source_topics=("in",))),)))
    out = merged(89, 0, d, resp(89, 0, groups=(_make(g_cls, dict(group_id="app", topology=topo)),)))
    g = out.groups[0]
    assert (int(g.error_code), g.topology, g.error_message) == (
        29, None, "The described group uses topics that the client is not authorized to describe.")
