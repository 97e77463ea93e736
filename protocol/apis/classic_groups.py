"""Classic consumer groups (the pre-KIP-848 protocol): JoinGroup, SyncGroup, Heartbeat,
LeaveGroup, DescribeGroups, ListGroups, DeleteGroups and the committed offsets
(OffsetCommit, OffsetFetch, OffsetDelete).  Each ``_enforce_*`` mirrors one
``KafkaApis.handle*`` method; the shared pattern is in :mod:`protocol.apis.group_common`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from protocol.apis.base import FORWARD, ApiSpec, Decision, RequestInfo
from protocol.apis.generic import inspect_decoded
from protocol.auth_helper import AuthHelper
from protocol.codecs import decode_response, encode, nested, response_class
from protocol.merging import merge_in_request_order, pop_first
from protocol.errors import (
    GROUP_AUTHORIZATION_FAILED,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_ID,
)
from protocol.headers import RequestHeader
from protocol.apis.group_common import DELETE, DESCRIBE, GROUP, INCONSISTENT_GROUP_PROTOCOL, READ, TOPIC, _blank, _describe_family, _distinct, _request_body, _respond, _topic_name

__all__ = ["SPECS"]


def _inspect_join(header: RequestHeader, frame: memoryview) -> RequestInfo:
    info = inspect_decoded(header, frame)
    request = info.decoded
    timeout = getattr(request, "rebalance_timeout", None) or request.session_timeout
    return replace(info, broker_wait_s=max(timeout.total_seconds(), 0.0))


def _enforce_join(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """JoinGroup (docs/authorization.md): GROUP:READ, W 30 (JoinGroupRequest.getErrorResponse)."""
    if not auth.enabled or auth.allowed(GROUP, info.decoded.group_id, READ):
        return FORWARD
    v = header.api_version
    return _respond(11, v, error_code=GROUP_AUTHORIZATION_FAILED, generation_id=-1,
                    protocol_name=None if v >= 7 else "", leader="", member_id="", members=())


def _group_read_whole(key: int) -> Any:
    """Heartbeat (12), LeaveGroup (13): GROUP:READ, W 30 with an otherwise empty response."""

    def enforce(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
        if not auth.enabled or auth.allowed(GROUP, info.decoded.group_id, READ):
            return FORWARD
        return _respond(key, header.api_version, error_code=GROUP_AUTHORIZATION_FAILED)

    return enforce


def _enforce_sync(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """SyncGroup (docs/authorization.md): v5+ missing protocol type/name -> 82 before auth; then GROUP:READ, W 30."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    v = header.api_version
    if v >= 5 and (request.protocol_type is None or request.protocol_name is None):
        return _respond(14, v, error_code=INCONSISTENT_GROUP_PROTOCOL, assignment=b"")
    if auth.allowed(GROUP, request.group_id, READ):
        return FORWARD
    return _respond(14, v, error_code=GROUP_AUTHORIZATION_FAILED, assignment=b"")


def _enforce_offset_commit(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """OffsetCommit (docs/authorization.md): GROUP:READ (W 30 on every partition), then TOPIC:READ filter (R 29)."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    v = header.api_version
    cls = response_class(8, v)
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    by_id = v >= 10

    def error_topic(topic: Any, code: int) -> Any:
        return _blank(topic_cls, name=getattr(topic, "name", ""), topic_id=getattr(topic, "topic_id", None),
                      partitions=tuple(_blank(part_cls, partition_index=p.partition_index, error_code=code)
                                       for p in topic.partitions))

    if not auth.allowed(GROUP, request.group_id, READ):
        return Decision(respond=encode(_blank(cls, topics=tuple(error_topic(t, GROUP_AUTHORIZATION_FAILED)
                                                                  for t in request.topics))))
    names = [(_topic_name(auth, t.topic_id) if by_id else t.name) for t in request.topics]
    allowed = auth.filter(TOPIC, READ, [n for n in names if n is not None])
    errors: dict[int, int] = {}  # request index -> error code
    for i, name in enumerate(names):
        if name is None:
            errors[i] = UNKNOWN_TOPIC_ID
        elif name not in allowed:
            errors[i] = TOPIC_AUTHORIZATION_FAILED
    if not errors:
        return FORWARD
    kept = [t for i, t in enumerate(request.topics) if i not in errors]
    if not kept:
        return Decision(respond=encode(_blank(cls, topics=tuple(
            error_topic(t, errors[i]) for i, t in enumerate(request.topics)))))
    reduced = replace(request, topics=tuple(kept))

    def merge(buf: memoryview | bytes, off: int) -> bytes:
        response = decode_response(8, v, buf, off)
        indexed = list(enumerate(request.topics))
        merged = merge_in_request_order(
            indexed, response.topics,
            denied_entry=lambda it: error_topic(it[1], errors[it[0]]) if it[0] in errors else None,
            same=(lambda e, it: e.topic_id == it[1].topic_id) if by_id else (lambda e, it: e.name == it[1].name))
        return encode(replace(response, topics=merged))

    return Decision(request=_request_body(reduced), merge=merge)


class _FetchGroupPlan:
    """What enforcement decided for one group of an OffsetFetch request."""

    __slots__ = ("group", "denied", "all_topics", "topic_errors", "names")

    def __init__(self, group: Any, denied: bool, all_topics: bool, topic_errors: dict[int, int], names: list[Any]) -> None:
        self.group = group
        self.denied = denied
        self.all_topics = all_topics
        #: request topic index -> error code (29, or 100 for an unresolvable id)
        self.topic_errors = topic_errors
        #: resolved name per request topic (None for ids kgw cannot resolve)
        self.names = names


def _plan_fetch_group(auth: AuthHelper, group_id: str, topics: Any, by_id: bool) -> _FetchGroupPlan:
    if not auth.allowed(GROUP, group_id, DESCRIBE):
        return _FetchGroupPlan(None, True, topics is None, {}, [])
    if topics is None:
        return _FetchGroupPlan(None, False, True, {}, [])
    names = [(_topic_name(auth, t.topic_id) if by_id else t.name) for t in topics]
    allowed = auth.filter(TOPIC, DESCRIBE, [n for n in names if n is not None])
    errors = {}
    for i, name in enumerate(names):
        if name is None:
            errors[i] = UNKNOWN_TOPIC_ID
        elif name not in allowed:
            errors[i] = TOPIC_AUTHORIZATION_FAILED
    return _FetchGroupPlan(None, False, False, errors, names)


def _enforce_offset_fetch(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """OffsetFetch (docs/authorization.md): GROUP:DESCRIBE per group; TOPIC:DESCRIBE filter on named topics (R 29)
    or on the coordinator's answer for "all topics" (F, denials logged)."""
    if not auth.enabled:
        return FORWARD
    v = header.api_version
    if v >= 8:
        return _offset_fetch_batched(auth, v, info.decoded)
    return _offset_fetch_single(auth, v, info.decoded)


def _fetch_partition_error(part_cls: Any, index: int, code: int) -> Any:
    return _blank(part_cls, partition_index=index, committed_offset=-1, committed_leader_epoch=-1,
                  metadata="", error_code=code)


def _filter_all_topics(auth: AuthHelper, topics: Any, by_id: bool) -> tuple[Any, ...]:
    """Kafka's fetchAllOffsetsForGroup filter: TOPIC:DESCRIBE (T/T) on the coordinator's topics."""
    names = [(_topic_name(auth, t.topic_id) if by_id else t.name) for t in topics]
    allowed = auth.filter(TOPIC, DESCRIBE, [n for n in names if n is not None])
    return tuple(t for t, n in zip(topics, names) if n is not None and n in allowed)


def _merge_named_topics(request_topics: Any, plan: _FetchGroupPlan, upstream_topics: Any, topic_cls: Any, part_cls: Any, by_id: bool) -> Any:
    upstream = list(upstream_topics)
    merged = []
    for i, t in enumerate(request_topics):
        code = plan.topic_errors.get(i)
        if code is not None:
            merged.append(_blank(topic_cls, name=getattr(t, "name", ""), topic_id=getattr(t, "topic_id", None),
                                 partitions=tuple(_fetch_partition_error(part_cls, p, code)
                                                  for p in t.partition_indexes)))
        else:
            key = (lambda e, t=t: e.topic_id == t.topic_id) if by_id else (lambda e, t=t: e.name == t.name)
            entry = pop_first(upstream, key)
            if entry is not None:
                merged.append(entry)
    # topics the coordinator returned that were not asked for are dropped (never disclosed unchecked)
    return tuple(merged)


def _offset_fetch_single(auth: AuthHelper, v: int, request: Any) -> Decision:
    cls = response_class(9, v)
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    plan = _plan_fetch_group(auth, request.group_id, request.topics, False)
    if plan.denied:
        if v < 2:  # no top-level error field: 30 on every requested partition
            return Decision(respond=encode(_blank(cls, topics=tuple(
                _blank(topic_cls, name=t.name, partitions=tuple(
                    _fetch_partition_error(part_cls, p, GROUP_AUTHORIZATION_FAILED) for p in t.partition_indexes))
                for t in request.topics or ()))))
        return _respond(9, v, error_code=GROUP_AUTHORIZATION_FAILED, topics=())
    if plan.all_topics:
        def merge_all(buf: memoryview | bytes, off: int) -> bytes:
            response = decode_response(9, v, buf, off)
            if getattr(response, "error_code", 0) != 0:
                return encode(response)
            return encode(replace(response, topics=_filter_all_topics(auth, response.topics, False)))

        return Decision(merge=merge_all)
    if not plan.topic_errors:
        return FORWARD
    kept = tuple(t for i, t in enumerate(request.topics) if i not in plan.topic_errors)
    reduced = replace(request, topics=kept)

    def merge(buf: memoryview | bytes, off: int) -> bytes:
        response = decode_response(9, v, buf, off)
        if getattr(response, "error_code", 0) != 0:
            return encode(response)
        return encode(replace(response, topics=_merge_named_topics(
            request.topics, plan, response.topics, topic_cls, part_cls, False)))

    return Decision(request=_request_body(reduced), merge=merge)


def _offset_fetch_batched(auth: AuthHelper, v: int, request: Any) -> Decision:
    cls = response_class(9, v)
    group_cls = nested(cls, "groups")
    topic_cls = nested(group_cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    by_id = v >= 10
    plans = [_plan_fetch_group(auth, g.group_id, g.topics, by_id) for g in request.groups]
    for g, p in zip(request.groups, plans):
        p.group = g
    if not any(p.denied or p.all_topics or p.topic_errors for p in plans):
        return FORWARD

    def denied_entry(g: Any) -> Any:
        return _blank(group_cls, group_id=g.group_id, error_code=GROUP_AUTHORIZATION_FAILED, topics=())

    forwarded = []
    for p in plans:
        if p.denied:
            continue
        if p.all_topics or not p.topic_errors:
            forwarded.append(p.group)
        else:
            forwarded.append(replace(p.group, topics=tuple(
                t for i, t in enumerate(p.group.topics) if i not in p.topic_errors)))
    if not forwarded:
        return _respond(9, v, groups=tuple(denied_entry(g) for g in request.groups))

    def merge(buf: memoryview | bytes, off: int) -> bytes:
        response = decode_response(9, v, buf, off)
        upstream = list(response.groups)
        merged = []
        for p in plans:
            g = p.group
            if p.denied:
                merged.append(denied_entry(g))
                continue
            entry = pop_first(upstream, lambda e: e.group_id == g.group_id)
            if entry is None:
                continue
            if entry.error_code != 0:
                merged.append(entry)
            elif p.all_topics:
                merged.append(replace(entry, topics=_filter_all_topics(auth, entry.topics, by_id)))
            elif p.topic_errors:
                merged.append(replace(entry, topics=_merge_named_topics(
                    g.topics, p, entry.topics, topic_cls, part_cls, by_id)))
            else:
                merged.append(entry)
        return encode(replace(response, groups=tuple(merged)))

    return Decision(request=_request_body(replace(request, groups=tuple(forwarded))), merge=merge)


def _enforce_list_groups(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """ListGroups (docs/authorization.md): CLUSTER:DESCRIBE (D=false) returns all; else per-group DESCRIBE (D=false) filter."""
    if not auth.enabled or auth.cluster(DESCRIBE, log_if_denied=False):
        return FORWARD
    v = header.api_version

    def merge(buf: memoryview | bytes, off: int) -> bytes:
        response = decode_response(16, v, buf, off)
        kept = tuple(g for g in response.groups if auth.allowed(GROUP, g.group_id, DESCRIBE, log_if_denied=False))
        return encode(replace(response, groups=kept))

    return Decision(merge=merge)


def _enforce_delete_groups(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """DeleteGroups (docs/authorization.md): GROUP:DELETE filter on the distinct groups (refCount 1), R 30."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    v = header.api_version
    groups = list(_distinct(request.groups_names))
    allowed = auth.filter(GROUP, DELETE, _distinct(groups))
    if len(allowed) == len(groups):
        return FORWARD
    cls = response_class(42, v)
    result_cls = nested(cls, "results")

    def denied_entry(g: Any) -> Any:
        return _blank(result_cls, group_id=g, error_code=GROUP_AUTHORIZATION_FAILED)

    kept = [g for g in groups if g in allowed]
    if not kept:
        return Decision(respond=encode(_blank(cls, results=tuple(denied_entry(g) for g in groups))))

    def merge(buf: memoryview | bytes, off: int) -> bytes:
        response = decode_response(42, v, buf, off)
        merged = merge_in_request_order(
            groups, response.results,
            denied_entry=lambda g: None if g in allowed else denied_entry(g), same=lambda e, g: e.group_id == g)
        return encode(replace(response, results=merged))

    return Decision(request=_request_body(replace(request, groups_names=tuple(kept))), merge=merge)


def _enforce_offset_delete(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """OffsetDelete (docs/authorization.md): GROUP:DELETE (W top-level 30), then TOPIC:READ filter (R 29 per partition).
    The coordinator is called even with no topic left (group-level errors win), as in Kafka."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    v = header.api_version
    if not auth.allowed(GROUP, request.group_id, DELETE):
        return _respond(47, v, error_code=GROUP_AUTHORIZATION_FAILED, topics=())
    allowed = auth.filter(TOPIC, READ, [t.name for t in request.topics])
    if all(t.name in allowed for t in request.topics):
        return FORWARD
    cls = response_class(47, v)
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")

    def denied_entry(t: Any) -> Any:
        return _blank(topic_cls, name=t.name, partitions=tuple(
            _blank(part_cls, partition_index=p.partition_index, error_code=TOPIC_AUTHORIZATION_FAILED)
            for p in t.partitions))

    kept = tuple(t for t in request.topics if t.name in allowed)

    def merge(buf: memoryview | bytes, off: int) -> bytes:
        response = decode_response(47, v, buf, off)
        if response.error_code != 0:  # OffsetDeleteResponse.Builder.merge: a top-level error replaces all
            return encode(response)
        merged = merge_in_request_order(
            request.topics, response.topics,
            denied_entry=lambda t: None if t.name in allowed else denied_entry(t), same=lambda e, t: e.name == t.name)
        return encode(replace(response, topics=merged))

    return Decision(request=_request_body(replace(request, topics=kept)), merge=merge)


SPECS = (
    ApiSpec(8, "OffsetCommit", inspect_decoded, enforce=_enforce_offset_commit, versions=(2, 10)),
    ApiSpec(9, "OffsetFetch", inspect_decoded, enforce=_enforce_offset_fetch, versions=(1, 10)),
    ApiSpec(11, "JoinGroup", _inspect_join, enforce=_enforce_join, versions=(0, 9)),
    ApiSpec(12, "Heartbeat", inspect_decoded, enforce=_group_read_whole(12), versions=(0, 4)),
    ApiSpec(13, "LeaveGroup", inspect_decoded, enforce=_group_read_whole(13), versions=(0, 5)),
    ApiSpec(14, "SyncGroup", inspect_decoded, enforce=_enforce_sync, versions=(0, 5)),
    ApiSpec(15, "DescribeGroups", inspect_decoded, enforce=_describe_family(15, "groups", ops_min_version=3), versions=(0, 6)),
    ApiSpec(16, "ListGroups", inspect_decoded, enforce=_enforce_list_groups, versions=(0, 5)),
    ApiSpec(42, "DeleteGroups", inspect_decoded, enforce=_enforce_delete_groups, versions=(0, 2)),
    ApiSpec(47, "OffsetDelete", inspect_decoded, enforce=_enforce_offset_delete, versions=(0, 0)),
)
