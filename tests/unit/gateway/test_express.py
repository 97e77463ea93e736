"""The data plane's express dispatch (``gateway/connection/_plane_steps.c``, ``express``) against
its reference, ``ConnectionCore.dispatch``: the usual Produce request forwarded on the decision
memo's word (without an authorizer, as it is; v13's topic id named as the gateway learned it)
without the interpreter, and everything else left to the reference untouched.

Every case runs the same requests and the same changes (the ACLs revoked and granted again, the
principal, the audit log at DEBUG, an audit sink, the routes, the upstream's versions, the
upstream, a SASL session, the size above which a request is large, the topic ids learned) on two
production gateways: one side as the data plane runs a request (the express path first, then
``dispatch`` when it declines), the other with ``dispatch`` alone; and the same without an
authorizer.  After each request both must have answered and forwarded the same, kept the same
slots, deferred the same counts and told the authorizer's metrics the same (the data plane's side
counting as the lanes do, the memo's allowances in C).  A request that must be refused (another
topic, a revoked ACL, a transactional or damaged batch) is refused on both: the express path never
forwards what the reference would not.  The memo asked and counted in C (``memo_allows``,
``count``) is held to its ``allows`` and ``inc`` where they differ in what C reads: the audit
logger's level cache, the rate window's turn, the metrics' lock held elsewhere, another clock."""

from __future__ import annotations

import logging
import random
import uuid
from datetime import timedelta
from types import SimpleNamespace

import pytest
import trio
from kio.static.primitive import i16, i32

from authz.audit import AUDIT_LOGGER_NAME
from authz.principal import KafkaPrincipal
from gateway.auth.sasl import SaslState
from gateway.connection import _plane_steps
from gateway.connection.client import ClientConnection
from gateway.connection.core import CloseConnection
from gateway.connection.upstream_side import UpstreamSide
from gateway.upstream.cluster import encode_request
from protocol.apis.api_versions import VersionRange, advertised_versions
from protocol.apis.registry import LOCAL_KEYS, REGISTRY
from protocol.codecs import make, nested, request_class
from tests.support.kio_samples import record_batch
from tests.unit.gateway.test_connection_core import _core, _gateway, _learn_versions
from tests.unit.gateway.test_decision_memo import _setup, _write_acl

express = _plane_steps.express

_ALLOWED_METRICS = ("kgw_authorizer_authorization_allowed_total", "kgw_authorizer_authorization_denied_total")


def _produce(rng: random.Random, topics: list, version: int, acks: int, client: int,
             attributes: int = 0, damaged: bool = False) -> memoryview:
    """A Produce request of ``version``: for each (name, partitions) of ``topics`` that many
    partitions of one batch (transactional with ``attributes`` 0x10; magic 1 when ``damaged``);
    the client id ``k<client>``."""
    cls = request_class(0, version)
    topic_cls = nested(cls, "topic_data")
    part_cls = nested(topic_cls, "partition_data")
    entries = []
    for name, n in topics:
        batch = bytearray(record_batch(b"v" * rng.randrange(4), producer_id=5 if attributes else -1,
                                       attributes=attributes))
        if damaged:
            batch[16] = 1
        parts = tuple(make(part_cls, index=i32(p), records=bytes(batch)) for p in range(n))
        named = {"topic_id": _ID[name]} if version >= 13 else {"name": name}
        entries.append(make(topic_cls, partition_data=parts, **named))
    body = make(cls, transactional_id="tx" if attributes else None, acks=i16(acks),
                timeout=timedelta(milliseconds=rng.choice([0, 1500, 30_000])), topic_data=tuple(entries))
    frame = encode_request(0, version, rng.randrange(1 << 31), body)
    return memoryview(frame.replace(b"\x00\x03kgw", b"\x00\x03" + b"k%02d" % client, 1))


#: the topics' ids (v13 names them by id); the gateways learned all but the last
_ID = {name: uuid.uuid5(uuid.NAMESPACE_URL, name) for name in ("express-orders", "express-other", "express-unknown")}


def _learn(gw) -> None:
    """What the gateway knows once the upstream answered ApiVersions (Produce up to v13) and
    Metadata (the ids of two topics)."""
    _learn_versions(gw)
    gw.cluster.versions = {**gw.cluster.versions, 0: VersionRange(3, 13)}
    gw._advertised = advertised_versions(gw.cluster.versions, LOCAL_KEYS, REGISTRY, gw.authorizer is not None)
    gw._advertised_for = gw.cluster.versions
    for name in ("express-orders", "express-other"):
        gw.topic_ids.learn(name, _ID[name])


class _Side:
    """One production gateway and connection core whose authorizer lets ``User:express-writer``
    write ``express-orders`` (or, not ``authorized``, a gateway without an authorizer); the
    connection on the data plane (a lane's deferred counts)."""

    def __init__(self, via_express: bool, authorized: bool = True) -> None:
        self.via_express = via_express
        if authorized:
            self.gw, self.core, self.acl_id, self.calls, self.registry = _setup("User:express-writer",
                                                                                "express-orders")
        else:
            self.gw = _gateway()
            self.core, self.calls, self.registry = _core(self.gw), [], None
        _learn(self.gw)
        self.core.lane = SimpleNamespace(deferred=[])
        self.limits = (self.core._offload_request, self.core._offload_produce)  # (restored by "undo limits")
        self.out: list = []
        self.expressed = 0

    def run(self, frame: memoryview) -> tuple:
        before = len(self.out)
        try:
            if self.via_express and express(self.core, frame, self.out):
                self.expressed += 1
                result: tuple = ("returned", False)
            else:
                outcome = self.core.dispatch(frame, self.out)
                result = ("returned", outcome if isinstance(outcome, bool) else type(outcome).__name__)
        except CloseConnection as e:
            result = ("closed", str(e), e.metric)
        deferred = [type(d).__name__ for d in self.core.lane.deferred]
        for counted in self.core.lane.deferred:  # as the lane counts them once the request is written
            if self.via_express:  # (the data plane's count: the memo's in C)
                _plane_steps.count(counted)
            else:
                counted.inc()
        self.core.lane.deferred.clear()
        slots = [(s.header, s.spec.name, s.merge is None, s.quota, s.large, None if s.data is None else bytes(s.data),
                  round(s.deadline - s.sent_at, 6), getattr(s, "busy", "unset"), getattr(s, "throttle", "unset"))
                 for s in self.core.pending]
        metrics = [self.registry.get_sample_value(m, {"listener": "T"}) if self.registry else None
                   for m in _ALLOWED_METRICS]
        window = self.gw.authorizer._metrics._window if self.registry else None
        metrics.append(None if window is None else [s[1:] for s in window.samples])
        return (result, [bytes(f) for f in self.out[before:]], slots, len(self.core.in_flight), deferred,
                self.core.client_id, metrics, len(self.calls))

    def change(self, what: str, rng: random.Random) -> None:
        """One change of state; ``"undo " + what`` takes it back."""
        core, authorizer = self.core, self.gw.authorizer
        if authorizer is None and what.endswith(("revoke", "grant", "sink")):
            return
        if what == "revoke":
            authorizer.load_snapshot({})
        elif what in ("undo revoke", "grant"):
            self.acl_id = uuid.uuid4()
            authorizer.load_snapshot({self.acl_id: _write_acl("User:express-writer", "express-orders")})
        elif what in ("principal", "undo principal"):  # (a new object either way: decided afresh)
            core.principal = KafkaPrincipal("User", "express-other" if what == "principal" else "express-writer")
        elif what in ("sink", "undo sink"):
            authorizer.audit_sinks = (SimpleNamespace(publish=lambda *a: None),) if what == "sink" else ()
        elif what in ("ids", "undo ids"):  # the ids learned forgotten (a cache that evicted them)
            if what == "ids":
                self.gw.topic_ids.clear()
            else:
                _learn(self.gw)
        elif what == "routes":
            core._routes_for = None  # (as a new advertised table makes them)
        elif what in ("versions", "undo versions"):  # the upstream's versions changed: the table not current
            if what == "versions":
                self.gw.cluster.versions = dict(self.gw.cluster.versions)
            else:
                self.gw._advertised_for = self.gw.cluster.versions
        elif what in ("upstream", "undo upstream"):
            core._upstream = None if what == "upstream" else object()
        elif what in ("session", "undo session"):
            core.auth = SimpleNamespace(principal=None, session=None if what == "undo session" else rng.choice([
                SimpleNamespace(state=SaslState.COMPLETE, expires_at=None, expects_raw_token=False,
                                authenticated=True, principal=None),
                SimpleNamespace(state=SaslState.COMPLETE, expires_at=1e12, expects_raw_token=False,
                                authenticated=True, principal=None, expired=lambda now: False),
                SimpleNamespace(state=SaslState.COMPLETE, expires_at=1.0, expects_raw_token=False,  # (KIP-368)
                                authenticated=True, principal=None, expired=lambda now: True, lifetime_ms=1)]))
        elif what in ("limits", "undo limits"):  # large requests: above offload_request (and offload_produce)
            core._offload_request, core._offload_produce = self.limits if what == "undo limits" else (
                100, rng.choice([100, 1 << 20]))
        elif what == "completed":  # the upstream answered the oldest request
            if core.in_flight:
                core.pending.remove(core.in_flight.popleft())


#: changes of state, each undone a few requests later; "routes" and "completed" are not undone
_CHANGES = ("revoke", "principal", "sink", "upstream", "session", "debug", "limits", "ids", "routes",
            "versions", "completed", "completed")


def _request(rng: random.Random) -> memoryview:
    roll = rng.random()
    version = rng.choice([3, 8, 9, 11, 12, 13, 13])
    acks = rng.choice([-1, -1, 1, 0])
    client = rng.randrange(3)
    if roll < 0.55:  # the usual request
        return _produce(rng, [("express-orders", rng.choice([1, 1, 3]))], version, acks, client)
    if roll < 0.65:
        return _produce(rng, [("express-other", 1)], version, acks, client)
    if roll < 0.72:
        return _produce(rng, [("express-orders", 1), ("express-orders", 2)], version, acks, client)
    if roll < 0.79:
        return _produce(rng, [("express-orders", 1)], version, acks, client, attributes=0x10)
    if roll < 0.86:
        return _produce(rng, [("express-orders", 1)], version, acks, client, damaged=True)
    if roll < 0.90:
        return _produce(rng, [("express-unknown", 1)], 13, acks, client)  # an id not learned
    if roll < 0.94:  # another API: never the express path's
        cls = request_class(3, 9)
        topic = nested(cls, "topics")
        return memoryview(encode_request(3, 9, rng.randrange(1 << 31), make(
            cls, topics=(make(topic, name="express-orders"),), allow_auto_topic_creation=False,
            include_cluster_authorized_operations=False, include_topic_authorized_operations=False)))
    frame = bytearray(_produce(rng, [("express-orders", 1)], version, acks, client))
    frame[rng.randrange(14, len(frame))] ^= 1 << rng.randrange(8)  # one bit of its body
    return memoryview(bytes(frame))


@pytest.mark.parametrize("seed, authorized", [(seed, True) for seed in range(12)]
                         + [(seed, False) for seed in range(12, 18)])
def test_the_express_path_does_what_dispatch_does(seed, authorized):
    rng = random.Random(seed)
    audit = logging.getLogger(AUDIT_LOGGER_NAME)
    level = audit.level
    fast, reference = _Side(True, authorized), _Side(False, authorized)
    undo: list = []  # [requests left, change]

    def change(what: str) -> None:
        if what.endswith("debug"):  # (one logger for both sides)
            audit.setLevel(logging.INFO if what.startswith("undo") else logging.DEBUG)
            return
        state = rng.getstate()
        fast.change(what, rng)
        rng.setstate(state)
        reference.change(what, rng)

    try:
        for step in range(200):
            for pending in list(undo):
                pending[0] -= 1
                if pending[0] < 0:
                    undo.remove(pending)
                    change(pending[1])
            if rng.random() < 0.08:
                what = rng.choice(_CHANGES)
                change(what)
                if what not in ("routes", "completed"):
                    undo.append([rng.randint(1, 6), "undo " + what])
                continue
            frame = _request(rng)
            assert fast.run(frame) == reference.run(frame), f"step {step}"
    finally:
        audit.setLevel(level)
    assert fast.expressed > 40  # the usual request took the express path


def test_what_the_express_path_declines_it_leaves_untouched():
    """A declined request changes nothing the reference would then do again: no slot, no
    forwarded frame, no deferred count, no client id."""
    side = _Side(True)
    rng = random.Random(7)
    usual = _produce(rng, [("express-orders", 1)], 9, -1, 1)
    assert express(side.core, usual, side.out) is False  # no action asked yet: the reference's
    assert side.core.dispatch(usual, side.out) is False and len(side.calls) == 1
    assert express(side.core, usual, side.out) is True  # now on the memo's word
    side.core.client_id = None
    side.core.lane.deferred.clear()
    side.core._offload_request = 16  # (a Produce request is large above both limits)
    for frame, state in ((_produce(rng, [("express-other", 1)], 9, -1, 1), None),
                         (usual, ("_quota_map", {"a quota": 1})),
                         (usual, ("_offload_produce", 16)),  # (with _offload_request, set below)
                         (usual, ("_memo", None))):
        if state is not None:
            saved = getattr(side.core, state[0])
            setattr(side.core, state[0], state[1])
        pending, out = len(side.core.pending), len(side.out)
        assert express(side.core, frame, side.out) is False
        assert (len(side.core.pending), len(side.out), side.core.lane.deferred, side.core.client_id) == (
            pending, out, [], None)
        if state is not None:
            setattr(side.core, state[0], saved)
    side.gw.authorizer.load_snapshot({})  # revoked: the memo no longer allows, and says so
    assert express(side.core, usual, side.out) is False and side.core.lane.deferred == []


def test_the_first_request_in_flight_moves_the_upstream_deadline_where_there_is_one():
    """A client connection's first request in flight moves its upstream side's deadline, as
    ``_on_first_in_flight`` does; with no cancel scope there (on the data plane) nothing is to move."""
    side = _Side(True)
    rng = random.Random(5)
    frames = [_produce(rng, [("express-orders", 1)], 9, -1, 1) for _ in range(3)]
    side.core.dispatch(frames[0], side.out)  # (the memo remembers the action)
    conn = ClientConnection.__new__(ClientConnection)
    conn.__dict__.update(side.core.__dict__)
    conn.upstream_side = UpstreamSide()
    conn.pending.clear()
    conn.in_flight.clear()
    assert express(conn, frames[1], side.out) is True and conn.upstream_side.scope is None
    conn.pending.clear()
    conn.in_flight.clear()

    async def main() -> None:
        with trio.CancelScope() as scope:
            conn.upstream_side.scope = scope
            assert express(conn, frames[2], side.out) is True
            moved = scope.deadline  # (inf before)
            conn._on_first_in_flight(conn.in_flight[0])  # the reference, on the same slot
            assert abs(scope.deadline - moved) < 0.5

    trio.run(main)


def test_the_data_plane_takes_the_express_path():
    """The handler the data plane runs for a client's frames asks the express path first: built
    and configured by importing the core (``make setup`` builds the extensions)."""
    side = _Side(True)
    rng = random.Random(3)
    frames = [_produce(rng, [("express-orders", 1)], 9, -1, 1) for _ in range(3)]
    side.core.dispatch(frames[0], side.out)
    assert [express(side.core, f, side.out) for f in frames[1:]] == [True, True]
    assert len(side.core.pending) == 3 and len(side.calls) == 1


def _remembered(seed: int) -> tuple:
    """A side whose memo remembers the usual request's action (the reference dispatched it
    once): the side, the memo, the action, the authorizer's metrics."""
    side = _Side(True)
    usual = _produce(random.Random(seed), [("express-orders", 1)], 9, -1, 1)
    side.core.dispatch(usual, side.out)
    memo = side.core._memo
    (action,) = memo._allowed.values()
    for counted in side.core.lane.deferred:
        counted.inc()
    side.core.lane.deferred.clear()
    return side, memo, action, side.gw.authorizer._metrics


def test_the_memo_asked_in_c_answers_as_allows_or_not_at_all():
    """``memo_allows`` says yes only where ``allows`` does, and otherwise "not known here" with
    nothing deferred: the dispatcher then asks ``allows`` (which may fill what C reads)."""
    side, memo, action, _ = _remembered(21)
    audit = logging.getLogger(AUDIT_LOGGER_NAME)
    level, disabled = audit.level, audit.disabled
    later: list = []
    try:
        assert _plane_steps.memo_allows(memo, action, later) is True and later == [memo]
        audit.setLevel(logging.INFO)  # (the logger's level cache emptied: C does not know yet)
        assert _plane_steps.memo_allows(memo, action, later) is False and later == [memo]
        assert memo.allows(action, later) is True  # the reference knows, and fills the cache
        assert _plane_steps.memo_allows(memo, action, later) is True and later == [memo] * 3
        audit.disabled = True  # (a disabled logger logs nothing: allows says yes)
        assert memo.allows(action, []) is True and _plane_steps.memo_allows(memo, action, later) is True
        audit.disabled = False
        audit.setLevel(logging.DEBUG)
        assert memo.allows(action, []) is False and _plane_steps.memo_allows(memo, action, later) is False
        audit.setLevel(logging.INFO)
        memo.allows(action, [])
        audit.__class__ = _LoudLogger  # (another class's isEnabledFor: C does not read it)
        assert memo.allows(action, []) is False and _plane_steps.memo_allows(memo, action, later) is False
        audit.__class__ = logging.Logger
        other = type(action)(action.operation, action.resource_pattern, 2, True, True)  # (not remembered)
        assert _plane_steps.memo_allows(memo, other, later) is False
        side.gw.authorizer._metrics = None  # nothing to count: allowed, nothing deferred
        assert _plane_steps.memo_allows(memo, action, later) is True and len(later) == 4
    finally:
        audit.__class__ = logging.Logger
        audit.setLevel(level)
        audit.disabled = disabled


class _LoudLogger(logging.Logger):
    """A logger class of its own, logging everything."""

    def isEnabledFor(self, level: int) -> bool:
        return True


class _BusyLock:
    """A lock another thread holds whenever it is tried without waiting (``acquire(False)``),
    entered as ``record`` enters it."""

    def __init__(self) -> None:
        self.entered = 0

    def acquire(self, blocking: bool = True) -> bool:
        return blocking

    def release(self) -> None:
        pass

    def __enter__(self):
        self.entered += 1
        return self

    def __exit__(self, *exc) -> None:
        pass


def test_the_memo_counts_in_c_as_record_does():
    """``count`` of a memo's allowance adds what ``inc`` adds, to the listener's tally and the
    current rate window; where ``record`` would do more (the listener's first count, a new window,
    another clock) or its lock is held elsewhere, ``inc`` records it."""
    side, memo, action, metrics = _remembered(22)

    def state() -> tuple:
        return tuple(metrics._tallies["T"]), [tuple(s) for s in metrics._window.samples]

    (allowed, denied), windows = state()
    for _ in range(5):
        _plane_steps.count(memo)
    assert state() == ((allowed + 5, denied), windows[:-1] + [(windows[-1][0], windows[-1][1] + 5, windows[-1][2])])
    metrics._window.last[0] -= 31.0  # the window is over: record begins the next
    _plane_steps.count(memo)
    assert len(metrics._window.samples) == 2 and metrics._window.last[1:] == [1, 0]
    assert metrics._tallies["T"] == [allowed + 6, denied]
    del metrics._tallies["T"]  # the listener's first count
    _plane_steps.count(memo)
    assert metrics._tallies["T"] == [1, 0]
    busy = metrics._lock = _BusyLock()
    _plane_steps.count(memo)
    assert busy.entered == 1 and metrics._tallies["T"] == [2, 0]
    metrics._clock = lambda: 1e9  # another clock: record reads it
    _plane_steps.count(memo)
    assert metrics._window.last == [1e9, 1, 0] and busy.entered == 2
