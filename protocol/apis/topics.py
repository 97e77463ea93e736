"""Enforcement for the topic and metadata APIs (fact sheet §1.1 / §1.2).

Theory of operation
-------------------
Every enforcer here follows the broker's request handler for its API
(``KafkaApis``, ``ControllerApis`` or ``DescribeTopicPartitionsRequestHandler``
at the fact sheet's 4.2-dev baseline): the same checks, in the same order,
with the same log flags and reference counts, and the same error entries.

Partial authorization.  The allowed part of a request is re-encoded with kio
(``dataclasses.replace`` + ``encode``; none of these APIs carries record
batches) and forwarded; the denied part is answered by kgw and merged back
into the upstream response **in request order** (upstream entries kgw did not
ask for are appended).  When nothing is allowed nothing goes upstream
(``Decision(respond=...)``).  Cluster-level denials that Kafka throws become
the request's own error response (``getErrorResponse``), built here.

Metadata (3) is always forwarded, because the client needs the broker list
even when it may see no topic: denied named topics are dropped from the
forwarded request and answered with TOPIC_AUTHORIZATION_FAILED; all-topics and
by-id requests are forwarded whole and their *response* is filtered.  Topic
and cluster authorized operations are always computed by kgw, never passed
through.  Auto topic creation: Kafka checks CLUSTER:CREATE and then
TOPIC:CREATE only for requested topics that do not exist, which kgw learns only
from the response.  kgw predicts the CREATE decision silently (log flags off);
if every described topic is creatable the request goes upstream unchanged,
otherwise it goes with ``allow_auto_topic_creation=false`` and, for topics the
upstream reports missing, the real (logged) checks run when the response
arrives: denied → 29, allowed → the upstream's 3 (the topic is not
auto-created in that mixed case).  Metadata v0-3 cannot switch auto-creation
off; there, a non-creatable topic is never forwarded and is answered 29 (what
Kafka answers for a missing topic without CREATE; for an existing one Kafka would
describe it, but kgw cannot know existence without a request that may create it).
Requests naming topic ids (v12+) are forwarded as Kafka reads them: the ids
only, name-only entries dropped, auto-creation off; the response keeps only the
requested ids and is filtered by name.

Topic ids.  The gateway learns ``topic id -> name`` (and which names exist)
from the upstream Metadata, DescribeTopicPartitions and CreateTopics responses
it merges, in the module-level, bounded :data:`LEARNED` cache.  Ids are unique
for the life of a cluster and the cache is filled only from upstream
responses, so a learned mapping is never wrong; a missing one makes a
DeleteTopics-by-id entry fail with UNKNOWN_TOPIC_ID (100), as Kafka answers
for an id it does not know.
"""

from __future__ import annotations

import dataclasses
import typing
from datetime import timedelta
from typing import Any, Callable, Iterable, Sequence
from uuid import UUID

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i64

from authz.acl import AclOperation, ResourceType
from protocol.apis.base import FORWARD, ApiSpec, Decision, RequestInfo
from protocol.apis.generic import inspect_decoded
from protocol.auth_helper import AuthHelper
from protocol.topic_ids import LEARNED, TopicCache
from protocol.codecs import decode_response, encode, make, response_class
from protocol.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    INVALID_TOPIC_EXCEPTION,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
)
from protocol.headers import RequestHeader

__all__ = ["SPECS", "LEARNED", "TopicCache", "invalid_topic_reason"]

TOPIC = ResourceType.TOPIC
CLUSTER = ResourceType.CLUSTER
Op = AclOperation

_ZERO_UUID = UUID(int=0)
#: the schema default of every ``*_authorized_operations`` field (Int.MinValue)
OPS_NOT_REQUESTED = -(2**31)
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
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


# ---------------------------------------------------------------- helpers


def _elem(cls: type, field_name: str) -> type:
    """The entity class of a (possibly nullable) array field."""
    tp = typing.get_type_hints(cls)[field_name]
    while not dataclasses.is_dataclass(tp):
        args = [a for a in typing.get_args(tp) if a is not type(None) and a is not Ellipsis]
        if not args:
            return tp
        tp = args[0]
    return tp


def _ordered(order: Iterable[str], denied: dict[str, list], upstream: Sequence, key: Callable[[Any], Any]) -> tuple:
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


def _partial(api_key: int, version: int, request, req_field: str, kept: Sequence, resp_field: str,
             order: Sequence, denied: dict[str, list], key: Callable[[Any], Any],
             post: Callable[[Any], Any] | None = None, local_fields: dict | None = None) -> Decision:
    """Forward ``request`` with ``req_field`` = ``kept`` and merge ``denied`` back in request order;
    answer locally when nothing is kept.  ``post`` maps each upstream entry before merging."""
    cls = response_class(api_key, version)
    if not kept:
        entries = _ordered(order, denied, (), key)
        return Decision(respond=encode(make(cls, throttle_time=_ZERO_TIME, **{resp_field: entries},
                                            **(local_fields or {}))))
    new_request = encode(dataclasses.replace(request, **{req_field: tuple(kept)}))

    def merge(buf, off: int) -> bytes:
        response = decode_response(api_key, version, buf, off)
        upstream = getattr(response, resp_field)
        if post is not None:
            upstream = [post(e) for e in upstream]
        return encode(dataclasses.replace(response, **{resp_field: _ordered(order, denied, upstream, key)}))

    return Decision(request=new_request, merge=merge)


def _group(items: Iterable, name: Callable[[Any], str], entry: Callable[[Any], Any]) -> dict[str, list]:
    out: dict[str, list] = {}
    for item in items:
        out.setdefault(name(item), []).append(entry(item))
    return out


def _distinct(names: Iterable[str]) -> dict[str, int]:
    """Distinct names in first-occurrence order, each with reference count 1 (Kafka filters a Set)."""
    return dict.fromkeys(names, 1)


def _cluster_message(api: str, op: AclOperation) -> str:
    # Kafka: ClusterAuthorizationException(s"Request $request needs $operation permission.")
    return f"Request {api} needs {op.name} permission."


# ---------------------------------------------------------------- Metadata (3)


def _md_error_topic(cls, error: int, name: str | None, topic_id: UUID | None, internal: bool = False):
    return make(cls, error_code=ErrorCode(error), name=name, topic_id=topic_id, is_internal=internal,
                partitions=(), topic_authorized_operations=i32(OPS_NOT_REQUESTED))


def _md_ops(auth: AuthHelper, topic, include_ops: bool):
    if not hasattr(topic, "topic_authorized_operations"):
        return topic
    ops = auth.authorized_operations(TOPIC, topic.name) if include_ops and topic.name is not None else OPS_NOT_REQUESTED
    return dataclasses.replace(topic, topic_authorized_operations=i32(ops))


def _md_cluster_ops(auth: AuthHelper, request, response):
    if not hasattr(response, "cluster_authorized_operations"):
        return response
    ops = OPS_NOT_REQUESTED
    if getattr(request, "include_cluster_authorized_operations", False):
        ops = auth.authorized_operations(CLUSTER, "kafka-cluster") if auth.cluster(Op.DESCRIBE) else 0
    return dataclasses.replace(response, cluster_authorized_operations=i32(ops))


def _md_learn(topics) -> None:
    for t in topics:
        if t.name is None:
            continue
        if t.error_code == 0:
            LEARNED.learn(t.name, getattr(t, "topic_id", None))
        elif t.error_code == UNKNOWN_TOPIC_OR_PARTITION:
            LEARNED.forget(t.name)


def _enforce_metadata(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """§1.1 Metadata: DESCRIBE filter (D=false for all-topics), auto-create CREATE checks,
    topic ops (v8+) and cluster ops (v8-10) computed by kgw."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    version = header.api_version
    cls = response_class(3, version)
    topic_cls = _elem(cls, "topics")
    include_ops = bool(getattr(request, "include_topic_authorized_operations", False))
    all_topics = request.topics is None or (version == 0 and not request.topics)

    if not all_topics and version < 12 and any(
            t.name is None or getattr(t, "topic_id", None) is not None for t in request.topics):
        # Kafka: InvalidRequestException -> MetadataRequest.getErrorResponse
        error_topics = tuple(_md_error_topic(topic_cls, INVALID_REQUEST, t.name or "", getattr(t, "topic_id", None))
                             for t in request.topics)
        return Decision(respond=encode(make(cls, throttle_time=_ZERO_TIME, brokers=(), cluster_id=None,
                                            controller_id=i32(-1), topics=error_topics,
                                            cluster_authorized_operations=i32(OPS_NOT_REQUESTED),
                                            error_code=ErrorCode(INVALID_REQUEST))))

    ids = [] if all_topics else [t.topic_id for t in request.topics
                                 if getattr(t, "topic_id", None) is not None and t.topic_id != _ZERO_UUID]
    if all_topics or ids:
        by_id = not all_topics
        new_request = None
        if by_id:
            # Kafka (KafkaApis.handleTopicMetadataRequest): once any id is given, only the ids
            # count (name-only entries are ignored) and ids name existing topics, so nothing is
            # created.  Forward exactly that: the distinct ids, no names, auto-creation off.
            wanted_ids = list(dict.fromkeys(ids))
            id_topic = type(request.topics[0])
            new_request = encode(dataclasses.replace(
                request, topics=tuple(make(id_topic, topic_id=i, name=None) for i in wanted_ids),
                allow_auto_topic_creation=False))
            wanted_set = set(wanted_ids)

        def merge_filtered(buf, off: int) -> bytes:
            response = decode_response(3, version, buf, off)
            topics = response.topics
            if by_id:  # only what was asked for, whatever the upstream added
                topics = [t for t in topics if getattr(t, "topic_id", None) in wanted_set]
            _md_learn(topics)
            named = [t for t in topics if t.name is not None and t.error_code != UNKNOWN_TOPIC_ID]
            allowed = auth.filter(TOPIC, Op.DESCRIBE, _distinct(t.name for t in named), log_if_denied=by_id)
            response = _md_cluster_ops(auth, request, response)
            out = []
            for t in topics:
                if t.name is None or t.error_code == UNKNOWN_TOPIC_ID:
                    out.append(_md_ops(auth, dataclasses.replace(t, name=None) if by_id else t, False))
                elif t.name in allowed:
                    out.append(_md_ops(auth, t, include_ops))
                elif by_id:  # ids are not sensitive: the id with a null name
                    out.append(_md_error_topic(topic_cls, TOPIC_AUTHORIZATION_FAILED, None, t.topic_id))
                # all-topics: silently omitted
            return encode(dataclasses.replace(response, topics=tuple(out)))

        return Decision(request=new_request, merge=merge_filtered)

    names = _distinct(t.name for t in request.topics)
    described = auth.filter(TOPIC, Op.DESCRIBE, names)  # T/T: named topics
    auto_create = version < 4 or request.allow_auto_topic_creation
    check_create = False  # run Kafka's CREATE checks on the topics the upstream reports missing
    held_back: list[str] = []  # v0-3: topics never forwarded (they would be auto-created)
    forward_auto = getattr(request, "allow_auto_topic_creation", None)
    if auto_create and described:
        # prediction only: log flags off; the logged checks run on the missing topics in merge
        not_creatable: set[str] = set()
        if not auth.allowed(CLUSTER, "kafka-cluster", Op.CREATE, False, False):
            not_creatable = described - auth.filter(TOPIC, Op.CREATE, _distinct(n for n in names if n in described),
                                                    False, False)
        if not_creatable:
            check_create = True
            if version >= 4:
                forward_auto = False
            else:
                # v0-3 always auto-creates: a topic kgw may not let the client create is never
                # forwarded, whatever kgw remembers about its existence (it may have been deleted)
                held_back = [n for n in names if n in not_creatable]
    forwarded = [t for t in request.topics if t.name in described and t.name not in held_back]
    seen: set[str] = set()
    forwarded = [t for t in forwarded if not (t.name in seen or seen.add(t.name))]
    changes: dict[str, Any] = {"topics": tuple(forwarded)}
    if forward_auto is not None:
        changes["allow_auto_topic_creation"] = forward_auto
    unchanged = len(forwarded) == len(request.topics) and forward_auto == getattr(
        request, "allow_auto_topic_creation", None)
    new_request = None if unchanged else encode(dataclasses.replace(request, **changes))
    wanted = {t.name for t in forwarded}

    def merge_named(buf, off: int) -> bytes:
        response = decode_response(3, version, buf, off)
        _md_learn(response.topics)
        upstream: dict[str, Any] = {}
        for t in response.topics:
            if t.name in wanted and t.name not in upstream:  # a v0 empty list means "all": keep only ours
                upstream[t.name] = t
        create_denied: set[str] = set()
        if check_create:
            missing = [n for n in names if n in held_back or (
                n in upstream and upstream[n].error_code in (UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION))]
            if missing and not auth.cluster(Op.CREATE, log_if_denied=False):
                create_denied = set(missing) - auth.filter(TOPIC, Op.CREATE, _distinct(missing))
        response = _md_cluster_ops(auth, request, response)
        out = []
        for name in names:
            if name not in described:
                out.append(_md_error_topic(topic_cls, TOPIC_AUTHORIZATION_FAILED, name, None))
            elif name in create_denied:
                out.append(_md_error_topic(topic_cls, TOPIC_AUTHORIZATION_FAILED, name, None, name in INTERNAL_TOPICS))
            elif name in upstream:
                out.append(_md_ops(auth, upstream[name], include_ops))
            elif name in held_back:  # CREATE allowed by the time the answer came: not auto-created here
                out.append(_md_error_topic(topic_cls, UNKNOWN_TOPIC_OR_PARTITION, name, None, name in INTERNAL_TOPICS))
        return encode(dataclasses.replace(response, topics=tuple(out)))

    return Decision(request=new_request, merge=merge_named)


# ---------------------------------------------------------------- DescribeTopicPartitions (75)


def _enforce_describe_topic_partitions(auth: AuthHelper, header: RequestHeader, body: memoryview,
                                       info: RequestInfo) -> Decision:
    """§1.2 DescribeTopicPartitions: TOPIC:DESCRIBE one call per topic (D=true even for all topics);
    topic authorized operations always computed."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    version = header.api_version
    cls = response_class(75, version)
    topic_cls = _elem(cls, "topics")

    def error_topic(error: int, name: str):
        return make(topic_cls, error_code=ErrorCode(error), name=name, topic_id=None, is_internal=False,
                    partitions=(), topic_authorized_operations=i32(OPS_NOT_REQUESTED))

    def with_ops(t):
        if t.name is None:
            return t
        return dataclasses.replace(t, topic_authorized_operations=i32(auth.authorized_operations(TOPIC, t.name)))

    if request.cursor is not None and request.cursor.partition_index < 0:
        # InvalidRequestException -> DescribeTopicPartitionsRequest.getErrorResponse
        return Decision(respond=encode(make(cls, throttle_time=_ZERO_TIME, next_cursor=None, topics=tuple(
            error_topic(INVALID_REQUEST, t.name) for t in request.topics))))
    if not request.topics:  # all topics: unauthorized ones are silently left out
        def merge_all(buf, off: int) -> bytes:
            response = decode_response(75, version, buf, off)
            _md_learn(response.topics)
            kept = [t for t in response.topics
                    if t.name is None or auth.allowed(TOPIC, t.name, Op.DESCRIBE)]
            next_cursor = response.next_cursor
            if next_cursor is not None and not auth.allowed(TOPIC, next_cursor.topic_name, Op.DESCRIBE, False, False):
                # the cursor would name a topic the client may not see: end the page here
                # (the client re-asks without it; disclosing the name is not an option)
                next_cursor = None
            return encode(dataclasses.replace(response, topics=tuple(with_ops(t) for t in kept),
                                              next_cursor=next_cursor))

        return Decision(merge=merge_all)

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
    seen: set[str] = set()
    kept = [t for t in kept if not (t.name in seen or seen.add(t.name))]
    new_cursor = cursor if cursor is not None and cursor.topic_name in allowed else None
    new_request = encode(dataclasses.replace(request, topics=tuple(kept), cursor=new_cursor))

    def merge(buf, off: int) -> bytes:
        response = decode_response(75, version, buf, off)
        mine = [t for t in response.topics if t.name in allowed]  # whatever else the upstream sent
        _md_learn(mine)
        upstream = [with_ops(t) for t in mine]
        return encode(dataclasses.replace(response, topics=_ordered(names, denied, upstream, lambda t: t.name)))

    return Decision(request=new_request, merge=merge)


# ---------------------------------------------------------------- ListOffsets (2)


def _filter_topics(auth: AuthHelper, op, api_key: int, version: int, request, name_of, error_entry) -> Decision:
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
    """§1.1 ListOffsets: TOPIC:DESCRIBE batch filter (refCount = topic entries); R 29 per partition."""
    if not auth.enabled:
        return FORWARD
    version = header.api_version

    def error_entry(t):
        topic_cls = _elem(response_class(2, version), "topics")
        part_cls = _elem(topic_cls, "partitions")
        return topic_cls(name=t.name, partitions=tuple(
            make(part_cls, partition_index=p.partition_index, error_code=ErrorCode(TOPIC_AUTHORIZATION_FAILED),
                 timestamp=i64(-1), offset=i64(-1), leader_epoch=i32(-1)) for p in t.partitions))

    return _filter_topics(auth, Op.DESCRIBE, 2, version, info.decoded, lambda t: t.name, error_entry)


# ---------------------------------------------------------------- OffsetForLeaderEpoch (23)


def _enforce_offset_for_leader_epoch(auth: AuthHelper, header: RequestHeader, body: memoryview,
                                     info: RequestInfo) -> Decision:
    """§1.1 OffsetForLeaderEpoch: CLUSTER:CLUSTER_ACTION (D=false) allows all; else TOPIC:DESCRIBE filter."""
    if not auth.enabled:
        return FORWARD
    if auth.cluster(Op.CLUSTER_ACTION, log_if_denied=False):
        return FORWARD
    version = header.api_version

    def error_entry(t):
        topic_cls = _elem(response_class(23, version), "topics")
        part_cls = _elem(topic_cls, "partitions")
        return topic_cls(topic=t.topic, partitions=tuple(
            make(part_cls, partition=p.partition, error_code=ErrorCode(TOPIC_AUTHORIZATION_FAILED),
                 leader_epoch=i32(-1), end_offset=i64(-1)) for p in t.partitions))

    return _filter_topics(auth, Op.DESCRIBE, 23, version, info.decoded, lambda t: t.topic, error_entry)


# ---------------------------------------------------------------- DeleteRecords (21)


def _enforce_delete_records(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """§1.2 DeleteRecords: TOPIC:DELETE batch filter; R 29 per partition, low watermark -1."""
    if not auth.enabled:
        return FORWARD
    version = header.api_version

    def error_entry(t):
        topic_cls = _elem(response_class(21, version), "topics")
        part_cls = _elem(topic_cls, "partitions")
        return topic_cls(name=t.name, partitions=tuple(
            part_cls(partition_index=p.partition_index, low_watermark=i64(-1),
                     error_code=ErrorCode(TOPIC_AUTHORIZATION_FAILED)) for p in t.partitions))

    return _filter_topics(auth, Op.DELETE, 21, version, info.decoded, lambda t: t.name, error_entry)


# ---------------------------------------------------------------- DescribeProducers (61)


def _enforce_describe_producers(auth: AuthHelper, header: RequestHeader, body: memoryview,
                                info: RequestInfo) -> Decision:
    """§1.1 DescribeProducers: per topic entry, an invalid name gives 17 (no check), else one
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
    denied: dict[str, list] = {}
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


# ---------------------------------------------------------------- CreateTopics (19)


def _enforce_create_topics(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """§1.2 CreateTopics (ControllerApis.createTopics): duplicates and __cluster_metadata → 42 (not
    authorized); CLUSTER:CREATE (D=false) else TOPIC:CREATE filter; TOPIC:DESCRIBE_CONFIGS filter
    (D=false) for the configs of created topics."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    version = header.api_version
    topic_cls = _elem(response_class(19, version), "topics")
    counts: dict[str, int] = {}
    for t in request.topics:
        counts[t.name] = counts.get(t.name, 0) + 1
    duplicates = {n for n, c in counts.items() if c > 1}
    unique = [n for n in counts if n not in duplicates]
    candidates = _distinct(n for n in unique if n != CLUSTER_METADATA_TOPIC)
    if auth.cluster(Op.CREATE, log_if_denied=False):
        authorized = set(candidates)
    else:
        authorized = auth.filter(TOPIC, Op.CREATE, candidates)
    describable = auth.filter(TOPIC, Op.DESCRIBE_CONFIGS, candidates, log_if_denied=False)

    def result(name: str, error: int, message: str):
        return make(topic_cls, name=name, topic_id=None, error_code=ErrorCode(error), error_message=message,
                    topic_config_error_code=i16(0), num_partitions=i32(-1), replication_factor=i16(-1), configs=())

    denied: dict[str, list] = {}
    for n in counts:
        if n in duplicates:
            denied[n] = [result(n, INVALID_REQUEST, "Duplicate topic name.")]
        elif n == CLUSTER_METADATA_TOPIC:
            denied[n] = [result(n, INVALID_REQUEST, f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.")]
        elif n not in authorized:
            denied[n] = [result(n, TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")]
    has_configs = version >= 5

    def post(entry):
        if entry.error_code == 0:
            LEARNED.learn(entry.name, getattr(entry, "topic_id", None))
            if has_configs and entry.name not in describable:
                # created, but without DESCRIBE_CONFIGS: no configs, partition count or replication factor
                return dataclasses.replace(entry, topic_config_error_code=i16(TOPIC_AUTHORIZATION_FAILED),
                                           num_partitions=i32(-1), replication_factor=i16(-1), configs=())
        return entry

    kept = [t for t in request.topics if t.name in authorized]
    if not denied:  # all forwarded; the response may still lose configs, and teaches topic ids
        def merge(buf, off: int) -> bytes:
            response = decode_response(19, version, buf, off)
            return encode(dataclasses.replace(response, topics=tuple(post(e) for e in response.topics)))

        return Decision(merge=merge)
    return _partial(19, version, request, "topics", kept, "topics", list(counts), denied, lambda e: e.name, post)


# ---------------------------------------------------------------- CreatePartitions (37)


def _enforce_create_partitions(auth: AuthHelper, header: RequestHeader, body: memoryview,
                               info: RequestInfo) -> Decision:
    """§1.2 CreatePartitions: duplicates → 42 (not authorized); TOPIC:ALTER filter; R 29, no message."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    version = header.api_version
    result_cls = _elem(response_class(37, version), "results")
    counts: dict[str, int] = {}
    for t in request.topics:
        counts[t.name] = counts.get(t.name, 0) + 1
    duplicates = {n for n, c in counts.items() if c > 1}
    allowed = auth.filter(TOPIC, Op.ALTER, _distinct(n for n in counts if n not in duplicates))
    denied: dict[str, list] = {}
    for n in counts:
        if n in duplicates:
            denied[n] = [result_cls(name=n, error_code=ErrorCode(INVALID_REQUEST), error_message="Duplicate topic name.")]
        elif n not in allowed:
            denied[n] = [result_cls(name=n, error_code=ErrorCode(TOPIC_AUTHORIZATION_FAILED), error_message=None)]
    if not denied:
        return FORWARD
    kept = [t for t in request.topics if t.name in allowed and t.name not in duplicates]
    return _partial(37, version, request, "topics", kept, "results", list(counts), denied, lambda e: e.name)


# ---------------------------------------------------------------- DeleteTopics (20)


def _enforce_delete_topics(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """§1.2 DeleteTopics, KRaft (ControllerApis.deleteTopics): CLUSTER:DELETE (D=false) allows all;
    otherwise TOPIC:DESCRIBE then TOPIC:DELETE filters over the provided names and the names of the
    provided ids (ids resolved through :data:`LEARNED`; unknown → 100)."""
    if not auth.enabled:
        return FORWARD
    if auth.cluster(Op.DELETE, log_if_denied=False):
        return FORWARD
    request = info.decoded
    version = header.api_version
    result_cls = _elem(response_class(20, version), "responses")
    by_state = version >= 6
    entries: list[tuple[str | None, UUID | None]] = (
        [(t.name, t.topic_id) for t in request.topics] if by_state else [(n, None) for n in request.topic_names])

    def result(name, topic_id, error: int, message: str | None):
        return make(result_cls, name=name, topic_id=topic_id, error_code=ErrorCode(error), error_message=message)

    order: list[Any] = []  # result keys in request order: ("n", name) / ("i", id) / ("x", index)
    denied: dict[Any, list] = {}
    names: dict[str, int] = {}
    ids: dict[UUID, int] = {}
    for index, (name, topic_id) in enumerate(entries):
        if name is None:
            if topic_id is None:
                key = ("x", index)
                denied[key] = [result(None, None, INVALID_REQUEST, "Neither topic name nor id were specified.")]
            else:
                key = ("i", topic_id)
                ids[topic_id] = ids.get(topic_id, 0) + 1
        elif topic_id is not None:
            key = ("x", index)
            denied[key] = [result(name, topic_id, INVALID_REQUEST, "You may not specify both topic name and topic id.")]
        else:
            key = ("n", name)
            names[name] = names.get(name, 0) + 1
        if key not in order:
            order.append(key)
    for n, c in names.items():
        if c > 1:
            denied[("n", n)] = [result(n, None, INVALID_REQUEST, "Duplicate topic name.")]
    for i, c in ids.items():
        if c > 1:
            denied[("i", i)] = [result(None, i, INVALID_REQUEST, "Duplicate topic id.")]
    provided_names = [n for n, c in names.items() if c == 1]
    id_names: dict[UUID, str] = {}
    for i, c in ids.items():
        if c != 1:
            continue
        name = LEARNED.name_of(i)
        if name is None:
            denied[("i", i)] = [result(None, i, UNKNOWN_TOPIC_ID, _MSG[UNKNOWN_TOPIC_ID])]
        else:
            id_names[i] = name
    to_check = _distinct([*provided_names, *id_names.values()])
    describable = auth.filter(TOPIC, Op.DESCRIBE, to_check)
    deletable = auth.filter(TOPIC, Op.DELETE, to_check)
    denial = _MSG[TOPIC_AUTHORIZATION_FAILED]
    for i, name in id_names.items():
        if name not in deletable:
            denied[("i", i)] = [result(name if name in describable else None, i, TOPIC_AUTHORIZATION_FAILED, denial)]
    for name in provided_names:
        if name not in describable or name not in deletable:
            # Kafka answers 3 for a describable-but-not-deletable topic that does not exist; kgw
            # cannot know existence without forwarding, so it answers 29 (which discloses less)
            denied[("n", name)] = [result(name, None, TOPIC_AUTHORIZATION_FAILED, denial)]
    if not denied:
        return FORWARD
    if by_state:
        kept = [t for t in request.topics
                if (t.name is None) != (t.topic_id is None)  # exactly one of name and id
                and (("n", t.name) if t.name is not None else ("i", t.topic_id)) not in denied]
        field = "topics"
    else:
        kept = [n for n in request.topic_names if ("n", n) not in denied]
        field = "topic_names"

    def key(entry):
        return ("n", entry.name)

    if not kept:
        return _partial(20, version, request, field, kept, "responses", order, denied, key)

    def match(entry_order: list, upstream: Sequence) -> tuple:
        pool = list(upstream)
        out = []
        for k in entry_order:
            if k in denied:
                out.append(denied[k][0])
                continue
            for idx, e in enumerate(pool):
                if (k[0] == "n" and e.name == k[1] and (not by_state or e.topic_id not in ids)) or \
                        (k[0] == "i" and getattr(e, "topic_id", None) == k[1]):
                    out.append(pool.pop(idx))
                    break
        out.extend(pool)
        return tuple(out)

    new_request = encode(dataclasses.replace(request, **{field: tuple(kept)}))

    def merge(buf, off: int) -> bytes:
        response = decode_response(20, version, buf, off)
        for e in response.responses:
            if e.error_code == 0 and e.name:
                LEARNED.forget(e.name)
        return encode(dataclasses.replace(response, responses=match(order, response.responses)))

    return Decision(request=new_request, merge=merge)


# ---------------------------------------------------------------- DescribeCluster (60)


def _enforce_describe_cluster(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """§1.2 DescribeCluster: no check on the body; cluster authorized ops when requested
    (CLUSTER:DESCRIBE T/T first, 0 if denied), computed by kgw."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    version = header.api_version
    ops = OPS_NOT_REQUESTED
    # Kafka validates the endpoint type (BROKER = 1) before any check
    if getattr(request, "endpoint_type", 1) == 1 and request.include_cluster_authorized_operations:
        ops = auth.authorized_operations(CLUSTER, "kafka-cluster") if auth.cluster(Op.DESCRIBE) else 0

    def merge(buf, off: int) -> bytes:
        response = decode_response(60, version, buf, off)
        value = ops if response.error_code == 0 else OPS_NOT_REQUESTED
        return encode(dataclasses.replace(response, cluster_authorized_operations=i32(value)))

    return Decision(merge=merge)


# ---------------------------------------------------------------- cluster-only APIs


def _enforce_describe_log_dirs(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """§1.2 DescribeLogDirs: CLUSTER:DESCRIBE; v3+ top-level 31 with empty results, v1-2 empty results."""
    if not auth.enabled or auth.cluster(Op.DESCRIBE):
        return FORWARD
    cls = response_class(35, header.api_version)
    return Decision(respond=encode(make(cls, throttle_time=_ZERO_TIME, error_code=ErrorCode(CLUSTER_AUTHORIZATION_FAILED),
                                        results=())))


def _enforce_alter_replica_log_dirs(auth: AuthHelper, header: RequestHeader, body: memoryview,
                                    info: RequestInfo) -> Decision:
    """§1.2 AlterReplicaLogDirs: CLUSTER:ALTER; W 31 on every partition (one result per dir and topic)."""
    if not auth.enabled or auth.cluster(Op.ALTER):
        return FORWARD
    request = info.decoded
    cls = response_class(34, header.api_version)
    topic_cls = _elem(cls, "results")
    part_cls = _elem(topic_cls, "partitions")
    results = tuple(
        topic_cls(topic_name=t.name, partitions=tuple(
            part_cls(partition_index=p, error_code=ErrorCode(CLUSTER_AUTHORIZATION_FAILED)) for p in t.partitions))
        for d in request.dirs for t in d.topics)
    return Decision(respond=encode(make(cls, throttle_time=_ZERO_TIME, results=results)))


def _enforce_elect_leaders(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """§1.2 ElectLeaders: CLUSTER:ALTER (thrown); W top-level 31 (v1+) plus 31 on each listed partition."""
    if not auth.enabled or auth.cluster(Op.ALTER):
        return FORWARD
    request = info.decoded
    cls = response_class(43, header.api_version)
    topic_cls = _elem(cls, "replica_election_results")
    part_cls = _elem(topic_cls, "partition_result")
    message = _cluster_message("ElectLeaders", Op.ALTER)
    results = tuple(
        topic_cls(topic=t.topic, partition_result=tuple(
            part_cls(partition_id=p, error_code=ErrorCode(CLUSTER_AUTHORIZATION_FAILED), error_message=message)
            for p in t.partitions))
        for t in request.topic_partitions or ())
    return Decision(respond=encode(make(cls, throttle_time=_ZERO_TIME, error_code=ErrorCode(CLUSTER_AUTHORIZATION_FAILED),
                                        replica_election_results=results)))


def _enforce_alter_partition_reassignments(auth: AuthHelper, header: RequestHeader, body: memoryview,
                                           info: RequestInfo) -> Decision:
    """§1.2 AlterPartitionReassignments: CLUSTER:ALTER (thrown); W top-level plus per-partition 31."""
    if not auth.enabled or auth.cluster(Op.ALTER):
        return FORWARD
    request = info.decoded
    cls = response_class(45, header.api_version)
    topic_cls = _elem(cls, "responses")
    part_cls = _elem(topic_cls, "partitions")
    message = _cluster_message("AlterPartitionReassignments", Op.ALTER)
    responses = tuple(
        topic_cls(name=t.name, partitions=tuple(
            part_cls(partition_index=p.partition_index, error_code=ErrorCode(CLUSTER_AUTHORIZATION_FAILED),
                     error_message=message) for p in t.partitions))
        for t in request.topics)
    return Decision(respond=encode(make(cls, throttle_time=_ZERO_TIME, allow_replication_factor_change=True,
                                        error_code=ErrorCode(CLUSTER_AUTHORIZATION_FAILED), error_message=message,
                                        responses=responses)))


def _enforce_list_partition_reassignments(auth: AuthHelper, header: RequestHeader, body: memoryview,
                                          info: RequestInfo) -> Decision:
    """§1.2 ListPartitionReassignments: CLUSTER:DESCRIBE (thrown); W 31, requested partitions echoed empty."""
    if not auth.enabled or auth.cluster(Op.DESCRIBE):
        return FORWARD
    request = info.decoded
    cls = response_class(46, header.api_version)
    topic_cls = _elem(cls, "topics")
    part_cls = _elem(topic_cls, "partitions")
    message = _cluster_message("ListPartitionReassignments", Op.DESCRIBE)
    topics = tuple(
        topic_cls(name=t.name, partitions=tuple(part_cls(partition_index=p) for p in t.partition_indexes))
        for t in request.topics or ())
    return Decision(respond=encode(make(cls, throttle_time=_ZERO_TIME, error_code=ErrorCode(CLUSTER_AUTHORIZATION_FAILED),
                                        error_message=message, topics=topics)))


SPECS = (
    ApiSpec(3, "Metadata", inspect_decoded, enforce=_enforce_metadata, versions=(0, 13)),
    ApiSpec(2, "ListOffsets", inspect_decoded, enforce=_enforce_list_offsets, versions=(1, 11)),
    ApiSpec(19, "CreateTopics", inspect_decoded, enforce=_enforce_create_topics, versions=(2, 7)),
    ApiSpec(20, "DeleteTopics", inspect_decoded, enforce=_enforce_delete_topics, versions=(1, 6)),
    ApiSpec(21, "DeleteRecords", inspect_decoded, enforce=_enforce_delete_records, versions=(0, 2)),
    ApiSpec(23, "OffsetForLeaderEpoch", inspect_decoded, enforce=_enforce_offset_for_leader_epoch, versions=(2, 4)),
    ApiSpec(34, "AlterReplicaLogDirs", inspect_decoded, enforce=_enforce_alter_replica_log_dirs, versions=(1, 2)),
    ApiSpec(35, "DescribeLogDirs", inspect_decoded, enforce=_enforce_describe_log_dirs, versions=(1, 5)),
    ApiSpec(37, "CreatePartitions", inspect_decoded, enforce=_enforce_create_partitions, versions=(0, 3)),
    ApiSpec(43, "ElectLeaders", inspect_decoded, enforce=_enforce_elect_leaders, versions=(0, 2)),
    ApiSpec(45, "AlterPartitionReassignments", inspect_decoded, enforce=_enforce_alter_partition_reassignments, versions=(0, 1)),
    ApiSpec(46, "ListPartitionReassignments", inspect_decoded, enforce=_enforce_list_partition_reassignments, versions=(0, 0)),
    ApiSpec(60, "DescribeCluster", inspect_decoded, enforce=_enforce_describe_cluster, versions=(0, 2)),
    ApiSpec(61, "DescribeProducers", inspect_decoded, enforce=_enforce_describe_producers, versions=(0, 0)),
    ApiSpec(75, "DescribeTopicPartitions", inspect_decoded, enforce=_enforce_describe_topic_partitions, versions=(0, 0)),
)
