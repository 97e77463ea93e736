"""The resources a request touches, found from kio's phantom field types.

Theory of operation
-------------------
kio types resource-naming fields with phantom string types (``TopicName``,
``GroupId``, ``TransactionalId``).  At run time they are plain ``str``, but the
dataclass annotations keep them, so for each request class kgw computes once a
*plan*: which fields name a resource, and which nested entities to descend
into.  Walking a decoded request with its plan lists every (kind, name) the
request touches, with how many times each name occurs (Kafka's
``resourceReferenceCount``).  This is the generic fallback: API modules with a
cheaper or more precise answer (Produce, whose body holds record batches)
provide their own.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any
from collections import Counter
from functools import lru_cache

from kio.schema.types import GroupId, TopicName, TransactionalId

__all__ = ["ResourceKind", "TouchedResources", "touched_resources"]


class ResourceKind:
    TOPIC = "TOPIC"
    GROUP = "GROUP"
    TRANSACTIONAL_ID = "TRANSACTIONAL_ID"


_PHANTOM_KINDS = {
    TopicName: ResourceKind.TOPIC,
    GroupId: ResourceKind.GROUP,
    TransactionalId: ResourceKind.TRANSACTIONAL_ID,
}

# A resource and how many request entries name it.
TouchedResources = dict[tuple[str, str], int]


def _unwrap(tp: object) -> tuple[object, bool]:
    """Strip Optional[...] and tuple[..., ...]; return (inner type, is_sequence)."""
    seq = False
    while True:
        origin = typing.get_origin(tp)
        if origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            tp = args[0] if len(args) == 1 else object
        elif origin is tuple:
            tp = typing.get_args(tp)[0]
            seq = True
        else:
            return tp, seq


@lru_cache(maxsize=None)
def _plan(cls: Any) -> tuple[tuple[str, str | None, type | None, bool], ...]:
    """For each relevant field: (name, resource kind or None, nested class or None, is_sequence)."""
    hints = typing.get_type_hints(cls)
    plan: list[tuple[str, str | None, type | None, bool]] = []
    for f in dataclasses.fields(cls):
        inner, seq = _unwrap(hints[f.name])
        if inner in _PHANTOM_KINDS:
            plan.append((f.name, _PHANTOM_KINDS[inner], None, seq))
        elif isinstance(inner, type) and dataclasses.is_dataclass(inner) and _plan(inner):
            plan.append((f.name, None, inner, seq))
    return tuple(plan)


def touched_resources(entity: object) -> TouchedResources:
    """List every (kind, name) a decoded kio entity names, with reference counts."""
    counts: Counter[tuple[str, str]] = Counter()
    _walk(entity, counts)
    return dict(counts)


def _walk(entity: Any, counts: Counter[tuple[str, str]]) -> None:
    for name, kind, nested, seq in _plan(entity.__class__):
        value = getattr(entity, name)
        if value is None:
            continue
        items = value if seq else (value,)
        if kind is not None:
            for item in items:
                if item is not None:
                    counts[(kind, item)] += 1
        else:
            for item in items:
                if item is not None:
                    _walk(item, counts)
