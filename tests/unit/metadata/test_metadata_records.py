"""Codec tests for metadata.records: hand-checked bytes, round-trips, errors."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from metadata.records import AccessControlEntryRecord, ClientQuotaRecord, ConfigRecord, RemoveAccessControlEntryRecord, RemoveUserScramCredentialRecord, UnknownMetadataRecord, UserScramCredentialRecord, decode_record, encode_record
from metadata.record_codec import MetadataRecordError

ACL_ID = uuid.UUID("00112233-4455-6677-8899-aabbccddeeff")


def test_access_control_entry_record_bytes_match_the_json_schema() -> None:
    # Worked out by hand from AccessControlEntryRecord.json (apiKey 18, v0,
    # flexibleVersions 0+) and AbstractApiMessageSerde's frame.
    record = AccessControlEntryRecord(
        id=ACL_ID,
        resource_type=2,  # TOPIC
        resource_name="foo",
        pattern_type=3,  # LITERAL
        principal="User:alice",
        host="*",
        operation=3,  # READ
        permission_type=3,  # ALLOW
    )
    expected = bytes.fromhex(
        "01"  # frame version 1 (uvarint)
        "12"  # api key 18 (uvarint)
        "00"  # record version 0 (uvarint)
        "00112233445566778899aabbccddeeff"  # Id: uuid, 16 bytes, MSB first
        "02"  # ResourceType int8
        "04" "666f6f"  # ResourceName compact string: len 3 + 1, "foo"
        "03"  # PatternType int8
        "0b" "557365723a616c696365"  # Principal: len 10 + 1, "User:alice"
        "02" "2a"  # Host: len 1 + 1, "*"
        "03"  # Operation int8
        "03"  # PermissionType int8
        "00"  # no tagged fields
    )
    assert encode_record(record) == expected
    assert decode_record(expected) == record


def test_remove_acl_and_config_record_bytes() -> None:
    assert encode_record(RemoveAccessControlEntryRecord(id=ACL_ID)) == (
        bytes.fromhex("011300") + ACL_ID.bytes + b"\x00"
    )
    deletion = ConfigRecord(resource_type=2, resource_name="t", name="k", value=None)
    # type 2, "t", "k", null value (compact length 0), no tags.
    assert encode_record(deletion) == bytes.fromhex("010400" "02" "0274" "026b" "00" "00")


def test_api_keys_match_kafka() -> None:
    keys = {
        cls.__name__: cls.API_KEY
        for cls in (
            AccessControlEntryRecord,
            RemoveAccessControlEntryRecord,
            ConfigRecord,
            UserScramCredentialRecord,
            RemoveUserScramCredentialRecord,
            ClientQuotaRecord,
        )
    }
    assert keys == {
        "AccessControlEntryRecord": 18,
        "RemoveAccessControlEntryRecord": 19,
        "ConfigRecord": 4,
        "UserScramCredentialRecord": 11,
        "RemoveUserScramCredentialRecord": 22,
        "ClientQuotaRecord": 14,
    }


def test_client_quota_record_bytes_match_the_json_schema() -> None:
    """ClientQuotaRecord v0: entity [(type, nullable name)] as a compact array of structs each
    with its tagged fields, key, float64 value, bool remove, tagged fields."""
    record = ClientQuotaRecord(entity=(("user", "alice"), ("client-id", None)), key="producer_byte_rate",
                               value=1048576.0, remove=False)
    expected = bytes.fromhex(
        "01" "0e" "00"                      # frame version 1, api key 14, version 0
        "03"                                # two entity entries
        "05" + b"user".hex() + "06" + b"alice".hex() + "00"
        "0a" + b"client-id".hex() + "00" "00"   # a null name: the default
        "13" + b"producer_byte_rate".hex() +
        "4130000000000000"                  # 1048576.0
        "00" "00")
    assert encode_record(record) == expected
    assert decode_record(expected) == record


int8s = st.integers(-128, 127)
texts = st.text(max_size=40)
blobs = st.binary(max_size=64)
uuids = st.uuids()

records = st.one_of(
    st.builds(
        AccessControlEntryRecord,
        id=uuids,
        resource_type=int8s,
        resource_name=texts,
        pattern_type=int8s,
        principal=texts,
        host=texts,
        operation=int8s,
        permission_type=int8s,
    ),
    st.builds(RemoveAccessControlEntryRecord, id=uuids),
    st.builds(
        ConfigRecord,
        resource_type=int8s,
        resource_name=texts,
        name=texts,
        value=st.none() | texts,
    ),
    st.builds(
        UserScramCredentialRecord,
        name=texts,
        mechanism=int8s,
        salt=blobs,
        stored_key=blobs,
        server_key=blobs,
        iterations=st.integers(-(2**31), 2**31 - 1),
    ),
    st.builds(RemoveUserScramCredentialRecord, name=texts, mechanism=int8s),
    st.builds(
        ClientQuotaRecord,
        entity=st.lists(st.tuples(texts, st.none() | texts), max_size=3).map(tuple),
        key=texts,
        value=st.floats(allow_nan=False),
        remove=st.booleans(),
    ),
)


@given(records)
def test_round_trip(record: object) -> None:
    data = encode_record(record)  # type: ignore[arg-type]
    assert data[0] == 1
    assert decode_record(data) == record


@given(records, st.integers(min_value=1))
def test_truncated_records_are_rejected(record: object, cut: int) -> None:
    data = encode_record(record)  # type: ignore[arg-type]
    cut = cut % len(data)
    with pytest.raises(MetadataRecordError):
        decode_record(data[:cut])


def test_unknown_tagged_fields_are_skipped() -> None:
    data = encode_record(RemoveAccessControlEntryRecord(id=ACL_ID))
    with_tag = data[:-1] + bytes.fromhex("01" "05" "02" "abcd")  # one tag 5, 2 bytes
    assert decode_record(with_tag) == RemoveAccessControlEntryRecord(id=ACL_ID)


@pytest.mark.parametrize("name", ["t", "x" * 126, "x" * 127, "é" * 200])
def test_acl_records_of_every_shape_decode_alike(name: str) -> None:
    """The usual shape takes a shorter path (metadata/records.py, _decode_acl_fast); long
    strings, tagged fields and negative codes take the general one, with the same result."""
    for operation in (5, -5):
        record = AccessControlEntryRecord(id=ACL_ID, resource_type=2, resource_name=name, pattern_type=4,
                                          principal=f"User:{name}", host="10.0.0.1", operation=operation,
                                          permission_type=3)
        data = encode_record(record)
        assert decode_record(data) == record
        with_tag = data[:-1] + bytes.fromhex("01" "05" "02" "abcd")
        assert decode_record(with_tag) == record


def test_unknown_record_type_is_kept_verbatim() -> None:
    data = bytes.fromhex("0102000301020300")  # TopicRecord-ish: api key 2
    record = decode_record(data)
    assert record == UnknownMetadataRecord(api_key=2, version=0, body=data[3:])
    assert encode_record(record) == data


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x00\x12\x00", "frame version 0"),
        (b"\x0f\x12\x00", "frame version 15"),
        (b"\x80\x80\x80\x80\x80\x80", "error while reading frame version"),
        (b"\x01\x13\x00" + ACL_ID.bytes + b"\x00\xff", r"1 byte\(s\) of garbage"),
        (b"\x01\x13\x00" + ACL_ID.bytes[:5], "buffer ends inside a uuid"),
    ],
)
def test_decode_errors_are_clear(data: bytes, message: str) -> None:
    with pytest.raises(MetadataRecordError, match=message):
        decode_record(data)


def test_encode_rejects_out_of_range_fields() -> None:
    bad = AccessControlEntryRecord(
        id=ACL_ID,
        resource_type=2,
        resource_name="t",
        pattern_type=3,
        principal="User:a",
        host="*",
        operation=300,
        permission_type=3,
    )
    with pytest.raises(MetadataRecordError, match=r"AccessControlEntryRecord\.operation: 300"):
        encode_record(bad)
    with pytest.raises(MetadataRecordError, match="exceeds Kafka's limit"):
        encode_record(ConfigRecord(resource_type=2, resource_name="x" * 40000, name="k", value="v"))
    with pytest.raises(MetadataRecordError, match="not nullable"):
        encode_record(ConfigRecord(resource_type=2, resource_name="t", name=None, value="v"))  # type: ignore[arg-type]
