"""KIP-848 consumer groups: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).

A heartbeat's ``SubscribedTopicRegex`` is never forwarded: kgw resolves it with the
member's authority and forwards the topic names (:mod:`protocol.regex_subscriptions`).
"""

from __future__ import annotations

import time
from dataclasses import replace

from typing import Any
from protocol.apis.base import FORWARD, ApiSpec, Decision, RequestInfo
from protocol.apis.generic import inspect_decoded
from protocol.auth_helper import AuthHelper
from protocol.errors import (
    GROUP_AUTHORIZATION_FAILED,
    TOPIC_AUTHORIZATION_FAILED,
)
from protocol.headers import RequestHeader
from protocol.apis.group_common import GROUP, READ, _any_topic_denied, _describe_family, _request_body, _respond
from protocol.regex_subscriptions import (REFRESH_MIN_INTERVAL_S, InvalidRegex, RegexMember, RegexSubscriptions,
                                          authorized)
from protocol.services import LocalServices

__all__ = ["SPECS"]


INVALID_REGULAR_EXPRESSION = 128

_DESCRIBED_TOPICS_DENIED = "The group has described topic(s) that the client is not authorized to describe."


def _topics_of_consumer_group(group: Any, with_target: bool) -> Any:
    for m in group.members or ():
        assignments = (m.assignment, m.target_assignment) if with_target else (m.assignment,)
        for a in assignments:
            if a is None:
                continue
            for tp in a.topic_partitions or ():
                yield tp.topic_name


def _enforce_consumer_heartbeat(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """ConsumerGroupHeartbeat (docs/authorization.md): GROUP:READ (W 30); non-empty SubscribedTopicNames: TOPIC:DESCRIBE
    on every distinct name, any denied -> W 29; a SubscribedTopicRegex is resolved by kgw with the
    member's authority and forwarded as names (see the module doc)."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    v = header.api_version
    if not auth.allowed(GROUP, request.group_id, READ):
        return _respond(68, v, error_code=GROUP_AUTHORIZATION_FAILED)
    if _any_topic_denied(auth, request.subscribed_topic_names):
        return _respond(68, v, error_code=TOPIC_AUTHORIZATION_FAILED)
    if v < 1:  # SubscribedTopicRegex came with v1
        return FORWARD
    return _regex_subscription(auth, v, request)


def _regex_subscription(auth: AuthHelper, version: int, request: Any) -> Decision:
    """What becomes of the member's expression: nothing to do, names forwarded instead, or an error."""
    table = RegexSubscriptions.of(auth.gateway_state)
    group, member, epoch = request.group_id, request.member_id, request.member_epoch
    regex = request.subscribed_topic_regex
    names = request.subscribed_topic_names
    if epoch < 0:  # leaving (-1, or -2 for a static member)
        table.forget(group, member)
        return FORWARD
    known = table.get(group, member)
    if regex is None:
        if epoch == 0:  # (re)joining without an expression: the member has none now
            if known is not None:
                table.forget(group, member)
            return FORWARD
        if known is None:
            return FORWARD
        if names is None and time.monotonic() - known.listing_at < REFRESH_MIN_INTERVAL_S:
            return FORWARD  # resolved recently against a listing that is still current
        explicit = tuple(names) if names is not None else known.explicit
        return Decision(then=_resolver(auth, request, known.regex, explicit, known.forwarded))
    if regex == "":  # the member gives up its expression: only its explicit names remain
        table.forget(group, member)
        if known is None:
            return FORWARD
        explicit = tuple(names) if names is not None else known.explicit
        return Decision(request=_request_body(replace(request, subscribed_topic_names=explicit)))
    try:
        table.compiled(regex)
    except InvalidRegex as e:
        return _respond(68, version, error_code=INVALID_REGULAR_EXPRESSION, error_message=str(e))
    if names is not None:
        explicit = tuple(names)
    else:
        explicit = known.explicit if known is not None and epoch != 0 else ()
    return Decision(then=_resolver(auth, request, regex, explicit, None))


def _resolver(auth: AuthHelper, request: Any, regex: str, explicit: tuple[str, ...], last: tuple[str, ...] | None) -> Any:
    """``Decision.then``: resolve ``regex`` against kgw's listing of the cluster for this member and
    forward the names instead of the expression (``last``: what was forwarded before, or None)."""

    async def then(services: LocalServices) -> Decision:
        listing = await services.upstream.topic_names(REFRESH_MIN_INTERVAL_S)
        table = RegexSubscriptions.of(auth.gateway_state)
        resolved = authorized(auth, table.matching(regex, listing.names, listing.version))
        forwarded = tuple(sorted({*explicit, *resolved}))
        table.put(request.group_id, request.member_id, RegexMember(
            regex, explicit, forwarded, listing.version, listing.fetched_at))
        if (last is not None and forwarded == last and request.subscribed_topic_names is None
                and request.subscribed_topic_regex is None):
            return FORWARD  # nothing changed: the broker holds these names already
        return Decision(request=_request_body(replace(request, subscribed_topic_names=forwarded,
                                                      subscribed_topic_regex=None)))

    return then


SPECS = (
    ApiSpec(68, "ConsumerGroupHeartbeat", inspect_decoded, enforce=_enforce_consumer_heartbeat, versions=(0, 1)),
    ApiSpec(69, "ConsumerGroupDescribe", inspect_decoded, enforce=_describe_family(
        69, "group_ids", lambda g: _topics_of_consumer_group(g, True), _DESCRIBED_TOPICS_DENIED), versions=(0, 1)),
)
