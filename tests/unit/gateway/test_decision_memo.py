"""The StandardAuthorizer's memo of what one connection was allowed (authz/standard_authorizer.py,
``StandardDecisionMemo``), from the client's side, through the connection core with the
production gateway and authorizer: a producer allowed once is refused on its next request as
soon as the ACL, the super users or the principal that allowed it change; every decision the
memo answers is counted as the authorizer counts it, and reaches the audit log and sinks as soon
as they ask for allowed decisions."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from types import SimpleNamespace

import prometheus_client
import pytest
from kio.static.primitive import i16, i32

from authz.acl import (AccessControlEntry, AclBinding, AclOperation, AclPermissionType, PatternType,
                       ResourcePattern, ResourceType)
from authz.audit import AUDIT_LOGGER_NAME
from authz.authorizer import AuthorizableRequestContext
from authz.principal import KafkaPrincipal
from authz.standard_authorizer import MEMO_ACTIONS, StandardAuthorizer
from gateway.connection.core import ConnectionCore
from protocol.auth_helper import literal_action as _action
from protocol.apis.base import RequestInfo
from protocol.apis.produce import ProduceShape, TopicSpan
from protocol.apis.registry import REGISTRY
from protocol.codecs import decode_response
from tests.support.kio_samples import record_batch
from gateway.upstream.cluster import encode_request
from protocol.apis.api_versions import VersionRange, advertised_versions
from protocol.apis.registry import LOCAL_KEYS
from protocol.codecs import decode_request, encode, make, nested, request_class
from protocol.topic_ids import TopicCache
from protocol.framing import FrameDecoder
from protocol.headers import parse_request_header
from tests.unit.gateway.test_connection_core import _core, _gateway, _learn_versions, _produce, _produce_of
from tests.unit.protocol import test_fetch_enforcement as fetch_tests
from tests.unit.protocol.test_fetch_enforcement import fetch_request, upstream_response

TOPIC_AUTHORIZATION_FAILED = 29
INVALID_RECORD = 87
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


def _write_acl(principal: str, topic: str) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                      AccessControlEntry(principal, "*", AclOperation.WRITE, AclPermissionType.ALLOW))


def _setup(principal: str, topic: str, **config):
    """A gateway whose authorizer lets ``principal`` write ``topic`` (and counts decisions), a
    connection core of that principal, and the id of the ACL; calls to ``authorize`` listed."""
    gw = _gateway(authorizer=config)
    acl_id = uuid.uuid4()
    gw.authorizer.load_snapshot({acl_id: _write_acl(principal, topic)})
    gw.authorizer.complete_initial_load()
    registry = prometheus_client.CollectorRegistry()
    gw.authorizer.monitor(registry)
    _learn_versions(gw)
    core = _core(gw)
    core.principal = KafkaPrincipal(*principal.split(":", 1))
    calls: list = []
    real = gw.authorizer.authorize
    gw.authorizer.authorize = lambda context, actions: calls.append(context) or real(context, actions)
    return gw, core, acl_id, calls, registry


def _answered_error(core) -> int:
    """The error code kgw answered the last Produce with (v8: one topic, one partition)."""
    data = core.pending[-1].data
    response = decode_response(0, 8, memoryview(data), 8)
    return int(response.responses[0].partition_responses[0].error_code)


def test_a_revoked_acl_refuses_the_very_next_produce():
    gw, core, acl_id, calls, _ = _setup("User:memo-writer", "memo-orders")
    out: list = []
    for cid in range(1, 4):
        assert core.dispatch(_produce("memo-orders", cid), out) is False
    assert len(calls) == 1  # the memo answered the second and third
    gw.authorizer.apply_changes({}, [acl_id])
    assert core.dispatch(_produce("memo-orders", 4), out) is True
    assert _answered_error(core) == TOPIC_AUTHORIZATION_FAILED and len(out) == 3


def test_a_super_user_removed_by_reconfiguration_is_refused_next():
    gw, core, _, calls, _ = _setup("User:memo-other", "memo-elsewhere", **{"super.users": "User:memo-admin"})
    core.principal = KafkaPrincipal("User", "memo-admin")
    out: list = []
    assert core.dispatch(_produce("memo-audit", 1), out) is False
    assert core.dispatch(_produce("memo-audit", 2), out) is False
    gw.authorizer.reconfigure({"super.users": "User:someone-else"})
    assert core.dispatch(_produce("memo-audit", 3), out) is True
    assert _answered_error(core) == TOPIC_AUTHORIZATION_FAILED


def test_another_principal_on_the_connection_is_decided_afresh():
    """Re-authentication may change the principal: what the first was allowed is not the second's."""
    _, core, _, _, _ = _setup("User:memo-first", "memo-shared")
    out: list = []
    assert core.dispatch(_produce("memo-shared", 1), out) is False
    assert core.dispatch(_produce("memo-shared", 2), out) is False
    core.principal = KafkaPrincipal("User", "memo-second")
    assert core.dispatch(_produce("memo-shared", 3), out) is True
    assert _answered_error(core) == TOPIC_AUTHORIZATION_FAILED


def test_every_decision_the_memo_answers_is_counted():
    _, core, _, calls, registry = _setup("User:memo-counted", "memo-counts")
    out: list = []
    for cid in range(1, 8):
        assert core.dispatch(_produce("memo-counts", cid), out) is False
    assert len(calls) == 1
    assert registry.get_sample_value("kgw_authorizer_authorization_allowed_total", {"listener": "T"}) == 7
    assert registry.get_sample_value("kgw_authorizer_authorization_requests_total", {"listener": "T"}) == 7
    rate = registry.get_sample_value("kafka_server_plugins_authorization_allowed_rate_per_minute",
                                     {"class": "StandardAuthorizer", "config": "authorizer.class.name",
                                      "role": "broker"})
    assert rate == pytest.approx(7 * 60 / 30)  # Kafka's window: one fresh 30 s sample


def test_on_the_data_plane_the_memo_counts_once_the_request_has_gone_on():
    """A lane counts what its requests cost once they are written upstream (before their answers
    can be read): what the memo answers is put with the request counters, and counted with them."""
    _, core, _, calls, registry = _setup("User:memo-lane", "memo-lane")
    core.lane = SimpleNamespace(deferred=[])  # (what the dispatcher uses of a data-plane Lane)
    out: list = []
    for cid in range(1, 5):
        assert core.dispatch(_produce("memo-lane", cid), out) is False
    assert len(calls) == 1 and len(out) == 4

    def allowed() -> float | None:
        return registry.get_sample_value("kgw_authorizer_authorization_allowed_total", {"listener": "T"})

    assert allowed() == 1  # the first, decided by authorize; the memo's three wait for the write
    for counter in core.lane.deferred:
        counter.inc()
    assert allowed() == 4
    assert registry.get_sample_value("kgw_authorizer_authorization_requests_total", {"listener": "T"}) == 4


def test_an_audit_sink_added_later_gets_every_allowed_decision():
    gw, core, _, _, _ = _setup("User:memo-audited", "memo-sinks")
    out: list = []
    assert core.dispatch(_produce("memo-sinks", 1), out) is False
    assert core.dispatch(_produce("memo-sinks", 2), out) is False
    published: list = []
    gw.authorizer.add_audit_sink(published.append)
    assert core.dispatch(_produce("memo-sinks", 3), out) is False
    assert core.dispatch(_produce("memo-sinks", 4), out) is False
    assert [(e["kgw_allowed"], e["kgw_correlation_id"]) for e in published] == [(True, 3), (True, 4)]


def test_allowed_decisions_are_logged_as_soon_as_the_audit_log_is_at_debug(caplog):
    _, core, _, _, _ = _setup("User:memo-logged", "memo-debug")
    out: list = []
    assert core.dispatch(_produce("memo-debug", 1), out) is False
    assert core.dispatch(_produce("memo-debug", 2), out) is False
    with caplog.at_level(logging.DEBUG, logger=AUDIT_LOGGER_NAME):
        assert core.dispatch(_produce("memo-debug", 3), out) is False
        assert core.dispatch(_produce("memo-debug", 4), out) is False
    logged = [r.getMessage() for r in caplog.records if r.name == AUDIT_LOGGER_NAME]
    assert len(logged) == 2 and all("memo-logged" in m and "memo-debug" in m for m in logged)


def test_a_decision_taken_across_an_acl_change_is_not_remembered():
    gw, core, acl_id, _, _ = _setup("User:memo-racing", "memo-race")
    real = StandardAuthorizer.authorize

    def authorize_then_revoke(context, actions):  # the ACL goes while the decision is taken
        results = real(gw.authorizer, context, actions)
        gw.authorizer.apply_changes({}, [acl_id])
        return results

    gw.authorizer.authorize = authorize_then_revoke
    out: list = []
    assert core.dispatch(_produce("memo-race", 1), out) is False  # decided before the change
    gw.authorizer.authorize = real.__get__(gw.authorizer)
    assert core.dispatch(_produce("memo-race", 2), out) is True
    assert _answered_error(core) == TOPIC_AUTHORIZATION_FAILED


def _context(principal: KafkaPrincipal, host: str = "127.0.0.1") -> AuthorizableRequestContext:
    import ipaddress

    return AuthorizableRequestContext("T", "PLAINTEXT", principal, ipaddress.ip_address(host), 0, 9, "c", 1)


def test_the_memo_keeps_only_its_own_principals_and_hosts_decisions():
    authorizer = StandardAuthorizer()
    authorizer.configure({"super.users": "User:memo-a;User:memo-b"})
    authorizer.complete_initial_load()
    a = KafkaPrincipal("User", "memo-a")
    memo = authorizer.decision_memo(_context(a))
    action = _action(ResourceType.TOPIC, "memo-any", AclOperation.WRITE, 1, True, True)
    assert memo.decide(_context(KafkaPrincipal("User", "memo-b")), action) is True
    assert memo.decide(_context(a, "10.0.0.9"), action) is True
    assert not memo.allows(action)
    assert memo.decide(_context(a), action) is True
    assert memo.allows(action)


def test_the_memo_holds_a_bounded_number_of_actions():
    authorizer = StandardAuthorizer()
    authorizer.configure({"super.users": "User:memo-bounded"})
    authorizer.complete_initial_load()
    context = _context(KafkaPrincipal("User", "memo-bounded"))
    memo = authorizer.decision_memo(context)
    actions = [_action(ResourceType.TOPIC, f"memo-{i}", AclOperation.WRITE, 1, True, True)
               for i in range(MEMO_ACTIONS * 3)]
    for action in actions:
        assert memo.decide(context, action) is True
    assert 0 < len(memo) <= MEMO_ACTIONS
    assert memo.allows(actions[-1])


def test_an_authorizer_deciding_its_own_way_gets_no_memo():
    class Stricter(StandardAuthorizer):
        def authorize(self, context, actions):
            return super().authorize(context, actions)

    assert Stricter().decision_memo(_context(KafkaPrincipal("User", "memo-sub"))) is None


# -- the usual Produce, forwarded on the memo's word alone (ApiSpec.sole_action) -----------------

def _remembered(topic: str):
    """A connection whose principal may write ``topic`` and has done so twice (remembered); the
    calls to ConnectionCore._auth_helper (the way into an API's enforcement) listed."""
    gw, core, acl_id, calls, _ = _setup("User:memo-usual", topic)
    out: list = []
    assert core.dispatch(_produce(topic, 1), out) is False
    assert core.dispatch(_produce(topic, 2), out) is False
    return gw, core, acl_id, calls, out


def test_the_usual_produce_goes_on_a_remembered_allowance_without_its_enforcement(monkeypatch):
    helpers: list = []
    real = ConnectionCore._auth_helper
    monkeypatch.setattr(ConnectionCore, "_auth_helper", lambda self, *a: helpers.append(a) or real(self, *a))
    _, core, _, calls, out = _remembered("memo-usual-orders")
    frames = [_produce("memo-usual-orders", cid) for cid in range(3, 6)]
    for frame in frames:
        assert core.dispatch(frame, out) is False
    assert len(helpers) == 1 and len(calls) == 1  # only the first request was enforced and decided
    assert out[2:] == frames and all(sent is frame for sent, frame in zip(out[2:], frames))  # as they came


@pytest.mark.parametrize("shape, records, error", [
    ("two batches in one partition", record_batch(b"a") + record_batch(b"b"), INVALID_RECORD),
    ("a transactional batch, its id not allowed", record_batch(b"t", producer_id=7, attributes=0x10),
     TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
])
def test_a_remembered_topic_write_does_not_carry_a_produce_of_another_shape(shape, records, error):
    _, core, _, _, out = _remembered("memo-shapes")
    transactional_id = "memo-shapes-txn" if error == TRANSACTIONAL_ID_AUTHORIZATION_FAILED else None
    assert core.dispatch(_produce_of({"memo-shapes": records}, 3, transactional_id), out) is True, shape
    assert _answered_error(core) == error and len(out) == 2  # answered by kgw, nothing forwarded


def test_a_remembered_topic_does_not_carry_another_topic_in_the_same_request():
    _, core, _, _, out = _remembered("memo-mixed")
    frame = _produce_of({"memo-mixed": record_batch(b"ok"), "memo-mixed-not-mine": record_batch(b"no")}, 3)
    assert core.dispatch(frame, out) is False  # the allowed topic goes on, the other is answered
    assert len(out) == 3 and b"memo-mixed" in bytes(out[2]) and b"memo-mixed-not-mine" not in bytes(out[2])
    assert core.pending[-1].merge is not None


def test_a_produce_naming_its_topic_by_id_is_asked_about_the_name_learned():
    """From v13 a topic is named by id: the usual request's one action is on the name the
    gateway learned for that id, as its enforcement names it; an id it did not learn has none
    (the enforcement answers UNKNOWN_TOPIC_ID)."""
    learned = TopicCache()
    topic_id = uuid.uuid4()
    learned.learn("memo-by-id", topic_id)

    def sole(tid):
        by_id = TopicSpan(None, [0, 1], 0, 0, 0, 0, [(0, 0), (0, 0)], None, tid)
        return REGISTRY[0].sole_action(None, RequestInfo(True, 1.0, ProduceShape(None, 1, 1000, [by_id], False, 0, 0)),
                                       None, learned)

    assert sole(topic_id) is _action(ResourceType.TOPIC, "memo-by-id", AclOperation.WRITE, 2)
    assert sole(uuid.uuid4()) is None


def _v13_setup(principal: str, topics: list[str]):
    """_setup's gateway advertising Produce v13, the ids of ``topics`` learned (the first one's
    writable by ``principal``); and a maker of a v13 Produce to a topic by its id."""
    gw, core, acl_id, calls, registry = _setup(principal, topics[0])
    ids = {name: uuid.uuid4() for name in topics}
    for name, topic_id in ids.items():
        gw.topic_ids.learn(name, topic_id)
    gw.cluster.versions = {**gw.cluster.versions, 0: VersionRange(3, 13)}
    gw._advertised = advertised_versions(gw.cluster.versions, LOCAL_KEYS, REGISTRY, True)
    gw._advertised_for = gw.cluster.versions
    cls = request_class(0, 13)
    topic_cls = nested(cls, "topic_data")
    part_cls = nested(topic_cls, "partition_data")

    def produce(name: str, cid: int) -> memoryview:
        return memoryview(encode_request(0, 13, cid, make(cls, transactional_id=None, acks=i16(-1),
                          timeout=timedelta(seconds=1), topic_data=(make(topic_cls, topic_id=ids[name], partition_data=(
                              make(part_cls, index=i32(0), records=record_batch(b"v")),)),))))

    return gw, core, calls, produce


def _v13_error(core) -> int:
    response = decode_response(0, 13, memoryview(core.pending[-1].data), 9)  # (a flexible header)
    return int(response.responses[0].partition_responses[0].error_code)


def test_a_v13_produce_by_a_learned_id_is_refused_as_soon_as_its_acl_goes():
    """The memo's word for a topic named by id holds exactly as long as for one named by name."""
    gw, core, calls, produce = _v13_setup("User:memo-id-writer", ["memo-id-orders"])
    out: list = []
    assert core.dispatch(produce("memo-id-orders", 1), out) is False
    assert core.dispatch(produce("memo-id-orders", 2), out) is False
    assert len(calls) == 1  # the second on the memo's word
    gw.authorizer.load_snapshot({})
    assert core.dispatch(produce("memo-id-orders", 3), out) is True and len(out) == 2
    assert _v13_error(core) == TOPIC_AUTHORIZATION_FAILED


def test_a_remembered_topic_does_not_carry_another_learned_id():
    """Two ids learned, one topic writable: after the first was allowed (and remembered), the
    other's id is asked about under its own name, and refused."""
    gw, core, calls, produce = _v13_setup("User:memo-ids", ["memo-ids-mine", "memo-ids-theirs"])
    out: list = []
    assert core.dispatch(produce("memo-ids-mine", 1), out) is False
    assert core.dispatch(produce("memo-ids-theirs", 2), out) is True and len(out) == 1
    assert _v13_error(core) == TOPIC_AUTHORIZATION_FAILED


# -- the usual Fetch of a session, forwarded on the memo's word alone (ApiSpec.sole_action) ------

_ORDERS_ID = uuid.UUID(int=0x0A)


def _read_acl(principal: str, topic: str) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                      AccessControlEntry(principal, "*", AclOperation.READ, AclPermissionType.ALLOW))


def _fetch_frame(version: int, cid: int, topics, session_id: int, epoch: int, forgotten=(),
                 replica_id: int = -1) -> memoryview:
    return memoryview(encode_request(1, version, cid, fetch_request(version, topics, session_id, epoch,
                                                                    replica_id=replica_id, forgotten=forgotten)))


def _answer(core, version: int, cid: int, session_id: int = 0) -> None:
    """The upstream's answer to the request in flight (records of orders-0 and -1)."""
    body = b"\x00" + encode(upstream_response(version, [("orders", [(0, None), (1, None)])], session_id=session_id))
    decoder = FrameDecoder(1 << 20, trusted=True)
    decoder.receive_data((4 + len(body)).to_bytes(4, "big") + cid.to_bytes(4, "big") + body)
    assert core.complete_responses(decoder)
    core.pending.clear()


def _fetch_session(version: int, monkeypatch):
    """A consumer allowed to read ``orders`` on a connection whose Fetch session 77 (orders-0,
    orders-1) was created through the core and learned from the upstream's answer, then used
    once (the memo remembers the session's action); its ``_auth_helper`` calls and the
    authorizer's ``authorize`` calls listed."""
    gw, core, acl_id, calls, registry = _setup("User:memo-reader", "memo-unused")
    read_id = uuid.uuid4()
    gw.authorizer.apply_changes({read_id: _read_acl("User:memo-reader", "orders")}, [acl_id])
    gw.cluster.versions[1] = VersionRange(4, 17)
    gw._advertised = advertised_versions(gw.cluster.versions, LOCAL_KEYS, REGISTRY, True)
    gw._advertised_for = gw.cluster.versions
    gw.topic_ids.learn("orders", _ORDERS_ID)
    monkeypatch.setitem(fetch_tests.TOPICS, 0, gw.topic_ids)
    helpers: list = []
    real = ConnectionCore._auth_helper
    monkeypatch.setattr(ConnectionCore, "_auth_helper", lambda self, *a: helpers.append(a) or real(self, *a))
    out: list = []
    assert core.dispatch(_fetch_frame(version, 1, [("orders", [0, 1])], 0, 0), out) is False
    _answer(core, version, 1, session_id=77)
    assert core.dispatch(_fetch_frame(version, 2, [("orders", [0])], 77, 1), out) is False
    _answer(core, version, 2)
    return gw, core, calls, helpers, out, read_id


@pytest.mark.parametrize("version", [12, 16])
def test_the_usual_session_fetch_goes_on_a_remembered_allowance_without_its_enforcement(version, monkeypatch):
    _, core, calls, helpers, out, _ = _fetch_session(version, monkeypatch)
    before = (len(helpers), len(calls))
    frames = [_fetch_frame(version, cid, topics, 77, cid) for cid, topics in
              ((3, [("orders", [1])]), (4, []), (5, [("orders", [0, 1])]))]
    for frame in frames:
        assert core.dispatch(frame, out) is False
        _answer(core, version, int.from_bytes(frame[8:12], "big"))
    assert (len(helpers), len(calls)) == before  # neither enforced nor decided again
    assert all(sent is frame for sent, frame in zip(out[2:], frames))  # forwarded as they came


@pytest.mark.parametrize("version", [12, 16])
def test_a_revoked_read_ends_the_session_at_its_very_next_fetch(version, monkeypatch):
    """The session's allowance is remembered; a fetch naming nothing after the ACL went is
    enforced, its session found denied: sent with epoch -1, the client starts over."""
    gw, core, _, _, out, read_id = _fetch_session(version, monkeypatch)
    gw.authorizer.apply_changes({}, [read_id])
    frame = _fetch_frame(version, 3, [], 77, 2)
    assert core.dispatch(frame, out) is False
    assert out[-1] is not frame
    forwarded = decode_request(1, version, out[-1][4:], parse_request_header(out[-1][4:]).size)
    assert forwarded.session_epoch == -1


@pytest.mark.parametrize("version", [12, 16])
@pytest.mark.parametrize("shape", ["a partition the session lacks", "a topic forgotten", "another topic",
                                   "two entries of its topic", "a follower's"])
def test_a_session_fetch_of_another_shape_is_enforced(version, shape, monkeypatch):
    _, core, calls, helpers, out, _ = _fetch_session(version, monkeypatch)
    topics, forgotten, replica_id = {
        "a partition the session lacks": ([("orders", [5])], (), -1),
        "a topic forgotten": ([], [("orders", [1])], -1),
        "another topic": ([("secret", [0])], (), -1),
        "two entries of its topic": ([("orders", [0]), ("orders", [1])], (), -1),
        "a follower's": ([("orders", [0])], (), 3),  # CLUSTER_ACTION, not the session's READ
    }[shape]
    before = len(helpers)
    core.dispatch(_fetch_frame(version, 3, topics, 77, 2, forgotten, replica_id), out)
    assert len(helpers) == before + 1, shape
