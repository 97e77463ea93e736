"""The audit trail's tamper evidence: a hash chain per gateway, checkpoints, and the verifier.

Theory of operation
-------------------
Each publishing gateway process keeps a *chain* (``chain``: ``audit.chain_id``, by default
``<cluster id>@<host>``, one per worker).  Each start of the process is a *run* (a random id).
Every event it publishes carries, besides its fields, ``chain``, ``run``, ``seq`` (1, 2, ... in
the run), ``prev_hash`` (the ``hash`` of the event before it; for ``seq`` 1 the hash of the event
the run resumes from, or 64 zeros) and ``hash``: SHA-256 over the event's *canonical bytes*,
the UTF-8 JSON of every field but ``hash`` with sorted keys and no spaces.  The first event of a
run names what it resumes from in ``resumes`` (``"<run>:<seq>"``): the last checkpoint of the
chain's previous run.  Events the gateway could not publish (its buffer was full, or the cluster
refused a batch for good) are never given a number: the next sealed batch starts with an event
``"event": "dropped"`` saying how many, so the trail records its own losses.

Every ``audit.checkpoint_interval_ms`` the publisher writes the run's head (``seq``, ``hash``)
to the metadata log as a :class:`Checkpoint` (a ConfigRecord of the kgw-private resource type
:data:`CHECKPOINT_RESOURCE_TYPE`, resource name = the chain, config name = the run): it is
replicated, snapshotted and shared like every other record, and cannot be edited from the
audit topic's side.

:func:`verify` reads the topic's records (partition, offset, value) and the checkpoints and
reports, per chain, what is wrong with the first bad offset:

* ``edited``: an event's bytes do not hash to its ``hash``;
* ``inserted``: an event whose ``prev_hash`` is not its predecessor's ``hash``, a second event
  with a taken ``seq`` and another hash, or an event without chain fields;
* ``deleted``: a ``seq`` missing inside a run, or a run ending before a checkpointed ``seq``;
* ``rewritten``: the event at a checkpointed ``seq`` has another hash than the checkpoint;
* ``reordered``: in one partition, a later offset with a lower ``seq`` of the same run.

Not tampering, reported for the record: ``duplicate`` (a batch written twice by a retried
Produce: the same ``seq`` and ``hash``), ``restart`` (a run resumed from its predecessor's last
checkpoint; events offered between that checkpoint and the stop, e.g. at a SIGKILL, may be
missing, and that is a gap, not an edit), ``unverified_tail`` (events after a run's last
checkpoint: a deletion there cannot be proven), ``head_missing`` (a run's first events are gone:
retention or deletion, indistinguishable).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CHECKPOINT_RESOURCE_TYPE", "GENESIS", "ChainWriter", "Checkpoint", "Finding", "Report", "seal",
           "verify"]

GENESIS = "0" * 64
#: the ConfigRecord resource type of audit checkpoints: not one of Kafka's (0-32), never
#: answered to DescribeConfigs
CHECKPOINT_RESOURCE_TYPE = 100
CHAIN_FIELDS = ("chain", "run", "seq", "prev_hash", "hash")


def _canonical(event: Mapping[str, Any]) -> str:
    return json.dumps({k: v for k, v in event.items() if k != "hash"}, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False, default=str)


def seal(event: Mapping[str, Any]) -> tuple[bytes, str]:
    """The record value of ``event`` (which holds its chain fields but ``hash``) and its hash."""
    body = _canonical(event)
    digest = hashlib.sha256(body.encode()).hexdigest()
    return (body[:-1] + f',"hash":"{digest}"}}').encode(), digest


@dataclass(frozen=True, slots=True)
class Checkpoint:
    run: str
    seq: int
    hash: str
    time_ms: int = 0
    #: the checkpoint the run resumed from ("<run>:<seq>"), if any
    resumes: str | None = None

    def to_value(self) -> str:
        return json.dumps({"seq": self.seq, "hash": self.hash, "time_ms": self.time_ms, "resumes": self.resumes},
                          separators=(",", ":"))

    @classmethod
    def from_value(cls, run: str, value: str) -> "Checkpoint":
        data = json.loads(value)
        return cls(run, int(data["seq"]), str(data["hash"]), int(data.get("time_ms", 0)), data.get("resumes"))


class ChainWriter:
    """The publisher's side: numbers and links events, one batch at a time.

    ``seal_batch`` returns the record values and the head they lead to; ``commit`` makes that the
    head once the batch is written (a batch refused for good is never committed: the next one
    links to the last written event, and the loss is recorded by a ``dropped`` event)."""

    def __init__(self, chain: str, resume: Checkpoint | None = None, run: str | None = None) -> None:
        self.chain = chain
        self.run = run or secrets.token_hex(8)
        self.resume = resume
        self.seq = 0
        self.hash = resume.hash if resume is not None else GENESIS
        self.checkpointed_seq = 0

    def seal_batch(self, events: Iterable[dict[str, Any]]) -> tuple[list[bytes], tuple[int, str]]:
        seq, prev = self.seq, self.hash
        values = []
        for event in events:
            seq += 1
            event.update(chain=self.chain, run=self.run, seq=seq, prev_hash=prev)
            if seq == 1 and self.resume is not None:
                event["resumes"] = f"{self.resume.run}:{self.resume.seq}"
            value, prev = seal(event)
            values.append(value)
        return values, (seq, prev)

    def commit(self, head: tuple[int, str]) -> None:
        self.seq, self.hash = head

    def checkpoint(self, time_ms: int) -> Checkpoint | None:
        """The head to record, if it moved since the last one recorded."""
        if self.seq == self.checkpointed_seq:
            return None
        resumes = f"{self.resume.run}:{self.resume.seq}" if self.resume is not None else None
        return Checkpoint(self.run, self.seq, self.hash, time_ms, resumes)

    def checkpointed(self, checkpoint: Checkpoint) -> None:
        self.checkpointed_seq = max(self.checkpointed_seq, checkpoint.seq)


def latest_checkpoint(checkpoints: Mapping[str, str]) -> Checkpoint | None:
    """The most recent of a chain's checkpoints (config name = run -> value)."""
    parsed = [Checkpoint.from_value(run, value) for run, value in checkpoints.items()]
    return max(parsed, key=lambda c: (c.time_ms, c.seq), default=None)


# --------------------------------------------------------------------------- verification


@dataclass(frozen=True, slots=True)
class Finding:
    chain: str
    kind: str
    detail: str
    #: "partition:offset" of the record concerned ("" when none)
    where: str = ""
    tampering: bool = True


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    #: chain -> events verified, runs
    chains: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(f.tampering for f in self.findings)

    def first_bad(self, chain: str) -> str | None:
        bad = [f.where for f in self.findings if f.chain == chain and f.tampering and f.where]
        return min(bad, key=lambda w: tuple(int(x) for x in w.split(":")), default=None)


@dataclass(slots=True)
class _Event:
    where: str
    partition: int
    offset: int
    run: str
    seq: int
    prev_hash: str
    hash: str
    resumes: str | None


def verify(records: Iterable[tuple[int, int, bytes]], checkpoints: Mapping[str, Mapping[str, str]]) -> Report:
    """Check the records of an audit topic (``(partition, offset, value)``, any order) against
    the checkpoints (chain -> run -> :meth:`Checkpoint.to_value`)."""
    report = Report()
    add = report.findings.append
    runs: dict[tuple[str, str], list[_Event]] = defaultdict(list)
    last_in_partition: dict[tuple[int, str, str], _Event] = {}
    seen: dict[tuple[int, str, str, int], str] = {}
    for partition, offset, value in sorted(records, key=lambda r: (r[0], r[1])):
        where = f"{partition}:{offset}"
        try:
            event = json.loads(value)
            if not isinstance(event, dict):
                raise ValueError("not an object")
        except ValueError:
            add(Finding("?", "inserted", "a record that is not a JSON audit event", where))
            continue
        chain = event.get("chain")
        if not isinstance(chain, str) or not all(isinstance(event.get(k), (str, int)) for k in CHAIN_FIELDS):
            add(Finding(str(chain or "?"), "inserted", "an event without its chain fields", where))
            continue
        claimed = str(event["hash"])
        if seal(event)[1] != claimed:
            add(Finding(chain, "edited", f"run {event['run']} seq {event['seq']}: its bytes do not hash to its hash",
                        where))
        item = _Event(where, partition, offset, str(event["run"]), int(event["seq"]), str(event["prev_hash"]), claimed,
                      event.get("resumes"))
        key = (partition, chain, item.run)
        before = last_in_partition.get(key)
        repeated = seen.get((partition, chain, item.run, item.seq)) == claimed  # a batch written twice
        seen[(partition, chain, item.run, item.seq)] = claimed
        if before is not None and item.seq < before.seq and not repeated:
            add(Finding(chain, "reordered", f"run {item.run}: seq {item.seq} after seq {before.seq} in partition "
                                            f"{partition}", where))
        last_in_partition[key] = item if before is None or item.seq > before.seq else before
        runs[(chain, item.run)].append(item)

    by_seq: dict[tuple[str, str, int], _Event] = {}
    for (chain, run), events in runs.items():
        events.sort(key=lambda e: (e.seq, e.partition, e.offset))
        unique: list[_Event] = []
        for e in events:
            if unique and unique[-1].seq == e.seq:
                if unique[-1].hash == e.hash:
                    add(Finding(chain, "duplicate", f"run {run} seq {e.seq} written twice (a retried Produce)",
                                e.where, tampering=False))
                else:
                    add(Finding(chain, "inserted", f"run {run}: a second seq {e.seq} with another hash", e.where))
                continue
            unique.append(e)
        runs[(chain, run)] = unique
        for e in unique:
            by_seq[(chain, run, e.seq)] = e
        if unique and unique[0].seq != 1:
            add(Finding(chain, "head_missing", f"run {run} starts at seq {unique[0].seq} (retention, or deleted)",
                        unique[0].where, tampering=False))
        for before, e in zip(unique, unique[1:]):
            if e.seq != before.seq + 1:
                add(Finding(chain, "deleted", f"run {run}: seq {before.seq + 1}..{e.seq - 1} missing", e.where))
            elif e.prev_hash != before.hash:
                add(Finding(chain, "inserted", f"run {run} seq {e.seq} does not link to seq {before.seq}", e.where))

    for (chain, run), events in runs.items():
        first = events[0] if events else None
        if first is not None and first.seq == 1:
            if first.resumes:
                resumed_run, _, resumed_seq = first.resumes.rpartition(":")
                resumed = by_seq.get((chain, resumed_run, int(resumed_seq or 0)))
                if resumed is not None and first.prev_hash != resumed.hash:
                    add(Finding(chain, "inserted", f"run {run} does not link to the event it resumes from "
                                                   f"({first.resumes})", first.where))
                previous = runs.get((chain, resumed_run)) or []
                after = previous[-1].seq - int(resumed_seq or 0) if previous else 0
                add(Finding(chain, "restart", f"run {run} resumed from run {first.resumes} (last checkpoint)"
                            + (f"; that run wrote {after} more event(s) after it" if after > 0 else "")
                            + "; what was offered between that and the stop may be missing", first.where,
                            tampering=False))
            elif first.prev_hash != GENESIS:
                add(Finding(chain, "inserted", f"run {run} seq 1 links to nothing known", first.where))

    for chain, chain_checkpoints in checkpoints.items():
        for run, stored in chain_checkpoints.items():
            checkpoint = Checkpoint.from_value(run, stored)
            events = runs.get((chain, run), [])
            at = by_seq.get((chain, run, checkpoint.seq))
            if at is None:
                last = events[-1].seq if events else 0
                if last < checkpoint.seq:
                    add(Finding(chain, "deleted", f"run {run} ends at seq {last} but seq {checkpoint.seq} was "
                                                  "checkpointed", events[-1].where if events else ""))
            elif at.hash != checkpoint.hash:
                add(Finding(chain, "rewritten", f"run {run} seq {checkpoint.seq} is not the checkpointed event",
                            at.where))
    for (chain, run), events in runs.items():
        last_stored = checkpoints.get(chain, {}).get(run)
        checkpointed = Checkpoint.from_value(run, last_stored).seq if last_stored else 0
        tail = [e for e in events if e.seq > checkpointed]
        if tail:
            add(Finding(chain, "unverified_tail", f"run {run}: {len(tail)} event(s) after its last checkpoint "
                                                  f"(seq {checkpointed})", tail[0].where, tampering=False))
        summary = report.chains.setdefault(chain, {"events": 0, "runs": 0})
        summary["events"] += len(events)
        summary["runs"] += 1
    return report
