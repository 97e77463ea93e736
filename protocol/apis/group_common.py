"""What the group families share: the enforcement pattern, helpers and the describe family.

The families, one module each: :mod:`~protocol.apis.classic_groups`,
:mod:`~protocol.apis.find_coordinator`, :mod:`~protocol.apis.consumer_groups` (KIP-848),
:mod:`~protocol.apis.share_groups` (KIP-932), :mod:`~protocol.apis.streams_groups` (KIP-1071).

Theory of operation
-------------------
Every API here is decoded whole by kio (none carries record batches in its
request; ShareFetch responses do, but they are only re-encoded in the rare
partial-denial case and kio keeps ``records`` as opaque bytes).  Each
``_enforce_*`` function mirrors one ``KafkaApis.handle*`` method of Kafka
4.2-dev: the same resources, operations, log flags, reference counts and call
order, and the same error shapes (the request's ``getErrorResponse`` for
whole-request errors).

Partial authorization follows one pattern: the allowed part is forwarded as a
re-encoded, reduced request; the denied part is answered by kgw; ``merge``
puts both together in request order.  When nothing is allowed and Kafka would
not call its coordinator either, kgw answers alone (``Decision(respond=...)``).
Where Kafka *does* call the coordinator with an empty list (OffsetFetch,
OffsetDelete with every topic denied) kgw forwards the empty list too, so that
group-level errors (NOT_COORDINATOR, GROUP_ID_NOT_FOUND ...) stay Kafka's.

Filters on the upstream response (ListGroups, OffsetFetch "all topics",
ConsumerGroupDescribe topic checks ...) run in ``merge``, on the body after
address rewriting.

Topic ids (OffsetCommit v10, OffsetFetch v10, ShareFetch, ShareAcknowledge)
name topics kgw cannot resolve on its own: :func:`_topic_name` asks the
AuthHelper for an optional ``topic_name(uuid) -> str | None`` resolver.  Without
one, every id is unknown and is answered UNKNOWN_TOPIC_ID (Kafka's answer for
an id its metadata cache lacks), i.e. topic-id requests fail closed.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
import types
import typing
from typing import Any
import uuid
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from kio.schema.errors import ErrorCode
from authz.acl import AclOperation, ResourceType
from protocol.apis.base import FORWARD, Decision, RequestInfo
from protocol.auth_helper import AuthHelper
from protocol.codecs import decode_response, encode, nested, response_class
from protocol.merging import merge_in_request_order
from protocol.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    GROUP_AUTHORIZATION_FAILED,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
)
from protocol.headers import RequestHeader

# Error codes not (yet) in protocol.errors.
INVALID_REQUEST = 42


INCONSISTENT_GROUP_PROTOCOL = 82


#: Errors.message() texts (Kafka's Errors enum) used where Kafka copies them into a response.
_MESSAGES = {
    TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional Id authorization failed.",
}


#: KIP-430 "not requested" value of authorized-operations fields.
OPS_OMITTED = -(2**31)


_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


_LEGAL_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


_ZERO_UUID = uuid.UUID(int=0)


GROUP = ResourceType.GROUP


TOPIC = ResourceType.TOPIC


TXN = ResourceType.TRANSACTIONAL_ID


READ = AclOperation.READ


DESCRIBE = AclOperation.DESCRIBE


DELETE = AclOperation.DELETE




_EPOCH = datetime.fromtimestamp(0, timezone.utc)


def _unwrap(tp: Any) -> Any:
    """(inner type, optional?, sequence?) of a kio field annotation."""
    optional = seq = False
    while True:
        origin = typing.get_origin(tp)
        if origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            optional = optional or len(args) < len(typing.get_args(tp))
            tp = args[0]
        elif origin is tuple:
            return typing.get_args(tp)[0], optional, True
        else:
            return tp, optional, seq


@lru_cache(maxsize=None)
def _field_defaults(cls: Any) -> tuple[tuple[str, object], ...]:
    """Java's default for every field of ``cls`` kio gives no default (zero, "", empty, null)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            continue
        inner, optional, seq = _unwrap(hints[f.name])
        value: object
        if seq:
            value = None if optional else ()
        elif optional:
            value = None
        elif inner is ErrorCode:
            value = ErrorCode.none
        elif isinstance(inner, type) and issubclass(inner, timedelta):
            value = timedelta(0)
        elif isinstance(inner, type) and issubclass(inner, datetime):
            value = _EPOCH  # an int64 timestamp of 0
        elif isinstance(inner, type) and issubclass(inner, float):
            value = 0.0
        elif inner is bool:
            value = False
        elif isinstance(inner, type) and issubclass(inner, bytes):
            value = b""
        elif isinstance(inner, type) and issubclass(inner, str):
            value = ""
        elif inner is uuid.UUID:
            value = _ZERO_UUID
        elif isinstance(inner, type) and issubclass(inner, int):
            value = inner(0)
        elif dataclasses.is_dataclass(inner):
            value = _blank(inner)
        else:  # a kio field type not covered above: fail loudly, not with a wrong default
            raise TypeError(f"no default for {cls.__name__}.{f.name}: {inner!r}")
        out.append((f.name, value))
    return tuple(out)


def _blank(cls: Any, **values: Any) -> Any:
    """An instance of ``cls`` with Java's defaults for fields not given; unknown keys are ignored.
    (Not cached: the values come from requests, a cache of them would grow with what clients send.)"""
    names = cls.__dataclass_fields__
    kwargs = dict(_field_defaults(cls))
    kwargs.update((k, v) for k, v in values.items() if k in names)
    for k, v in kwargs.items():
        if k == "error_code" and isinstance(v, int) and not isinstance(v, ErrorCode):
            kwargs[k] = ErrorCode(v)
    return cls(**kwargs)


def _respond(key: int, version: int, **values: Any) -> Decision:
    return Decision(respond=encode(_blank(response_class(key, version), **values)))


def _request_body(entity: Any) -> bytes:
    return encode(entity)


def _topic_name(auth: AuthHelper, topic_id: Any) -> str | None:
    """The topic name for a topic id, if the gateway can resolve it (see module doc)."""
    resolve = getattr(auth, "topic_name", None)
    if resolve is None or topic_id is None or topic_id == _ZERO_UUID:
        return None
    name: str | None = resolve(topic_id)
    return name


def _is_valid_topic(name: str) -> bool:
    return 0 < len(name) <= 249 and name not in (".", "..") and all(c in _LEGAL_TOPIC_CHARS for c in name)


def _distinct(names: Any) -> dict[str, int]:
    """Names in first-seen order, each with reference count 1 (Kafka's ``.toSet`` / ``.distinct``)."""
    return {n: 1 for n in names}


def _describe_family(key: int, ids_field: str, topics_of: Callable[..., Any] | None = None, denied_topics_message: str | None = None,
                     ops_min_version: int = 0) -> Any:
    """DescribeGroups (15), ConsumerGroupDescribe (69), ShareGroupDescribe (77), StreamsGroupDescribe (89):
    GROUP:DESCRIBE per group (individual calls), R 30; authorized operations (F/F) for groups the
    coordinator described without error; for 69/77/89 a TOPIC:DESCRIBE check over the described
    topics replaces a group using a denied topic by error 29."""

    def enforce(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
        if not auth.enabled:
            return FORWARD
        request = info.decoded
        v = header.api_version
        cls = response_class(key, v)
        group_cls = nested(cls, "groups")
        has_ops = v >= ops_min_version and "authorized_operations" in group_cls.__dataclass_fields__
        include_ops = has_ops and bool(getattr(request, "include_authorized_operations", False))
        ids = list(getattr(request, ids_field))
        allowed = [auth.allowed(GROUP, g, DESCRIBE) for g in ids]

        def denied_entry(g: Any) -> Any:
            return _blank(group_cls, group_id=g, error_code=GROUP_AUTHORIZATION_FAILED, authorized_operations=OPS_OMITTED)

        def finish(groups: list[Any]) -> list[Any]:
            if topics_of is None:
                return groups
            names = _distinct(n for grp in groups for n in topics_of(grp))
            ok = auth.filter(TOPIC, DESCRIBE, names)
            out = []
            for grp in groups:
                if any(n not in ok for n in topics_of(grp)):
                    fields = dict(group_id=grp.group_id, error_code=TOPIC_AUTHORIZATION_FAILED,
                                  error_message=denied_topics_message, members=(), authorized_operations=OPS_OMITTED)
                    if "topology" in group_cls.__dataclass_fields__:
                        fields["topology"] = None
                    out.append(_blank(group_cls, **fields))
                else:
                    out.append(grp)
            return out

        if not any(allowed):
            groups = finish([denied_entry(g) for g in ids])
            return Decision(respond=encode(_blank(cls, groups=tuple(groups))))
        if all(allowed) and not has_ops and topics_of is None:
            return FORWARD
        kept = [g for g, ok in zip(ids, allowed) if ok]
        request_out = None if all(allowed) else _request_body(replace(request, **{ids_field: tuple(kept)}))

        def merge(buf: memoryview | bytes, off: int) -> bytes:
            response = decode_response(key, v, buf, off)
            upstream = list(response.groups)
            if has_ops:
                upstream = [replace(grp, authorized_operations=(
                    auth.authorized_operations(GROUP, grp.group_id) if include_ops and grp.error_code == 0
                    else OPS_OMITTED)) for grp in upstream]
            merged = merge_in_request_order(
                zip(ids, allowed), upstream,
                denied_entry=lambda ga: None if ga[1] else denied_entry(ga[0]), same=lambda e, ga: e.group_id == ga[0])
            return encode(replace(response, groups=tuple(finish(list(merged)))))

        return Decision(request=request_out, merge=merge)

    return enforce


def _any_topic_denied(auth: AuthHelper, names: Any) -> bool:
    """TOPIC:DESCRIBE on every distinct subscribed name (none: nothing to check)."""
    if not names:
        return False
    wanted = _distinct(names)
    return len(auth.filter(TOPIC, DESCRIBE, wanted)) < len(wanted)
