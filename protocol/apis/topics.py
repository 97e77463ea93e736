"""Reading topics and partitions: ListOffsets, DeleteRecords, OffsetForLeaderEpoch,
DescribeProducers and DescribeTopicPartitions (KIP-966).  The shared pattern of partial
authorization is described in :mod:`protocol.apis.topic_common`.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
from typing import Any
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i64
from authz.acl import AclOperation
from protocol.apis.base import FORWARD, ApiSpec, Decision, RequestInfo
from protocol.apis.generic import inspect_decoded
from protocol.auth_helper import AuthHelper
from protocol.codecs import decode_response, encode, make, request_class, response_class
from protocol.errors import (
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    TOPIC_AUTHORIZATION_FAILED,
)
from protocol.headers import RequestHeader
from protocol.apis.metadata import _first_of_each_name, _md_learn
from protocol.apis.topic_common import OPS_NOT_REQUESTED, Op, TOPIC, _MSG, _ZERO_TIME, _distinct, _elem, _group, _ordered, _partial, invalid_topic_reason
from protocol.services import LocalServices

__all__ = ["SPECS"]


def _enforce_describe_topic_partitions(auth: AuthHelper, header: RequestHeader, body: memoryview,
                                       info: RequestInfo) -> Decision:
    """DescribeTopicPartitions (docs/authorization.md): TOPIC:DESCRIBE one call per topic (D=true even for all topics);
    topic authorized operations always computed."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    version = header.api_version
    cls = response_class(75, version)
    topic_cls = _elem(cls, "topics")

    def error_topic(error: int, name: str) -> Any:
        return make(topic_cls, error_code=ErrorCode(error), name=name, topic_id=None, is_internal=False,
                    partitions=(), topic_authorized_operations=i32(OPS_NOT_REQUESTED))

    def with_ops(t: Any) -> Any:
        if t.name is None:
            return t
        return dataclasses.replace(t, topic_authorized_operations=i32(auth.authorized_operations(TOPIC, t.name)))

    if request.cursor is not None and request.cursor.partition_index < 0:
        # InvalidRequestException -> DescribeTopicPartitionsRequest.getErrorResponse
        return Decision(respond=encode(make(cls, throttle_time=_ZERO_TIME, next_cursor=None, topics=tuple(
            error_topic(INVALID_REQUEST, t.name) for t in request.topics))))
    if not request.topics:
        # All topics.  Kafka lists the topics the principal may DESCRIBE (D=true) and pages over
        # *those*; forwarded as it is, the broker would page over every topic (kgw's authority)
        # and a page could end on one the client may not see.  So kgw asks for every topic name,
        # authorizes them as Kafka does, and forwards the named form of the request with the
        # allowed names at or after the cursor: the broker pages over exactly them.
        async def then(services: LocalServices) -> Decision:
            listing = await services.upstream.topic_names(0)
            cursor = request.cursor
            start = cursor.topic_name if cursor is not None else ""
            candidates = sorted(n for n in listing.names if n >= start)
            allowed = [n for n in candidates if auth.allowed(TOPIC, n, Op.DESCRIBE)]
            if not allowed:
                return Decision(respond=encode(make(cls, throttle_time=_ZERO_TIME, next_cursor=None, topics=())))
            topic_cls = _elem(request_class(75, version), "topics")
            named = dataclasses.replace(request, topics=tuple(make(topic_cls, name=n) for n in allowed),
                                        cursor=cursor if cursor is not None and cursor.topic_name in allowed else None)
            listed = set(allowed)

            def merge_all(buf: memoryview | bytes, off: int) -> bytes:
                response = decode_response(75, version, buf, off)
                # a topic deleted since the listing is an error entry in the named form, skipped in
                # Kafka's all-topics form; anything not asked for is not the client's
                kept = [t for t in response.topics if t.error_code == 0 and t.name in listed]
                _md_learn(kept, auth.topics)
                return encode(dataclasses.replace(response, topics=tuple(with_ops(t) for t in kept)))

            return Decision(request=encode(named), merge=merge_all)

        return Decision(then=then)

    cursor = request.cursor
    cursor_name = cursor.topic_name if cursor is not None else ""
    names = [n for n in _distinct(t.name for t in request.topics) if n >= cursor_name]
    if (cursor is not None and cursor.topic_name not in names) or (cursor is not None and cursor.partition_index < 0):
        # InvalidRequestException -> DescribeTopicPartitionsRequest.getErrorResponse
        return Decision(respond=encode(make(cls, throttle_time=_ZERO_TIME, next_cursor=None, topics=tuple(
            error_topic(INVALID_REQUEST, t.name) for t in request.topics))))
    allowed = {n for n in sorted(names) if auth.allowed(TOPIC, n, Op.DESCRIBE)}
    denied = {n: [error_topic(TOPIC_AUTHORIZATION_FAILED, n)] for n in names if n not in allowed}
    if not allowed:
        return Decision(respond=encode(make(cls, throttle_time=_ZERO_TIME, next_cursor=None,
                                            topics=_ordered(names, denied, (), lambda t: t.name))))
    # Forward exactly the authorized names (at or after the cursor, each once), never the
    # client's list: names before the cursor were neither authorized nor asked for.
    kept = [t for t in request.topics if t.name in allowed]
    kept = _first_of_each_name(kept)
    new_cursor = cursor if cursor is not None and cursor.topic_name in allowed else None
    new_request = encode(dataclasses.replace(request, topics=tuple(kept), cursor=new_cursor))

    def merge(buf: memoryview | bytes, off: int) -> bytes:
        response = decode_response(75, version, buf, off)
        mine = [t for t in response.topics if t.name in allowed]  # whatever else the upstream sent
        _md_learn(mine, auth.topics)
        upstream = [with_ops(t) for t in mine]
        return encode(dataclasses.replace(response, topics=_ordered(names, denied, upstream, lambda t: t.name)))

    return Decision(request=new_request, merge=merge)


def _filter_topics(auth: AuthHelper, op: AclOperation, api_key: int, version: int, request: Any, name_of: Callable[..., Any], error_entry: Callable[..., Any]) -> Decision:
    """One TOPIC batch filter over ``request.topics`` (refCount = entries per name): FORWARD when
    every name is allowed, else the allowed entries forwarded and ``error_entry(t)`` answered for
    each denied one, merged back in request order."""
    names = [name_of(t) for t in request.topics]
    allowed = auth.filter(TOPIC, op, names)
    if all(n in allowed for n in names):
        return FORWARD
    denied = _group((t for t in request.topics if name_of(t) not in allowed), name_of, error_entry)
    kept = [t for t in request.topics if name_of(t) in allowed]
    return _partial(api_key, version, request, "topics", kept, "topics", names, denied, name_of)


def _enforce_list_offsets(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """ListOffsets (docs/authorization.md): TOPIC:DESCRIBE batch filter (refCount = topic entries); R 29 per partition."""
    if not auth.enabled:
        return FORWARD
    version = header.api_version

    def error_entry(t: Any) -> Any:
        topic_cls = _elem(response_class(2, version), "topics")
        part_cls = _elem(topic_cls, "partitions")
        return topic_cls(name=t.name, partitions=tuple(
            make(part_cls, partition_index=p.partition_index, error_code=ErrorCode(TOPIC_AUTHORIZATION_FAILED),
                 timestamp=i64(-1), offset=i64(-1), leader_epoch=i32(-1)) for p in t.partitions))

    return _filter_topics(auth, Op.DESCRIBE, 2, version, info.decoded, lambda t: t.name, error_entry)


def _enforce_offset_for_leader_epoch(auth: AuthHelper, header: RequestHeader, body: memoryview,
                                     info: RequestInfo) -> Decision:
    """OffsetForLeaderEpoch (docs/authorization.md): CLUSTER:CLUSTER_ACTION (D=false) allows all; else TOPIC:DESCRIBE filter."""
    if not auth.enabled:
        return FORWARD
    if auth.cluster(Op.CLUSTER_ACTION, log_if_denied=False):
        return FORWARD
    version = header.api_version

    def error_entry(t: Any) -> Any:
        topic_cls = _elem(response_class(23, version), "topics")
        part_cls = _elem(topic_cls, "partitions")
        return topic_cls(topic=t.topic, partitions=tuple(
            make(part_cls, partition=p.partition, error_code=ErrorCode(TOPIC_AUTHORIZATION_FAILED),
                 leader_epoch=i32(-1), end_offset=i64(-1)) for p in t.partitions))

    return _filter_topics(auth, Op.DESCRIBE, 23, version, info.decoded, lambda t: t.topic, error_entry)


def _enforce_delete_records(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """DeleteRecords (docs/authorization.md): TOPIC:DELETE batch filter; R 29 per partition, low watermark -1."""
    if not auth.enabled:
        return FORWARD
    version = header.api_version

    def error_entry(t: Any) -> Any:
        topic_cls = _elem(response_class(21, version), "topics")
        part_cls = _elem(topic_cls, "partitions")
        return topic_cls(name=t.name, partitions=tuple(
            part_cls(partition_index=p.partition_index, low_watermark=i64(-1),
                     error_code=ErrorCode(TOPIC_AUTHORIZATION_FAILED)) for p in t.partitions))

    return _filter_topics(auth, Op.DELETE, 21, version, info.decoded, lambda t: t.name, error_entry)


def _enforce_describe_producers(auth: AuthHelper, header: RequestHeader, body: memoryview,
                                info: RequestInfo) -> Decision:
    """DescribeProducers (docs/authorization.md): per topic entry, an invalid name gives 17 (no check), else one
    TOPIC:READ check (T/T, refCount 1); R 29 on each requested partition."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    version = header.api_version
    topic_cls = _elem(response_class(61, version), "topics")
    part_cls = _elem(topic_cls, "partitions")
    errors: list[tuple[int, str | None] | None] = []
    for t in request.topics:
        reason = invalid_topic_reason(t.name)
        if reason is not None:
            errors.append((INVALID_TOPIC_EXCEPTION, reason))
        elif not auth.allowed(TOPIC, t.name, Op.READ):
            errors.append((TOPIC_AUTHORIZATION_FAILED, _MSG[TOPIC_AUTHORIZATION_FAILED]))
        else:
            errors.append(None)
    if all(e is None for e in errors):
        return FORWARD
    denied: dict[str, list[Any]] = {}
    order: list[str] = []
    kept = []
    for t, err in zip(request.topics, errors):
        order.append(t.name)
        if err is None:
            kept.append(t)
            continue
        denied.setdefault(t.name, []).append(topic_cls(name=t.name, partitions=tuple(
            part_cls(partition_index=p, error_code=ErrorCode(err[0]), error_message=err[1], active_producers=())
            for p in t.partition_indexes)))
    # a name both valid-allowed and denied cannot happen: the decision depends on the name only
    return _partial(61, version, request, "topics", kept, "topics", order, denied, lambda e: e.name)


SPECS = (
    ApiSpec(2, "ListOffsets", inspect_decoded, enforce=_enforce_list_offsets, versions=(1, 11)),
    ApiSpec(21, "DeleteRecords", inspect_decoded, enforce=_enforce_delete_records, versions=(0, 2)),
    ApiSpec(23, "OffsetForLeaderEpoch", inspect_decoded, enforce=_enforce_offset_for_leader_epoch, versions=(2, 4)),
    ApiSpec(61, "DescribeProducers", inspect_decoded, enforce=_enforce_describe_producers, versions=(0, 0)),
    ApiSpec(75, "DescribeTopicPartitions", inspect_decoded, enforce=_enforce_describe_topic_partitions, versions=(0, 0)),
)
