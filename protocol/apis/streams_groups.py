"""KIP-1071 streams groups: StreamsGroupHeartbeat (88) and StreamsGroupDescribe (89).
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
from protocol.apis.group_common import DESCRIBE, GROUP, READ, TOPIC, _INTERNAL_TOPICS, _describe_family, _is_valid_topic, _respond

__all__ = ["SPECS"]


STREAMS_INVALID_TOPOLOGY = 130


_STREAMS_TOPICS_DENIED = "The described group uses topics that the client is not authorized to describe."


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


def _enforce_streams_heartbeat(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """StreamsGroupHeartbeat (docs/authorization.md): GROUP:READ (W 30); topology topics: internal or invalid -> 130;
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


SPECS = (
    ApiSpec(88, "StreamsGroupHeartbeat", inspect_decoded, enforce=_enforce_streams_heartbeat, versions=(0, 0)),
    ApiSpec(89, "StreamsGroupDescribe", inspect_decoded, enforce=_describe_family(
        89, "group_ids", _topics_of_streams_group, _STREAMS_TOPICS_DENIED), versions=(0, 0)),
)
