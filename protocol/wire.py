"""Small readers for walking a frame without decoding it (hot-path modules only), and the
writers of what a walk rewrites in place.

Each reader takes (buffer, offset) and returns (value, new offset), like kio's
readers, and raises :class:`WalkError` when the buffer ends early.
"""

from __future__ import annotations

import io
import struct

from kio.serial.writers import write_unsigned_varint

from protocol.headers import HeaderError, read_uvarint

__all__ = ["WalkError", "i16", "i32", "uvarint", "skip_tagged", "skip_string", "skip_bytes", "array_len",
           "uvarint_bytes", "string_bytes"]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class WalkError(Exception):
    pass


def i16(buf: memoryview | bytes, off: int) -> tuple[int, int]:
    try:
        return _I16.unpack_from(buf, off)[0], off + 2
    except struct.error:
        raise WalkError("buffer ends inside an int16") from None


def i32(buf: memoryview | bytes, off: int) -> tuple[int, int]:
    try:
        return _I32.unpack_from(buf, off)[0], off + 4
    except struct.error:
        raise WalkError("buffer ends inside an int32") from None


def uvarint(buf: memoryview | bytes, off: int) -> tuple[int, int]:
    try:
        b = buf[off]
        if b < 0x80:  # one byte: nearly every length and count on the hot path
            return b, off + 1
        return read_uvarint(buf, off)
    except IndexError:
        raise WalkError("buffer ends inside a varint") from None
    except HeaderError as e:  # e.g. longer than 5 bytes
        raise WalkError(str(e)) from None


def array_len(buf: memoryview | bytes, off: int, flexible: bool) -> tuple[int, int]:
    """Element count of an array (-1 for null)."""
    if flexible:
        n, off = uvarint(buf, off)
        return n - 1, off
    return i32(buf, off)


def skip_string(buf: memoryview | bytes, off: int, flexible: bool) -> tuple[str | None, int]:
    """Read a (nullable) string; returns (value, new offset)."""
    if flexible:
        n, off = uvarint(buf, off)
        n -= 1
    else:
        n, off = i16(buf, off)
    if n < 0:
        if n != -1:  # only -1 means null, as for Kafka's parser
            raise WalkError(f"negative string length {n}")
        return None, off
    end = off + n
    if end > len(buf):
        raise WalkError("buffer ends inside a string")
    return str(buf[off:end], "utf-8"), end


def skip_bytes(buf: memoryview | bytes, off: int, flexible: bool) -> tuple[int, int, int]:
    """Locate (nullable) bytes without copying: returns (start, end, new offset); start=-1 for null."""
    if flexible:
        n, off = uvarint(buf, off)
        n -= 1
    else:
        n, off = i32(buf, off)
    if n < -1:
        raise WalkError(f"negative byte-field length {n}")
    if n < 0:
        return -1, -1, off
    end = off + n
    if end > len(buf):
        raise WalkError("buffer ends inside a byte field")
    return off, end, end


def skip_tagged(buf: memoryview | bytes, off: int) -> int:
    try:
        if buf[off] == 0:  # no tagged fields: the usual case
            return off + 1
    except IndexError:
        raise WalkError("buffer ends inside tagged fields") from None
    count, off = uvarint(buf, off)
    for _ in range(count):
        _tag, off = uvarint(buf, off)
        size, off = uvarint(buf, off)
        off += size
    if off > len(buf):
        raise WalkError("buffer ends inside tagged fields")
    return off


def uvarint_bytes(n: int) -> bytes:
    """An unsigned varint (compact lengths and counts, tag numbers)."""
    if n < 0x80:  # one byte: nearly every length and count
        return bytes((n,))
    out = io.BytesIO()
    write_unsigned_varint(out, n)  # type: ignore[arg-type]  # kio: an int subclass, same bytes
    return out.getvalue()


def string_bytes(value: str, flexible: bool) -> bytes:
    """A (non-null) string: a compact one in flexible versions, else int16-prefixed."""
    data = value.encode()
    return (uvarint_bytes(len(data) + 1) if flexible else _I16.pack(len(data))) + data
