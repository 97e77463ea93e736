"""Topic administration: CreateTopics, DeleteTopics (by name or id; ids resolved from
what the gateway learned, unknown ids answered UNKNOWN_TOPIC_ID as Kafka does) and
CreatePartitions.
"""

from __future__ import annotations
import dataclasses
from typing import Any, Sequence
from uuid import UUID
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32
from protocol.apis.base import FORWARD, ApiSpec, Decision, RequestInfo
from protocol.apis.generic import inspect_decoded
from protocol.auth_helper import AuthHelper
from protocol.codecs import decode_response, encode, make, response_class
from protocol.errors import (
    INVALID_REQUEST,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_TOPIC_ID,
)
from protocol.headers import RequestHeader
from protocol.apis.metadata import CLUSTER_METADATA_TOPIC
from protocol.apis.topic_common import Op, TOPIC, _MSG, _distinct, _elem, _partial

__all__ = ["SPECS"]


def _enforce_create_topics(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """docs/authorization.md CreateTopics (ControllerApis.createTopics): duplicates and __cluster_metadata → 42 (not
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

    def result(name: str, error: int, message: str) -> Any:
        return make(topic_cls, name=name, topic_id=None, error_code=ErrorCode(error), error_message=message,
                    topic_config_error_code=i16(0), num_partitions=i32(-1), replication_factor=i16(-1), configs=())

    denied: dict[str, list[Any]] = {}
    for n in counts:
        if n in duplicates:
            denied[n] = [result(n, INVALID_REQUEST, "Duplicate topic name.")]
        elif n == CLUSTER_METADATA_TOPIC:
            denied[n] = [result(n, INVALID_REQUEST, f"Creation of internal topic {CLUSTER_METADATA_TOPIC} is prohibited.")]
        elif n not in authorized:
            denied[n] = [result(n, TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")]
    has_configs = version >= 5

    def post(entry: Any) -> Any:
        if entry.error_code == 0:
            auth.topics.learn(entry.name, getattr(entry, "topic_id", None))
            if has_configs and entry.name not in describable:
                # created, but without DESCRIBE_CONFIGS: no configs, partition count or replication factor
                return dataclasses.replace(entry, topic_config_error_code=i16(TOPIC_AUTHORIZATION_FAILED),
                                           num_partitions=i32(-1), replication_factor=i16(-1), configs=())
        return entry

    kept = [t for t in request.topics if t.name in authorized]
    if not denied:  # all forwarded; the response may still lose configs, and teaches topic ids
        def merge(buf: memoryview | bytes, off: int) -> bytes:
            response = decode_response(19, version, buf, off)
            return encode(dataclasses.replace(response, topics=tuple(post(e) for e in response.topics)))

        return Decision(merge=merge)
    return _partial(19, version, request, "topics", kept, "topics", list(counts), denied, lambda e: e.name, post)


def _enforce_create_partitions(auth: AuthHelper, header: RequestHeader, body: memoryview,
                               info: RequestInfo) -> Decision:
    """CreatePartitions (docs/authorization.md): duplicates → 42 (not authorized); TOPIC:ALTER filter; R 29, no message."""
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
    denied: dict[str, list[Any]] = {}
    for n in counts:
        if n in duplicates:
            denied[n] = [result_cls(name=n, error_code=ErrorCode(INVALID_REQUEST), error_message="Duplicate topic name.")]
        elif n not in allowed:
            denied[n] = [result_cls(name=n, error_code=ErrorCode(TOPIC_AUTHORIZATION_FAILED), error_message=None)]
    if not denied:
        return FORWARD
    kept = [t for t in request.topics if t.name in allowed and t.name not in duplicates]
    return _partial(37, version, request, "topics", kept, "results", list(counts), denied, lambda e: e.name)


def _enforce_delete_topics(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """docs/authorization.md DeleteTopics, KRaft (ControllerApis.deleteTopics): CLUSTER:DELETE (D=false) allows all;
    otherwise TOPIC:DESCRIBE then TOPIC:DELETE filters over the provided names and the names of the
    provided ids (ids resolved through the gateway's learned topic ids (``AuthHelper.topics``); unknown → 100)."""
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

    def result(name: Any, topic_id: Any, error: int, message: str | None) -> Any:
        return make(result_cls, name=name, topic_id=topic_id, error_code=ErrorCode(error), error_message=message)

    order: list[Any] = []  # result keys in request order: ("n", name) / ("i", id) / ("x", index)
    denied: dict[Any, list[Any]] = {}
    names: dict[str, int] = {}
    ids: dict[UUID, int] = {}
    key: tuple[str, Any]
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
        name = auth.topics.name_of(i)
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

    def by_name(entry: Any) -> tuple[str, Any]:
        return ("n", entry.name)

    if not kept:
        return _partial(20, version, request, field, kept, "responses", order, denied, by_name)

    def match(entry_order: list[Any], upstream: Sequence[Any]) -> tuple[Any, ...]:
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

    def merge(buf: memoryview | bytes, off: int) -> bytes:
        response = decode_response(20, version, buf, off)
        for e in response.responses:
            if e.error_code == 0 and e.name:
                auth.topics.forget(e.name)
        return encode(dataclasses.replace(response, responses=match(order, response.responses)))

    return Decision(request=new_request, merge=merge)


SPECS = (
    ApiSpec(19, "CreateTopics", inspect_decoded, enforce=_enforce_create_topics, versions=(2, 7)),
    ApiSpec(20, "DeleteTopics", inspect_decoded, enforce=_enforce_delete_topics, versions=(1, 6)),
    ApiSpec(37, "CreatePartitions", inspect_decoded, enforce=_enforce_create_partitions, versions=(0, 3)),
)
