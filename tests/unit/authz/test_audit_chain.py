"""The audit trail's hash chain (authz/audit_chain.py): an intact trail verifies; an edited,
deleted, reordered, inserted or rewritten event is reported as tampering with its offset; a
restart (graceful or SIGKILL) resumes the chain from its last checkpoint and is reported as a
restart, not as tampering; a retried Produce's duplicate is not tampering either."""

from __future__ import annotations

import json

from authz.audit_chain import GENESIS, ChainWriter, Checkpoint, latest_checkpoint, verify


def _event(i: int) -> dict:
    return {"time": "2026-11-26T00:00:00.000Z", "ts_ms": 1_795_000_000_000 + i, "principal": "User:alice",
            "decision": "DENIED", "resource": f"Topic:LITERAL:t{i}", "event": "authorization", "correlation_id": i}


class Trail:
    """A topic of ``partitions`` partitions that batches go to in turn, and the checkpoint store."""

    def __init__(self, partitions: int = 1) -> None:
        self.partitions: list[list[bytes]] = [[] for _ in range(partitions)]
        self.checkpoints: dict[str, dict[str, str]] = {}
        self._next = 0

    def publish(self, writer: ChainWriter, count: int, start: int = 0) -> None:
        values, head = writer.seal_batch([_event(start + i) for i in range(count)])
        self.partitions[self._next % len(self.partitions)].extend(values)
        self._next += 1
        writer.commit(head)

    def checkpoint(self, writer: ChainWriter) -> None:
        checkpoint = writer.checkpoint(1_795_000_000_000 + writer.seq)
        assert checkpoint is not None
        self.checkpoints.setdefault(writer.chain, {})[checkpoint.run] = checkpoint.to_value()
        writer.checkpointed(checkpoint)

    def records(self) -> list[tuple[int, int, bytes]]:
        return [(p, o, v) for p, values in enumerate(self.partitions) for o, v in enumerate(values)]

    def resume(self, chain: str) -> ChainWriter:
        return ChainWriter(chain, latest_checkpoint(self.checkpoints.get(chain, {})))


def _tampering(report) -> list[tuple[str, str]]:
    return [(f.kind, f.where) for f in report.findings if f.tampering]


def _trail(partitions: int = 1) -> Trail:
    trail = Trail(partitions)
    writer = ChainWriter("gw-a")
    for batch in range(4):
        trail.publish(writer, 3, start=batch * 3)
    trail.checkpoint(writer)
    return trail


def test_an_intact_trail_verifies_and_events_carry_their_links():
    trail = _trail(partitions=2)
    report = verify(trail.records(), trail.checkpoints)
    assert report.ok and _tampering(report) == []
    assert report.chains == {"gw-a": {"events": 12, "runs": 1}}
    first = json.loads(trail.partitions[0][0])
    assert (first["seq"], first["prev_hash"], first["chain"]) == (1, GENESIS, "gw-a")
    second = json.loads(trail.partitions[0][1])
    assert second["prev_hash"] == first["hash"]


def test_an_edited_event_is_reported_at_its_offset():
    trail = _trail()
    event = json.loads(trail.partitions[0][4])
    event["decision"] = "ALLOWED"
    trail.partitions[0][4] = json.dumps(event).encode()
    report = verify(trail.records(), trail.checkpoints)
    assert not report.ok and ("edited", "0:4") in _tampering(report)
    assert report.first_bad("gw-a") == "0:4"


def test_an_edit_that_recomputes_the_hash_breaks_the_next_link():
    from authz.audit_chain import seal

    trail = _trail()
    event = json.loads(trail.partitions[0][4])
    event["decision"] = "ALLOWED"
    del event["hash"]
    trail.partitions[0][4] = seal(event)[0]  # a forger who knows the scheme
    report = verify(trail.records(), trail.checkpoints)
    assert ("inserted", "0:5") in _tampering(report)  # seq 6 does not link to the new seq 5


def test_a_deleted_event_is_reported():
    trail = _trail()
    del trail.partitions[0][6]
    report = verify(trail.records(), trail.checkpoints)
    assert [k for k, _ in _tampering(report)] == ["deleted"]


def test_deleting_the_tail_up_to_a_checkpoint_is_reported():
    trail = _trail()
    del trail.partitions[0][9:]
    report = verify(trail.records(), trail.checkpoints)
    assert [k for k, _ in _tampering(report)] == ["deleted"]
    assert "seq 12 was checkpointed" in next(f.detail for f in report.findings if f.tampering)


def test_reordered_events_are_reported():
    trail = _trail()
    p = trail.partitions[0]
    p[3], p[4] = p[4], p[3]
    report = verify(trail.records(), trail.checkpoints)
    assert ("reordered", "0:4") in _tampering(report)


def test_an_inserted_event_is_reported():
    trail = _trail()
    forged = json.loads(trail.partitions[0][2])
    forged["resource"] = "Topic:LITERAL:secret"
    trail.partitions[0].insert(3, json.dumps(forged).encode())  # a copy with the same seq, other bytes
    trail.partitions[0].insert(0, json.dumps(_event(99)).encode())  # no chain fields at all
    report = verify(trail.records(), trail.checkpoints)
    kinds = _tampering(report)
    assert ("inserted", "0:0") in kinds and any(k == "edited" for k, _ in kinds)


def test_a_rewritten_whole_run_is_caught_by_the_checkpoint():
    trail = _trail()
    original_run = json.loads(trail.partitions[0][0])["run"]
    rewritten = ChainWriter("gw-a", run=original_run)  # the same chain and run, forged from the start
    trail.partitions[0] = []
    for batch in range(4):
        trail.publish(rewritten, 3, start=100 + batch * 3)
    report = verify(trail.records(), trail.checkpoints)
    assert [k for k, _ in _tampering(report)] == ["rewritten"]


def test_a_duplicate_batch_from_a_retried_produce_is_not_tampering():
    trail = _trail()
    p = trail.partitions[0]
    p[6:6] = p[3:6]  # the batch written again right after itself
    report = verify(trail.records(), trail.checkpoints)
    assert report.ok
    assert [f.kind for f in report.findings].count("duplicate") == 3


def test_a_restart_resumes_from_the_last_checkpoint_and_a_kill_is_a_gap_not_tampering():
    trail = Trail()
    first = ChainWriter("gw-a")
    trail.publish(first, 5)
    trail.checkpoint(first)
    trail.publish(first, 2, start=5)  # published after the last checkpoint, then SIGKILL
    second = trail.resume("gw-a")
    assert second.resume is not None and (second.resume.run, second.resume.seq) == (first.run, 5)
    trail.publish(second, 4, start=10)
    trail.checkpoint(second)
    report = verify(trail.records(), trail.checkpoints)
    assert report.ok, _tampering(report)
    restart = next(f for f in report.findings if f.kind == "restart")
    assert f"{first.run}:5" in restart.detail and "2 more event(s)" in restart.detail
    tail = next(f for f in report.findings if f.kind == "unverified_tail")
    assert first.run in tail.detail
    assert report.chains["gw-a"] == {"events": 11, "runs": 2}


def test_checkpoints_round_trip_and_the_latest_wins():
    a, b = Checkpoint("r1", 5, "ab" * 32, 100), Checkpoint("r2", 2, "cd" * 32, 200, "r1:5")
    assert Checkpoint.from_value("r2", b.to_value()) == b
    assert latest_checkpoint({"r1": a.to_value(), "r2": b.to_value()}) == b
    assert latest_checkpoint({}) is None
