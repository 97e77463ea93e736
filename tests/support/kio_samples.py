"""Valid kio entities of any API and version, built from their type hints, for fuzzing.

:func:`sample` fills every field of a request or response class with a plausible
value: topic, group and transactional-id names drawn from ``names`` (so a test
can mix names a principal may and may not use), one element per array, a real
magic-v2 record batch wherever records go.  :func:`names_in` walks a decoded
entity and yields every (kind, value) a broker would authorize: the kio phantom
types ``TopicName``, ``GroupId`` and ``TransactionalId`` say which strings those are.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import io
import random
import types
import typing
import uuid
from datetime import timedelta
from typing import Any, Iterator

from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.schema import types as kt
from kio.static import primitive as kp

__all__ = ["record_batch", "sample", "names_in", "NAME_KINDS"]

#: kio phantom string types whose values a broker authorizes, and the resource kind of each
NAME_KINDS = {kt.TopicName: "topic", kt.GroupId: "group", kt.TransactionalId: "transactional_id"}


def record_batch(value: bytes = b"v", *, producer_id: int = -1, attributes: int = 0) -> bytes:
    out = io.BytesIO()
    write_new_batch(out, NewRecordBatch(
        producer_id=kp.i64(producer_id), producer_epoch=kp.i16(-1 if producer_id < 0 else 0),
        base_sequence=kp.i32(-1 if producer_id < 0 else 0), attributes=kp.i16(attributes),
        records=(Record(attributes=kp.i8(0), timestamp=dt.datetime.now(dt.timezone.utc), offset=kp.i64(0),
                        key=b"k", value=value, headers=()),)))
    return out.getvalue()


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _value(tp: Any, rnd: random.Random, names: dict[str, list[str]], depth: int) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) < len(typing.get_args(tp)) and rnd.random() < 0.15:
            return None
        return _value(args[0], rnd, names, depth)
    if origin is tuple:
        inner = typing.get_args(tp)[0]
        count = rnd.choice((0, 1, 1, 1, 2, 3)) if depth < 4 else 0
        return tuple(_value(inner, rnd, names, depth + 1) for _ in range(count))
    if origin is typing.Literal:
        return typing.get_args(tp)[0]
    if dataclasses.is_dataclass(tp):
        return sample(tp, rnd, names, depth + 1)
    for kind_type, kind in NAME_KINDS.items():
        if tp is kind_type:
            return rnd.choice(names[kind])
    if tp is kp.Records:
        return record_batch(attributes=rnd.choice((0, 0, 0, 0x10, 0x20)))
    if isinstance(tp, type):
        if issubclass(tp, bool):
            return rnd.random() < 0.5
        if issubclass(tp, enum.Enum):
            return rnd.choice(list(tp))
        if issubclass(tp, timedelta):
            return timedelta(milliseconds=rnd.choice((0, 10, 500)))
        if issubclass(tp, dt.datetime):
            return dt.datetime.now(dt.timezone.utc)
        if issubclass(tp, uuid.UUID):
            return uuid.uuid4() if rnd.random() < 0.8 else uuid.UUID(int=0)
        if issubclass(tp, float):
            return 0.0
        if issubclass(tp, int):
            return rnd.choice((-1, 0, 0, 1, 2))
        if issubclass(tp, bytes):
            return b"\x00\x01"
        if issubclass(tp, str):
            return rnd.choice(("x", "", "PLAIN"))
    raise TypeError(f"no sample for {tp!r}")


def sample(cls: type, rnd: random.Random, names: dict[str, list[str]], depth: int = 0):
    """An instance of the kio entity ``cls`` with every field filled (see the module docstring)."""
    hints = _hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        values[f.name] = _value(hints[f.name], rnd, names, depth)
    return cls(**values)


def names_in(entity: Any, path: str = "") -> Iterator[tuple[str, str, str]]:
    """Every (field path, kind, name) in a decoded entity that a broker would authorize."""
    if not dataclasses.is_dataclass(entity):
        return
    hints = _hints(type(entity))
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        if value is None:
            continue
        kind = _kind(hints[f.name])
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if kind is not None and isinstance(item, str):
                yield path + f.name, kind, item
            elif dataclasses.is_dataclass(item):
                yield from names_in(item, f"{path}{f.name}.")


def _kind(tp: Any) -> str | None:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType, tuple):
        for arg in typing.get_args(tp):
            if arg is not type(None) and arg is not Ellipsis:
                kind = _kind(arg)
                if kind is not None:
                    return kind
        return None
    return NAME_KINDS.get(tp)
