"""Every length and count in a request checked against the bytes that are there, before kio reads it.

Theory of operation
-------------------
kio's native reader sizes arrays from the count on the wire before reading their
elements: a 50-byte request whose array count says two billion makes it ask the
allocator for hundreds of gigabytes, and the process aborts (a crash of the whole
gateway, not an exception).  So before any request body reaches
:func:`protocol.codecs.decode_request`, :func:`check_lengths` walks it with the
schema kio describes in its dataclass fields (``kafka_type`` metadata, tagged
fields, flexible versions) and refuses any string, byte field or array that
claims more than the bytes left in the frame (every element takes at least one
byte).  It reads no value: it only moves an offset.

The walk is planned once per entity class (:func:`_plan`): runs of fixed-width
fields are one skip, and an array of fixed-width elements without tagged
sections is skipped in one step, so a Fetch request of thousands of partitions
costs a loop over its topics only in non-flexible versions, and one cheap step
per partition in flexible ones.
"""

from __future__ import annotations

import dataclasses
import struct
import types
import typing
from functools import lru_cache
from typing import Any

from kio.serial._introspect import EntityField, EntityTupleField, PrimitiveTupleField, classify_field, get_field_tag

__all__ = ["LengthError", "check_lengths", "check_lengths_python"]


class LengthError(ValueError):
    """A length or count in the request exceeds the bytes that follow it."""


_FIXED = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "float64": 8,
          "uuid": 16, "timedelta_i32": 4, "timedelta_i64": 8, "error_code": 2,
          "datetime_i64": 8}
_VARIABLE = frozenset({"string", "bytes", "records"})
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def check_lengths(cls: type, buf: memoryview | bytes, offset: int) -> int:
    """Walk an encoded ``cls`` at ``buf[offset:]``; the offset after it.  In C
    (``protocol/_native.c``) where it was built; what the C walk declines (anything malformed)
    is walked again by :func:`_walk`, the reference, which names what is wrong.

    Raises:
        LengthError: a length, count or tagged-field size claims more bytes than remain,
            or the buffer ends inside the entity.
    """
    plan = _plan(cls)[0]
    if _native_check is not None:
        end: int | None = _native_check(plan, buf, offset)
        if end is not None:
            return end
    return check_lengths_python(cls, buf, offset)


def check_lengths_python(cls: type, buf: memoryview | bytes, offset: int) -> int:
    """:func:`check_lengths` in Python alone: the reference of the C walk."""
    try:
        return _walk(_plan(cls)[0], buf, offset, len(buf))
    except (IndexError, struct.error):
        raise LengthError(f"{cls.__name__}: the request ends inside a field") from None


def _uvarint(buf: memoryview | bytes, off: int) -> tuple[int, int]:
    result = shift = 0
    for i in range(5):
        b = buf[off + i]
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, off + i + 1
        shift += 7
    raise LengthError("an unsigned varint longer than 5 bytes")


def _length(buf: memoryview | bytes, off: int, end: int, flexible: bool, wide: bool, what: str,
            nullable: bool = True) -> tuple[int, int]:
    """A string/bytes length or an array count (-1 for null), checked against what remains;
    null only where the schema allows it, and no other negative value."""
    if flexible:
        n, off = _uvarint(buf, off)
        n -= 1
    elif wide:
        (n,) = _I32.unpack_from(buf, off)
        off += 4
    else:
        (n,) = _I16.unpack_from(buf, off)
        off += 2
    if n > end - off:
        raise LengthError(f"{what} of {n} claims more than the {end - off} bytes left in the request")
    if n < 0 and (n != -1 or not nullable):
        raise LengthError(f"{what} of {n}: " + ("a negative length" if n != -1 else "null where the schema allows none"))
    return n, off


def _tags(buf: memoryview | bytes, off: int, end: int) -> int:
    if buf[off] == 0:
        return off + 1
    count, off = _uvarint(buf, off)
    if count > end - off:
        raise LengthError(f"{count} tagged fields claim more than the {end - off} bytes left")
    for _ in range(count):
        _tag, off = _uvarint(buf, off)
        size, off = _uvarint(buf, off)
        if size > end - off:
            raise LengthError(f"a tagged field of {size} bytes claims more than the {end - off} left")
        off += size
    return off


# A plan is a tuple of steps; each step is (kind, argument):
#   ("skip", n)            n fixed bytes
#   ("var", (wide, nullable))    a string (wide=False) or bytes/records (wide=True)
#   ("array", (elem, n, nullable))  an array; elem is a sub-plan, or ("var", ...) / ("skip", n) for
#                          primitives; n the fixed size of one element when it has one (skipped in one
#                          step), else None
#   ("tagged_array", (n, nullable))  an array of entities of n fixed bytes and a tagged section each
# A null (length -1) where ``nullable`` is False is malformed, as it is for Kafka's parser.
#   ("struct", (plan, nullable))  a nested entity (nullable ones carry an int8 presence marker)
#   ("tags", None)         the tagged-field section of a flexible entity


@lru_cache(maxsize=None)
def _plan(cls: type) -> tuple[tuple[bool, tuple[Any, ...]], int | None]:
    """(flexible, steps) of ``cls`` and its fixed encoded size (None when it varies)."""
    flexible = bool(getattr(cls, "__flexible__", False))
    steps: list[tuple[str, Any]] = []
    fixed: int | None = 0

    def skip(n: int) -> None:
        nonlocal fixed
        if steps and steps[-1][0] == "skip":
            steps[-1] = ("skip", steps[-1][1] + n)
        else:
            steps.append(("skip", n))
        if fixed is not None:
            fixed += n

    for f in dataclasses.fields(cls):
        if flexible and get_field_tag(f) is not None:
            continue  # in the tagged section
        kind = f.metadata.get("kafka_type")
        shape = classify_field(f)
        if isinstance(shape, EntityTupleField):
            sub, sub_fixed = _plan(shape.type_)
            sub_steps = sub[1]
            if sub_fixed is None and len(sub_steps) == 2 and sub_steps[0][0] == "skip" and sub_steps[1][0] == "tags":
                # fixed-width fields then a tagged section (e.g. Fetch partitions): one step each
                steps.append(("tagged_array", (sub_steps[0][1], _nullable(f.type))))
            else:
                steps.append(("array", (sub, sub_fixed, _nullable(f.type))))
            fixed = None
        elif isinstance(shape, EntityField):
            sub, _sub_fixed = _plan(shape.type_)
            steps.append(("struct", (sub, _nullable(f.type))))
            fixed = None
        elif kind in _FIXED and not isinstance(shape, PrimitiveTupleField):
            skip(_FIXED[kind])
        else:
            steps.append(primitive_step(cls, f))
            fixed = None
    if flexible:
        steps.append(("tags", None))
        fixed = None
    return (flexible, tuple(steps)), fixed


def primitive_step(cls: type, f: dataclasses.Field[Any]) -> tuple[str, Any]:
    """The step of a plan that walks field ``f`` of ``cls``: a primitive, or an array of them."""
    kind = f.metadata.get("kafka_type")
    if isinstance(classify_field(f), PrimitiveTupleField):
        outer = _unwrap_optional(f.type)
        inner = outer.__args__[0] if hasattr(outer, "__args__") else None
        elem = ("skip", _FIXED[kind]) if kind in _FIXED else ("var", (kind != "string", _nullable(inner)))
        return ("array", (elem, _FIXED.get(kind) if kind is not None else None, _nullable(f.type)))
    if kind in _FIXED:
        return ("skip", _FIXED[kind])
    if kind in _VARIABLE:
        return ("var", (kind != "string", _nullable(f.type)))
    raise TypeError(f"{cls.__name__}.{f.name}: unknown kafka_type {kind!r}")


def _nullable(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)


def _unwrap_optional(tp: Any) -> Any:
    if _nullable(tp):
        return next(a for a in typing.get_args(tp) if a is not type(None))
    return tp


def struct_present(buf: memoryview | bytes, off: int, nullable: bool) -> tuple[bool, int]:
    """Whether a nested entity follows at ``off`` (a nullable one's int8 marker is -1 for null),
    and where it begins."""
    if not nullable:
        return True, off
    return buf[off] != 0xFF, off + 1


def _walk(plan: tuple[bool, tuple[Any, ...]], buf: memoryview | bytes, off: int, end: int) -> int:
    flexible, steps = plan
    for kind, arg in steps:
        if kind == "skip":
            off += arg
        elif kind == "var":
            wide, nullable = arg
            n, off = _length(buf, off, end, flexible, wide, "a byte field" if wide else "a string", nullable)
            if n > 0:
                off += n
        elif kind == "array":
            elem, elem_size, nullable = arg
            n, off = _length(buf, off, end, flexible, True, "an array count", nullable)
            if n <= 0:
                continue
            if elem_size is not None:
                if n * elem_size > end - off:
                    raise LengthError(f"{n} elements of {elem_size} bytes claim more than the {end - off} left")
                off += n * elem_size
            elif elem[0] == "var":
                wide, elem_nullable = elem[1]
                for _ in range(n):
                    m, off = _length(buf, off, end, flexible, wide, "a string", elem_nullable)
                    if m > 0:
                        off += m
            else:
                for _ in range(n):
                    off = _walk(elem, buf, off, end)
        elif kind == "tagged_array":
            size, nullable = arg
            n, off = _length(buf, off, end, flexible, True, "an array count", nullable)
            if n > 0:
                if n * (size + 1) > end - off:
                    raise LengthError(f"{n} elements of at least {size + 1} bytes claim more than the {end - off} left")
                for _ in range(n):
                    off += size
                    if buf[off] == 0:
                        off += 1
                    else:
                        off = _tags(buf, off, end)
        elif kind == "struct":
            sub, nullable = arg
            present, off = struct_present(buf, off, nullable)
            if present:
                off = _walk(sub, buf, off, end)
        else:  # tags
            off = _tags(buf, off, end)
        if off > end:
            raise LengthError(f"the request ends inside a field ({off - end} bytes short)")
    return off


try:  # the walk in C, built by setup.py where a compiler is found
    from protocol import _native
except ImportError:  # pragma: no cover - a build without a compiler: the reference alone
    _native_check = None
else:
    _native_check = _native.check_lengths
