"""KIP-848 consumer groups: ConsumerGroupHeartbeat (68) and ConsumerGroupDescribe (69).
"""

from __future__ import annotations
from protocol.apis.base import FORWARD, ApiSpec, Decision, RequestInfo
from protocol.apis.generic import inspect_decoded
from protocol.auth_helper import AuthHelper
from protocol.errors import (
    GROUP_AUTHORIZATION_FAILED,
    TOPIC_AUTHORIZATION_FAILED,
)
from protocol.headers import RequestHeader
from protocol.apis.group_common import GROUP, READ, _any_topic_denied, _describe_family, _respond

__all__ = ["SPECS"]


_DESCRIBED_TOPICS_DENIED = "The group has described topic(s) that the client is not authorized to describe."


def _topics_of_consumer_group(group, with_target: bool):
    for m in group.members or ():
        assignments = (m.assignment, m.target_assignment) if with_target else (m.assignment,)
        for a in assignments:
            if a is None:
                continue
            for tp in a.topic_partitions or ():
                yield tp.topic_name


def _enforce_consumer_heartbeat(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """ConsumerGroupHeartbeat (docs/authorization.md): GROUP:READ (W 30); non-empty SubscribedTopicNames: TOPIC:DESCRIBE
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


SPECS = (
    ApiSpec(68, "ConsumerGroupHeartbeat", inspect_decoded, enforce=_enforce_consumer_heartbeat, versions=(0, 1)),
    ApiSpec(69, "ConsumerGroupDescribe", inspect_decoded, enforce=_describe_family(
        69, "group_ids", lambda g: _topics_of_consumer_group(g, True), _DESCRIBED_TOPICS_DENIED), versions=(0, 1)),
)
