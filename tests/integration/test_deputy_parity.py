"""No confused deputy: what the broker derives from a request (regex subscriptions, share-session
contents, token owners, streams internal topics, listing pages) is what Kafka gives the *client*,
never what kgw's super-user account would get.

Each test drives the same sequence of requests, as the same users with the same ACLs, against
Kafka's own StandardAuthorizer (clients straight to a broker) and through kgw in front of
another broker (tests/support/oracle.py), then compares what carries authorization: topics
assigned, records served, tokens' owners, topics created, error codes.  Each compared outcome
differed on the code before the fix (the finding it guards is named in its docstring).
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta

import pytest
from confluent_kafka import Producer

from protocol.codecs import nested, request_class
from tests.support.oracle import USERS, Side, request, start_oracle

pytestmark = pytest.mark.kafka

T = 20
RETRIABLE = (14, 15, 16)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    o = start_oracle(tmp_path_factory.mktemp("deputy"))
    try:
        yield o
    finally:
        o.stop()


@pytest.fixture
def run() -> str:
    return f"d{uuid.uuid4().hex[:6]}"


def until(what, ok, timeout: float = T, every: float = 0.3):
    """Call ``what()`` until ``ok(result)``; the last result (the caller asserts on it)."""
    deadline = time.monotonic() + timeout
    while True:
        result = what()
        if ok(result) or time.monotonic() >= deadline:
            return result
        time.sleep(every)


def coordinator_ready(conn, group: str, key_type: int = 0) -> None:
    r = until(lambda: conn.call(10, 4, request(10, 4, key_type=key_type, coordinator_keys=(group,))),
              lambda r: r.coordinators[0].error_code == 0)
    assert r.coordinators[0].error_code == 0, r


def learn_topics(conn, *names: str) -> None:
    """A Metadata request through the side, as every client makes before using topic ids."""
    cls = request_class(3, 12)
    conn.call(3, 12, request(3, 12, topics=tuple(nested(cls, "topics")(name=n, topic_id=None) for n in names),
                             allow_auto_topic_creation=False, include_topic_authorized_operations=False))


def produce(side: Side, topic: str, n: int) -> None:
    p = Producer({"bootstrap.servers": side.broker, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
                  "sasl.username": "admin", "sasl.password": USERS["admin"], "broker.address.family": "v4"})
    for i in range(n):
        p.produce(topic, f"r{i}".encode())
    assert p.flush(T) == 0


def both(oracle, scenario) -> dict[str, object]:
    """``scenario(side)`` on each side: {side name: outcome}."""
    return {side.name: scenario(side) for side in oracle.sides}


# ------------------------------------------------------------------ KIP-848 regular expressions


class Member:
    """A KIP-848 consumer group member speaking ConsumerGroupHeartbeat v1 on one connection."""

    def __init__(self, side: Side, user: str, group: str) -> None:
        self.side, self.group = side, group
        self.conn = side.connect(user)
        coordinator_ready(self.conn, group)
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.assigned: dict[uuid.UUID, tuple[int, ...]] = {}

    def heartbeat(self, names=None, regex=None):
        joining = self.epoch == 0
        r = until(lambda: self.conn.call(68, 1, request(
            68, 1, group_id=self.group, member_id=self.member_id, member_epoch=self.epoch,
            rebalance_timeout=timedelta(seconds=30) if joining else timedelta(milliseconds=-1),
            subscribed_topic_names=names, subscribed_topic_regex=regex,
            topic_partitions=() if joining else None)), lambda r: r.error_code not in RETRIABLE)
        assert r.error_code == 0, (self.side.name, r)
        self.epoch = r.member_epoch
        if r.assignment is not None:
            self.assigned = {t.topic_id: tuple(sorted(t.partitions)) for t in r.assignment.topic_partitions}
        return r

    def names(self) -> dict[str, tuple[int, ...]]:
        ids = self.side.topic_names()
        return {ids.get(tid, str(tid)): parts for tid, parts in sorted(self.assigned.items(), key=str)}


def settle(*members: Member, rounds: int = 12) -> None:
    """Heartbeat until every member's assignment stopped changing for a few rounds (the
    coordinator resolves expressions and assigns asynchronously)."""
    stable, last = 0, None
    for _ in range(rounds * 4):
        for m in members:
            m.heartbeat()
        now = [m.names() for m in members]
        stable = stable + 1 if now == last else 0
        last = now
        if stable >= 4:
            return
        time.sleep(0.5)


def test_regex_subscription_is_resolved_with_the_members_authority(oracle, run):
    """Finding 1: ``.*`` from a principal with READ on one group and one topic was assigned every
    topic of the cluster through kgw, internal ones included."""
    def scenario(side: Side):
        side.create_topics({f"{run}-victim-a": 2, f"{run}-mine-1": 1})
        side.grant(f"alice ALLOW GROUP LITERAL {run}-g READ", f"alice ALLOW TOPIC PREFIXED {run}-mine- READ")
        alice = Member(side, "alice", f"{run}-g")
        alice.heartbeat(regex=".*")
        settle(alice)
        return {name: parts for name, parts in alice.names().items()}

    outcome = both(oracle, scenario)
    # alice may describe only her own topic: on both sides that is all she is assigned (her
    # earlier runs' topics may match too; never a victim's, never an internal topic)
    for assigned in outcome.values():
        assert f"{run}-mine-1" in assigned
        assert not any(n.startswith("__") or "victim" in n for n in assigned), assigned
    assert outcome["kgw"] == outcome["kafka"]


def test_regex_cannot_steal_another_members_partitions(oracle, run):
    """Finding 1: a member with only GROUP READ joined a victim's group with ``victim-.*`` and was
    assigned one of the victim's partitions (which it cannot fetch, so it went unconsumed)."""
    def scenario(side: Side):
        side.create_topics({f"{run}-victim-a": 2})
        side.grant(f"bob ALLOW GROUP LITERAL {run}-vg READ", f"bob ALLOW TOPIC LITERAL {run}-victim-a READ",
                   f"mallory ALLOW GROUP LITERAL {run}-vg READ")
        bob = Member(side, "bob", f"{run}-vg")
        bob.heartbeat(names=(f"{run}-victim-a",))
        mallory = Member(side, "mallory", f"{run}-vg")
        mallory.heartbeat(regex=f"{run}-victim-.*")
        settle(bob, mallory)
        return bob.names(), mallory.names()

    outcome = both(oracle, scenario)
    assert outcome["kafka"] == ({f"{run}-victim-a": (0, 1)}, {})
    assert outcome["kgw"] == outcome["kafka"]


# ------------------------------------------------------------------ KIP-932 share sessions


class ShareMember:
    def __init__(self, side: Side, user: str, group: str, topic: str) -> None:
        self.side, self.group, self.topic = side, group, topic
        self.conn = side.connect(user)
        coordinator_ready(self.conn, group)
        learn_topics(self.conn, topic)
        self.topic_id = {v: k for k, v in side.topic_names().items()}[topic]
        self.member_id = str(uuid.uuid4())
        self.epoch = 0

    def join(self) -> None:
        def beat():
            return self.conn.call(76, 1, request(76, 1, group_id=self.group, member_id=self.member_id,
                                                 member_epoch=self.epoch, subscribed_topic_names=(
                                                     (self.topic,) if self.epoch == 0 else None)))
        r = until(beat, lambda r: r.error_code not in RETRIABLE)
        assert r.error_code == 0, r
        self.epoch = r.member_epoch
        r = until(beat, lambda r: r.assignment is not None and r.assignment.topic_partitions)
        assert r.assignment is not None and r.assignment.topic_partitions, r

    def fetch(self, session_epoch: int, partitions=(), member_id: str | None = None, conn=None):
        """(top-level error, {partition: (error, records bytes)})."""
        cls = request_class(78, 1)
        t_cls = nested(cls, "topics")
        p_cls = nested(t_cls, "partitions")
        topics = (t_cls(topic_id=self.topic_id, partitions=tuple(p_cls(partition_index=p, acknowledgement_batches=())
                                                                  for p in partitions)),) if partitions else ()
        r = (conn or self.conn).call(78, 1, request(
            78, 1, group_id=self.group, member_id=member_id or self.member_id, share_session_epoch=session_epoch,
            max_wait=timedelta(milliseconds=300), min_bytes=1, max_bytes=1 << 20, max_records=500, batch_size=500,
            topics=topics, forgotten_topics_data=()))
        served = {p.partition_index: (int(p.error_code), len(p.records or b""))
                  for t in r.responses if t.topic_id == self.topic_id for p in t.partitions}
        return int(r.error_code), served


def test_share_session_partitions_are_reauthorized_on_every_fetch(oracle, run):
    """Finding 2: after a member's READ ACL was deleted, its next topic-less ShareFetch still
    returned records of the partition its session held."""
    def scenario(side: Side):
        topic, group = f"{run}-tb", f"{run}-sg"
        side.create_topics({topic: 1})
        side.grant(f"alice ALLOW GROUP LITERAL {group} READ", f"alice ALLOW TOPIC LITERAL {topic} DESCRIBE")
        read = side.grant(f"alice ALLOW TOPIC LITERAL {topic} READ")
        alice = ShareMember(side, "alice", group, topic)
        alice.join()
        epoch = 0
        error, _ = alice.fetch(epoch, partitions=(0,))
        assert error == 0
        produce(side, topic, 5)

        def next_fetch():
            nonlocal epoch
            epoch += 1
            return alice.fetch(epoch)

        before = until(next_fetch, lambda r: r[1].get(0, (0, 0))[1] > 0)
        side.revoke(read)
        produce(side, topic, 5)
        # the revocation reaches the deciding authorizer within moments (Kafka: through its
        # metadata log): from then on every fetch of the session answers 29 and serves nothing
        after = until(next_fetch, lambda r: r[1].get(0, (0, 0))[0] == 29)
        later = [next_fetch() for _ in range(3)]
        return before[1][0][1] > 0, after[1].get(0), [r[1].get(0) for r in later]

    outcome = both(oracle, scenario)
    assert outcome["kafka"] == (True, (29, 0), [(29, 0)] * 3)
    assert outcome["kgw"] == outcome["kafka"]


def test_another_members_share_session_serves_nothing_its_principal_may_not_read(oracle, run):
    """Finding 2: a member with GROUP READ used another member's id (from ShareGroupDescribe)
    and the next epoch, and read records of a topic it may only DESCRIBE.  Kafka serves that
    session with the intruder's authority (29); kgw refuses a session its connection did not
    open (SHARE_SESSION_NOT_FOUND): either way no record is served."""
    def scenario(side: Side):
        topic, group = f"{run}-tc", f"{run}-sg2"
        side.create_topics({topic: 1})
        side.grant(f"bob ALLOW GROUP LITERAL {group} READ", f"bob ALLOW TOPIC LITERAL {topic} READ",
                   f"mallory ALLOW GROUP LITERAL {group} READ", f"mallory ALLOW TOPIC LITERAL {topic} DESCRIBE")
        bob = ShareMember(side, "bob", group, topic)
        bob.join()
        assert bob.fetch(0, partitions=(0,))[0] == 0
        produce(side, topic, 5)
        mallory = side.connect("mallory")
        learn_topics(mallory, topic)
        error, served = bob.fetch(1, member_id=bob.member_id, conn=mallory)
        return error, sum(records for _, records in served.values())

    outcome = both(oracle, scenario)
    assert outcome["kafka"][1] == 0 and outcome["kgw"][1] == 0
    assert outcome["kgw"][0] == 122  # SHARE_SESSION_NOT_FOUND (Kafka: 0 at the top, 29 for the partition)


# ------------------------------------------------------------------ delegation tokens


def test_delegation_tokens_are_owned_by_the_client_and_renewed_by_their_owner(oracle, run):
    """Finding 3: CreateDelegationToken v3 without an owner returned a token owned by kgw's
    service account (a super user's token)."""
    def scenario(side: Side):
        alice, mallory, bob = side.connect("alice"), side.connect("mallory"), side.connect("bob")
        r = alice.call(38, 3, request(38, 3, renewers=(nested(request_class(38, 3), "renewers")(
            principal_type="User", principal_name="bob"),), max_lifetime=timedelta(hours=1)))
        assert r.error_code == 0, r
        token_id, hmac = r.token_id, r.hmac
        owner = (r.principal_type, r.principal_name, r.token_requester_principal_name)
        # the broker's record of it, read as a super user bypassing kgw
        with side_connection(side, "admin", backend=True) as admin:
            stored = until(lambda: [t for t in admin.call(41, 3, request(41, 3, owners=None)).tokens
                                    if t.token_id == token_id], bool)
        stored_owner = (stored[0].principal_type, stored[0].principal_name)

        def renew(conn):  # (a refusal's -1 expiry is more than kio decodes: the code leads the body)
            raw = conn.call_bytes(39, 2, request(39, 2, hmac=hmac, renew_period=timedelta(hours=1)))
            return int.from_bytes(raw[:2], "big")

        # a token for another owner needs CREATE_TOKENS on it; the refusal's -1 timestamps are
        # more than kio decodes: its error code leads the body
        other_owner = alice.call_bytes(38, 3, request(38, 3, owner_principal_type="User", owner_principal_name="mallory",
                                                      renewers=(), max_lifetime=timedelta(hours=1)))
        return (owner, stored_owner, renew(alice), renew(bob), renew(mallory),
                int.from_bytes(mallory.call_bytes(40, 2, request(40, 2, hmac=hmac,
                                                                 expiry_time_period=timedelta(hours=1)))[:2], "big"),
                [t.token_id for t in mallory.call(41, 3, request(41, 3, owners=None)).tokens],
                int.from_bytes(other_owner[:2], "big"))

    outcome = both(oracle, scenario)
    assert outcome["kafka"] == (("User", "alice", "alice"), ("User", "alice"), 0, 0, 63, 63, [], 65)
    assert outcome["kgw"] == outcome["kafka"]


class side_connection:
    def __init__(self, side: Side, user: str, backend: bool = False) -> None:
        from tests.support.raw_kafka import RawConnection
        self.conn = RawConnection(side.broker if backend else side.bootstrap).sasl_plain(user, USERS[user])

    def __enter__(self):
        return self.conn

    def __exit__(self, *exc):
        self.conn.close()


# ------------------------------------------------------------------ KIP-1071 streams internal topics


def streams_heartbeat(side: Side, user: str, app: str, changelog: str, source: str):
    conn = side.connect(user)
    coordinator_ready(conn, app)
    cls = request_class(88, 0)
    t_cls = nested(cls, "topology")
    s_cls = nested(t_cls, "subtopologies")
    i_cls = nested(s_cls, "state_changelog_topics")
    topology = t_cls(epoch=1, subtopologies=(s_cls(
        subtopology_id="0", source_topics=(source,), source_topic_regex=(), repartition_sink_topics=(),
        repartition_source_topics=(), copartition_groups=(),
        state_changelog_topics=(i_cls(name=changelog, partitions=0, replication_factor=0, topic_configs=()),)),))
    return until(lambda: conn.call(88, 0, request(
        88, 0, group_id=app, member_id=str(uuid.uuid4()), member_epoch=0, endpoint_information_epoch=0,
        rebalance_timeout=timedelta(seconds=30), topology=topology, active_tasks=(), standby_tasks=(), warmup_tasks=(),
        process_id=str(uuid.uuid4()), client_tags=())), lambda r: r.error_code not in RETRIABLE)


def test_streams_internal_topics_are_created_only_with_create(oracle, run):
    """Finding 4: a principal with WRITE but no CREATE had a topology's changelog topic created
    (through kgw the broker creates it with kgw's authority)."""
    def scenario(side: Side):
        source, app = f"{run}-in", f"{run}-app"
        denied, allowed = f"{run}-app-store-changelog", f"{run}-ok-store-changelog"
        side.create_topics({source: 3})
        side.grant(f"alice ALLOW GROUP PREFIXED {run}- READ", f"alice ALLOW TOPIC PREFIXED {run}- DESCRIBE",
                   f"alice ALLOW TOPIC PREFIXED {run}- WRITE", f"alice ALLOW TOPIC PREFIXED {run}- READ",
                   f"alice ALLOW TOPIC LITERAL {allowed} CREATE")
        r = streams_heartbeat(side, "alice", app, denied, source)
        refused = (int(r.error_code), sorted((s.status_code, s.status_detail) for s in r.status or ()
                                             if s.status_code == 3))
        r = streams_heartbeat(side, "alice", f"{run}-ok", allowed, source)
        created = until(lambda: allowed in side.topics(), bool)
        time.sleep(1)  # what the broker would create is created within this (it was, before the fix)
        return refused, denied in side.topics(), created

    outcome = both(oracle, scenario)
    detail = (f"Internal topics are missing: {run}-app-store-changelog; "
              f"Unauthorized to CREATE on topics {run}-app-store-changelog.")
    assert outcome["kafka"] == ((0, [(3, detail)]), False, True)
    assert outcome["kgw"] == outcome["kafka"]


# ------------------------------------------------------------------ KIP-966 listing pages


def test_describe_topic_partitions_pages_over_the_visible_topics(oracle, run):
    """Finding 5: listing all topics with response_partition_limit 1, a page that ended on a
    topic the principal may not see came back empty and without a cursor through kgw."""
    def scenario(side: Side):
        side.create_topics({f"{run}-a": 1, f"{run}-b": 1, f"{run}-c": 1})
        side.grant(f"bob ALLOW TOPIC LITERAL {run}-a DESCRIBE", f"bob ALLOW TOPIC LITERAL {run}-c DESCRIBE")
        conn = side.connect("bob")
        c_cls = nested(request_class(75, 0), "cursor")
        cursor, pages = None, []
        for _ in range(50):
            r = conn.call(75, 0, request(75, 0, topics=(), response_partition_limit=1, cursor=cursor))
            pages.append([t.name for t in r.topics if t.name.startswith(run)])
            if r.next_cursor is None:
                break
            cursor = c_cls(topic_name=r.next_cursor.topic_name, partition_index=r.next_cursor.partition_index)
        return [p for p in pages if p]

    outcome = both(oracle, scenario)
    assert outcome["kafka"] == [[f"{run}-a"], [f"{run}-c"]]
    assert outcome["kgw"] == outcome["kafka"]


# ------------------------------------------------------------------ KIP-511 client software names


@pytest.mark.parametrize("name", ["bad\nname", "a" * 2047 + "!", "a" * 2048, "apache-kafka-java"])
def test_api_versions_client_software_is_validated_as_kafka_does(oracle, name):
    """Finding 9: an invalid client_software_name was answered 0 by kgw, 42 by Kafka."""
    def scenario(side: Side):
        with side_connection(side, "alice") as conn:
            r = conn.call(18, 3, request(18, 3, client_software_name=name, client_software_version="4.3.1"))
            return int(r.error_code), bool(r.api_keys)

    outcome = both(oracle, scenario)
    assert outcome["kgw"] == outcome["kafka"]


# ------------------------------------------------------------------ what a client shows


def test_acl_apis_refused_on_the_cluster_say_what_kafka_says(oracle, run):
    """kafka-acls prints the refusal's text: Kafka's "Request Request(...) needs DESCRIBE
    permission." (ALTER for creating and deleting), not the error's default text.  kgw names
    the listener and principal where Kafka names its request object; the rest is the same."""
    cr, dl = request_class(30, 3), request_class(31, 3)
    calls = {
        "describe": (29, 3, request(29, 3, resource_type_filter=2, resource_name_filter=None, pattern_type_filter=1,
                                    principal_filter=None, host_filter=None, operation=1, permission_type=1)),
        "create": (30, 3, request(30, 3, creations=(nested(cr, "creations")(
            resource_type=2, resource_name=f"t-{run}", resource_pattern_type=3, principal="User:mallory", host="*",
            operation=3, permission_type=3),))),
        "delete": (31, 3, request(31, 3, filters=(nested(dl, "filters")(
            resource_type_filter=2, resource_name_filter=f"t-{run}", pattern_type_filter=3, principal_filter=None,
            host_filter=None, operation=1, permission_type=1),))),
    }

    def messages(side: Side) -> dict[str, tuple[int, str]]:
        conn = side.connect("mallory")
        out = {}
        for name, (key, version, body) in calls.items():
            r = conn.call(key, version, body)
            entry = r if key == 29 else (r.results[0] if key == 30 else r.filter_results[0])
            out[name] = (int(entry.error_code), entry.error_message)
        return out

    got = both(oracle, messages)
    for name, operation in (("describe", "DESCRIBE"), ("create", "ALTER"), ("delete", "ALTER")):
        for side in ("kafka", "kgw"):
            code, message = got[side][name]
            assert code == 31 and message.startswith("Request Request(") and message.endswith(
                f") needs {operation} permission."), (side, name, got)
    assert "principal=User:mallory" in got["kgw"]["describe"][1]
