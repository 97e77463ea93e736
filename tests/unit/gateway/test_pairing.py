"""The pairing of upstream responses with requests in flight in C
(``gateway/connection/_plane_steps.c``, ``complete_responses``) against its Python reference,
``ConnectionCore.complete_responses_python``: the same responses to the same requests leave the
same answers, the same counts, the same close.

Every case is built twice from one seed, once for each side, on production connection cores:
a few requests in flight (APIs with and without a response rewrite, merged or not, under a quota
or not, large or not) and a few frames from the upstream (the right correlation id or not, shorter
than a response header, a flexible response header with tagged fields, larger than the offload
threshold, more frames than requests)."""

from __future__ import annotations

import dataclasses
import random
import struct
from types import SimpleNamespace

import pytest

from gateway.connection import _plane_steps, core as core_module
from gateway.connection.core import CloseConnection, Slot
from protocol.apis.registry import REGISTRY
from protocol.codecs import CodecError
from protocol.framing import FrameDecoder
from protocol.headers import RequestHeader
from tests.unit.gateway.test_connection_core import _core, _gateway

pairing = _plane_steps.complete_responses


def _rewrite_to(body: bytes):
    return lambda _version, _frame, _off, _nodes: body


def _rewrite_refusing(_version, _frame, _off, _nodes):
    raise CodecError("a body that does not decode")


def _rewrite_failing(_version, _frame, _off, _nodes):
    raise ValueError("not a codec error")


def _specs() -> list:
    produce, metadata = REGISTRY[0], REGISTRY[3]
    other = dataclasses.replace(produce, response_tags=None)  # (Produce's check is for Produce's rewrite)
    plain = dataclasses.replace(other, api_key=10, name="FindCoordinator", rewrite_response=None)
    return [
        produce,  # Produce: its rewrite looks for tags (v10+) and answers None on the usual response;
        # the C pairing asks its response_tags first (random bodies: False, True or not known)
        metadata,  # Metadata: its rewrite decodes the body (random bytes: a CodecError, never an abort)
        plain,  # no rewrite at all
        dataclasses.replace(other, api_key=11, name="JoinGroup", rewrite_response=_rewrite_to(b"\x01\x02new")),
        dataclasses.replace(other, api_key=12, name="Heartbeat", rewrite_response=_rewrite_refusing),
        dataclasses.replace(other, api_key=13, name="LeaveGroup", rewrite_response=_rewrite_failing),
    ]


class _Quota:
    """A connection's quotas (what _throttle asks of them): over one by ``ms`` on each response."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def on_response(self, _api_key, _size, _busy):
        return self.ms


def _case(seed: int, gw) -> tuple:
    """One case, the same for the same seed: (core, decoder, slots), nothing run yet."""
    rng = random.Random(seed)
    core = _core(gw)
    core._offload_response = rng.choice([1 << 20, 24])
    core._cluster = SimpleNamespace(timing_out_since=rng.choice([None, 12.5]), answers=0)
    core._cluster.answered = lambda: setattr(core._cluster, "timing_out_since", None)
    specs = _specs()
    slots = []
    for i in range(rng.randint(0, 3)):
        spec = rng.choice(specs)
        version = rng.choice([8, 9, 10, 11])
        header = RequestHeader(spec.api_key, version, 100 + i, "c", 10, version >= 9)
        slot = Slot(header, spec, None, 1.0, 2.0)
        roll = rng.random()
        if roll < 0.15:
            slot.merge = lambda frame, off: None
        elif roll < 0.25:
            slot.merge = lambda frame, off: b"merged"
        if rng.random() < 0.15:
            slot.quota = _Quota(rng.choice([0, 5]))
            slot.busy, slot.throttle = 0.0, 0
        slot.large = rng.random() < 0.1
        slots.append(slot)
        core.in_flight.append(slot)
        core.pending.append(slot)
    data = b""
    for i in range(rng.randint(0, 4)):
        correlation = 100 + i if rng.random() < 0.9 else 7
        shape = rng.random()
        if shape < 0.1:
            body = b""  # the correlation id alone
        elif shape < 0.2:
            body = b"\x02\x05\x01x" + bytes(rng.randrange(256) for _ in range(rng.randint(0, 30)))  # header tags
        else:
            body = b"\x00" + bytes(rng.randrange(256) for _ in range(rng.randint(0, 40)))
        frame = struct.pack(">i", correlation) + body
        data += struct.pack(">i", len(frame)) + frame
    if rng.random() < 0.1:
        data += b"\x00\x00"  # the start of the next frame
    decoder = FrameDecoder(1 << 20, trusted=True)
    decoder.receive_data(data)
    return core, decoder, slots


def _outcome(run, core, decoder, slots, gw) -> dict:
    before = _latency_counts(gw)
    try:
        result = ("returned", run(core, decoder))
    except CloseConnection as e:
        result = ("closed", str(e), e.metric)
    except Exception as e:  # noqa: BLE001 - what escapes must be the same on both sides
        result = ("raised", type(e).__name__, str(e))
    heavy = core.heavy
    return {
        "result": result,
        "data": [None if s.data is None else bytes(s.data) for s in slots],
        "unsent": core.unsent,
        "heavy": None if heavy is None else (slots.index(heavy[0]), bytes(heavy[1])),
        "in flight": len(core.in_flight),
        "buffered": decoder.buffered,
        "answered": core._cluster.timing_out_since,
        "throttled": core.throttled_until > 0,
        "observed": {k: v - before.get(k, 0) for k, v in _latency_counts(gw).items() if v != before.get(k, 0)},
    }


def _latency_counts(gw) -> dict:
    """Responses observed in kgw_upstream_latency_seconds, by API (a row: the buckets' counts, the sum)."""
    return {key[1]: sum(row[:-1]) for key, row in gw.metrics.upstream_latency.totals().items()}


@pytest.mark.parametrize("block", range(8))
def test_the_pairing_in_c_leaves_what_its_python_reference_leaves(block):
    gw = _gateway()
    for seed in range(block * 250, (block + 1) * 250):
        python = _outcome(core_module.ConnectionCore.complete_responses_python, *_case(seed, gw), gw)
        native = _outcome(pairing, *_case(seed, gw), gw)
        assert native == python, f"seed {seed}"


def test_the_cases_reach_every_way_a_response_goes():
    """The differential cases above are worth what they cover: each outcome occurs."""
    gw = _gateway()
    seen = set()
    for seed in range(2000):
        core, decoder, slots = _case(seed, gw)
        timing_out = core._cluster.timing_out_since is not None
        out = _outcome(core_module.ConnectionCore.complete_responses_python, core, decoder, slots, gw)
        result = out["result"]
        seen.add(result[0] if result[0] != "closed" else f"closed: {result[1].split(':')[0].split(' (')[0]}")
        if out["heavy"] is not None:
            seen.add("heavy")
        if any(d is not None and d.endswith(b"new") for d in out["data"]):
            seen.add("rewritten")
        if any(d is not None and d.endswith(b"merged") for d in out["data"]):
            seen.add("merged")
        if timing_out and out["answered"] is None:
            seen.add("answered")
        if out["throttled"]:
            seen.add("throttled")
    assert {"returned", "raised", "heavy", "rewritten", "merged", "answered", "throttled",
            "closed: upstream answered correlation id 7, expected 100",
            "closed: upstream sent a response nobody asked for",
            "closed: cannot rewrite upstream Heartbeat response",
            "closed: cannot rewrite upstream Metadata response",
            } <= seen, seen


def test_the_core_pairs_in_c_where_it_was_built():
    """ConnectionCore.complete_responses is the C pairing when the extension is there (the data
    plane calls it directly), the Python reference otherwise."""
    assert core_module._pairing is pairing
    gw = _gateway()
    core, decoder, slots = _case(3, gw)
    calls = []
    saved = core_module._pairing
    core_module._pairing = lambda c, d: calls.append((c, d)) or True
    try:
        assert core.complete_responses(decoder) is True
    finally:
        core_module._pairing = saved
    assert calls == [(core, decoder)]


@pytest.mark.parametrize("seed", range(4))
def test_a_latency_observed_in_c_counts_as_its_python_observe(seed):
    """The pairing observes each response's latency in C (_plane_steps.observe) for the per-thread
    histogram's children: the same rows as their own observe, bounds, beyond them, a thread's
    first observation; and another kind of child is asked to observe itself."""
    from gateway.process.metrics import GatewayMetrics

    rng = random.Random(seed)
    python, native = GatewayMetrics(), GatewayMetrics()
    bounds = python.upstream_latency.bounds
    amounts = [rng.choice(bounds) for _ in range(50)] + [rng.uniform(-1, 40) for _ in range(200)] + [0.0, 1e9]
    for amount in amounts:
        api = rng.choice(["Produce", "Fetch", "Metadata"])
        python.latency("T", api).observe(amount)
        _plane_steps.observe(native.latency("T", api), amount)
    assert native.upstream_latency.totals() == python.upstream_latency.totals()
    assert sum(sum(row[:-1]) for row in native.upstream_latency.totals().values()) == len(amounts)
    seen = []
    _plane_steps.observe(SimpleNamespace(observe=seen.append), 0.25)
    assert seen == [0.25]


def test_a_child_with_a_row_is_added_to_without_its_method(monkeypatch):
    """Once this thread has its row, the C observe adds to it without calling the child's observe."""
    from gateway.process import metrics as metrics_module

    native = metrics_module.GatewayMetrics()
    child = native.latency("T", "Produce")
    _plane_steps.observe(child, 0.002)  # the thread's first: its own method makes the row

    def refused(self, amount):
        raise AssertionError("observed in Python")

    monkeypatch.setattr(metrics_module._HistogramChild, "observe", refused)
    _plane_steps.observe(child, 0.002)
    _plane_steps.observe(child, 7.0)
    (row,) = native.upstream_latency.totals().values()
    assert sum(row[:-1]) == 3 and row[-1] == pytest.approx(7.004)


def _lane(deferred: list):
    """A Lane with only what its metrics() reads: the counters its requests deferred."""
    from gateway.connection.lane import Lane

    lane = Lane.__new__(Lane)
    lane.deferred = deferred
    return lane


class _Tally:
    """Something else a request defers (the decision memo's allowance): counted by its inc()."""

    def __init__(self, fail: bool = False) -> None:
        self.n, self.fail = 0, fail

    def inc(self) -> None:
        if self.fail:
            raise RuntimeError("this count fails")
        self.n += 1


@pytest.mark.parametrize("seed", range(4))
def test_what_a_request_deferred_is_counted_in_c_as_lane_metrics_counts_it(seed):
    """The data plane counts each lane's deferred counters in C (_plane_steps.lane_metrics, its
    reference Lane.metrics): the same totals, the other objects' inc() called as often, the list
    emptied; a count that fails leaves the list as it was on both sides."""
    from gateway.connection.lane import Lane
    from gateway.process.metrics import GatewayMetrics

    rng = random.Random(seed)
    python, native = GatewayMetrics(), GatewayMetrics()
    tallies = {"python": _Tally(), "native": _Tally()}
    for _ in range(40):
        picks = [rng.choice(["Produce", "Fetch", "tally"]) for _ in range(rng.randint(0, 5))]
        for side, metrics, count in (("python", python, Lane.metrics), ("native", native, _plane_steps.lane_metrics)):
            lane = _lane([tallies[side] if p == "tally" else metrics.request("T", p) for p in picks])
            count(lane)
            assert lane.deferred == []
    assert native.requests.totals() == python.requests.totals()
    assert tallies["native"].n == tallies["python"].n > 0
    for count in (Lane.metrics, _plane_steps.lane_metrics):
        failing = _Tally(fail=True)
        lane = _lane([native.request("T", "Produce"), failing])
        with pytest.raises(RuntimeError, match="this count fails"):
            count(lane)
        assert len(lane.deferred) == 2


def test_a_deferred_counter_with_a_row_is_counted_without_its_method(monkeypatch):
    from gateway.process import metrics as metrics_module

    native = metrics_module.GatewayMetrics()
    counter = native.request("T", "Produce")
    _plane_steps.lane_metrics(_lane([counter]))  # the thread's first: its method

    def refused(self, amount=1):
        raise AssertionError("counted in Python")

    monkeypatch.setattr(metrics_module._CounterChild, "inc", refused)
    _plane_steps.lane_metrics(_lane([counter, counter]))
    assert native.requests.totals() == {("T", "Produce"): [3]}


def test_another_kind_of_lane_counts_with_its_own_metrics():
    counted = []
    _plane_steps.lane_metrics(SimpleNamespace(deferred=[1, 2], metrics=lambda: counted.append(True)))
    assert counted == [True]


def _flexible_case(gw, spec, bodies: list[bytes]):
    """A core with one flexible (v10) request of ``spec`` in flight per body, and their responses."""
    core = _core(gw)
    core._cluster = SimpleNamespace(timing_out_since=None)
    slots, data = [], b""
    for i, body in enumerate(bodies):
        slot = Slot(RequestHeader(spec.api_key, 10, 100 + i, "c", 10, True), spec, None, 1.0, 2.0)
        slots.append(slot)
        core.in_flight.append(slot)
        core.pending.append(slot)
        frame = struct.pack(">i", 100 + i) + b"\x00" + body  # the response header: no tagged field
        data += struct.pack(">i", len(frame)) + frame
    decoder = FrameDecoder(1 << 20, trusted=True)
    decoder.receive_data(data)
    return core, decoder, slots


def test_the_pairing_in_c_asks_no_rewrite_its_response_tags_rule_out():
    """ApiSpec.response_tags False: the rewrite would answer None, so the C pairing does not ask it
    (Produce's usual answer costs no Python call); True or None: it asks; the reference always
    asks; both leave the same answers."""
    gw = _gateway()
    said = {b"A": False, b"B": True, b"C": None}
    for run, asked in ((pairing, [b"B", b"C"]), (core_module.ConnectionCore.complete_responses_python,
                                                 [b"A", b"B", b"C"])):
        calls, checked = [], []

        def rewrite(_version, frame, off, _nodes):
            calls.append(bytes(frame[off:]))
            return b"new" if bytes(frame[off:]) == b"B" else None

        def tags(frame, off, version):
            checked.append((bytes(frame[off:]), version))
            return said[bytes(frame[off:])]

        spec = dataclasses.replace(REGISTRY[0], api_key=11, name="JoinGroup", rewrite_response=rewrite,
                                   response_tags=tags)
        core, decoder, slots = _flexible_case(gw, spec, [b"A", b"B", b"C"])
        assert run(core, decoder) is True
        assert calls == asked
        if run is pairing:
            assert checked == [(b"A", 10), (b"B", 10), (b"C", 10)]
        assert [bytes(s.data)[9:] for s in slots] == [b"A", b"new", b"C"]


def test_the_pairing_in_c_takes_a_known_latency_child_without_the_method(monkeypatch):
    """The C pairing finds the latency child GatewayMetrics keeps per (listener, API) itself; it
    asks metrics.latency only for one not made yet."""
    gw = _gateway()
    spec = dataclasses.replace(REGISTRY[0], api_key=10, name="FindCoordinator", rewrite_response=None)
    core, decoder, _slots = _flexible_case(gw, spec, [b"A"])
    asked = []
    made = type(gw.metrics).latency

    def latency(self, listener, api):
        asked.append(api)
        return made(self, listener, api)

    monkeypatch.setattr(type(gw.metrics), "latency", latency)
    before = _latency_counts(gw).get("FindCoordinator", 0)
    assert pairing(core, decoder) is True
    assert asked == ["FindCoordinator"]  # not made yet: the method makes it
    core, decoder, _slots = _flexible_case(gw, spec, [b"B", b"C"])
    assert pairing(core, decoder) is True
    assert asked == ["FindCoordinator"]  # known: taken from the metrics' own cache
    assert _latency_counts(gw)["FindCoordinator"] == before + 3
