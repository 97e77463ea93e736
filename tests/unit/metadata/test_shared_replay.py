"""Several instances writing one shared log (#14 item 2): whatever the interleaving of their
writes and of what each has seen when it writes, every instance that applied the same offset
holds the same ACLs, configs and SCRAM credentials - as does a new instance replaying the log,
and one starting from a snapshot plus the tail.

The log here is in memory (the Kafka topic is exercised in tests/integration/test_shared_metadata.py);
what runs is the production replay: MetadataImage, the StandardAuthorizer writing through it,
and the records codec (every batch is encoded and decoded on its way through the log).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from authz.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from authz.standard_authorizer import StandardAuthorizer
from metadata.image import MetadataImage
from metadata.records import (
    ConfigRecord,
    MetadataRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
    decode_record,
    encode_record,
)
from metadata.store import CommittedBatch, LoadedState, MetadataStore, Subscription
from metadata.transfer import export_document


class SharedLog:
    """One ordered log; each view gets committed batches only when the test says so."""

    def __init__(self) -> None:
        self.batches: list[CommittedBatch] = []
        self.views: list[SharedLogView] = []

    def view(self) -> SharedLogView:
        v = SharedLogView(self)
        self.views.append(v)
        return v


class SharedLogView(MetadataStore):
    shared = True

    def __init__(self, log: SharedLog, snapshot: tuple[list[MetadataRecord], int] | None = None) -> None:
        self.log = log
        self.delivered = 0  # batches of log.batches handed to the subscription
        self.subscription: Subscription | None = None
        self.snapshot_at = snapshot

    async def load(self) -> LoadedState:
        self.delivered = len(self.log.batches)
        snap, end = self.snapshot_at or ([], -1)
        tail = [r for b in self.log.batches if b.base_offset > end for r in b.records]
        return LoadedState(tuple(snap), end + 1, tuple(tail), self.last_offset)

    async def append(self, records: Sequence[MetadataRecord]) -> int:
        base = self.last_offset + 1
        wire = tuple(decode_record(encode_record(r)) for r in records)  # through the codec
        self.log.batches.append(CommittedBatch(base, wire))
        return base + len(wire) - 1

    def deliver(self, count: int | None = None) -> None:
        pending = self.log.batches[self.delivered :]
        for batch in pending[: len(pending) if count is None else count]:
            assert self.subscription is not None and self.subscription._offer(batch)
            self.delivered += 1

    async def snapshot(self, records: Iterable[MetadataRecord], *, through_offset: int | None = None) -> None:
        pass

    def subscribe(self, *, max_buffered_batches: int = 1024) -> Subscription:
        self.subscription = Subscription(max_buffered_batches)
        return self.subscription

    @property
    def last_offset(self) -> int:
        return self.log.batches[-1].last_offset if self.log.batches else -1

    @property
    def records_since_snapshot(self) -> int:
        return 0

    async def aclose(self) -> None:
        if self.subscription is not None:
            self.subscription._finish()


TOPICS = ["a", "b", "c"]
PRINCIPALS = ["User:x", "User:y"]


def binding(topic: str, principal: str, op: AclOperation, deny: bool) -> AclBinding:
    return AclBinding(ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL),
                      AccessControlEntry(principal, "*", op, AclPermissionType.DENY if deny else AclPermissionType.ALLOW))


def acl_filter(topic: str | None, principal: str | None) -> AclBindingFilter:
    return AclBindingFilter(ResourcePatternFilter(ResourceType.TOPIC if topic else ResourceType.ANY, topic,
                                                  PatternType.LITERAL if topic else PatternType.ANY),
                            AccessControlEntryFilter(principal, None, AclOperation.ANY, AclPermissionType.ANY))


ALL = acl_filter(None, None)

bindings = st.builds(binding, st.sampled_from(TOPICS), st.sampled_from(PRINCIPALS),
                     st.sampled_from([AclOperation.READ, AclOperation.WRITE]), st.booleans())
writes = st.one_of(
    st.tuples(st.just("create"), st.lists(bindings, min_size=1, max_size=3)),
    st.tuples(st.just("delete"), st.builds(acl_filter, st.sampled_from([*TOPICS, None]),
                                           st.sampled_from([*PRINCIPALS, None]))),
    st.tuples(st.just("config"), st.tuples(st.sampled_from(["k1", "k2"]), st.sampled_from(["1", "2", None]))),
    st.tuples(st.just("scram"), st.tuples(st.sampled_from(["u1", "u2"]), st.integers(0, 2))),
)
# (instance, write) or (instance, "deliver", how many pending batches it now sees)
steps = st.lists(st.one_of(st.tuples(st.integers(0, 2), writes),
                           st.tuples(st.integers(0, 2), st.just(("deliver", None)), st.integers(1, 3))),
                 min_size=1, max_size=30)


async def perform(inst: tuple[MetadataImage, StandardAuthorizer], write) -> None:
    image, authorizer = inst
    kind, arg = write
    if kind == "create":
        assert all(r.ok for r in await authorizer.create_acls(None, arg))
    elif kind == "delete":
        assert all(r.error_code == 0 for r in await authorizer.delete_acls(None, [arg]))
    elif kind == "config":
        await image.append([ConfigRecord(resource_type=4, resource_name="", name=arg[0], value=arg[1])])
    elif arg[1] == 0:
        await image.append([RemoveUserScramCredentialRecord(name=arg[0], mechanism=1)])
    else:
        await image.append([UserScramCredentialRecord(name=arg[0], mechanism=1, salt=bytes([arg[1]]) * 16,
                                                      stored_key=b"k" * 32, server_key=b"s" * 32, iterations=4096)])


def state(image: MetadataImage, authorizer: StandardAuthorizer | None = None) -> dict:
    doc = export_document(image.acls, image.configs, image.scram, image.offset)
    if authorizer is not None:  # the authorizer enforces exactly what the image holds
        assert sorted(map(repr, authorizer.acls(ALL))) == sorted(map(repr, image.acls.values()))
    return doc


async def open_instance(store: MetadataStore, nursery) -> tuple[MetadataImage, StandardAuthorizer]:
    authorizer = StandardAuthorizer()
    image = MetadataImage(store, authorizer)
    authorizer.acl_writer = image.write_acls
    await image.load()
    await nursery.start(image.follow)
    return image, authorizer


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps, st.integers(0, 40))
def test_any_interleaving_of_writes_replays_to_one_state(plan, snapshot_cut):
    async def main():
        log = SharedLog()
        async with trio.open_nursery() as nursery:
            views = [log.view() for _ in range(3)]
            instances = [await open_instance(v, nursery) for v in views]
            async with trio.open_nursery() as writers:
                for step in plan:
                    if step[1][0] == "deliver":
                        views[step[0]].deliver(step[2])
                    else:
                        writers.start_soon(perform, instances[step[0]], step[1])
                    await trio.testing.wait_all_tasks_blocked()
                while any(v.delivered < len(log.batches) for v in views):  # everyone catches up
                    for v in views:
                        v.deliver()
                    await trio.testing.wait_all_tasks_blocked()
            await trio.testing.wait_all_tasks_blocked()
            states = [state(*inst) for inst in instances]
            assert states[0] == states[1] == states[2]
            assert states[0]["offset"] == log.batches[-1].last_offset if log.batches else -1

            # a new instance replaying the whole log holds the same state
            fresh, _ = await open_instance(log.view(), nursery)
            assert state(fresh) == states[0]

            # ... and one starting from a snapshot taken at a batch boundary, then the tail
            cut = min(snapshot_cut, len(log.batches))
            prefix = SharedLog()
            prefix.batches = log.batches[:cut]
            early, _ = await open_instance(prefix.view(), nursery)
            snap = (early.records(), early.offset)
            restarted, _ = await open_instance(SharedLogView(log, snapshot=snap), nursery)
            assert state(restarted) == states[0]
            nursery.cancel_scope.cancel()

    trio.run(main)


def test_a_duplicate_create_and_a_racing_delete_resolve_by_log_order():
    """Two instances that have not seen each other's write create the same ACL; a third deletes
    it after seeing only the first. The first record wins everywhere, the second is skipped
    everywhere, and the delete (by the first's id) leaves no ACL anywhere."""
    async def main():
        log = SharedLog()
        acl = binding("a", "User:x", AclOperation.READ, False)
        async with trio.open_nursery() as nursery:
            views = [log.view() for _ in range(3)]
            (ia, aa), (ib, ab), (ic, ac) = [await open_instance(v, nursery) for v in views]
            async with trio.open_nursery() as writers:
                writers.start_soon(perform, (ia, aa), ("create", [acl]))
                writers.start_soon(perform, (ib, ab), ("create", [acl]))
                await trio.testing.wait_all_tasks_blocked()
                assert len(log.batches) == 2  # both appended: neither saw the other
                for v in views:
                    v.deliver()
            assert len(ia.acls) == len(ib.acls) == len(ic.acls) == 1
            first_id = log.batches[0].records[0].id
            assert set(ia.acls) == set(ib.acls) == set(ic.acls) == {first_id}
            async with trio.open_nursery() as writers:
                writers.start_soon(perform, (ic, ac), ("delete", acl_filter("a", None)))
                await trio.testing.wait_all_tasks_blocked()
                for v in views:
                    v.deliver()
            assert ia.acls == ib.acls == ic.acls == {}
            assert aa.acls(ALL) == ab.acls(ALL) == ac.acls(ALL) == []
            nursery.cancel_scope.cancel()

    trio.run(main)
