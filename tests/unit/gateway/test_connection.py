"""Client connections against an in-process gateway in front of a scripted broker.

Ordering of pipelined responses, acks=0, bad input closing only the offending
connection, upstream timeouts and a dead upstream giving errors rather than hangs.
"""

from __future__ import annotations

import struct
from datetime import timedelta

import pytest
import trio
import trio.testing
from kio.schema.errors import ErrorCode
from kio.schema.produce.v8 import request as produce8
from kio.static.primitive import i16, i32

from configs.yaml_reader import parse_config
from gateway.connection import core as core_module
from gateway.connection import data_plane as data_plane_module
from gateway.connection import plane_steps
from gateway.process.server import Gateway
from gateway.upstream.cluster import encode_request
from protocol.codecs import decode_response, request_class
from protocol.framing import NEED_DATA, FrameDecoder
from tests.support.kio_samples import record_batch
from tests.support.ports import free_port_base
from tests.unit.gateway.fake_broker import NODE_ID, FakeBroker


class RawClient:
    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder(1 << 30)

    @classmethod
    async def connect(cls, port: int) -> "RawClient":
        return cls(await trio.open_tcp_stream("127.0.0.1", port))

    async def send(self, api_key: int, version: int, correlation_id: int, body) -> None:
        frame = bytearray(encode_request(api_key, version, correlation_id, body))
        frame[8:10] = struct.pack(">h", 0)  # patched below to the real correlation id
        frame[8:12] = struct.pack(">i", correlation_id)
        await self.stream.send_all(bytes(frame))

    async def receive_frame(self) -> bytes | None:
        """Next response frame, or None when the gateway closed the connection."""
        while (frame := self.decoder.next_frame()) is NEED_DATA:
            try:
                data = await self.stream.receive_some(65536)
            except trio.BrokenResourceError:
                return None
            if not data:
                return None
            self.decoder.receive_data(data)
        return bytes(frame)

    async def receive(self, api_key: int, version: int):
        frame = await self.receive_frame()
        assert frame is not None, "gateway closed the connection"
        (corr,) = struct.unpack_from(">i", frame, 4)
        flexible = request_class(api_key, version).__flexible__ and api_key != 18
        return corr, decode_response(api_key, version, frame, 9 if flexible else 8)


async def _start_gateway(nursery, tmp_path, broker: FakeBroker, data_plane: bool, **sections):
    """A gateway in front of ``broker``; ``sections`` are added to (or replace) the YAML's."""
    raw = {
        "io": {"data_plane_thread": data_plane},
        "listeners": [{"name": "T", "host": "127.0.0.1", "port": 0, "advertised_host": "127.0.0.1",
                       "broker_port_base": free_port_base((NODE_ID,))}],
        "upstream": {"bootstrap_servers": [f"127.0.0.1:{broker.port}"], "request_timeout_ms": 5000},
        "admin": None,
        "metadata": {"path": str(tmp_path / "meta")},
        **sections,
    }
    gateway = Gateway(parse_config(raw))
    return gateway, (await nursery.start(gateway.run)).listeners["T"][1]


async def _forwarding_client(port: int) -> RawClient:
    """A connection that has forwarded one request (ListGroups, correlation id 1): once its
    upstream is open a plain-TCP connection is served by the data plane, when that is on."""
    client = await RawClient.connect(port)
    await client.send(16, 4, 1, request_class(16, 4)(states_filter=()))
    assert (await client.receive(16, 4))[0] == 1
    return client


def _md_request(version=12):
    cls = request_class(3, version)
    kw = {"topics": ()}
    for name, value in (("allow_auto_topic_creation", False), ("include_topic_authorized_operations", False)):
        if name in cls.__dataclass_fields__:
            kw[name] = value
    return cls(**kw)


@pytest.fixture(params=["c", "python", None], ids=["data-plane", "data-plane-python-steps", "trio-only"])
def data_plane(request, monkeypatch) -> bool:
    """Every test runs with plain-TCP connections on the data-plane thread (its per-event steps in
    C, then the Python references: gateway/connection/plane_steps.py) and all on Trio."""
    if request.param == "python":
        use_python_steps(monkeypatch)
    return request.param is not None


def use_python_steps(monkeypatch) -> None:
    """Make the data plane poll, set masks, read, write, handle its events and pair responses with
    the Python references (the DataPlane's own methods stand for the C handlers then, and
    ConnectionCore.complete_responses_python for the C pairing)."""
    for name in ("serve", "set_masks", "receive", "write_queue"):
        monkeypatch.setattr(data_plane_module, name, getattr(plane_steps, f"{name}_python"))
    monkeypatch.setattr(data_plane_module, "handlers", None)
    monkeypatch.setattr(core_module, "_pairing", None)


@pytest.fixture
async def setup(nursery, tmp_path, data_plane):
    broker = await nursery.start(FakeBroker().serve)
    base = free_port_base((NODE_ID,))  # base + NODE_ID is free, below the ephemeral range
    config = parse_config({
        "listeners": [{"name": "T", "host": "127.0.0.1", "port": 0, "advertised_host": "127.0.0.1",
                       "broker_port_base": base}],
        "upstream": {"bootstrap_servers": [f"127.0.0.1:{broker.port}"], "request_timeout_ms": 1500,
                     "connect_timeout_ms": 1000},
        "limits": {"max_frame_bytes": 4096},
        "io": {"data_plane_thread": data_plane},
        "admin": None,
        "metadata": {"path": str(tmp_path / "meta")},
    })
    gateway = Gateway(config)
    started = await nursery.start(gateway.run)
    return broker, gateway, started.listeners["T"][1]


async def test_api_versions_answered_locally_with_intersection(setup):
    broker, gateway, port = setup
    client = await RawClient.connect(port)
    seen_before = len(broker.received)
    await client.send(18, 3, 1, request_class(18, 3)(client_software_name="t", client_software_version="1"))
    corr, resp = await client.receive(18, 3)
    ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert corr == 1 and resp.error_code == ErrorCode.none
    assert ranges[0] == (3, 11)  # upstream 3-11, kio 3-13
    assert ranges[3] == (0, 12)
    assert 1 not in ranges  # upstream lacks Fetch: never advertised
    assert len(broker.received) == seen_before  # not forwarded


async def test_unknown_api_versions_version_gets_unsupported_version_v0(setup):
    _, _, port = setup
    client = await RawClient.connect(port)
    await client.send(18, 3, 5, request_class(18, 3)(client_software_name="t", client_software_version="1"))
    frame = bytearray(encode_request(18, 3, 6, request_class(18, 3)(client_software_name="t", client_software_version="1")))
    frame[6:8] = struct.pack(">h", 9)  # ApiVersions v9
    await client.receive(18, 3)
    await client.stream.send_all(bytes(frame))
    corr, resp = await client.receive(18, 0)
    assert corr == 6 and resp.error_code == ErrorCode.unsupported_version
    assert any(k.api_key == 18 for k in resp.api_keys)


async def test_metadata_rewritten_to_gateway_address_and_node_port_routes(setup):
    broker, gateway, port = setup
    client = await RawClient.connect(port)
    await client.send(3, 12, 2, _md_request())
    _, resp = await client.receive(3, 12)
    (b,) = resp.brokers
    listener = gateway.listeners[0]
    assert (b.node_id, b.host, b.port) == (NODE_ID, "127.0.0.1", listener.config.broker_port_base + NODE_ID)
    assert b.port != broker.port
    node_client = await RawClient.connect(b.port)
    await node_client.send(16, 4, 3, request_class(16, 4)(states_filter=()))
    corr, groups = await node_client.receive(16, 4)
    assert corr == 3 and groups.error_code == ErrorCode.none


async def test_pipelined_responses_come_back_in_request_order(setup):
    broker, _, port = setup
    broker.delay[3] = 0.2  # Metadata is slow upstream
    client = await RawClient.connect(port)
    await client.send(3, 12, 10, _md_request())
    await client.send(18, 3, 11, request_class(18, 3)(client_software_name="t", client_software_version="1"))
    await client.send(16, 4, 12, request_class(16, 4)(states_filter=()))
    order = [(await client.receive(k, v))[0] for k, v in ((3, 12), (18, 3), (16, 4))]
    assert order == [10, 11, 12]


async def test_produce_acks_zero_gets_no_response(setup):
    broker, _, port = setup
    client = await RawClient.connect(port)
    body = produce8.ProduceRequest(transactional_id=None, acks=i16(0), timeout=timedelta(seconds=1), topic_data=(
        produce8.TopicProduceData(name="t", partition_data=(produce8.PartitionProduceData(index=i32(0), records=b"x" * 70),)),))
    await client.send(0, 8, 20, body)
    await client.send(16, 4, 21, request_class(16, 4)(states_filter=()))
    corr, _ = await client.receive(16, 4)
    assert corr == 21  # the acks=0 produce produced no response
    assert (0, 8, 20) in broker.received


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(struct.pack(">i", 5000), id="oversized-length"),
        pytest.param(struct.pack(">i", -1), id="negative-length"),
        pytest.param(struct.pack(">i", 3) + b"\x00\x03\x00", id="truncated-header"),
        pytest.param(struct.pack(">i", 10) + struct.pack(">hhih", 999, 0, 1, -1), id="unknown-api-key"),
        pytest.param(struct.pack(">i", 10) + struct.pack(">hhih", 3, 99, 1, -1), id="unknown-version"),
        pytest.param(struct.pack(">i", 12) + struct.pack(">hhih", 3, 4, 1, -1) + b"\xff\xff", id="garbage-body"),
        pytest.param(struct.pack(">i", 10) + struct.pack(">hhih", 52, 0, 1, -1), id="broker-internal-api"),
    ],
)
async def test_bad_input_closes_only_that_connection(setup, raw):
    _, _, port = setup
    bystander = await RawClient.connect(port)
    await bystander.send(3, 12, 1, _md_request())
    bad = await RawClient.connect(port)
    await bad.stream.send_all(raw)
    assert await bad.receive_frame() is None  # closed, no response
    await bystander.send(16, 4, 2, request_class(16, 4)(states_filter=()))
    assert [(await bystander.receive(3, 12))[0], (await bystander.receive(16, 4))[0]] == [1, 2]


async def test_client_disconnecting_mid_request_leaves_gateway_serving(setup):
    _, _, port = setup
    quitter = await RawClient.connect(port)
    await quitter.stream.send_all(struct.pack(">i", 100) + b"\x00\x03\x00\x0c")
    await quitter.stream.aclose()
    other = await RawClient.connect(port)
    await other.send(3, 12, 4, _md_request())
    assert (await other.receive(3, 12))[0] == 4


async def test_upstream_that_never_answers_gets_the_connection_closed_after_timeout(setup):
    broker, _, port = setup
    broker.hang.add(16)
    client = await RawClient.connect(port)
    start = trio.current_time()
    await client.send(16, 4, 30, request_class(16, 4)(states_filter=()))
    with trio.fail_after(10):
        assert await client.receive_frame() is None
    assert trio.current_time() - start >= 1.4  # request_timeout_ms 1500


async def test_dead_upstream_closes_connection_instead_of_hanging(nursery, tmp_path, data_plane):
    broker = await nursery.start(FakeBroker().serve)
    config = parse_config({
        "listeners": [{"name": "T", "host": "127.0.0.1", "port": 0, "broker_port_base": 20000}],
        "io": {"data_plane_thread": data_plane},
        "upstream": {"bootstrap_servers": [f"127.0.0.1:{broker.port}"], "connect_timeout_ms": 500},
        "admin": None,
        "metadata": {"path": str(tmp_path / "meta")},
    })
    gateway = Gateway(config)
    port = (await nursery.start(gateway.run)).listeners["T"][1]
    gateway.cluster.bootstrap = [("127.0.0.1", 1)]  # nothing listens on port 1
    client = await RawClient.connect(port)
    await client.send(16, 4, 1, request_class(16, 4)(states_filter=()))
    with trio.fail_after(5):
        assert await client.receive_frame() is None


async def test_more_pipelined_requests_than_the_in_flight_limit_are_all_answered(nursery, tmp_path, data_plane):
    broker = await nursery.start(FakeBroker().serve)
    _, port = await _start_gateway(nursery, tmp_path, broker, data_plane, limits={"max_in_flight_per_connection": 3})
    client = await RawClient.connect(port)
    frames = b"".join(encode_request(16, 4, corr, request_class(16, 4)(states_filter=())) for corr in range(10))
    await client.stream.send_all(frames)  # ten requests in one write: they arrive in one chunk
    with trio.fail_after(4):  # far below the upstream timeout: no request waits for a deadline
        assert [(await client.receive(16, 4))[0] for _ in range(10)] == list(range(10))


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(struct.pack(">i", 5000), id="oversized-length"),
        pytest.param(struct.pack(">i", 3) + b"\x00\x03\x00", id="truncated-header"),
        pytest.param(struct.pack(">i", 10) + struct.pack(">hhih", 999, 0, 1, -1), id="unknown-api-key"),
        pytest.param(struct.pack(">i", 10) + struct.pack(">hhih", 3, 99, 1, -1), id="unknown-version"),
        pytest.param(struct.pack(">i", 12) + struct.pack(">hhih", 3, 4, 1, -1) + b"\xff\xff", id="garbage-body"),
    ],
)
async def test_bad_input_on_a_connection_already_forwarding_closes_only_it(setup, raw):
    """The same bad inputs after a forwarded request (on the data plane, once it serves the connection)."""
    _, gateway, port = setup
    bystander = await RawClient.connect(port)
    await bystander.send(3, 12, 1, _md_request())
    assert (await bystander.receive(3, 12))[0] == 1
    bad = await _forwarding_client(port)
    await bad.stream.send_all(raw)
    with trio.fail_after(5):
        assert await bad.receive_frame() is None  # closed, no response
    await bystander.send(16, 4, 2, request_class(16, 4)(states_filter=()))
    assert (await bystander.receive(16, 4))[0] == 2
    errors = {s.labels["reason"] for m in gateway.metrics.registry.collect() if m.name == "kgw_request_errors"
              for s in m.samples if s.value}
    assert errors & {"frame", "header", "unknown_api", "unsupported_version", "decode"}


async def test_local_answers_between_forwarded_requests_keep_request_order(setup):
    """ApiVersions (answered by kgw) pipelined among forwarded requests, some slow upstream."""
    broker, _, port = setup
    broker.delay[3] = 0.1
    client = await _forwarding_client(port)
    plan = [(3, 12), (18, 3), (16, 4), (18, 3), (3, 12), (16, 4)]
    for corr, (key, version) in enumerate(plan, start=10):
        body = (_md_request() if key == 3 else request_class(16, 4)(states_filter=()) if key == 16
                else request_class(18, 3)(client_software_name="t", client_software_version="1"))
        await client.send(key, version, corr, body)
    with trio.fail_after(5):
        got = [(await client.receive(key, version))[0] for key, version in plan]
    assert got == list(range(10, 10 + len(plan)))


async def test_upstream_closing_mid_request_closes_the_client_connection(setup):
    broker, _, port = setup
    client = await _forwarding_client(port)
    broker.close_on.add(3)  # the broker drops the connection instead of answering Metadata
    await client.send(3, 12, 2, _md_request())
    with trio.fail_after(5):
        assert await client.receive_frame() is None


async def test_client_closing_with_requests_in_flight_leaves_others_served(setup):
    broker, gateway, port = setup
    broker.delay[3] = 0.3
    quitter = await _forwarding_client(port)
    for corr in range(2, 6):
        await quitter.send(3, 12, corr, _md_request())
    await quitter.stream.aclose()
    other = await RawClient.connect(port)
    await other.send(3, 12, 7, _md_request())
    with trio.fail_after(5):
        assert (await other.receive(3, 12))[0] == 7


async def test_plain_tcp_connection_moves_to_the_data_plane_once_forwarding(setup, data_plane):
    _, gateway, port = setup
    client = await RawClient.connect(port)
    await client.send(18, 3, 1, request_class(18, 3)(client_software_name="t", client_software_version="1"))
    await client.receive(18, 3)
    if data_plane:
        assert not gateway.data_plane._lanes  # ApiVersions alone: still on Trio, no upstream yet
    await client.send(16, 4, 2, request_class(16, 4)(states_filter=()))
    assert (await client.receive(16, 4))[0] == 2
    if data_plane:
        (lane,) = set(gateway.data_plane._lanes.values())  # the response came through the lane
        assert lane.cfd in gateway.data_plane._lanes and lane.ufd in gateway.data_plane._lanes
    else:
        assert gateway.data_plane is None


async def test_denied_requests_beyond_the_in_flight_limit_are_all_answered(nursery, tmp_path, data_plane):
    """Produce requests kgw answers itself (TOPIC_AUTHORIZATION_FAILED, no ACLs), ten pipelined
    with max_in_flight 3 after a forwarded request: each local answer frees its slot at once."""
    broker = await nursery.start(FakeBroker().serve)
    _, port = await _start_gateway(
        nursery, tmp_path, broker, data_plane, limits={"max_in_flight_per_connection": 3},
        authorizer={"class_name": "authz.standard_authorizer:StandardAuthorizer", "config": {}})
    client = await RawClient.connect(port)
    await client.send(3, 12, 1, _md_request())  # no topics: forwarded (the connection starts forwarding)
    assert (await client.receive(3, 12))[0] == 1
    body = produce8.ProduceRequest(transactional_id=None, acks=i16(1), timeout=timedelta(seconds=1), topic_data=(
        produce8.TopicProduceData(name="t", partition_data=(produce8.PartitionProduceData(index=i32(0), records=b"\x00" * 70),)),))
    await client.stream.send_all(b"".join(encode_request(0, 8, corr, body) for corr in range(10, 20)))
    with trio.fail_after(4):
        got = [await client.receive(0, 8) for _ in range(10)]
    assert [corr for corr, _ in got] == list(range(10, 20))
    assert {p.error_code for _, r in got for t in r.responses for p in t.partition_responses} == {
        ErrorCode.topic_authorization_failed}
    assert not any(key == 0 for key, _, _ in broker.received)  # none of them went upstream


async def test_every_authorized_produce_is_counted_before_its_answer_arrives(nursery, tmp_path, data_plane):
    """The request counter and the authorizer's count of each Produce (the first decided, the
    others answered by the decision memo; on the data plane counted once written upstream) are
    there for whoever scrapes right after the answer."""
    broker = await nursery.start(FakeBroker().serve)
    gateway, port = await _start_gateway(
        nursery, tmp_path, broker, data_plane,
        authorizer={"class_name": "authz.standard_authorizer:StandardAuthorizer",
                    "config": {"allow.everyone.if.no.acl.found": "true"}})
    client = await _forwarding_client(port)
    registry = gateway.metrics.registry
    body = produce8.ProduceRequest(transactional_id=None, acks=i16(1), timeout=timedelta(seconds=1), topic_data=(
        produce8.TopicProduceData(name="counted", partition_data=(
            produce8.PartitionProduceData(index=i32(0), records=record_batch(b"c")),)),))
    allowed_before = registry.get_sample_value("kgw_authorizer_authorization_allowed_total", {"listener": "T"}) or 0
    for n in range(1, 6):
        await client.send(0, 8, 40 + n, body)
        with trio.fail_after(5):
            corr, response = await client.receive(0, 8)
        assert corr == 40 + n and [p.error_code for t in response.responses for p in t.partition_responses] == [
            ErrorCode.none]
        assert registry.get_sample_value("kgw_requests_total", {"listener": "T", "api": "Produce"}) == n
        assert registry.get_sample_value("kgw_authorizer_authorization_allowed_total",
                                         {"listener": "T"}) == allowed_before + n


async def test_large_pipelined_produce_requests_all_reach_the_broker_in_order(nursery, tmp_path, data_plane):
    """Twenty 512 KiB Produce requests in one burst: more than the sockets buffer, so sending
    upstream blocks part-way (the gateway must stop reading the client, finish the write later
    and keep every byte and the order)."""
    broker = await nursery.start(FakeBroker().serve)
    _, port = await _start_gateway(nursery, tmp_path, broker, data_plane,
                                   upstream={"bootstrap_servers": [f"127.0.0.1:{broker.port}"], "request_timeout_ms": 10000})
    client = await _forwarding_client(port)
    broker.read_pause = 0.005  # ~13 MB/s: the burst outruns it, so the gateway's upstream writes block
    records = bytes(range(256)) * 2048  # 512 KiB, a recognisable pattern
    body = produce8.ProduceRequest(transactional_id=None, acks=i16(1), timeout=timedelta(seconds=5), topic_data=(
        produce8.TopicProduceData(name="big", partition_data=(produce8.PartitionProduceData(index=i32(0), records=records),)),))
    burst = b"".join(encode_request(0, 8, corr, body) for corr in range(100, 120))
    async with trio.open_nursery() as inner:
        inner.start_soon(client.stream.send_all, burst)
        with trio.fail_after(20):
            got = [(await client.receive(0, 8))[0] for _ in range(20)]
    assert got == list(range(100, 120))
    assert [c for key, _, c in broker.received if key == 0] == list(range(100, 120))
    assert broker.produce_bytes == [len(records)] * 20  # each request's records arrived whole


async def test_broker_first_seen_in_a_forwarded_response_gets_its_port_at_once(nursery, tmp_path, data_plane):
    """A new node id in a Metadata response rewritten on the data plane: its port is bound before
    the response leaves (it is advertised) and accepting starts on Trio."""
    broker = await nursery.start(FakeBroker().serve)
    base = free_port_base((NODE_ID, 7))
    _, port = await _start_gateway(nursery, tmp_path, broker, data_plane, listeners=[
        {"name": "T", "host": "127.0.0.1", "port": 0, "advertised_host": "127.0.0.1", "broker_port_base": base}])
    client = await _forwarding_client(port)
    broker.extra_nodes = (7,)
    await client.send(3, 12, 2, _md_request())
    _, resp = await client.receive(3, 12)
    assert sorted((b.node_id, b.port) for b in resp.brokers) == [(NODE_ID, base + NODE_ID), (7, base + 7)]
    node7 = await RawClient.connect(base + 7)
    await node7.send(16, 4, 3, request_class(16, 4)(states_filter=()))
    with trio.fail_after(5):
        assert (await node7.receive(16, 4))[0] == 3


class _CountingLimiter:
    """Delegates to a real CapacityLimiter and counts the worker-thread runs it admitted."""

    def __init__(self) -> None:
        self.inner = trio.CapacityLimiter(1)
        self.runs = 0

    async def acquire_on_behalf_of(self, borrower) -> None:
        self.runs += 1
        await self.inner.acquire_on_behalf_of(borrower)

    def release_on_behalf_of(self, borrower) -> None:
        self.inner.release_on_behalf_of(borrower)


async def test_large_requests_and_their_answers_are_handled_on_a_worker_thread_in_order(nursery, tmp_path, data_plane):
    """With every request and response "large" (thresholds of one byte), inspection,
    authorization and merging run on the worker thread, and nothing changes for the client:
    forwarded and locally answered requests come back in request order on both I/O paths."""
    broker = await nursery.start(FakeBroker().serve)
    gateway, port = await _start_gateway(
        nursery, tmp_path, broker, data_plane,
        limits={"offload_request_bytes": 1, "offload_produce_bytes": 1, "offload_response_bytes": 1},
        authorizer={"class_name": "authz.standard_authorizer:StandardAuthorizer",
                    "config": {"allow.everyone.if.no.acl.found": "true"}})
    limiter = gateway.heavy_work_limiter = _CountingLimiter()
    client = await _forwarding_client(port)
    runs_before = limiter.runs
    produce = produce8.ProduceRequest(transactional_id=None, acks=i16(1), timeout=timedelta(seconds=1), topic_data=(
        produce8.TopicProduceData(name="t", partition_data=(produce8.PartitionProduceData(index=i32(0), records=b"\x00" * 70),)),))
    burst = [encode_request(3, 12, 30, _md_request()),
             encode_request(18, 3, 31, request_class(18, 3)(client_software_name="t", client_software_version="1")),
             encode_request(0, 8, 32, produce),  # not one magic-v2 batch: answered by kgw (87)
             encode_request(16, 4, 33, request_class(16, 4)(states_filter=()))]
    await client.stream.send_all(b"".join(burst))
    with trio.fail_after(5):
        got = [await client.receive(k, v) for k, v in ((3, 12), (18, 3), (0, 8), (16, 4))]
    assert [corr for corr, _ in got] == [30, 31, 32, 33]
    assert [p.error_code for t in got[2][1].responses for p in t.partition_responses] == [ErrorCode(87)]
    # Metadata, Produce and ListGroups inspected there; Metadata's answer merged there
    assert limiter.runs - runs_before >= 4


async def test_drain_answers_every_request_in_flight_then_closes(nursery, tmp_path, data_plane):
    """SIGTERM's drain: twenty pipelined Produce requests to a slow broker are all answered,
    the connection is then closed by the gateway, /readyz turns 503, no new connection is
    accepted, and nothing was abandoned."""
    broker = await nursery.start(FakeBroker().serve)
    gateway, port = await _start_gateway(nursery, tmp_path, broker, data_plane)
    client = await _forwarding_client(port)
    broker.delay[0] = 0.3  # every Produce waits upstream: they are in flight when the drain begins
    body = produce8.ProduceRequest(transactional_id=None, acks=i16(1), timeout=timedelta(seconds=5), topic_data=(
        produce8.TopicProduceData(name="t", partition_data=(produce8.PartitionProduceData(index=i32(0), records=b"r"),)),))
    await client.stream.send_all(b"".join(encode_request(0, 8, corr, body) for corr in range(200, 220)))
    with trio.fail_after(5):
        while sum(1 for key, _v, _c in broker.received if key == 0) < 20:  # all went upstream
            await trio.sleep(0.01)
    abandoned: list[int] = []

    async def drain() -> None:
        abandoned.append(await gateway.drain(10))

    nursery.start_soon(drain)
    with trio.fail_after(10):
        got = [(await client.receive(0, 8))[0] for _ in range(20)]
        assert await client.receive_frame() is None  # then the gateway closed the connection
        while not abandoned:
            await trio.sleep(0.01)
    assert got == list(range(200, 220))
    assert abandoned == [0]
    assert set(gateway.readiness().values()) == {False}
    with pytest.raises(OSError):
        await trio.open_tcp_stream("127.0.0.1", port)


async def test_drain_gives_up_after_its_timeout_and_counts_what_was_abandoned(nursery, tmp_path, data_plane):
    broker = await nursery.start(FakeBroker().serve)
    gateway, port = await _start_gateway(nursery, tmp_path, broker, data_plane)
    client = await _forwarding_client(port)
    broker.hang.add(16)
    await client.send(16, 4, 2, request_class(16, 4)(states_filter=()))
    with trio.fail_after(5):
        while (16, 4, 2) not in broker.received:  # in flight upstream, never to be answered
            await trio.sleep(0.01)
    with trio.fail_after(5):
        assert await gateway.drain(0.2) == 1


async def _alive_after_closing(gateway, one, count: int, alive) -> list:
    """Run ``one()`` (open, use and close a connection) once, then ``count`` times with the
    cycle collector off, and return ``alive()``: what those connections left behind that only
    the collector would free."""
    import gc

    async def all_closed() -> None:
        with trio.fail_after(5):
            while gateway.connections:
                await trio.sleep(0.01)

    await one()
    await all_closed()
    gc.collect()
    gc.disable()
    try:
        for _ in range(count):
            await one()
        await all_closed()
        await trio.testing.wait_all_tasks_blocked()
        return alive()
    finally:
        gc.enable()


async def test_closed_connections_are_freed_at_once_not_by_the_cycle_collector(nursery, tmp_path, data_plane):
    """With the collector off, a hundred connections opened, used and closed leave (almost)
    nothing behind: each is freed by reference counting when it closes.  A reference cycle
    (a connection and its data-plane lane pointing at each other) kept every one alive until
    the next full collection, which gc.freeze() and kgw's thresholds make rare."""
    import gc

    from gateway.connection.client import ClientConnection
    from gateway.connection.lane import Lane

    broker = await nursery.start(FakeBroker().serve)
    gateway, port = await _start_gateway(nursery, tmp_path, broker, data_plane)

    async def one() -> None:
        client = await _forwarding_client(port)  # forwarded: on the data plane when it is on
        await client.stream.aclose()

    alive = await _alive_after_closing(
        gateway, one, 100, lambda: [o for o in gc.get_objects() if isinstance(o, (ClientConnection, Lane))])
    assert len(alive) <= 2, f"{len(alive)} connection objects still alive after close"


@pytest.mark.parametrize("ending", ["close_notify", "no_close_notify", "failed_handshake"])
async def test_closed_tls_connections_are_freed_at_once_not_by_the_cycle_collector(nursery, tmp_path, ending):
    """The same over TLS (served on Trio): trio's SSLStream refers to itself (its handshake
    holds a bound method of it), and a client that leaves without TLS's close_notify made the
    connection's nursery gather an exception group whose Cancelled traceback led back to the
    group; both kept every TLS connection until a full collection (bench/churn.py --tls: RSS
    68 -> 163 MB over 60,000 connections).  Also for handshakes that fail (a plaintext client)."""
    import gc
    import ssl

    from gateway.connection.client import ClientConnection
    from tests.unit.gateway.certs import make_pki

    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    broker = await nursery.start(FakeBroker().serve)
    gateway, port = await _start_gateway(nursery, tmp_path, broker, False, listeners=[{
        "name": "T", "security_protocol": "SSL", "host": "127.0.0.1", "port": 0, "advertised_host": "127.0.0.1",
        "broker_port_base": free_port_base((NODE_ID,)),
        "tls": {"cert_file": str(pki.server.cert_file), "key_file": str(pki.server.key_file)}}])
    client_ctx = ssl.create_default_context(cafile=str(pki.ca.cert_file))

    async def one() -> None:
        tcp = await trio.open_tcp_stream("127.0.0.1", port)
        if ending == "failed_handshake":
            await tcp.send_all(encode_request(18, 3, 1, request_class(18, 3)(client_software_name="x",
                                                                            client_software_version="1")))
            with trio.fail_after(5):
                while await tcp.receive_some(1024):
                    pass
            await tcp.aclose()
            return
        tls = trio.SSLStream(tcp, client_ctx, server_hostname="localhost")
        client = RawClient(tls)
        await client.send(16, 4, 1, request_class(16, 4)(states_filter=()))  # forwarded upstream
        assert (await client.receive(16, 4))[0] == 1
        if ending == "close_notify":
            await tls.aclose()
        else:
            await tcp.aclose()  # the TCP connection ends without TLS's close_notify

    alive = await _alive_after_closing(gateway, one, 30, lambda: [
        o for o in gc.get_objects()
        if isinstance(o, ClientConnection) or (isinstance(o, trio.SSLStream) and o.server_side)])
    assert len(alive) <= 2, f"{len(alive)} connection objects still alive after close: {alive[:4]}"


@pytest.mark.parametrize("ending", ["login_refused", "unknown_api", "upstream_timeout", "idle"])
async def test_connections_kgw_closes_are_freed_at_once(nursery, tmp_path, data_plane, ending):
    """A connection kgw closes (a refused login, a request it cannot serve, an upstream
    timeout, idleness) is freed when it closes.  The reason, an exception, was kept by a frame
    its own traceback holds (a loop variable in run()'s handler; the data plane's message in
    serve_in_data_plane), so every such connection waited for a full collection."""
    import gc

    from authz.credentials import PlainCredential
    from gateway.connection.client import ClientConnection

    broker = await nursery.start(FakeBroker().serve)
    broker.hang.add(16 if ending == "upstream_timeout" else -1)
    gateway, port = await _start_gateway(nursery, tmp_path, broker, data_plane, listeners=[{
        "name": "T", "security_protocol": "SASL_PLAINTEXT", "host": "127.0.0.1", "port": 0,
        "advertised_host": "127.0.0.1", "broker_port_base": free_port_base((NODE_ID,)),
        "sasl": {"mechanisms": ["PLAIN"]}}],
        limits={"failed_authentication_delay_ms": 0, "connections_max_idle_ms": 200},
        upstream={"bootstrap_servers": [f"127.0.0.1:{broker.port}"], "request_timeout_ms": 200},
        users={"plain": [{"name": "bob", "password_hash": PlainCredential.hash_password("right", iterations=1000)}]})

    async def one() -> None:
        client = await RawClient.connect(port)
        await client.send(17, 1, 1, request_class(17, 1)(mechanism="PLAIN"))
        await client.receive(17, 1)
        password = b"wrong" if ending == "login_refused" else b"right"
        await client.send(36, 2, 2, request_class(36, 2)(auth_bytes=b"\0bob\0" + password))
        await client.receive(36, 2)
        if ending == "login_refused":
            await client.stream.aclose()  # kgw waits for the client to close first
            return
        if ending == "unknown_api":
            await client.stream.send_all(struct.pack(">ihhih", 10, 32000, 0, 3, -1))
        else:  # forwarded (on the data plane when it is on), then never answered or idle
            await client.send(16, 4, 3, request_class(16, 4)(states_filter=()))
        with trio.fail_after(5):
            while await client.receive_frame() is not None:
                pass  # until kgw closes the connection
        await client.stream.aclose()

    alive = await _alive_after_closing(
        gateway, one, 20, lambda: [o for o in gc.get_objects() if isinstance(o, ClientConnection)])
    assert len(alive) <= 2, f"{len(alive)} connection objects still alive after close"


async def test_upstream_tls_streams_are_freed_with_their_connection(nursery, tmp_path):
    """kgw's own TLS connections to the broker (upstream.tls) are freed when the client's
    connection closes, as the client-side ones are (the same SSLStream cycle)."""
    import gc
    import ssl

    from gateway.connection.client import ClientConnection
    from gateway.auth.tls import server_ssl_context
    from configs.gateway_config import ListenerTlsConfig
    from tests.unit.gateway.certs import make_pki

    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    broker = FakeBroker()
    broker.ssl_context = server_ssl_context(ListenerTlsConfig(cert_file=pki.server.cert_file,
                                                              key_file=pki.server.key_file))
    broker = await nursery.start(broker.serve)
    gateway, port = await _start_gateway(nursery, tmp_path, broker, True, upstream={
        "bootstrap_servers": [f"localhost:{broker.port}"], "request_timeout_ms": 5000,
        "security_protocol": "SSL", "tls": {"ca_file": str(pki.ca.cert_file)}})

    async def one() -> None:
        client = await _forwarding_client(port)  # forwarded over kgw's own TLS connection
        await client.stream.aclose()

    alive = await _alive_after_closing(gateway, one, 30, lambda: [
        o for o in gc.get_objects()
        if isinstance(o, ClientConnection) or (isinstance(o, trio.SSLStream) and not o.server_side)])
    assert len(alive) <= 3, f"{len(alive)} objects still alive after close: {alive[:4]}"


async def test_api_versions_is_answered_on_the_fast_path(setup, data_plane, monkeypatch):
    """ApiVersions on a forwarding connection is answered where the request is dispatched (on
    the data plane, without pausing the lane for the Trio task), in request order."""
    from gateway.connection.client import ClientConnection

    broker, _, port = setup
    slow: list[str] = []  # what the core asked a driver to await
    real_perform = ClientConnection.perform

    async def spy(self, step, to_upstream):
        slow.append(type(step).__name__)
        await real_perform(self, step, to_upstream)

    monkeypatch.setattr(ClientConnection, "perform", spy)
    client = await _forwarding_client(port)
    assert slow  # the spy sees the awaits (the first ListGroups opened the upstream)
    slow.clear()
    broker.delay[3] = 0.2
    await client.send(3, 12, 40, _md_request())
    await client.send(18, 3, 41, request_class(18, 3)(client_software_name="t", client_software_version="1"))
    corr_md, _ = await client.receive(3, 12)
    corr_av, versions = await client.receive(18, 3)
    assert (corr_md, corr_av) == (40, 41)
    assert versions.error_code == 0 and any(k.api_key == 0 for k in versions.api_keys)
    assert slow == []
    fresh = await RawClient.connect(port)  # a client's first request, before any upstream is open
    await fresh.send(18, 3, 1, request_class(18, 3)(client_software_name="t", client_software_version="1"))
    assert (await fresh.receive(18, 3))[0] == 1
    assert slow == []


@pytest.mark.parametrize("name, version", [("bad\nname", "1"), ("ok-name", "-1.0"), ("a" * 2048 + "!", "1"),
                                           ("ünicode", "1")])
async def test_api_versions_with_an_invalid_client_software_is_invalid_request(setup, data_plane, name, version):
    """KIP-511: Kafka answers INVALID_REQUEST (42) with no API keys when the client software name
    or version breaks its rule ([a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?), and keeps the
    connection; kgw answered 0 with its table."""
    _, _, port = setup
    for client in (await RawClient.connect(port), await _forwarding_client(port)):  # first request, forwarding
        await client.send(18, 3, 5, request_class(18, 3)(client_software_name=name, client_software_version=version))
        corr, answer = await client.receive(18, 3)
        assert (corr, int(answer.error_code), answer.api_keys) == (5, 42, ())
        await client.send(18, 3, 6, request_class(18, 3)(client_software_name="kgw-test", client_software_version="1.0"))
        corr, answer = await client.receive(18, 3)
        assert corr == 6 and answer.error_code == 0 and answer.api_keys


@pytest.mark.parametrize("version, reason", [(13, "unsupported_version"), (-1, "header")])
async def test_a_version_outside_the_advertised_range_never_reaches_the_broker_on_a_forwarding_connection(
        setup, version, reason):
    """The fast path of a connection already forwarding checks the version against what kgw
    advertises (Metadata v0-v12 here: the upstream's range) as the first request's path does:
    a Metadata v13 (or a negative version) closes the connection and is not forwarded."""
    broker, gateway, port = setup
    client = await _forwarding_client(port)
    frame = bytearray(encode_request(3, 12, 5, _md_request(12)))
    frame[6:8] = struct.pack(">h", version)  # the header's api_version
    await client.stream.send_all(bytes(frame))
    with trio.fail_after(5):
        assert await client.receive_frame() is None
    assert not [r for r in broker.received if r[0] == 3 and r[1] == version]
    errors = {(s.labels["api"], s.labels["reason"]): s.value for m in gateway.metrics.registry.collect()
              if m.name == "kgw_request_errors" for s in m.samples if s.name.endswith("_total")}
    assert [why for (_api, why) in errors] == [reason], errors
