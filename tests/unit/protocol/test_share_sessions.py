"""KIP-932 share sessions: every partition of the session is authorized on every ShareFetch,
as Kafka does, and the broker never serves one its principal may no longer read
(protocol/apis/share_groups.py)."""

from __future__ import annotations

import ipaddress
import uuid
from datetime import timedelta

from authz.acl import AclOperation as Op, AclPermissionType, ResourceType as RT
from authz.authorizer import AuthorizableRequestContext
from authz.principal import KafkaPrincipal
from protocol.apis import share_groups
from protocol.apis.base import FORWARD, SESSIONS_PER_CONNECTION
from protocol.apis.registry import REGISTRY
from protocol.auth_helper import AuthHelper
from protocol.codecs import decode_request, decode_response, encode, response_class
from protocol.apis.group_common import _blank, nested
from protocol.headers import parse_request_header
from protocol.topic_ids import TopicCache
from tests.unit.protocol.test_groups_enforcement import acl, authorizer, frame_of, req

A, B = uuid.UUID(int=0xA), uuid.UUID(int=0xB)


class Connection:
    """One client connection's ShareFetch requests (its enforcement state kept between them)."""

    def __init__(self, authz, principal: str = "alice") -> None:
        self.authz = authz
        self.principal = principal
        self.state: dict = {}
        self.topics = TopicCache()
        self.topics.learn("ta", A)
        self.topics.learn("tb", B)

    def fetch(self, epoch: int, topics=(), forgotten=(), member: str = "m1", version: int = 1, acks=()):
        cls = __import__("protocol.codecs", fromlist=["request_class"]).request_class(78, version)
        t_cls = nested(cls, "topics")
        p_cls = nested(t_cls, "partitions")
        a_cls = nested(p_cls, "acknowledgement_batches")
        f_cls = nested(cls, "forgotten_topics_data")
        body = req(78, version, group_id="sg", member_id=member, share_session_epoch=epoch,
                   max_wait=timedelta(milliseconds=100), topics=tuple(
                       _blank(t_cls, topic_id=tid, partitions=tuple(
                           _blank(p_cls, partition_index=p, acknowledgement_batches=tuple(
                               _blank(a_cls, first_offset=0, last_offset=0, acknowledge_types=(1,))
                               for _ in range(1 if (tid, p) in acks else 0)))
                           for p in parts)) for tid, parts in topics),
                   forgotten_topics_data=tuple(_blank(f_cls, topic_id=tid, partitions=tuple(parts))
                                               for tid, parts in forgotten))
        frame = frame_of(78, version, body)
        header = parse_request_header(frame)
        info = REGISTRY[78].inspect(header, frame)
        ctx = AuthorizableRequestContext("EXTERNAL", "SASL_PLAINTEXT", KafkaPrincipal("User", self.principal),
                                         ipaddress.ip_address("10.0.0.1"), 78, version, "c1", 7)
        return REGISTRY[78].enforce(AuthHelper(self.authz, ctx, self.state, self.topics), header, frame, info)


def sent(decision):
    assert decision.request is not None, decision
    r = decode_request(78, 1, decision.request, 0)
    return ({t.topic_id: sorted(p.partition_index for p in t.partitions) for t in r.topics},
            {f.topic_id: sorted(f.partitions) for f in r.forgotten_topics_data})


def answered(decision, upstream_topics=()):
    """The client's response once the upstream answered with ``upstream_topics``."""
    cls = response_class(78, 1)
    t_cls = nested(cls, "responses")
    p_cls = nested(t_cls, "partitions")
    l_cls = nested(p_cls, "current_leader")
    upstream = _blank(cls, responses=tuple(
        _blank(t_cls, topic_id=tid, partitions=tuple(_blank(p_cls, partition_index=p, records=b"x",
                                                            current_leader=_blank(l_cls)) for p in parts))
        for tid, parts in upstream_topics))
    if decision is FORWARD or decision.merge is None:
        return upstream
    out = decision.merge(encode(upstream), 0)
    return upstream if out is None else decode_response(78, 1, out, 0)


def errors(response):
    return {(t.topic_id, p.partition_index): int(p.error_code) for t in response.responses for p in t.partitions
            if p.error_code}


def both_readable():
    return authorizer(acl(RT.GROUP, "sg", Op.READ), acl(RT.TOPIC, "ta", Op.READ), acl(RT.TOPIC, "tb", Op.READ))


def test_a_revoked_partition_held_by_the_session_is_forgotten_upstream_and_answered_29():
    """The finding: after alice's READ on tb was revoked, a topic-less ShareFetch still returned
    tb's records.  Kafka re-checks every partition of the session."""
    a = both_readable()
    conn = Connection(a)
    assert conn.fetch(0, topics=[(A, [0]), (B, [0])]) is FORWARD
    assert conn.fetch(1) is FORWARD  # nothing changed
    a.apply_changes({uuid.uuid4(): acl(RT.TOPIC, "tb", Op.READ, AclPermissionType.DENY)}, [])
    d = conn.fetch(2)  # names no topic: the session holds ta-0 and tb-0
    topics, forgotten = sent(d)
    assert topics == {} and forgotten == {B: [0]}
    response = answered(d, [(A, [0])])
    assert errors(response) == {(B, 0): 29}
    # every later fetch keeps tb-0 out of the broker's session and answers it 29, as Kafka does
    d = conn.fetch(3)
    assert sent(d)[1] == {B: [0]} and errors(answered(d, [(A, [0])])) == {(B, 0): 29}


def test_a_partition_allowed_again_is_put_back_in_the_brokers_session():
    a = both_readable()
    conn = Connection(a)
    conn.fetch(0, topics=[(A, [0]), (B, [0, 1])])
    deny = uuid.uuid4()
    a.apply_changes({deny: acl(RT.TOPIC, "tb", Op.READ, AclPermissionType.DENY)}, [])
    conn.fetch(1)
    a.apply_changes({}, [deny])
    topics, forgotten = sent(conn.fetch(2))
    assert topics == {B: [0, 1]} and forgotten == {}
    assert conn.fetch(3) is FORWARD


def test_a_partition_the_client_forgets_is_no_longer_checked():
    a = both_readable()
    conn = Connection(a)
    conn.fetch(0, topics=[(A, [0]), (B, [0])])
    assert conn.fetch(1, forgotten=[(B, [0])]) is FORWARD
    a.apply_changes({uuid.uuid4(): acl(RT.TOPIC, "tb", Op.READ, AclPermissionType.DENY)}, [])
    assert conn.fetch(2) is FORWARD


def test_acknowledgements_for_a_revoked_partition_are_refused_with_it():
    a = both_readable()
    conn = Connection(a)
    conn.fetch(0, topics=[(A, [0]), (B, [0])])
    a.apply_changes({uuid.uuid4(): acl(RT.TOPIC, "tb", Op.READ, AclPermissionType.DENY)}, [])
    d = conn.fetch(1, topics=[(B, [0])], acks={(B, 0)})
    topics, forgotten = sent(d)
    assert topics == {} and forgotten == {B: [0]}
    (entry,) = [p for t in answered(d).responses for p in t.partitions]
    assert (int(entry.error_code), entry.acknowledge_error_code) == (29, 29)


def test_a_session_another_connection_opened_is_not_used_here():
    """The finding: a member read through another member's session (its id from
    ShareGroupDescribe, the next epoch).  kgw answers SHARE_SESSION_NOT_FOUND on a connection
    that did not open the session: it cannot authorize what that session holds."""
    a = authorizer(acl(RT.GROUP, "sg", Op.READ), acl(RT.TOPIC, "ta", Op.DESCRIBE))
    thief = Connection(a)
    d = thief.fetch(5, member="victim-member")
    assert d.request is None
    r = decode_response(78, 1, d.respond, 0)
    assert r.error_code == 122 and r.responses == ()


def test_a_refused_fetch_drops_the_session_so_nothing_is_left_behind():
    a = both_readable()
    conn = Connection(a)
    conn.fetch(0, topics=[(A, [0]), (B, [0])])
    a.apply_changes({uuid.uuid4(): acl(RT.TOPIC, "tb", Op.READ, AclPermissionType.DENY)}, [])
    d = conn.fetch(1)
    cls = response_class(78, 1)
    refused = encode(_blank(cls, error_code=123))  # INVALID_SHARE_SESSION_EPOCH
    assert d.merge(refused, 0) is None  # the broker's answer goes to the client as it is
    assert conn.fetch(2).respond is not None  # the session is gone: 122, the client starts over


def test_closing_the_session_forgets_it():
    conn = Connection(both_readable())
    conn.fetch(0, topics=[(A, [0])])
    conn.fetch(-1)
    assert decode_response(78, 1, conn.fetch(1).respond, 0).error_code == 122


def test_a_connection_opening_session_after_session_keeps_a_bounded_number():
    """A client opening share sessions under new member ids on one connection: kgw keeps the
    newest SESSIONS_PER_CONNECTION; an older one's next fetch gets 122 and starts over."""
    conn = Connection(both_readable())
    members = [f"m-{i}" for i in range(SESSIONS_PER_CONNECTION * 4)]
    for member in members:
        assert conn.fetch(0, topics=[(A, [0])], member=member) is FORWARD
    assert len(conn.state["share_sessions"]) == SESSIONS_PER_CONNECTION
    assert conn.fetch(1, member=members[-1]) is FORWARD
    assert decode_response(78, 1, conn.fetch(1, member=members[0]).respond, 0).error_code == 122


def test_a_session_grown_past_its_partition_bound_ends(monkeypatch):
    """Incremental ShareFetches naming partition after partition: past SESSION_PARTITIONS the
    session ends (122, the client starts over) instead of growing kgw's memory."""
    monkeypatch.setattr(share_groups, "SESSION_PARTITIONS", 3)
    conn = Connection(both_readable())
    assert conn.fetch(0, topics=[(A, [0, 1])]) is FORWARD
    assert conn.fetch(1, topics=[(A, [2])]) is FORWARD  # three: at the bound
    over = conn.fetch(2, topics=[(B, [0])])
    assert decode_response(78, 1, over.respond, 0).error_code == 122
    assert "share_sessions" in conn.state and conn.state["share_sessions"] == {}
