"""KIP-932 share groups: ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch,
ShareAcknowledge and the share-group offsets APIs (Describe/Alter/DeleteShareGroupOffsets).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any
from authz.acl import AclOperation
from protocol.apis.base import FORWARD, SESSION_PARTITIONS, ApiSpec, Decision, RequestInfo, keep_session, partition_count
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
from protocol.apis.consumer_groups import _DESCRIBED_TOPICS_DENIED, _topics_of_consumer_group
from protocol.apis.group_common import DELETE, DESCRIBE, GROUP, INVALID_REQUEST, READ, TOPIC, _MESSAGES, _ZERO_UUID, _any_topic_denied, _blank, _describe_family, _request_body, _respond, _topic_name

__all__ = ["SPECS"]


def _enforce_share_heartbeat(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """ShareGroupHeartbeat (docs/authorization.md): GROUP:READ (W 30); invalid member id -> 42 (after auth);
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


_SHARE_SESSIONS = "share_sessions"  # connection_state key: (group, member) -> _ShareSession
SHARE_SESSION_NOT_FOUND = 122


class _ShareSession:
    """One share session as kgw keeps it for a client connection (Kafka ties a session to the
    connection that created it): the partitions the client has put in it, and those kgw let the
    broker keep (the client's, less the ones its principal may no longer read)."""

    __slots__ = ("client", "upstream")

    def __init__(self, client: dict[Any, Any], upstream: dict[Any, Any]) -> None:
        self.client: dict[Any, Any] = client  # topic id -> set[Any] of partitions
        self.upstream: dict[Any, Any] = upstream


def _parts(topics: Any) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for t in topics:
        out.setdefault(t.topic_id, set()).update(p.partition_index for p in t.partitions)
    return out


def _share_data_plane(key: int) -> Any:
    """ShareFetch / ShareAcknowledge: GROUP:READ (W 30); TOPIC:READ filter over the request's topic
    ids (R 29 per partition; ids kgw cannot resolve -> 100).  ShareFetch sessions (KIP-932):
    every partition of the session is authorized on every fetch, as Kafka does (see
    :func:`_share_session`)."""

    def enforce(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
        if not auth.enabled:
            return FORWARD
        request = info.decoded
        v = header.api_version
        if request.group_id is None or not auth.allowed(GROUP, request.group_id, READ):
            return _respond(key, v, error_code=GROUP_AUTHORIZATION_FAILED)
        topics = list(request.topics or ())
        sessions = auth.connection_state.setdefault(_SHARE_SESSIONS, {})
        session_key = (request.group_id, request.member_id)
        epoch = request.share_session_epoch
        if key == 78 and epoch > 0 and session_key not in sessions:
            # a session this connection did not open: kgw cannot authorize what it holds
            return _respond(key, v, error_code=SHARE_SESSION_NOT_FOUND,
                            error_message="Share session not found on this connection (kgw).")
        if epoch == -1:
            sessions.pop(session_key, None)
        if not topics and key == 79:
            return FORWARD
        names = {t.topic_id: _topic_name(auth, t.topic_id) for t in topics}
        cls = response_class(key, v)
        topic_cls = nested(cls, "responses")
        part_cls = nested(topic_cls, "partitions")
        leader_cls = nested(part_cls, "current_leader")

        def error_entry(topic_id: Any, partitions: Any, code: int, acked: Any = frozenset()) -> Any:
            return _blank(topic_cls, topic_id=topic_id, partitions=tuple(
                _blank(part_cls, partition_index=p, error_code=code,
                       acknowledge_error_code=code if p in acked else 0,
                       current_leader=_blank(leader_cls, leader_id=-1, leader_epoch=-1), records=b"")
                for p in partitions))

        if key == 78 and epoch > 0:
            return _share_session(auth, v, request, sessions, session_key, names, error_entry)
        counts: dict[str, int] = {}
        for t in topics:
            n = names[t.topic_id]
            if n is not None:
                counts[n] = counts.get(n, 0) + len(t.partitions)
        allowed = auth.filter(TOPIC, READ, counts)
        denied = {t.topic_id for t in topics if names[t.topic_id] is None or names[t.topic_id] not in allowed}
        if key == 78 and epoch == 0:
            requested = _parts(topics)  # (what one request holds; bounded as the session grows)
            keep_session(sessions, session_key, _ShareSession(
                requested, {tid: parts for tid, parts in requested.items() if tid not in denied}))
        if not denied:
            return FORWARD

        def denied_entry(t: Any) -> Any:
            code = UNKNOWN_TOPIC_ID if names[t.topic_id] is None else TOPIC_AUTHORIZATION_FAILED
            acked = {p.partition_index for p in t.partitions if getattr(p, "acknowledgement_batches", None)}
            return error_entry(t.topic_id, [p.partition_index for p in t.partitions], code, acked)

        kept = tuple(t for t in topics if t.topic_id not in denied)

        def merge(buf: memoryview | bytes, off: int) -> bytes:
            response = decode_response(key, v, buf, off)
            if response.error_code != 0:
                return encode(response)
            merged = merge_in_request_order(
                topics, response.responses,
                denied_entry=lambda t: denied_entry(t) if t.topic_id in denied else None,
                same=lambda e, t: e.topic_id == t.topic_id)
            return encode(replace(response, responses=merged))

        if not kept and key == 79:
            return Decision(respond=encode(_blank(cls, responses=tuple(denied_entry(t) for t in topics))))
        # ShareFetch: the session (epoch, forgotten topics) must still reach the broker, so the reduced
        # request is forwarded even when no named topic is left.
        return Decision(request=_request_body(replace(request, topics=kept)), merge=merge)

    return enforce


def _share_session(auth: AuthHelper, version: int, request: Any, sessions: dict[Any, Any], session_key: Any, names: dict[Any, Any],
                   error_entry: Callable[..., Any]) -> Decision:
    """An incremental ShareFetch (epoch > 0) on a session this connection opened.

    Kafka authorizes READ on *every* partition of the session, not only those the request
    names, and answers 29 for those no longer allowed.  kgw does the same against its copy of
    the session: partitions the principal may not read are taken out of the broker's session
    (``forgotten_topics_data``) and answered 29 on every fetch while the client keeps them in
    its session; once allowed again they are put back (fetched with no acknowledgements).  The
    broker never serves a partition of the session its principal may not read.
    """
    session = sessions[session_key]
    topics = list(request.topics or ())
    requested = _parts(topics)
    client = {tid: set(parts) for tid, parts in session.client.items()}
    for tid, parts in requested.items():
        client.setdefault(tid, set()).update(parts)
    for f in request.forgotten_topics_data or ():
        if f.topic_id in client:
            client[f.topic_id].difference_update(f.partitions)
            if not client[f.topic_id]:
                del client[f.topic_id]
    if partition_count(client) > SESSION_PARTITIONS:
        # kgw would have to remember more than it keeps for one session: the session ends here
        # (the broker's is left to expire), and the client starts over
        sessions.pop(session_key, None)
        return _respond(78, version, error_code=SHARE_SESSION_NOT_FOUND,
                        error_message=f"Share session over {SESSION_PARTITIONS} partitions: not kept (kgw).")
    for tid in client:
        if tid not in names:
            names[tid] = _topic_name(auth, tid)
    counts: dict[str, int] = {}
    for tid, parts in client.items():
        n = names[tid]
        if n is not None:
            counts[n] = counts.get(n, 0) + len(parts)
    allowed = auth.filter(TOPIC, READ, counts)
    target = {tid: parts for tid, parts in client.items() if names[tid] is not None and names[tid] in allowed}
    denied = [tid for tid in client if tid not in target]
    # Every partition kgw knows of and the principal may not read is forgotten upstream on every
    # fetch, whether or not kgw believes the broker still holds it (forgetting a partition a
    # session does not hold changes nothing): a fetch the broker refused cannot leave one behind.
    forget: dict[Any, Any] = {}
    for known in (session.upstream, client):
        for tid, parts in known.items():
            gone = parts - target.get(tid, set())
            if gone:
                forget.setdefault(tid, set()).update(gone)
    add = {tid: parts - session.upstream.get(tid, set()) - requested.get(tid, set()) for tid, parts in target.items()}
    add = {tid: parts for tid, parts in add.items() if parts}
    session.client, session.upstream = client, target
    request_denied = [t for t in topics if t.topic_id not in target]
    if not denied and not add:  # what the broker holds beyond the client's view, the request forgets
        return FORWARD
    kept = [t for t in topics if t.topic_id in target]
    if add:
        fetch_topic_cls = type(topics[0]) if topics else nested(type(request), "topics")
        part_cls = nested(fetch_topic_cls, "partitions")
        for tid, parts in add.items():
            kept.append(_blank(fetch_topic_cls, topic_id=tid, partitions=tuple(
                _blank(part_cls, partition_index=p, acknowledgement_batches=()) for p in sorted(parts))))
    forgotten_cls = nested(type(request), "forgotten_topics_data")
    forgotten = tuple(_blank(forgotten_cls, topic_id=tid, partitions=tuple(sorted(parts)))
                      for tid, parts in forget.items())
    # 29 (or 100 for an id kgw cannot name) for every partition of the session now denied: those
    # the request names (with their acknowledgements refused too), then those it only holds
    errors = []
    named_denied = set()
    for t in request_denied:
        named_denied.add(t.topic_id)
        code = UNKNOWN_TOPIC_ID if names[t.topic_id] is None else TOPIC_AUTHORIZATION_FAILED
        acked = {p.partition_index for p in t.partitions if getattr(p, "acknowledgement_batches", None)}
        parts = sorted(client.get(t.topic_id, set()) | {p.partition_index for p in t.partitions})
        errors.append(error_entry(t.topic_id, parts, code, acked))
    for tid in denied:
        if tid not in named_denied:
            code = UNKNOWN_TOPIC_ID if names[tid] is None else TOPIC_AUTHORIZATION_FAILED
            errors.append(error_entry(tid, sorted(client[tid]), code))
    new_request = replace(request, topics=tuple(kept), forgotten_topics_data=forgotten)

    def merge(buf: memoryview | bytes, off: int) -> bytes | None:
        response = decode_response(78, version, buf, off)
        if response.error_code != 0:  # the broker did not take the change: the client starts over
            sessions.pop(session_key, None)
            return None
        if not errors:
            return None
        return encode(replace(response, responses=(*response.responses, *errors)))

    return Decision(request=_request_body(new_request), merge=merge)


def _enforce_describe_share_offsets(auth: AuthHelper, header: RequestHeader, body: memoryview,
                                    info: RequestInfo) -> Decision:
    """DescribeShareGroupOffsets (docs/authorization.md): GROUP:DESCRIBE per group (R 30); named topics TOPIC:DESCRIBE
    (R 29 per partition, with message); all topics (null): F on the coordinator's answer."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    v = header.api_version
    cls = response_class(90, v)
    group_cls = nested(cls, "groups")
    topic_cls = nested(group_cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    plans: list[tuple[Any, bool, bool, set[int]]] = []  # (group, denied, all_topics, denied topic indexes)
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

    def denied_group(g: Any) -> Any:
        return _blank(group_cls, group_id=g.group_id, error_code=GROUP_AUTHORIZATION_FAILED, topics=())

    def denied_topic(t: Any) -> Any:
        return _blank(topic_cls, topic_name=t.topic_name, topic_id=_ZERO_UUID, partitions=tuple(
            _blank(part_cls, partition_index=p, start_offset=-1, leader_epoch=-1, lag=-1,
                   error_code=TOPIC_AUTHORIZATION_FAILED, error_message=_MESSAGES[TOPIC_AUTHORIZATION_FAILED])
            for p in t.partitions))

    forwarded = [g if not bad else replace(g, topics=tuple(t for i, t in enumerate(g.topics) if i not in bad))
                 for g, d, _a, bad in plans if not d]
    if not forwarded:
        return _respond(90, v, groups=tuple(denied_group(g) for g, *_ in plans))

    def merge(buf: memoryview | bytes, off: int) -> bytes:
        response = decode_response(90, v, buf, off)
        upstream = list(response.groups)
        merged = []
        for g, denied, all_topics, bad in plans:
            if denied:
                merged.append(denied_group(g))
                continue
            entry = pop_first(upstream, lambda e: bool(e.group_id == g.group_id))  # called at once
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
                        e = pop_first(ups, lambda e: bool(e.topic_name == t.topic_name))  # called at once
                        if e is not None:
                            topics.append(e)
                merged.append(replace(entry, topics=tuple(topics)))
            else:
                merged.append(entry)
        return encode(replace(response, groups=tuple(merged)))

    return Decision(request=_request_body(replace(request, groups=tuple(forwarded))), merge=merge)


def _share_offsets_change(key: int, group_op: AclOperation) -> Any:
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

        def denied_entry(t: Any) -> Any:
            if key == 92:
                return _blank(topic_cls, topic_name=t.topic_name, topic_id=_ZERO_UUID,
                              error_code=TOPIC_AUTHORIZATION_FAILED, error_message=msg)
            part_cls = nested(topic_cls, "partitions")
            return _blank(topic_cls, topic_name=t.topic_name, topic_id=_ZERO_UUID, partitions=tuple(
                _blank(part_cls, partition_index=p.partition_index, error_code=TOPIC_AUTHORIZATION_FAILED,
                       error_message=msg) for p in t.partitions))

        kept = tuple(t for t, a in zip(request.topics, ok) if a)

        def merge(buf: memoryview | bytes, off: int) -> bytes:
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


SPECS = (
    ApiSpec(76, "ShareGroupHeartbeat", inspect_decoded, enforce=_enforce_share_heartbeat, versions=(1, 1)),
    ApiSpec(77, "ShareGroupDescribe", inspect_decoded, enforce=_describe_family(
        77, "group_ids", lambda g: _topics_of_consumer_group(g, False), _DESCRIBED_TOPICS_DENIED), versions=(1, 1)),
    ApiSpec(78, "ShareFetch", inspect_decoded, enforce=_share_data_plane(78), versions=(1, 2)),
    ApiSpec(79, "ShareAcknowledge", inspect_decoded, enforce=_share_data_plane(79), versions=(1, 2)),
    ApiSpec(90, "DescribeShareGroupOffsets", inspect_decoded, enforce=_enforce_describe_share_offsets, versions=(0, 1)),
    ApiSpec(91, "AlterShareGroupOffsets", inspect_decoded, enforce=_share_offsets_change(91, READ), versions=(0, 0)),
    ApiSpec(92, "DeleteShareGroupOffsets", inspect_decoded, enforce=_share_offsets_change(92, DELETE), versions=(0, 0)),
)
