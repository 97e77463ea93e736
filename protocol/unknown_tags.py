"""Tagged fields kio does not know, left out of an upstream's response so that it can be decoded.

Theory of operation
-------------------
A flexible entity ends with a tagged section, and Kafka adds tagged fields to a version that
already exists (that is what they are for): a newer broker may send a tag this kio was not
generated with.  Kafka's own parsers keep such a field aside and carry on; kio's reader refuses
the whole body, and kgw would close the client's connection over a response it could have
passed on.  :func:`without_unknown_tags` copies a body, leaving out of every tagged section the
tags its entity does not declare, so that kio can read it.  Only responses come through here
(:func:`protocol.codecs.decode_response`): what kgw then passes on is what it decoded, without
the field, as an older broker would have answered.  A request's unknown tag still fails its
decode: kgw cannot authorize what it cannot read, and forwards nothing it has not read.

The copy is made only after a decode failed on an unknown tag (rare), so it walks the entity's
dataclass fields directly, with :mod:`protocol.bounds`' steps for primitive fields and its
checks of every length against the bytes that are there.  A declared tag whose value holds
entities (a tagged struct such as Fetch's current leader, an array such as the node endpoints) is
copied the same way, its size written again.
"""

from __future__ import annotations

import dataclasses
import struct
from functools import lru_cache
from typing import Any

from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_field_tag

from protocol.bounds import LengthError, _length, _nullable, _uvarint, _walk, primitive_step, struct_present
from protocol.wire import uvarint_bytes

__all__ = ["without_unknown_tags"]


def without_unknown_tags(cls: type, buf: memoryview | bytes, offset: int) -> bytes:
    """``cls`` encoded at ``buf[offset:]``, every tag its entities do not declare left out.

    Raises:
        LengthError: the body is malformed (a length claims more than remains, it ends early).
    """
    out: list[bytes | memoryview] = []
    view = memoryview(buf)
    try:
        _copy(cls, view, offset, len(view), out)
    except (IndexError, struct.error):
        raise LengthError(f"{cls.__name__}: the response ends inside a field") from None
    return b"".join(out)


Step = tuple[str, Any]


@lru_cache(maxsize=None)
def _layout(cls: type) -> tuple[bool, tuple[Step, ...], dict[int, Step | None]]:
    """(flexible, one step per field in the body, the tags ``cls`` declares): a step is
    ``("entity", (sub, nullable))``, ``("entities", (sub, nullable))`` or a plan step of
    :mod:`protocol.bounds`; a declared tag maps to its field's step when its value holds entities
    (whose own tagged sections are copied the same way), else to None (its value copied whole)."""
    flexible = bool(getattr(cls, "__flexible__", False))
    steps: list[Step] = []
    tags: dict[int, Step | None] = {}
    for f in dataclasses.fields(cls):
        shape = classify_field(f)
        nullable = _nullable(f.type)
        if isinstance(shape, EntityTupleField):
            step: Step | None = ("entities", (shape.type_, nullable))
        elif isinstance(shape, EntityField):
            step = ("entity", (shape.type_, nullable))
        else:
            step = None
        tag = get_field_tag(f) if flexible else None
        if tag is not None:
            tags[tag] = step
        else:
            steps.append(step if step is not None else primitive_step(cls, f))
    return flexible, tuple(steps), tags


def _copy(cls: type, buf: memoryview, off: int, end: int, out: list[bytes | memoryview]) -> int:
    """Append ``cls``'s bytes at ``off`` to ``out`` without its unknown tags; the offset after it."""
    flexible, steps, known = _layout(cls)
    start = off  # of the bytes not yet appended
    for step in steps:
        off, start = _copy_field(step, flexible, buf, off, end, out, start)
    out.append(buf[start:off])
    if flexible:
        off = _tags(buf, off, end, known, out)
    return off


def _copy_field(step: Step, flexible: bool, buf: memoryview, off: int, end: int, out: list[bytes | memoryview],
                start: int) -> tuple[int, int]:
    """Walk one field at ``off``, appending to ``out`` what lies before its entities' tagged
    sections (from ``start``, the first byte not yet appended); (the offset after the field, the
    first byte not yet appended)."""
    kind, arg = step
    if kind == "entities":
        sub, nullable = arg
        n, off = _length(buf, off, end, flexible, True, "an array count", nullable)
        out.append(buf[start:off])
        for _ in range(max(n, 0)):
            off = _copy(sub, buf, off, end, out)
        return off, off
    if kind == "entity":
        sub, nullable = arg
        present, off = struct_present(buf, off, nullable)
        if not present:
            return off, start
        out.append(buf[start:off])
        off = _copy(sub, buf, off, end, out)
        return off, off
    return _walk((flexible, (step,)), buf, off, end), start


def _tags(buf: memoryview, off: int, end: int, known: dict[int, Step | None], out: list[bytes | memoryview]) -> int:
    """Append the tagged section at ``off`` with the ``known`` tags only, each value holding
    entities copied without their own unknown tags; the offset after it."""
    count, off = _uvarint(buf, off)
    if count > end - off:
        raise LengthError(f"{count} tagged fields claim more than the {end - off} bytes left")
    kept: list[bytes | memoryview] = []
    fields = 0
    for _ in range(count):
        field = off
        tag, off = _uvarint(buf, off)
        size, off = _uvarint(buf, off)
        if size > end - off:
            raise LengthError(f"a tagged field of {size} bytes claims more than the {end - off} left")
        value_at, off = off, off + size
        if tag not in known:
            continue
        fields += 1
        step = known[tag]
        if step is None:
            kept.append(buf[field:off])
            continue
        value: list[bytes | memoryview] = []
        value_end, rest = _copy_field(step, True, buf, value_at, off, value, value_at)
        if value_end != off:
            raise LengthError(f"tagged field {tag}'s value ends {off - value_end} bytes before its size says")
        value.append(buf[rest:value_end])
        data = b"".join(value)
        kept += (uvarint_bytes(tag), uvarint_bytes(len(data)), data)
    out.append(uvarint_bytes(fields))
    out += kept
    return off
