"""``throttle_time_ms`` set in a response frame (protocol/throttle.py): a Fetch patched in place
(its records untouched, flexible header or not), any other response re-encoded, the larger of
the broker's and the gateway's kept, a version without the field left as it is."""

from __future__ import annotations

import struct
from datetime import timedelta

from kio.schema.errors import ErrorCode

from protocol.codecs import decode_response, encode, make, nested, response_class
from protocol.headers import response_header
from protocol.throttle import with_throttle_time


def _frame(api_key: int, version: int, flexible: bool, body) -> bytes:
    head = response_header(api_key, flexible, 7)
    data = head + encode(body)
    return struct.pack(">i", len(data)) + data


def _fetch(version: int, throttle_ms: int, records: bytes):
    cls = response_class(1, version)
    topic_cls = nested(cls, "responses")
    part_cls = nested(topic_cls, "partitions")
    part = make(part_cls, partition_index=0, error_code=ErrorCode.none, high_watermark=10, last_stable_offset=10,
                log_start_offset=0, aborted_transactions=(), preferred_read_replica=-1, records=records)
    topic_kw = {"topic_id" if version >= 13 else "topic": (__import__("uuid").UUID(int=5) if version >= 13 else "t")}
    topic = make(topic_cls, partitions=(part,), **topic_kw)
    return make(cls, throttle_time=timedelta(milliseconds=throttle_ms), error_code=ErrorCode.none, session_id=0,
                responses=(topic,))


def test_a_fetch_response_is_patched_in_place_and_its_records_kept():
    records = bytes(range(256)) * 64
    for version, flexible in ((4, False), (11, False), (13, True)):
        frame = _frame(1, version, flexible, _fetch(version, 0, records))
        out = with_throttle_time(1, version, flexible, frame, 1234)
        assert len(out) == len(frame) and bytes(out).count(records) == 1
        off = 9 if flexible else 8
        decoded = decode_response(1, version, bytes(out), off)
        assert decoded.throttle_time == timedelta(milliseconds=1234)
        assert decoded.responses[0].partitions[0].records == records
        # the broker's own larger throttle stays
        frame = _frame(1, version, flexible, _fetch(version, 5000, records))
        assert with_throttle_time(1, version, flexible, frame, 1234) is frame


def test_other_responses_are_re_encoded_with_the_field():
    cls = response_class(16, 4)
    body = make(cls, throttle_time=timedelta(0), error_code=ErrorCode.none, groups=())
    frame = _frame(16, 4, True, body)
    out = bytes(with_throttle_time(16, 4, True, frame, 250))
    assert struct.unpack_from(">i", out)[0] == len(out) - 4 and out[4:8] == frame[4:8]  # size, correlation id
    assert decode_response(16, 4, out, 9).throttle_time == timedelta(milliseconds=250)
    # ListGroups v0 has no throttle time: unchanged (the gateway's mute still applies)
    v0 = _frame(16, 0, False, make(response_class(16, 0), error_code=ErrorCode.none, groups=()))
    assert with_throttle_time(16, 0, False, v0, 250) is v0
