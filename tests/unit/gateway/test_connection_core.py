"""The connection core driven with bytes only: no socket, no event loop.  What it decides for
each request - forward, answer, close, or await something named - is the whole of kgw's
per-request logic; both drivers only perform what it asks (gateway/connection/core.py)."""

from __future__ import annotations

import struct
from datetime import timedelta
from types import SimpleNamespace

import pytest
from kio.static.primitive import i16, i32

from authz.authorizer import AuthorizableRequestContext
from authz.principal import KafkaPrincipal
from configs.yaml_reader import parse_config
from gateway.connection.core import (
    CloseConnection, ConnectionCore, NeedLocalAnswer, NeedSpace, NeedUpstream, NeedVersions, NeedWorker,
)
from gateway.process.server import Gateway
from gateway.upstream.cluster import encode_request
from protocol.apis.api_versions import VersionRange, advertised_versions
from protocol.apis.registry import LOCAL_KEYS, REGISTRY
from protocol.codecs import request_class
from protocol.framing import FrameDecoder
from tests.support.kio_samples import record_batch

UPSTREAM = {0: (3, 11), 3: (0, 12), 16: (0, 5), 18: (0, 3), 29: (0, 3)}


def _gateway(authorizer: dict | None = None, **limits) -> Gateway:
    raw = {
        "listeners": [{"name": "T", "host": "127.0.0.1", "port": 0, "broker_port_base": 21000}],
        "upstream": {"bootstrap_servers": ["127.0.0.1:1"]},
        "admin": None,
        "metadata": {"path": "/nonexistent-kgw-core-test"},
        "limits": limits,
    }
    if authorizer is not None:
        raw["authorizer"] = {"class_name": "authz.standard_authorizer:StandardAuthorizer", "config": authorizer}
    return Gateway(parse_config(raw))


def _learn_versions(gw: Gateway) -> None:
    """What the gateway knows once the upstream answered ApiVersions (no I/O here)."""
    gw.cluster.versions = {k: VersionRange(lo, hi) for k, (lo, hi) in UPSTREAM.items()}
    gw._advertised = advertised_versions(gw.cluster.versions, LOCAL_KEYS, REGISTRY, gw.authorizer is not None)
    gw._advertised_for = gw.cluster.versions


def _core(gw: Gateway, *, upstream_open: bool = True) -> ConnectionCore:
    core = ConnectionCore(gw.listeners[0], None, ("127.0.0.1", 40000), None)
    core.auth = SimpleNamespace(session=None, principal=None)
    if upstream_open:
        core._upstream = object()  # only its presence matters to the core
    return core


def _frame(api_key: int, version: int, correlation_id: int, body) -> memoryview:
    return memoryview(encode_request(api_key, version, correlation_id, body))


def _produce(topic: str, correlation_id: int = 1, value: bytes = b"v") -> memoryview:
    return _produce_of({topic: record_batch(value)}, correlation_id)


def _produce_of(topics: dict[str, bytes], correlation_id: int, transactional_id: str | None = None) -> memoryview:
    """A Produce v8 request: partition 0 of each topic carrying the given records."""
    cls = request_class(0, 8)
    topic_cls = cls.__dataclass_fields__["topic_data"].type.__args__[0]
    part_cls = topic_cls.__dataclass_fields__["partition_data"].type.__args__[0]
    body = cls(transactional_id=transactional_id, acks=i16(1), timeout=timedelta(seconds=1), topic_data=tuple(
        topic_cls(name=name, partition_data=(part_cls(index=i32(0), records=records),))
        for name, records in topics.items()))
    return _frame(0, 8, correlation_id, body)


def _correlation_ids(frames) -> list[int]:
    return [struct.unpack_from(">i", bytes(f), 8)[0] for f in frames]


def test_a_forwarded_request_waits_for_its_upstream_then_takes_its_place_in_order():
    gw = _gateway()
    _learn_versions(gw)
    core = _core(gw, upstream_open=False)
    out: list = []
    step = core.dispatch(_produce("orders", 5), out)
    assert isinstance(step, NeedUpstream) and out == [] and not core.pending
    core._upstream = object()  # the driver opened it
    assert step.then(None, out) is False
    assert _correlation_ids(out) == [5] and len(core.pending) == len(core.in_flight) == 1
    assert core.dispatch(_produce("orders", 6), out) is False  # now at once
    assert _correlation_ids(out) == [5, 6]


def test_api_versions_is_answered_by_the_core_itself():
    gw = _gateway()
    _learn_versions(gw)
    core = _core(gw, upstream_open=False)  # needs no upstream
    out: list = []
    assert core.dispatch(_frame(18, 3, 9, request_class(18, 3)(client_software_name="t",
                                                                 client_software_version="1")), out) is True
    (slot,) = core.pending
    assert out == [] and struct.unpack_from(">i", slot.data, 4)[0] == 9


def test_until_the_upstream_versions_are_known_the_core_asks_for_them_and_counts_once():
    gw = _gateway()
    core = _core(gw)
    out: list = []
    step = core.dispatch(_produce("orders", 3), out)
    assert isinstance(step, NeedVersions)
    _learn_versions(gw)
    assert step.then(gw._advertised, out) is False and _correlation_ids(out) == [3]
    assert gw.metrics.registry.get_sample_value("kgw_requests_total", {"listener": "T", "api": "Produce"}) == 1


@pytest.mark.parametrize("frame, reason", [
    (memoryview(struct.pack(">ihhihb", 11, 27, 1, 1, -1, 0)), "unknown_api"),  # WriteTxnMarkers: broker-only
    (memoryview(struct.pack(">ihhi", 0, 999, 0, 1) + b"\xff\xff"), "header"),
    (memoryview(bytearray(_frame(3, 12, 1, request_class(3, 12)(topics=(), allow_auto_topic_creation=False,
                                                                   include_topic_authorized_operations=False)))),
     "unsupported_version"),
    (memoryview(b"\x00\x00\x00\x03\x00\x01\x00"), "header"),
])
def test_what_cannot_be_accounted_for_closes_the_connection(frame, reason):
    if reason == "unsupported_version":
        frame[6:8] = struct.pack(">h", 13)  # Metadata v13: advertised only to v12
    gw = _gateway()
    _learn_versions(gw)
    with pytest.raises(CloseConnection) as closed:
        _core(gw).dispatch(frame, [])
    assert closed.value.metric == reason


def test_a_denied_produce_is_answered_by_the_core_and_never_forwarded():
    gw = _gateway(authorizer={"super.users": "User:admin"})
    gw.authorizer.complete_initial_load()
    _learn_versions(gw)
    core = _core(gw)
    out: list = []
    assert core.dispatch(_produce("secret", 4), out) is True
    assert out == [] and struct.unpack_from(">i", core.pending[0].data, 4)[0] == 4


def test_each_request_is_authorized_with_the_principal_the_connection_has_now_and_its_own_ids():
    """The request context is copied from one kept per connection: a principal set after it was
    built (authentication, re-authentication) must be the one authorized, and every copy carries
    its own request's key, version, client id and correlation id (the audit names them)."""
    gw = _gateway(authorizer={"super.users": "User:ctx-admin"})
    gw.authorizer.complete_initial_load()
    _learn_versions(gw)
    seen = []
    real = gw.authorizer.authorize
    gw.authorizer.authorize = lambda context, actions: seen.append(context) or real(context, actions)
    core = _core(gw)
    out: list = []

    def produce(correlation_id: int) -> memoryview:  # each with a client id of its own
        frame = bytes(_produce("ctx-topic", correlation_id))
        return memoryview(frame.replace(b"\x00\x03kgw", b"\x00\x03c%d" % correlation_id, 1))

    assert core.dispatch(produce(11), out) is True  # ANONYMOUS: denied, answered here
    core.principal = KafkaPrincipal("User", "ctx-admin")
    assert core.dispatch(produce(12), out) is False  # a super user now: forwarded
    core.principal = KafkaPrincipal("User", "ctx-other")
    assert core.dispatch(produce(13), out) is True
    assert core.dispatch(produce(14), out) is True  # the same principal again: the kept context copied
    assert [(c.principal.name, c.correlation_id, c.request_type, c.request_version, c.client_id, c.host_address)
            for c in seen] == [("ANONYMOUS", 11, 0, 8, "c11", "127.0.0.1"), ("ctx-admin", 12, 0, 8, "c12", "127.0.0.1"),
                               ("ctx-other", 13, 0, 8, "c13", "127.0.0.1"), ("ctx-other", 14, 0, 8, "c14", "127.0.0.1")]
    assert seen[1] == AuthorizableRequestContext("T", "PLAINTEXT", KafkaPrincipal("User", "ctx-admin"),
                                                 core.client_address, 0, 8, "c12", 12)


def test_an_api_kgw_answers_itself_is_awaited_then_queued():
    gw = _gateway()
    _learn_versions(gw)
    core = _core(gw)
    cls = request_class(29, 3)
    body = cls(resource_type_filter=i16(1), resource_name_filter=None, pattern_type_filter=i16(1),
               principal_filter=None, host_filter=None, operation=i16(1), permission_type=i16(1))
    step = core.dispatch(_frame(29, 3, 8, body), [])
    assert isinstance(step, NeedLocalAnswer) and step.spec.name == "DescribeAcls"
    assert step.then(b"\x00" * 8, []) is True and len(core.pending) == 1


def test_a_large_request_is_inspected_on_a_worker_and_room_is_awaited():
    gw = _gateway(offload_request_bytes=1024, offload_produce_bytes=1024, max_in_flight_per_connection=1)
    _learn_versions(gw)
    core = _core(gw)
    out: list = []
    step = core.dispatch(_produce("orders", 1, value=b"x" * 4096), out)
    assert isinstance(step, NeedWorker)
    assert step.then(step.job(), out) is False and _correlation_ids(out) == [1]
    step = core.dispatch(_produce("orders", 2), out)  # one request outstanding already
    assert isinstance(step, NeedSpace)
    core.pending.clear()
    core.in_flight.clear()
    assert step.then(None, out) is False and _correlation_ids(out) == [1, 2]


def test_responses_complete_in_order_and_a_wrong_correlation_id_closes():
    gw = _gateway()
    _learn_versions(gw)
    core = _core(gw)
    out: list = []
    for cid in (1, 2):
        core.dispatch(_produce("orders", cid), out)
    decoder = FrameDecoder(1 << 20, trusted=True)
    decoder.receive_data(struct.pack(">ii", 4, 1) + struct.pack(">ii", 4, 7))
    with pytest.raises(CloseConnection, match="correlation id 7, expected 2"):
        core.complete_responses(decoder)
    assert core.pending[0].data is not None and core.pending[1].data is None


def test_a_request_after_the_sasl_session_expired_closes_the_connection():
    """KIP-368: the first request other than SaslHandshake/SaslAuthenticate after the session's
    lifetime closes the connection; before it, the request is served."""
    gw = _gateway()
    _learn_versions(gw)
    core = _core(gw)
    session = SimpleNamespace(expires_at=None, lifetime_ms=1500, principal="User:alice", authenticated=True,
                              expects_raw_token=False)
    session.expired = lambda now: session.expires_at is not None and now >= session.expires_at
    core.auth = SimpleNamespace(session=session, principal=None)
    import time

    session.expires_at = time.monotonic() + 3600
    out: list = []
    assert core.dispatch(_produce("orders", 1), out) is False and len(out) == 1
    session.expires_at = time.monotonic() - 0.001
    with pytest.raises(CloseConnection, match="did not re-authenticate .* session lifetime of 1500 ms"):
        core.dispatch(_produce("orders", 2), out)
