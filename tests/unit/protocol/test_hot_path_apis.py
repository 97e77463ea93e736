"""Produce requests and Fetch responses are walked, not decoded; records stay byte-identical."""

import io
import re
import uuid
from datetime import timedelta

import pytest
from kio.schema.fetch.v17 import response as fetch17
from kio.schema.produce.v11 import request as produce11
from kio.schema.produce.v11 import response as produce11r
from kio.schema.produce.v8 import request as produce8
from kio.schema.request_header.v2.header import RequestHeader as H2
from kio.schema.request_header.v1.header import RequestHeader as H1
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from kio.static.primitive import i16, i32, i64

from protocol.apis.fetch import SPECS as FETCH, top_level_tags_offset
from protocol.apis.produce import SPECS as PRODUCE, has_top_level_tags
from protocol.codecs import CodecError, decode_response, encode, make, nested, response_class
from protocol.headers import parse_request_header

RECORDS = b"\x00" * 61 + b"opaque-record-batch-bytes" * 40


def request_frame(header_cls, api_key, version, body) -> memoryview:
    out = io.BytesIO()
    entity_writer(header_cls)(out, header_cls(request_api_key=i16(api_key), request_api_version=i16(version),
                                              correlation_id=i32(9), client_id="t"))
    out.write(encode(body))
    return memoryview(out.getvalue())


class FakeNodes:
    def __init__(self):
        self.learned = {}

    def learn(self, node_id, host, port, rack):
        self.learned[node_id] = (host, port)

    def advertise(self, node_id):
        return ("gw.example", 20000 + node_id)


def produce_v11(acks=-1, txn=None):
    return produce11.ProduceRequest(
        transactional_id=txn, acks=i16(acks), timeout=timedelta(seconds=3),
        topic_data=(
            produce11.TopicProduceData(name="orders", partition_data=(
                produce11.PartitionProduceData(index=i32(0), records=RECORDS),
                produce11.PartitionProduceData(index=i32(1), records=RECORDS),
            )),
            produce11.TopicProduceData(name="audit", partition_data=(
                produce11.PartitionProduceData(index=i32(0), records=None),)),
        ),
    )


def test_produce_walk_lists_topics_with_partition_counts_and_acks():
    frame = request_frame(H2, 0, 11, produce_v11(acks=1, txn="tx-1"))
    info = PRODUCE[0].inspect(parse_request_header(frame), frame)
    shape = info.decoded
    assert [(t.name, len(t.partitions)) for t in shape.topics] == [("orders", 2), ("audit", 1)]
    assert shape.transactional_id == "tx-1"
    assert info.expects_response and info.broker_wait_s == 3.0


def test_produce_acks_zero_expects_no_response_non_flexible_version():
    body = produce8.ProduceRequest(transactional_id=None, acks=i16(0), timeout=timedelta(seconds=1), topic_data=(
        produce8.TopicProduceData(name="t", partition_data=(produce8.PartitionProduceData(index=i32(0), records=RECORDS),)),))
    frame = request_frame(H1, 0, 8, body)
    info = PRODUCE[0].inspect(parse_request_header(frame), frame)
    assert info.expects_response is False and [(t.name, len(t.partitions)) for t in info.decoded.topics] == [("t", 1)]


@pytest.mark.parametrize("acks", [0, 1, -1])
@pytest.mark.parametrize("txn", [None, "tx-1"])
def test_produce_peek_agrees_with_inspect_on_what_forwarding_needs(acks, txn):
    """Without an authorizer only acks and the timeout are read; they must match the full walk."""
    for header_cls, version, body in (
        (H2, 11, produce_v11(acks=acks, txn=txn)),
        (H1, 8, produce8.ProduceRequest(transactional_id=txn, acks=i16(acks), timeout=timedelta(seconds=2), topic_data=(
            produce8.TopicProduceData(name="t", partition_data=(
                produce8.PartitionProduceData(index=i32(0), records=RECORDS),)),))),
    ):
        frame = request_frame(header_cls, 0, version, body)
        header = parse_request_header(frame)
        full, peeked = PRODUCE[0].inspect(header, frame), PRODUCE[0].peek(header, frame)
        assert (peeked.expects_response, peeked.broker_wait_s) == (full.expects_response, full.broker_wait_s)
        assert peeked.expects_response is (acks != 0)
    whole = request_frame(H2, 0, 11, produce_v11())
    short = whole[: parse_request_header(whole).size + 3]  # ends inside the acks/timeout
    with pytest.raises(CodecError, match="Produce v11"):
        PRODUCE[0].peek(parse_request_header(short), short)


def test_truncated_produce_request_is_a_codec_error():
    frame = request_frame(H2, 0, 11, produce_v11())
    short = frame[: len(frame) - 10]
    with pytest.raises(CodecError, match="Produce v11"):
        PRODUCE[0].inspect(parse_request_header(short), short)


def test_produce_response_without_endpoints_passes_through():
    resp = produce11r.ProduceResponse(responses=(), throttle_time=timedelta(0), node_endpoints=())
    body = memoryview(encode(resp))
    assert PRODUCE[0].rewrite_response(11, body, 0, FakeNodes()) is None


@pytest.mark.parametrize("version", [10, 11, 12, 13])
@pytest.mark.parametrize("with_endpoints", [False, True])
def test_produce_response_walker_sees_top_level_tags_past_partition_tags(version, with_endpoints):
    """Partitions with record errors, messages and a current_leader tag; endpoints only when given."""
    cls = response_class(0, version)
    topic_cls = nested(cls, "responses")
    part_cls = nested(topic_cls, "partition_responses")
    error_cls, leader_cls = nested(part_cls, "record_errors"), nested(part_cls, "current_leader")
    parts = tuple(
        make(part_cls, index=i32(p), error_code=ErrorCode.not_leader_or_follower if p else ErrorCode.none,
             base_offset=i64(5), log_append_time=None, log_start_offset=i64(0),
             record_errors=(make(error_cls, batch_index=i32(1), batch_index_error_message="bad"),) if p == 1 else (),
             error_message="moved" if p else None,
             current_leader=make(leader_cls, leader_id=i32(2), leader_epoch=i32(7)))
        for p in range(3))
    key = {"topic_id": uuid.uuid4()} if version >= 13 else {"name": "t-é"}
    topics = (make(topic_cls, partition_responses=parts, **key), make(topic_cls, partition_responses=(), **key))
    endpoints = (make(nested(cls, "node_endpoints"), node_id=i32(111), host="broker", port=i32(9092), rack=None),)
    body = memoryview(encode(make(cls, responses=topics, throttle_time=timedelta(0),
                                  node_endpoints=endpoints if with_endpoints else ())))
    assert has_top_level_tags(version, body, 0) is with_endpoints
    rewritten = PRODUCE[0].rewrite_response(version, body, 0, FakeNodes())
    if with_endpoints:
        got = decode_response(0, version, rewritten, 0)
        assert [(e.node_id, e.host, e.port) for e in got.node_endpoints] == [(111, "gw.example", 20111)]
        assert got.responses == decode_response(0, version, body, 0).responses
    else:
        assert rewritten is None
    with pytest.raises(CodecError):
        has_top_level_tags(version, body[: len(body) // 2], 0)


def fetch_response(endpoints):
    part = fetch17.PartitionData(
        partition_index=i32(0), error_code=ErrorCode.none, high_watermark=i64(10), last_stable_offset=i64(10),
        log_start_offset=i64(0), aborted_transactions=(fetch17.AbortedTransaction(producer_id=i64(5), first_offset=i64(1)),),
        preferred_read_replica=i32(-1), records=RECORDS,
    )
    return fetch17.FetchResponse(
        throttle_time=timedelta(0), error_code=ErrorCode.none, session_id=i32(0),
        responses=(fetch17.FetchableTopicResponse(topic_id=uuid.uuid4(), partitions=(part, part)),),
        node_endpoints=endpoints,
    )


def test_fetch_walker_finds_the_top_level_tags():
    body = encode(fetch_response(()))
    assert top_level_tags_offset(memoryview(body), 0) == len(body) - 1
    assert FETCH[0].rewrite_response(17, memoryview(body), 0, FakeNodes()) is None


def test_fetch_node_endpoints_rewritten_records_untouched():
    endpoints = (fetch17.NodeEndpoint(node_id=i32(7), host="10.0.0.7", port=i32(9092), rack="r1"),)
    original = fetch_response(endpoints)
    body = memoryview(encode(original))
    nodes = FakeNodes()
    new = FETCH[0].rewrite_response(17, body, 0, nodes)
    assert nodes.learned == {7: ("10.0.0.7", 9092)}
    decoded = decode_response(1, 17, new, 0)
    assert decoded.node_endpoints[0].host == "gw.example" and decoded.node_endpoints[0].port == 20007
    assert decoded.node_endpoints[0].rack == "r1"
    assert decoded.responses == original.responses  # records byte-identical
    tags_at = top_level_tags_offset(body, 0)
    assert new[:tags_at] == bytes(body[:tags_at])  # prefix copied verbatim, not re-encoded


def test_fetch_with_an_empty_node_endpoints_tag_passes_through_without_a_copy():
    # a broker that always writes the tag (as tansu does) must not force a rebuild of every response
    body = bytearray(encode(fetch_response(())))
    assert body[-1] == 0
    body[-1:] = b"\x01\x00\x01\x01"  # one tagged field: tag 0, size 1, empty compact array
    assert FETCH[0].rewrite_response(17, memoryview(bytes(body)), 0, FakeNodes()) is None


def _random_produce_response(rng, version: int, endpoints: bool):
    """A Produce response of a random shape: long names (two-byte lengths), many partitions,
    record errors, messages, current_leader tags, null arrays and strings."""
    cls = response_class(0, version)
    topic_cls = nested(cls, "responses")
    part_cls = nested(topic_cls, "partition_responses")
    error_cls, leader_cls = nested(part_cls, "record_errors"), nested(part_cls, "current_leader")

    def partition(p):
        errors = tuple(make(error_cls, batch_index=i32(b), batch_index_error_message=rng.choice([None, "bad", "x" * 200]))
                       for b in range(rng.choice([0, 0, 0, 1, 2])))
        leader = (make(leader_cls, leader_id=i32(2), leader_epoch=i32(7)) if rng.random() < 0.2
                  else make(leader_cls, leader_id=i32(-1), leader_epoch=i32(-1)))
        return make(part_cls, index=i32(p), error_code=ErrorCode.none, base_offset=i64(rng.randrange(1 << 40)),
                    log_append_time=None, log_start_offset=i64(0), record_errors=errors,
                    error_message=rng.choice([None, None, "moved", "m" * 130]), current_leader=leader)

    def topic(t):
        parts = tuple(partition(p) for p in range(rng.choice([0, 1, 1, 3, 130])))
        key = {"topic_id": uuid.UUID(int=rng.getrandbits(128))} if version >= 13 else {
            "name": rng.choice(["t", f"topic-{t}", "n" * 127, "é" * 70])}
        return make(topic_cls, partition_responses=parts, **key)

    endpoint = make(nested(cls, "node_endpoints"), node_id=i32(111), host="broker", port=i32(9092), rack=None)
    return memoryview(encode(make(cls, responses=tuple(topic(t) for t in range(rng.choice([0, 1, 1, 2, 3]))),
                                  throttle_time=timedelta(milliseconds=rng.choice([0, 5])),
                                  node_endpoints=(endpoint,) if endpoints else ())))


@pytest.mark.parametrize("version", [10, 11, 12, 13])
def test_produce_response_walk_in_c_agrees_with_the_full_walk(version):
    """The C walk of the usual shape (protocol/_native.c) gives the full walk's answer on every
    shape, and the same CodecError on every truncation or damage of it (it declines those)."""
    import random

    from protocol.apis.produce import _walk_to_top_level_tags

    rng = random.Random(version)
    for case in range(60):
        body = _random_produce_response(rng, version, endpoints=case % 3 == 0)
        assert has_top_level_tags(version, body, 0) is _walk_to_top_level_tags(version, body, 0) is (case % 3 == 0)
        damaged = []
        for _ in range(30):  # a byte changed: zero lengths, two-byte varints, tags where none were
            raw = bytearray(body)
            raw[rng.randrange(len(raw))] = rng.choice([0, 1, 0x7F, 0x80, 0xFF, rng.randrange(256)])
            damaged.append(memoryview(bytes(raw)))
        for short in [body[:cut] for cut in range(0, len(body), max(1, len(body) // 40))] + damaged:
            try:
                expected = _walk_to_top_level_tags(version, short, 0)
            except CodecError as e:
                with pytest.raises(CodecError, match=re.escape(str(e))):
                    has_top_level_tags(version, short, 0)
            else:
                assert has_top_level_tags(version, short, 0) is expected


@pytest.mark.parametrize("version", [9, 10, 11, 12, 13])
def test_produce_response_tags_false_means_its_rewrite_answers_none(version):
    """ApiSpec.response_tags' contract, which lets the data plane's C pairing skip the rewrite:
    where Produce's says False, its rewrite_response answers None (on whole, cut and damaged
    responses); and, where it knows, False on a response without endpoints, True on one with them."""
    import random

    from protocol.apis.registry import REGISTRY

    spec = REGISTRY[0]  # (what the request path reads: the registry keeps the check with its rewrite)
    assert spec.response_tags is PRODUCE[0].response_tags is not None
    assert spec.rewrite_response is PRODUCE[0].rewrite_response
    rng = random.Random(version * 7)
    said = set()
    for case in range(40):
        body = _random_produce_response(rng, max(version, 10), endpoints=case % 2 == 0)
        variants = [body, body[: rng.randrange(len(body) + 1)]]
        raw = bytearray(body)
        raw[rng.randrange(len(raw))] = rng.randrange(256)
        variants.append(memoryview(bytes(raw)))
        for frame in variants:
            tags = spec.response_tags(frame, 0, version)
            said.add(tags)
            if tags is False:
                assert spec.rewrite_response(version, frame, 0, FakeNodes()) is None
        if version >= 10:  # (None: a shape the C walk leaves to the reference)
            assert spec.response_tags(body, 0, version) in (None, case % 2 == 0)
    assert {False, True} <= said


@pytest.mark.parametrize("version", [10, 13])
def test_usual_produce_response_is_walked_in_c(version, monkeypatch):
    """The answer to an ordinary produce (topics, partitions, no record errors or tags) never
    needs the full walk: the C walk takes it, as every Produce response on the request path."""
    import protocol.apis.produce as produce_api

    def full_walk(*_args):
        raise AssertionError("the usual response took the full walk")

    cls = response_class(0, version)
    topic_cls = nested(cls, "responses")
    part_cls = nested(topic_cls, "partition_responses")
    leader = make(nested(part_cls, "current_leader"), leader_id=i32(-1), leader_epoch=i32(-1))
    parts = tuple(make(part_cls, index=i32(p), error_code=ErrorCode.none, base_offset=i64(1 << 33),
                       log_append_time=None, log_start_offset=i64(0), record_errors=(), error_message=None,
                       current_leader=leader) for p in range(3))
    key = {"topic_id": uuid.uuid4()} if version >= 13 else {"name": "orders"}
    body = memoryview(encode(make(cls, responses=(make(topic_cls, partition_responses=parts, **key),) * 2,
                                  throttle_time=timedelta(0), node_endpoints=())))
    monkeypatch.setattr(produce_api, "_walk_to_top_level_tags", full_walk)
    assert has_top_level_tags(version, body, 0) is False
    assert PRODUCE[0].rewrite_response(version, body, 0, FakeNodes()) is None


@pytest.mark.parametrize("version", [10, 12])
@pytest.mark.parametrize("with_endpoints", [False, True])
def test_produce_response_with_a_null_topic_name_is_walked_as_kafka_reads_it(version, with_endpoints):
    """A null name (one length byte, 0) is one byte in both walks, not none."""
    from protocol.apis.produce import _walk_to_top_level_tags

    cls = response_class(0, version)
    topic_cls = nested(cls, "responses")
    part_cls = nested(topic_cls, "partition_responses")
    leader = make(nested(part_cls, "current_leader"), leader_id=i32(-1), leader_epoch=i32(-1))
    part = make(part_cls, index=i32(0), error_code=ErrorCode.none, base_offset=i64(9), log_append_time=None,
                log_start_offset=i64(0), record_errors=(), error_message=None, current_leader=leader)
    endpoint = make(nested(cls, "node_endpoints"), node_id=i32(111), host="broker", port=i32(9092), rack=None)
    body = bytes(encode(make(cls, responses=(make(topic_cls, name="t", partition_responses=(part,)),),
                             throttle_time=timedelta(0), node_endpoints=(endpoint,) if with_endpoints else ())))
    assert body[1:3] == b"\x02t"
    null_name = memoryview(body[:1] + b"\x00" + body[3:])
    assert _walk_to_top_level_tags(version, null_name, 0) is with_endpoints
    assert has_top_level_tags(version, null_name, 0) is with_endpoints


def _fetch_request(version: int, max_wait_ms: int) -> memoryview:
    from gateway.upstream.cluster import encode_request
    from protocol.codecs import request_class

    cls = request_class(1, version)
    tcls = nested(cls, "topics")
    pcls = nested(tcls, "partitions")
    named = {"topic_id": uuid.UUID(int=7)} if version >= 13 else {"topic": "orders"}
    body = make(cls, max_wait=timedelta(milliseconds=max_wait_ms), min_bytes=i32(1), max_bytes=i32(1 << 20),
                isolation_level=0, session_id=i32(5), session_epoch=i32(3), rack_id="",
                topics=(make(tcls, partitions=(make(pcls, partition=i32(0), fetch_offset=i64(42),
                                                    partition_max_bytes=i32(1 << 20)),), **named),),
                forgotten_topics_data=())
    return memoryview(encode_request(1, version, 11, body))[4:]


@pytest.mark.parametrize("version", range(4, 19))
def test_fetch_peek_reads_the_wait_the_full_decode_finds(version):
    """Without an authorizer a Fetch request is not decoded: only ``max_wait`` is read (after
    ``replica_id`` before v15), and it must be what the decoded request holds."""
    for max_wait_ms in (0, 500, 30_000):
        frame = _fetch_request(version, max_wait_ms)
        header = parse_request_header(frame)
        full, peeked = FETCH[0].inspect(header, frame), FETCH[0].peek(header, frame)
        assert (peeked.expects_response, peeked.broker_wait_s) == (full.expects_response, full.broker_wait_s)
        assert peeked.broker_wait_s == max_wait_ms / 1000 and peeked.decoded is None
    frame = _fetch_request(version, 500)
    header = parse_request_header(frame)
    short = frame[: header.size + (4 if version < 15 else 0) + 3]  # ends inside max_wait
    with pytest.raises(CodecError, match=f"Fetch v{version}"):
        FETCH[0].peek(parse_request_header(short), short)

