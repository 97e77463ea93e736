import io
import struct

import pytest
from kio.schema.request_header.v1.header import RequestHeader as H1
from kio.schema.request_header.v2.header import RequestHeader as H2
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from protocol.headers import HeaderError, is_flexible, parse_request_header, response_header


def encode(cls, **kw):
    out = io.BytesIO()
    entity_writer(cls)(out, cls(**kw))
    return out.getvalue()


def test_v1_header_of_a_non_flexible_request():
    raw = encode(H1, request_api_key=i16(0), request_api_version=i16(8), correlation_id=i32(42), client_id="c-1")
    h = parse_request_header(memoryview(raw + b"BODY"))
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id, h.flexible) == (0, 8, 42, "c-1", False)
    assert h.size == len(raw)


def test_v2_header_with_null_client_id_and_tagged_fields_skipped():
    raw = encode(H2, request_api_key=i16(3), request_api_version=i16(12), correlation_id=i32(7), client_id=None)
    assert raw.endswith(b"\x00")
    # add one unknown tagged field (tag 5, 3 bytes) in place of the empty section
    raw = raw[:-1] + b"\x01\x05\x03abc"
    h = parse_request_header(memoryview(raw))
    assert (h.api_key, h.client_id, h.flexible, h.size) == (3, None, True, len(raw))


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"\x00\x03", "truncated"),
        (struct.pack(">hhih", 3, 1, 1, 50) + b"short", "truncated inside client id"),
        (struct.pack(">hhih", 999, 0, 1, -1), "unknown api key 999"),
        (struct.pack(">hhih", 3, 12, 1, -1) + b"\x02\x01", "tagged fields"),
        (struct.pack(">hhih", 3, 1, 1, 2) + b"\xff\xfe", "UTF-8"),
    ],
)
def test_malformed_headers_raise_header_error(raw, message):
    with pytest.raises(HeaderError, match=message):
        parse_request_header(memoryview(raw))


def test_flexible_table_and_api_versions_special_cases():
    assert is_flexible(3, 9) is True and is_flexible(3, 8) is False
    assert is_flexible(18, 9) is True  # newer ApiVersions than kio knows is still parseable
    assert response_header(18, True, 5) == struct.pack(">i", 5)  # ApiVersions: always response header v0
    assert response_header(3, True, 5) == struct.pack(">i", 5) + b"\x00"
