"""KIP-1071: the broker creates a streams topology's missing internal topics with the sender's
authority; through kgw that is kgw's, so kgw decides as Kafka would for the client
(protocol/apis/streams_groups.py)."""

from __future__ import annotations

import ipaddress
from datetime import timedelta

from authz.acl import AclOperation as Op, PatternType, ResourceType as RT
from authz.authorizer import AuthorizableRequestContext
from authz.principal import KafkaPrincipal
from protocol.apis.base import FORWARD
from protocol.apis.group_common import _blank, nested
from protocol.apis.registry import REGISTRY
from protocol.apis.streams_groups import StreamsTopologies
from protocol.auth_helper import AuthHelper
from protocol.codecs import decode_response, request_class, response_class
from protocol.headers import parse_request_header
from tests.support.fake_services import FakeServices, FakeUpstream, settle
from tests.support.scenarios import scenario_cluster
from tests.unit.protocol.test_groups_enforcement import acl, authorizer, frame_of, req


def topology(source=("in",), changelog=("app-store-changelog",), repartition=("app-rep-repartition",), regex=()):
    cls = request_class(88, 0)
    t_cls = nested(cls, "topology")
    s_cls = nested(t_cls, "subtopologies")
    i_cls = nested(s_cls, "state_changelog_topics")
    info = lambda n: _blank(i_cls, name=n, partitions=7, replication_factor=1)  # noqa: E731
    return _blank(t_cls, epoch=1, subtopologies=(_blank(
        s_cls, subtopology_id="0", source_topics=tuple(source), source_topic_regex=tuple(regex),
        state_changelog_topics=tuple(info(n) for n in changelog),
        repartition_sink_topics=tuple(repartition), repartition_source_topics=tuple(info(n) for n in repartition)),))


def heartbeat(authz, state, services, epoch=0, topo=None, principal="alice", group="app"):
    body = req(88, 0, group_id=group, member_id="m1", member_epoch=epoch, endpoint_information_epoch=0,
               rebalance_timeout=timedelta(seconds=10), topology=topo, active_tasks=None, standby_tasks=None,
               warmup_tasks=None)
    frame = frame_of(88, 0, body)
    header = parse_request_header(frame)
    info = REGISTRY[88].inspect(header, frame)
    ctx = AuthorizableRequestContext("EXTERNAL", "SASL_PLAINTEXT", KafkaPrincipal("User", principal),
                                     ipaddress.ip_address("10.0.0.1"), 88, 0, "c1", 7)
    return settle(REGISTRY[88].enforce(AuthHelper(authz, ctx, gateway_state=state), header, frame, info), services)


def base_acls(*extra):
    return authorizer(acl(RT.GROUP, "app", Op.READ), acl(RT.TOPIC, "*", Op.DESCRIBE), *extra)


def test_missing_internal_topics_the_sender_may_not_create_are_not_created():
    """The finding: a principal with WRITE but no CREATE had a 7-partition topic created."""
    up = FakeUpstream(["in"])
    d = heartbeat(base_acls(acl(RT.TOPIC, "app-", Op.WRITE, pattern=PatternType.PREFIXED)), {}, FakeServices(up),
                  topo=topology())
    assert d.request is None and d.respond is not None  # nothing forwarded: nothing created
    r = decode_response(88, 0, d.respond, 0)
    assert r.error_code == 0 and r.member_id == "m1" and r.member_epoch == 0
    (status,) = r.status
    assert status.status_code == 3  # MISSING_INTERNAL_TOPICS, as Kafka answers
    assert status.status_detail == ("Internal topics are missing: app-rep-repartition, app-store-changelog; "
                                    "Unauthorized to CREATE on topics app-rep-repartition, app-store-changelog.")
    assert ("existing_topics", frozenset({"app-rep-repartition", "app-store-changelog"})) in up.asked


def test_a_sender_that_may_create_them_is_forwarded_without_asking_the_upstream():
    up = FakeUpstream(["in"])
    a = base_acls(acl(RT.TOPIC, "app-", Op.CREATE, pattern=PatternType.PREFIXED))
    assert heartbeat(a, {}, FakeServices(up), topo=topology()) is FORWARD
    assert up.asked == []
    cluster = base_acls(acl(RT.CLUSTER, "kafka-cluster", Op.CREATE))
    assert heartbeat(cluster, {}, FakeServices(up), topo=topology()) is FORWARD


def test_internal_topics_that_exist_need_no_create():
    up = FakeUpstream(["in", "app-rep-repartition", "app-store-changelog"])
    assert heartbeat(base_acls(), {}, FakeServices(up), topo=topology()) is FORWARD


def test_only_the_missing_ones_are_authorized_and_named():
    up = FakeUpstream(["in", "app-store-changelog"])
    a = base_acls(acl(RT.TOPIC, "app-store-changelog", Op.CREATE))
    r = decode_response(88, 0, heartbeat(a, {}, FakeServices(up), topo=topology()).respond, 0)
    assert r.status[0].status_detail.endswith("Unauthorized to CREATE on topics app-rep-repartition.")


def test_later_heartbeats_of_the_group_are_checked_too():
    """Every heartbeat of a group with missing internal topics makes the broker create them:
    heartbeats without a topology are checked against the topology kgw forwarded for the group."""
    state: dict = {}
    up = FakeUpstream(["in", "app-rep-repartition", "app-store-changelog"])
    a = base_acls()
    assert heartbeat(a, state, FakeServices(up), topo=topology()) is FORWARD  # they exist: joined
    up.topics.discard("app-store-changelog")  # deleted since
    r = decode_response(88, 0, heartbeat(a, state, FakeServices(up), epoch=3).respond, 0)
    assert r.member_epoch == 3 and r.status[0].status_code == 3


def test_a_group_kgw_has_not_seen_is_described_at_its_coordinator_first():
    up = scenario_cluster({"topics": ["in"], "streams_internal_topics": {"app": ["app-x-changelog"]}})
    d = heartbeat(base_acls(), {}, FakeServices(up), epoch=5)
    assert ("coordinator", "app") in up.asked and ("call", 89) in up.asked
    assert decode_response(88, 0, d.respond, 0).status[0].status_detail.endswith("app-x-changelog.")
    # a group without a topology: nothing can be created
    up = scenario_cluster({"topics": ["in"]})
    assert heartbeat(base_acls(), {}, FakeServices(up), epoch=5, group="app") is FORWARD


def test_source_topic_regex_refused_as_kafka_refuses_it():
    d = heartbeat(base_acls(), {}, FakeServices(FakeUpstream(["in"])), topo=topology(regex=("in.*",)))
    r = decode_response(88, 0, d.respond, 0)
    assert r.error_code == 42 and r.error_message == "Regular expressions for source topics are not supported yet."


def test_leaving_is_forwarded():
    assert heartbeat(base_acls(), {}, FakeServices(FakeUpstream()), epoch=-1) is FORWARD


def test_the_topology_table_is_bounded():
    table = StreamsTopologies()
    table.MAX_GROUPS = 3
    for i in range(10):
        table.learn(f"g{i}", frozenset())
    assert table.get("g9") is not None and table.get("g0") is None

