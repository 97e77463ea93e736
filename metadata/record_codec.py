"""The primitives of KRaft's metadata record encoding: unsigned varints, compact (nullable)
strings and bytes, UUIDs and empty tagged fields, written and read with the field named in
every error.
"""

from __future__ import annotations

import struct
from typing import Final
import uuid


_INT32 = struct.Struct(">i")
_FLOAT64 = struct.Struct(">d")


#: Kafka strings are length-limited to ``Short.MAX_VALUE`` UTF-8 bytes.
_MAX_STRING_BYTES: Final = 0x7FFF


class MetadataRecordError(ValueError):
    """A metadata record could not be encoded or decoded.

    The message says which record and which field, e.g. ``"AccessControlEntryRecord
    .operation: 300 does not fit in an int8"``.
    """

def write_uvarint(out: bytearray, value: int) -> None:
    """Append ``value`` as an unsigned LEB128 varint (Kafka ``writeUnsignedVarint``)."""
    if value < 0:
        raise MetadataRecordError(f"unsigned varint cannot hold {value}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _write_int8(out: bytearray, value: int, where: str) -> None:
    if not -128 <= value <= 127:
        raise MetadataRecordError(f"{where}: {value} does not fit in an int8")
    out.append(value & 0xFF)


def _write_int32(out: bytearray, value: int, where: str) -> None:
    if not -(2**31) <= value < 2**31:
        raise MetadataRecordError(f"{where}: {value} does not fit in an int32")
    out += _INT32.pack(value)


def _write_compact_bytes(out: bytearray, data: bytes, where: str) -> None:
    if not isinstance(data, (bytes, bytearray)):
        raise MetadataRecordError(f"{where}: expected bytes, got {type(data).__name__}")
    write_uvarint(out, len(data) + 1)
    out += data


def _write_compact_string(out: bytearray, value: str | None, where: str) -> None:
    if value is None:
        raise MetadataRecordError(f"{where}: null is not allowed (field is not nullable)")
    if not isinstance(value, str):
        raise MetadataRecordError(f"{where}: expected str, got {type(value).__name__}")
    data = value.encode("utf-8")
    if len(data) > _MAX_STRING_BYTES:
        raise MetadataRecordError(
            f"{where}: {len(data)} UTF-8 bytes exceeds Kafka's limit of {_MAX_STRING_BYTES}"
        )
    write_uvarint(out, len(data) + 1)
    out += data


def _write_nullable_compact_string(out: bytearray, value: str | None, where: str) -> None:
    if value is None:
        out.append(0)
    else:
        _write_compact_string(out, value, where)


def _write_uuid(out: bytearray, value: uuid.UUID, where: str) -> None:
    if not isinstance(value, uuid.UUID):
        raise MetadataRecordError(f"{where}: expected uuid.UUID, got {type(value).__name__}")
    out += value.bytes


def _write_no_tagged_fields(out: bytearray) -> None:
    out.append(0)


def read_uvarint(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    """Read an unsigned varint of at most 5 bytes (a Java int) at ``pos``."""
    try:
        byte = buf[pos]
        if byte < 0x80:  # fast path: almost every length and key fits in one byte
            return byte, pos + 1
        result = byte & 0x7F
        for shift in (7, 14, 21, 28):
            pos += 1
            byte = buf[pos]
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result, pos + 1
    except IndexError:
        raise MetadataRecordError("buffer ends inside an unsigned varint") from None
    raise MetadataRecordError("unsigned varint is longer than 5 bytes")


def _need(buf: bytes | memoryview, pos: int, size: int, what: str) -> None:
    if pos + size > len(buf):
        raise MetadataRecordError(
            f"buffer ends inside {what}: need {size} byte(s) at {pos}, have {len(buf) - pos}"
        )


def _read_int8(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    try:
        value = buf[pos]
    except IndexError:
        raise MetadataRecordError(f"buffer ends inside an int8 at {pos}") from None
    return (value - 256 if value > 127 else value), pos + 1


def _read_int32(buf: bytes | memoryview, pos: int) -> tuple[int, int]:
    _need(buf, pos, 4, "an int32")
    return _INT32.unpack_from(buf, pos)[0], pos + 4


def _write_float64(out: bytearray, value: float, where: str) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise MetadataRecordError(f"{where}: {value!r} is not a float64")
    out += _FLOAT64.pack(float(value))


def _write_bool(out: bytearray, value: bool, where: str) -> None:
    if not isinstance(value, bool):
        raise MetadataRecordError(f"{where}: {value!r} is not a bool")
    out.append(1 if value else 0)


def _read_float64(buf: bytes | memoryview, pos: int) -> tuple[float, int]:
    _need(buf, pos, 8, "a float64")
    return _FLOAT64.unpack_from(buf, pos)[0], pos + 8


def _read_bool(buf: bytes | memoryview, pos: int) -> tuple[bool, int]:
    _need(buf, pos, 1, "a bool")
    if buf[pos] > 1:
        raise MetadataRecordError(f"bool byte {buf[pos]} at {pos} is neither 0 nor 1")
    return buf[pos] == 1, pos + 1


def _read_uuid(buf: bytes | memoryview, pos: int) -> tuple[uuid.UUID, int]:
    _need(buf, pos, 16, "a uuid")
    return uuid.UUID(bytes=bytes(buf[pos : pos + 16])), pos + 16


def _read_compact_bytes_or_null(
    buf: bytes | memoryview, pos: int
) -> tuple[bytes | None, int]:
    length_plus_one, pos = read_uvarint(buf, pos)
    if length_plus_one == 0:
        return None, pos
    end = pos + length_plus_one - 1
    if end > len(buf):
        _need(buf, pos, length_plus_one - 1, "a compact string/bytes")
    return bytes(buf[pos:end]), end


def _read_compact_bytes(buf: bytes | memoryview, pos: int) -> tuple[bytes, int]:
    data, pos = _read_compact_bytes_or_null(buf, pos)
    if data is None:
        raise MetadataRecordError("null found where non-nullable bytes were expected")
    return data, pos


def _read_nullable_compact_string(
    buf: bytes | memoryview, pos: int
) -> tuple[str | None, int]:
    data, pos = _read_compact_bytes_or_null(buf, pos)
    if data is None:
        return None, pos
    try:
        return data.decode("utf-8"), pos
    except UnicodeDecodeError as exc:
        raise MetadataRecordError(f"string is not valid UTF-8: {exc}") from exc


def _read_compact_string(buf: bytes | memoryview, pos: int) -> tuple[str, int]:
    value, pos = _read_nullable_compact_string(buf, pos)
    if value is None:
        raise MetadataRecordError("null found where a non-nullable string was expected")
    return value, pos


def _skip_tagged_fields(buf: bytes | memoryview, pos: int) -> int:
    """Skip the tagged-field section; kgw's records define no tagged fields."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        _need(buf, pos, size, "a tagged field")
        pos += size
    return pos
