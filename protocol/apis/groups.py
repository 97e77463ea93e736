"""Consumer-group family: inspection (JoinGroup waits) and enforcement (fact sheet §1.1).

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

import dataclasses
import types
import typing
import uuid
from dataclasses import replace
from datetime import timedelta
from functools import lru_cache

from kio.schema.errors import ErrorCode

from authz.acl import AclOperation, ResourceType
from protocol.apis.base import FORWARD, ApiSpec, Decision, RequestInfo
from protocol.apis.generic import inspect_decoded
from protocol.auth_helper import AuthHelper
from protocol.codecs import decode_response, encode, nested, response_class
from protocol.merging import merge_in_request_order, pop_first
from protocol.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    GROUP_AUTHORIZATION_FAILED,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_ID,
)
from protocol.headers import RequestHeader

__all__ = ["SPECS"]

# Error codes not (yet) in protocol.errors.
INVALID_REQUEST = 42
INCONSISTENT_GROUP_PROTOCOL = 82
STREAMS_INVALID_TOPOLOGY = 130

#: Errors.message() texts (Kafka's Errors enum) used where Kafka copies them into a response.
_MESSAGES = {
    TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
    CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED: "Transactional Id authorization failed.",
}
_DESCRIBED_TOPICS_DENIED = "The group has described topic(s) that the client is not authorized to describe."
_STREAMS_TOPICS_DENIED = "The described group uses topics that the client is not authorized to describe."

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

# FindCoordinator key types
_KEY_GROUP, _KEY_TRANSACTION, _KEY_SHARE = 0, 1, 2


# ----------------------------------------------------------------------------- building responses


def _unwrap(tp):
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
def _field_defaults(cls: type) -> tuple[tuple[str, object], ...]:
    """Java's default for every field of ``cls`` kio gives no default (zero, "", empty, null)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            continue
        inner, optional, seq = _unwrap(hints[f.name])
        if seq:
            value = None if optional else ()
        elif optional:
            value = None
        elif inner is ErrorCode:
            value = ErrorCode.none
        elif isinstance(inner, type) and issubclass(inner, timedelta):
            value = timedelta(0)
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
        else:  # pragma: no cover - every kio field type is covered above
            raise TypeError(f"no default for {cls.__name__}.{f.name}: {inner!r}")
        out.append((f.name, value))
    return tuple(out)


@lru_cache(maxsize=None)
def _blank(cls: type, **values):
    """An instance of ``cls`` with Java's defaults for fields not given; unknown keys are ignored."""
    names = cls.__dataclass_fields__
    kwargs = dict(_field_defaults(cls))
    kwargs.update((k, v) for k, v in values.items() if k in names)
    for k, v in kwargs.items():
        if k == "error_code" and isinstance(v, int) and not isinstance(v, ErrorCode):
            kwargs[k] = ErrorCode(v)
    return cls(**kwargs)


def _respond(key: int, version: int, **values) -> Decision:
    return Decision(respond=encode(_blank(response_class(key, version), **values)))


def _request_body(entity) -> bytes:
    return encode(entity)


def _topic_name(auth: AuthHelper, topic_id) -> str | None:
    """The topic name for a topic id, if the gateway can resolve it (see module doc)."""
    resolve = getattr(auth, "topic_name", None)
    if resolve is None or topic_id is None or topic_id == _ZERO_UUID:
        return None
    return resolve(topic_id)


def _is_valid_topic(name: str) -> bool:
    return 0 < len(name) <= 249 and name not in (".", "..") and all(c in _LEGAL_TOPIC_CHARS for c in name)


def _distinct(names) -> dict[str, int]:
    """Names in first-seen order, each with reference count 1 (Kafka's ``.toSet`` / ``.distinct``)."""
    return {n: 1 for n in names}


# ----------------------------------------------------------------------------- JoinGroup (11) and single-group APIs


def _inspect_join(header: RequestHeader, frame: memoryview) -> RequestInfo:
    info = inspect_decoded(header, frame)
    request = info.decoded
    timeout = getattr(request, "rebalance_timeout", None) or request.session_timeout
    return replace(info, broker_wait_s=max(timeout.total_seconds(), 0.0))


def _enforce_join(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """§1.1 JoinGroup: GROUP:READ, W 30 (JoinGroupRequest.getErrorResponse)."""
    if not auth.enabled or auth.allowed(GROUP, info.decoded.group_id, READ):
        return FORWARD
    v = header.api_version
    return _respond(11, v, error_code=GROUP_AUTHORIZATION_FAILED, generation_id=-1,
                    protocol_name=None if v >= 7 else "", leader="", member_id="", members=())


def _group_read_whole(key: int):
    """Heartbeat (12), LeaveGroup (13): GROUP:READ, W 30 with an otherwise empty response."""

    def enforce(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
        if not auth.enabled or auth.allowed(GROUP, info.decoded.group_id, READ):
            return FORWARD
        return _respond(key, header.api_version, error_code=GROUP_AUTHORIZATION_FAILED)

    return enforce


def _enforce_sync(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """§1.1 SyncGroup: v5+ missing protocol type/name -> 82 before auth; then GROUP:READ, W 30."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    v = header.api_version
    if v >= 5 and (request.protocol_type is None or request.protocol_name is None):
        return _respond(14, v, error_code=INCONSISTENT_GROUP_PROTOCOL, assignment=b"")
    if auth.allowed(GROUP, request.group_id, READ):
        return FORWARD
    return _respond(14, v, error_code=GROUP_AUTHORIZATION_FAILED, assignment=b"")


# ----------------------------------------------------------------------------- OffsetCommit (8)


def _enforce_offset_commit(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """§1.1 OffsetCommit: GROUP:READ (W 30 on every partition), then TOPIC:READ filter (R 29)."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    v = header.api_version
    cls = response_class(8, v)
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    by_id = v >= 10

    def error_topic(topic, code: int):
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

    def merge(buf, off: int) -> bytes:
        response = decode_response(8, v, buf, off)
        indexed = list(enumerate(request.topics))
        merged = merge_in_request_order(
            indexed, response.topics,
            denied_entry=lambda it: error_topic(it[1], errors[it[0]]) if it[0] in errors else None,
            same=(lambda e, it: e.topic_id == it[1].topic_id) if by_id else (lambda e, it: e.name == it[1].name))
        return encode(replace(response, topics=merged))

    return Decision(request=_request_body(reduced), merge=merge)


# ----------------------------------------------------------------------------- OffsetFetch (9)


class _FetchGroupPlan:
    """What enforcement decided for one group of an OffsetFetch request."""

    __slots__ = ("group", "denied", "all_topics", "topic_errors", "names")

    def __init__(self, group, denied: bool, all_topics: bool, topic_errors: dict[int, int], names: list):
        self.group = group
        self.denied = denied
        self.all_topics = all_topics
        #: request topic index -> error code (29, or 100 for an unresolvable id)
        self.topic_errors = topic_errors
        #: resolved name per request topic (None for ids kgw cannot resolve)
        self.names = names


def _plan_fetch_group(auth: AuthHelper, group_id: str, topics, by_id: bool) -> _FetchGroupPlan:
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
    """§1.1 OffsetFetch: GROUP:DESCRIBE per group; TOPIC:DESCRIBE filter on named topics (R 29)
    or on the coordinator's answer for "all topics" (F, denials logged)."""
    if not auth.enabled:
        return FORWARD
    v = header.api_version
    if v >= 8:
        return _offset_fetch_batched(auth, v, info.decoded)
    return _offset_fetch_single(auth, v, info.decoded)


def _fetch_partition_error(part_cls, index: int, code: int):
    return _blank(part_cls, partition_index=index, committed_offset=-1, committed_leader_epoch=-1,
                  metadata="", error_code=code)


def _filter_all_topics(auth: AuthHelper, topics, by_id: bool) -> tuple:
    """Kafka's fetchAllOffsetsForGroup filter: TOPIC:DESCRIBE (T/T) on the coordinator's topics."""
    names = [(_topic_name(auth, t.topic_id) if by_id else t.name) for t in topics]
    allowed = auth.filter(TOPIC, DESCRIBE, [n for n in names if n is not None])
    return tuple(t for t, n in zip(topics, names) if n is not None and n in allowed)


def _merge_named_topics(request_topics, plan: _FetchGroupPlan, upstream_topics, topic_cls, part_cls, by_id: bool):
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


def _offset_fetch_single(auth: AuthHelper, v: int, request) -> Decision:
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
        def merge_all(buf, off: int) -> bytes:
            response = decode_response(9, v, buf, off)
            if getattr(response, "error_code", 0) != 0:
                return encode(response)
            return encode(replace(response, topics=_filter_all_topics(auth, response.topics, False)))

        return Decision(merge=merge_all)
    if not plan.topic_errors:
        return FORWARD
    kept = tuple(t for i, t in enumerate(request.topics) if i not in plan.topic_errors)
    reduced = replace(request, topics=kept)

    def merge(buf, off: int) -> bytes:
        response = decode_response(9, v, buf, off)
        if getattr(response, "error_code", 0) != 0:
            return encode(response)
        return encode(replace(response, topics=_merge_named_topics(
            request.topics, plan, response.topics, topic_cls, part_cls, False)))

    return Decision(request=_request_body(reduced), merge=merge)


def _offset_fetch_batched(auth: AuthHelper, v: int, request) -> Decision:
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

    def denied_entry(g):
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

    def merge(buf, off: int) -> bytes:
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


# ----------------------------------------------------------------------------- FindCoordinator (10)


def _coordinator_check(auth: AuthHelper, key_type: int, key: str) -> int:
    """Kafka's getCoordinator auth part: the error code, 0 if allowed or not checked."""
    if key_type == _KEY_GROUP:
        return 0 if auth.allowed(GROUP, key, DESCRIBE) else GROUP_AUTHORIZATION_FAILED
    if key_type == _KEY_TRANSACTION:
        return 0 if auth.allowed(TXN, key, DESCRIBE) else TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    return 0


def _enforce_find_coordinator(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """§1.1 FindCoordinator: GROUP:DESCRIBE / TRANSACTIONAL_ID:DESCRIBE on the key(s);
    SHARE keys (v6+) CLUSTER:CLUSTER_ACTION, thrown: every key 31."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    v = header.api_version
    key_type = getattr(request, "key_type", _KEY_GROUP)
    if v < 4:
        code = _coordinator_check(auth, key_type, request.key)
        if code == 0:
            return FORWARD
        # sendErrorResponseMaybeThrottle -> prepareOldResponse(error, Node.noNode)
        return _respond(10, v, error_code=code, error_message=_MESSAGES[code], node_id=-1, host="", port=-1)
    cls = response_class(10, v)
    coord_cls = nested(cls, "coordinators")
    keys = list(request.coordinator_keys)
    if key_type == _KEY_SHARE and v >= 6:
        for _ in keys:
            if not auth.cluster(AclOperation.CLUSTER_ACTION):
                return Decision(respond=encode(_blank(cls, coordinators=tuple(
                    _blank(coord_cls, key=k, node_id=-1, host="", port=-1, error_code=CLUSTER_AUTHORIZATION_FAILED,
                           error_message=_MESSAGES[CLUSTER_AUTHORIZATION_FAILED]) for k in keys))))
        return FORWARD
    codes = [_coordinator_check(auth, key_type, k) for k in keys]
    if not any(codes):
        return FORWARD

    def denied_entry(k, code):
        return _blank(coord_cls, key=k, node_id=-1, host="", port=-1, error_code=code, error_message="")

    kept = [k for k, c in zip(keys, codes) if c == 0]
    if not kept:
        return Decision(respond=encode(_blank(cls, coordinators=tuple(
            denied_entry(k, c) for k, c in zip(keys, codes)))))

    def merge(buf, off: int) -> bytes:
        response = decode_response(10, v, buf, off)
        merged = merge_in_request_order(
            zip(keys, codes), response.coordinators,
            denied_entry=lambda kc: denied_entry(*kc) if kc[1] else None, same=lambda e, kc: e.key == kc[0])
        return encode(replace(response, coordinators=merged))

    return Decision(request=_request_body(replace(request, coordinator_keys=tuple(kept))), merge=merge)


# ----------------------------------------------------------------------------- DescribeGroups (15) and the *GroupDescribe APIs


def _topics_of_consumer_group(group, with_target: bool):
    for m in group.members or ():
        assignments = (m.assignment, m.target_assignment) if with_target else (m.assignment,)
        for a in assignments:
            if a is None:
                continue
            for tp in a.topic_partitions or ():
                yield tp.topic_name


def _topics_of_streams_group(group):
    topology = group.topology
    if topology is None:
        return
    for s in topology.subtopologies or ():
        yield from s.source_topics or ()
        yield from s.repartition_sink_topics or ()
        for t in s.repartition_source_topics or ():
            yield t.name
        for t in s.state_changelog_topics or ():
            yield t.name


def _describe_family(key: int, ids_field: str, topics_of=None, denied_topics_message: str | None = None,
                     ops_min_version: int = 0):
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

        def denied_entry(g):
            return _blank(group_cls, group_id=g, error_code=GROUP_AUTHORIZATION_FAILED, authorized_operations=OPS_OMITTED)

        def finish(groups: list) -> list:
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

        def merge(buf, off: int) -> bytes:
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


# ----------------------------------------------------------------------------- ListGroups (16)


def _enforce_list_groups(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """§1.1 ListGroups: CLUSTER:DESCRIBE (D=false) returns all; else per-group DESCRIBE (D=false) filter."""
    if not auth.enabled or auth.cluster(DESCRIBE, log_if_denied=False):
        return FORWARD
    v = header.api_version

    def merge(buf, off: int) -> bytes:
        response = decode_response(16, v, buf, off)
        kept = tuple(g for g in response.groups if auth.allowed(GROUP, g.group_id, DESCRIBE, log_if_denied=False))
        return encode(replace(response, groups=kept))

    return Decision(merge=merge)


# ----------------------------------------------------------------------------- DeleteGroups (42)


def _enforce_delete_groups(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """§1.1 DeleteGroups: GROUP:DELETE filter on the distinct groups (refCount 1), R 30."""
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

    def denied_entry(g):
        return _blank(result_cls, group_id=g, error_code=GROUP_AUTHORIZATION_FAILED)

    kept = [g for g in groups if g in allowed]
    if not kept:
        return Decision(respond=encode(_blank(cls, results=tuple(denied_entry(g) for g in groups))))

    def merge(buf, off: int) -> bytes:
        response = decode_response(42, v, buf, off)
        merged = merge_in_request_order(
            groups, response.results,
            denied_entry=lambda g: None if g in allowed else denied_entry(g), same=lambda e, g: e.group_id == g)
        return encode(replace(response, results=merged))

    return Decision(request=_request_body(replace(request, groups_names=tuple(kept))), merge=merge)


# ----------------------------------------------------------------------------- OffsetDelete (47)


def _enforce_offset_delete(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """§1.1 OffsetDelete: GROUP:DELETE (W top-level 30), then TOPIC:READ filter (R 29 per partition).
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

    def denied_entry(t):
        return _blank(topic_cls, name=t.name, partitions=tuple(
            _blank(part_cls, partition_index=p.partition_index, error_code=TOPIC_AUTHORIZATION_FAILED)
            for p in t.partitions))

    kept = tuple(t for t in request.topics if t.name in allowed)

    def merge(buf, off: int) -> bytes:
        response = decode_response(47, v, buf, off)
        if response.error_code != 0:  # OffsetDeleteResponse.Builder.merge: a top-level error replaces all
            return encode(response)
        merged = merge_in_request_order(
            request.topics, response.topics,
            denied_entry=lambda t: None if t.name in allowed else denied_entry(t), same=lambda e, t: e.name == t.name)
        return encode(replace(response, topics=merged))

    return Decision(request=_request_body(replace(request, topics=kept)), merge=merge)


# ----------------------------------------------------------------------------- group heartbeats (68, 76, 88)


def _any_topic_denied(auth: AuthHelper, names) -> bool:
    """TOPIC:DESCRIBE on every distinct subscribed name (none: nothing to check)."""
    if not names:
        return False
    wanted = _distinct(names)
    return len(auth.filter(TOPIC, DESCRIBE, wanted)) < len(wanted)


def _enforce_consumer_heartbeat(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """§1.1 ConsumerGroupHeartbeat: GROUP:READ (W 30); non-empty SubscribedTopicNames: TOPIC:DESCRIBE
    on every distinct name, any denied -> W 29."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    v = header.api_version
    if not auth.allowed(GROUP, request.group_id, READ):
        return _respond(68, v, error_code=GROUP_AUTHORIZATION_FAILED)
    if _any_topic_denied(auth, request.subscribed_topic_names):
        return _respond(68, v, error_code=TOPIC_AUTHORIZATION_FAILED)
    return FORWARD


def _enforce_share_heartbeat(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """§1.1 ShareGroupHeartbeat: GROUP:READ (W 30); invalid member id -> 42 (after auth);
    TOPIC:DESCRIBE on every subscribed name, any denied -> W 29."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    v = header.api_version
    if not auth.allowed(GROUP, request.group_id, READ):
        return _respond(76, v, error_code=GROUP_AUTHORIZATION_FAILED)
    if not request.member_id or len(request.member_id) > 36:
        return _respond(76, v, error_code=INVALID_REQUEST, error_message="Invalid member id in the request.")
    if _any_topic_denied(auth, request.subscribed_topic_names):
        return _respond(76, v, error_code=TOPIC_AUTHORIZATION_FAILED)
    return FORWARD


def _enforce_streams_heartbeat(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """§1.1 StreamsGroupHeartbeat: GROUP:READ (W 30); topology topics: internal or invalid -> 130;
    TOPIC:DESCRIBE on all of them, any denied -> W 29.  (The CREATE check on internal topics the
    coordinator wants created cannot be made by kgw; see the report.)"""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    v = header.api_version
    if not auth.allowed(GROUP, request.group_id, READ):
        return _respond(88, v, error_code=GROUP_AUTHORIZATION_FAILED)
    topology = request.topology
    if topology is None:
        return FORWARD
    required: dict[str, int] = {}
    for s in topology.subtopologies or ():
        for n in (*(s.source_topics or ()), *(s.repartition_sink_topics or ()),
                  *(t.name for t in s.repartition_source_topics or ()),
                  *(t.name for t in s.state_changelog_topics or ())):
            required.setdefault(n, 1)
    prohibited = [n for n in required if n in _INTERNAL_TOPICS]
    if prohibited:
        return _respond(88, v, error_code=STREAMS_INVALID_TOPOLOGY, error_message=(
            f"Use of Kafka internal topics {','.join(prohibited)} in a Kafka Streams topology is prohibited."))
    invalid = [n for n in required if not _is_valid_topic(n)]
    if invalid:
        return _respond(88, v, error_code=STREAMS_INVALID_TOPOLOGY,
                        error_message=f"Topic names {','.join(invalid)} are not valid topic names.")
    if required and len(auth.filter(TOPIC, DESCRIBE, required)) < len(required):
        return _respond(88, v, error_code=TOPIC_AUTHORIZATION_FAILED)
    return FORWARD


# ----------------------------------------------------------------------------- ShareFetch (78), ShareAcknowledge (79)


def _share_data_plane(key: int):
    """ShareFetch / ShareAcknowledge: GROUP:READ (W 30); TOPIC:READ filter over the request's topic
    ids (R 29 per partition; ids kgw cannot resolve -> 100).  Share-session partitions not named in
    the request cannot be re-authorized by kgw (see the report)."""

    def enforce(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
        if not auth.enabled:
            return FORWARD
        request = info.decoded
        v = header.api_version
        if request.group_id is None or not auth.allowed(GROUP, request.group_id, READ):
            return _respond(key, v, error_code=GROUP_AUTHORIZATION_FAILED)
        topics = list(request.topics or ())
        if not topics:
            return FORWARD
        names = [_topic_name(auth, t.topic_id) for t in topics]
        counts: dict[str, int] = {}
        for t, n in zip(topics, names):
            if n is not None:
                counts[n] = counts.get(n, 0) + len(t.partitions)
        allowed = auth.filter(TOPIC, READ, counts)
        errors = {i: (UNKNOWN_TOPIC_ID if n is None else TOPIC_AUTHORIZATION_FAILED)
                  for i, n in enumerate(names) if n is None or n not in allowed}
        if not errors:
            return FORWARD
        cls = response_class(key, v)
        topic_cls = nested(cls, "responses")
        part_cls = nested(topic_cls, "partitions")
        leader_cls = nested(part_cls, "current_leader")

        def denied_entry(i):
            t = topics[i]
            code = errors[i]
            return _blank(topic_cls, topic_id=t.topic_id, partitions=tuple(
                _blank(part_cls, partition_index=p.partition_index, error_code=code,
                       acknowledge_error_code=code if getattr(p, "acknowledgement_batches", None) else 0,
                       current_leader=_blank(leader_cls, leader_id=-1, leader_epoch=-1), records=b"")
                for p in t.partitions))

        kept = tuple(t for i, t in enumerate(topics) if i not in errors)

        def merge(buf, off: int) -> bytes:
            response = decode_response(key, v, buf, off)
            if response.error_code != 0:
                return encode(response)
            merged = merge_in_request_order(
                enumerate(topics), response.responses,
                denied_entry=lambda it: denied_entry(it[0]) if it[0] in errors else None,
                same=lambda e, it: e.topic_id == it[1].topic_id)
            return encode(replace(response, responses=merged))

        if not kept and key == 79:
            return Decision(respond=encode(_blank(cls, responses=tuple(denied_entry(i) for i in range(len(topics))))))
        # ShareFetch: the session (epoch, forgotten topics) must still reach the broker, so the reduced
        # request is forwarded even when no named topic is left.
        return Decision(request=_request_body(replace(request, topics=kept)), merge=merge)

    return enforce


# ----------------------------------------------------------------------------- share-group offsets (90, 91, 92)


def _enforce_describe_share_offsets(auth: AuthHelper, header: RequestHeader, body: memoryview,
                                    info: RequestInfo) -> Decision:
    """§1.1 DescribeShareGroupOffsets: GROUP:DESCRIBE per group (R 30); named topics TOPIC:DESCRIBE
    (R 29 per partition, with message); all topics (null): F on the coordinator's answer."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    v = header.api_version
    cls = response_class(90, v)
    group_cls = nested(cls, "groups")
    topic_cls = nested(group_cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    plans = []  # (group, denied, all_topics, denied topic indexes)
    for g in request.groups:
        if not auth.allowed(GROUP, g.group_id, DESCRIBE):
            plans.append((g, True, False, set()))
        elif g.topics is None:
            plans.append((g, False, True, set()))
        elif not g.topics:
            plans.append((g, False, False, set()))
        else:
            ok = auth.filter(TOPIC, DESCRIBE, [t.topic_name for t in g.topics])
            plans.append((g, False, False, {i for i, t in enumerate(g.topics) if t.topic_name not in ok}))
    if not any(d or a or bad for _, d, a, bad in plans):
        return FORWARD

    def denied_group(g):
        return _blank(group_cls, group_id=g.group_id, error_code=GROUP_AUTHORIZATION_FAILED, topics=())

    def denied_topic(t):
        return _blank(topic_cls, topic_name=t.topic_name, topic_id=_ZERO_UUID, partitions=tuple(
            _blank(part_cls, partition_index=p, start_offset=-1, leader_epoch=-1, lag=-1,
                   error_code=TOPIC_AUTHORIZATION_FAILED, error_message=_MESSAGES[TOPIC_AUTHORIZATION_FAILED])
            for p in t.partitions))

    forwarded = [g if not bad else replace(g, topics=tuple(t for i, t in enumerate(g.topics) if i not in bad))
                 for g, d, _a, bad in plans if not d]
    if not forwarded:
        return _respond(90, v, groups=tuple(denied_group(g) for g, *_ in plans))

    def merge(buf, off: int) -> bytes:
        response = decode_response(90, v, buf, off)
        upstream = list(response.groups)
        merged = []
        for g, denied, all_topics, bad in plans:
            if denied:
                merged.append(denied_group(g))
                continue
            entry = pop_first(upstream, lambda e, g=g: e.group_id == g.group_id)
            if entry is None:
                continue
            if all_topics:
                ok = auth.filter(TOPIC, DESCRIBE, [t.topic_name for t in entry.topics])
                merged.append(replace(entry, topics=tuple(t for t in entry.topics if t.topic_name in ok)))
            elif bad and entry.error_code == 0:
                ups = list(entry.topics)
                topics = []
                for i, t in enumerate(g.topics):
                    if i in bad:
                        topics.append(denied_topic(t))
                    else:
                        e = pop_first(ups, lambda e, t=t: e.topic_name == t.topic_name)
                        if e is not None:
                            topics.append(e)
                merged.append(replace(entry, topics=tuple(topics)))
            else:
                merged.append(entry)
        return encode(replace(response, groups=tuple(merged)))

    return Decision(request=_request_body(replace(request, groups=tuple(forwarded))), merge=merge)


def _share_offsets_change(key: int, group_op: AclOperation):
    """AlterShareGroupOffsets (91, GROUP:READ) / DeleteShareGroupOffsets (92, GROUP:DELETE): W 30 with
    message; then TOPIC:READ per topic entry, one call each (R 29 with message); a top-level error
    from the coordinator replaces everything."""

    def enforce(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
        if not auth.enabled:
            return FORWARD
        request = info.decoded
        v = header.api_version
        if not auth.allowed(GROUP, request.group_id, group_op):
            return _respond(key, v, error_code=GROUP_AUTHORIZATION_FAILED,
                            error_message=_MESSAGES[GROUP_AUTHORIZATION_FAILED])
        ok = [auth.allowed(TOPIC, t.topic_name, READ) for t in request.topics]
        if all(ok):
            return FORWARD
        cls = response_class(key, v)
        topic_cls = nested(cls, "responses")
        msg = _MESSAGES[TOPIC_AUTHORIZATION_FAILED]

        def denied_entry(t):
            if key == 92:
                return _blank(topic_cls, topic_name=t.topic_name, topic_id=_ZERO_UUID,
                              error_code=TOPIC_AUTHORIZATION_FAILED, error_message=msg)
            part_cls = nested(topic_cls, "partitions")
            return _blank(topic_cls, topic_name=t.topic_name, topic_id=_ZERO_UUID, partitions=tuple(
                _blank(part_cls, partition_index=p.partition_index, error_code=TOPIC_AUTHORIZATION_FAILED,
                       error_message=msg) for p in t.partitions))

        kept = tuple(t for t, a in zip(request.topics, ok) if a)

        def merge(buf, off: int) -> bytes:
            response = decode_response(key, v, buf, off)
            if response.error_code != 0:
                return encode(response)
            merged = merge_in_request_order(
                zip(request.topics, ok), response.responses,
                denied_entry=lambda ta: None if ta[1] else denied_entry(ta[0]),
                same=lambda e, ta: e.topic_name == ta[0].topic_name)
            return encode(replace(response, responses=merged))

        return Decision(request=_request_body(replace(request, topics=kept)), merge=merge)

    return enforce


# ----------------------------------------------------------------------------- the table


SPECS = (
    ApiSpec(8, "OffsetCommit", inspect_decoded, enforce=_enforce_offset_commit, versions=(2, 10)),
    ApiSpec(9, "OffsetFetch", inspect_decoded, enforce=_enforce_offset_fetch, versions=(1, 10)),
    # addresses.py rewrites FindCoordinator responses; the registry merges this enforcement in.
    ApiSpec(10, "FindCoordinator", inspect_decoded, enforce=_enforce_find_coordinator, versions=(0, 6)),
    ApiSpec(11, "JoinGroup", _inspect_join, enforce=_enforce_join, versions=(0, 9)),
    ApiSpec(12, "Heartbeat", inspect_decoded, enforce=_group_read_whole(12), versions=(0, 4)),
    ApiSpec(13, "LeaveGroup", inspect_decoded, enforce=_group_read_whole(13), versions=(0, 5)),
    ApiSpec(14, "SyncGroup", inspect_decoded, enforce=_enforce_sync, versions=(0, 5)),
    ApiSpec(15, "DescribeGroups", inspect_decoded, enforce=_describe_family(15, "groups", ops_min_version=3), versions=(0, 6)),
    ApiSpec(16, "ListGroups", inspect_decoded, enforce=_enforce_list_groups, versions=(0, 5)),
    ApiSpec(42, "DeleteGroups", inspect_decoded, enforce=_enforce_delete_groups, versions=(0, 2)),
    ApiSpec(47, "OffsetDelete", inspect_decoded, enforce=_enforce_offset_delete, versions=(0, 0)),
    ApiSpec(68, "ConsumerGroupHeartbeat", inspect_decoded, enforce=_enforce_consumer_heartbeat, versions=(0, 1)),
    ApiSpec(69, "ConsumerGroupDescribe", inspect_decoded, enforce=_describe_family(
        69, "group_ids", lambda g: _topics_of_consumer_group(g, True), _DESCRIBED_TOPICS_DENIED), versions=(0, 1)),
    ApiSpec(76, "ShareGroupHeartbeat", inspect_decoded, enforce=_enforce_share_heartbeat, versions=(1, 1)),
    ApiSpec(77, "ShareGroupDescribe", inspect_decoded, enforce=_describe_family(
        77, "group_ids", lambda g: _topics_of_consumer_group(g, False), _DESCRIBED_TOPICS_DENIED), versions=(1, 1)),
    ApiSpec(78, "ShareFetch", inspect_decoded, enforce=_share_data_plane(78), versions=(1, 2)),
    ApiSpec(79, "ShareAcknowledge", inspect_decoded, enforce=_share_data_plane(79), versions=(1, 2)),
    ApiSpec(88, "StreamsGroupHeartbeat", inspect_decoded, enforce=_enforce_streams_heartbeat, versions=(0, 0)),
    ApiSpec(89, "StreamsGroupDescribe", inspect_decoded, enforce=_describe_family(
        89, "group_ids", _topics_of_streams_group, _STREAMS_TOPICS_DENIED), versions=(0, 0)),
    ApiSpec(90, "DescribeShareGroupOffsets", inspect_decoded, enforce=_enforce_describe_share_offsets, versions=(0, 1)),
    ApiSpec(91, "AlterShareGroupOffsets", inspect_decoded, enforce=_share_offsets_change(91, READ), versions=(0, 0)),
    ApiSpec(92, "DeleteShareGroupOffsets", inspect_decoded, enforce=_share_offsets_change(92, DELETE), versions=(0, 0)),
)
