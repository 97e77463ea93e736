"""What the topic families share: helpers for partial authorization and topic names.

Theory of operation
-------------------
Every enforcer here follows the broker's request handler for its API
(``KafkaApis``, ``ControllerApis`` or ``DescribeTopicPartitionsRequestHandler``
at the Kafka 4.2-dev baseline): the same checks, in the same order,
with the same log flags and reference counts, and the same error entries.

Partial authorization.  The allowed part of a request is re-encoded with kio
(``dataclasses.replace`` + ``encode``; none of these APIs carries record
batches) and forwarded; the denied part is answered by kgw and merged back
into the upstream response **in request order** (upstream entries kgw did not
ask for are appended).  When nothing is allowed nothing goes upstream
(``Decision(respond=...)``).  Cluster-level denials that Kafka throws become
the request's own error response (``getErrorResponse``), built here.

The families, one module each: :mod:`~protocol.apis.metadata` (Metadata),
:mod:`~protocol.apis.topics` (reading topics and partitions),
:mod:`~protocol.apis.topic_admin` (creating and deleting topics and partitions),
:mod:`~protocol.apis.cluster` (DescribeCluster, log dirs, replicas and reassignments).
"""

from __future__ import annotations
import dataclasses
from datetime import timedelta
from typing import Any, Callable, Iterable, Sequence
from uuid import UUID
from authz.acl import AclOperation, ResourceType
from protocol.apis.base import Decision
from protocol.codecs import decode_response, encode, make, nested, response_class
from protocol.errors import (
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_ID,
)

TOPIC = ResourceType.TOPIC


CLUSTER = ResourceType.CLUSTER


Op = AclOperation


_ZERO_UUID = UUID(int=0)


#: the schema default of every ``*_authorized_operations`` field (Int.MinValue)
OPS_NOT_REQUESTED = -(2**31)


INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


_ZERO_TIME = timedelta(0)


#: Kafka's default texts (``Errors.message()``), used where Kafka builds ``new ApiError(error)``
_MSG = {
    TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    UNKNOWN_TOPIC_ID: "This server does not host this topic ID.",
}


_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def invalid_topic_reason(name: str) -> str | None:
    """Kafka's ``Topic.validate`` message for an illegal topic name, or None when it is legal."""
    if name == "":
        reason = "the empty string is not allowed"
    elif name in (".", ".."):
        reason = f"'{name}' is not allowed"
    elif len(name) > 249:
        reason = f"the length of '{name}' is longer than the max allowed length 249"
    elif not set(name) <= _TOPIC_CHARS:
        reason = f"'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
    else:
        return None
    return f"Topic name is invalid: {reason}"


#: the entity class of a (possibly nullable) array field: codecs' lookup, cached per class and
#: field (every authorized Metadata request asks for its response's topic class)
_elem = nested


def _ordered(order: Iterable[str], denied: dict[str, list[Any]], upstream: Sequence[Any], key: Callable[[Any], Any]) -> tuple[Any, ...]:
    """Merge in request order: a denied key takes its next kgw-built entry, an allowed one the next
    upstream entry with that key; upstream entries nobody claimed are appended."""
    pool = list(upstream)
    queues = {k: list(v) for k, v in denied.items()}
    out = []
    for k in order:
        if k in queues:
            if queues[k]:
                out.append(queues[k].pop(0))
            continue
        for i, entry in enumerate(pool):
            if key(entry) == k:
                out.append(pool.pop(i))
                break
    out.extend(pool)
    return tuple(out)


def _partial(api_key: int, version: int, request: Any, req_field: str, kept: Sequence[Any], resp_field: str,
             order: Sequence[Any], denied: dict[str, list[Any]], key: Callable[[Any], Any],
             post: Callable[[Any], Any] | None = None, local_fields: dict[Any, Any] | None = None) -> Decision:
    """Forward ``request`` with ``req_field`` = ``kept`` and merge ``denied`` back in request order;
    answer locally when nothing is kept.  ``post`` maps each upstream entry before merging."""
    cls = response_class(api_key, version)
    if not kept:
        entries = _ordered(order, denied, (), key)
        return Decision(respond=encode(make(cls, throttle_time=_ZERO_TIME, **{resp_field: entries},
                                            **(local_fields or {}))))
    new_request = encode(dataclasses.replace(request, **{req_field: tuple(kept)}))

    def merge(buf: memoryview | bytes, off: int) -> bytes:
        response = decode_response(api_key, version, buf, off)
        upstream = getattr(response, resp_field)
        if post is not None:
            upstream = [post(e) for e in upstream]
        return encode(dataclasses.replace(response, **{resp_field: _ordered(order, denied, upstream, key)}))

    return Decision(request=new_request, merge=merge)


def _group(items: Iterable[Any], name: Callable[[Any], str], entry: Callable[[Any], Any]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for item in items:
        out.setdefault(name(item), []).append(entry(item))
    return out


def _distinct(names: Iterable[str]) -> dict[str, int]:
    """Distinct names in first-occurrence order, each with reference count 1 (Kafka filters a Set)."""
    return dict.fromkeys(names, 1)


def _cluster_message(api: str, op: AclOperation) -> str:
    # Kafka: ClusterAuthorizationException(s"Request $request needs $operation permission.")
    return f"Request {api} needs {op.name} permission."
