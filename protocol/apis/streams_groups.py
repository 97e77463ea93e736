"""KIP-1071 streams groups: StreamsGroupHeartbeat (88) and StreamsGroupDescribe (89).

Internal topics are created with the *sender's* authority
--------------------------------------------------------------
A streams topology names internal topics (repartition and changelog topics).  On
every heartbeat of a group whose topology has missing internal topics, Kafka's
coordinator asks the broker to create them, and the broker does so when the
*sender* of that heartbeat may CREATE them (CLUSTER:CREATE, logIfDenied false,
else TOPIC:CREATE per missing topic); otherwise it creates nothing and adds "
Unauthorized to CREATE on topics ..." to the MISSING_INTERNAL_TOPICS status.
Through kgw the sender is kgw's super-user account, so kgw makes that decision
before forwarding, for every heartbeat:

* the group's internal topics come from the topology of the heartbeat (only a
  joining member sends one) or, for later heartbeats, from the topologies kgw
  has forwarded for the group; a group kgw has not seen is described first
  (StreamsGroupDescribe at its coordinator, remembered :data:`_DESCRIBED_TTL_S`);
* a principal that may create every one of them (probed without audit) is
  forwarded at once: the usual set-up (CREATE on the application's prefix)
  costs nothing more;
* otherwise kgw asks the upstream which of them exist, now (never from memory),
  and authorizes CREATE for the missing ones as the broker would; if one is
  refused, nothing is forwarded and kgw answers the heartbeat as Kafka's status
  says: no error, the MISSING_INTERNAL_TOPICS status with Kafka's detail, the
  member's own id and epoch, no assignment change.  The member waits for the
  topics, as against Kafka; the coordinator, unlike Kafka's, has not seen this
  heartbeat (a member kept waiting longer than its session is fenced, and rejoins
  once the topics exist).

Source topics given by regular expression are refused as Kafka 4.3 refuses
them (INVALID_REQUEST): a coordinator that resolved them would do so with kgw's
authority.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from datetime import timedelta

from typing import Any
from authz.acl import AclOperation
from protocol.apis.base import FORWARD, ApiSpec, Decision, RequestInfo
from protocol.apis.generic import inspect_decoded
from protocol.auth_helper import AuthHelper
from protocol.codecs import encode, make, nested, request_class, response_class
from protocol.errors import (
    GROUP_AUTHORIZATION_FAILED,
    TOPIC_AUTHORIZATION_FAILED,
)
from protocol.headers import RequestHeader
from protocol.apis.group_common import (DESCRIBE, GROUP, INVALID_REQUEST, READ, TOPIC, _INTERNAL_TOPICS, _blank,
                                        _describe_family, _is_valid_topic, _respond)
from protocol.services import LocalServices

__all__ = ["SPECS", "StreamsTopologies"]


STREAMS_INVALID_TOPOLOGY = 130
#: StreamsGroupHeartbeatResponse.Status.MISSING_INTERNAL_TOPICS
MISSING_INTERNAL_TOPICS = 3
#: Kafka's streams.group.heartbeat.interval.ms default, told to a member kgw answers itself
_HEARTBEAT_INTERVAL = timedelta(milliseconds=5000)
#: how long a topology learned by describing the group is trusted
_DESCRIBED_TTL_S = 60.0
CREATE = AclOperation.CREATE


_STREAMS_TOPICS_DENIED = "The described group uses topics that the client is not authorized to describe."


class StreamsTopologies:
    """The internal topics of each streams group's topology, as this gateway last saw it."""

    MAX_GROUPS = 10_000

    def __init__(self) -> None:
        self._groups: OrderedDict[str, tuple[frozenset[str], float]] = OrderedDict()
        self._lock = threading.Lock()

    @classmethod
    def of(cls, gateway_state: dict[Any, Any]) -> StreamsTopologies:
        table: StreamsTopologies | None = gateway_state.get("streams_topologies")
        if table is None:
            table = gateway_state.setdefault("streams_topologies", cls())
        return table

    def learn(self, group: str, internal: frozenset[str], expires_at: float = float("inf")) -> None:
        with self._lock:
            self._groups[group] = (internal, expires_at)
            self._groups.move_to_end(group)
            while len(self._groups) > self.MAX_GROUPS:
                self._groups.popitem(last=False)

    def get(self, group: str) -> frozenset[str] | None:
        with self._lock:
            entry = self._groups.get(group)
            if entry is None:
                return None
            if time.monotonic() >= entry[1]:
                del self._groups[group]
                return None
            self._groups.move_to_end(group)
            return entry[0]


def _internal_topics(subtopologies: Any) -> frozenset[str]:
    """The topics a topology has created for it: repartition source and changelog topics."""
    names: set[str] = set()
    for s in subtopologies or ():
        names.update(t.name for t in s.repartition_source_topics or ())
        names.update(t.name for t in s.state_changelog_topics or ())
    return frozenset(names)


def _topics_of_streams_group(group: Any) -> Any:
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
    TOPIC:DESCRIBE on all of them, any denied -> W 29; internal topics the broker would create
    are created only if the sender may create them (see the module doc)."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    v = header.api_version
    if not auth.allowed(GROUP, request.group_id, READ):
        return _respond(88, v, error_code=GROUP_AUTHORIZATION_FAILED)
    topology = request.topology
    if topology is not None:
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
        if any(s.source_topic_regex for s in topology.subtopologies or ()):
            return _respond(88, v, error_code=INVALID_REQUEST,
                            error_message="Regular expressions for source topics are not supported yet.")
    return _internal_topics_decision(auth, v, request)


def _internal_topics_decision(auth: AuthHelper, version: int, request: Any) -> Decision:
    if request.member_epoch < 0:  # leaving: the coordinator configures nothing
        return FORWARD
    topologies = StreamsTopologies.of(auth.gateway_state)
    group = request.group_id
    internal: frozenset[str] | None
    if request.topology is not None:
        internal = _internal_topics(request.topology.subtopologies)
        topologies.learn(group, internal)
    else:
        internal = topologies.get(group)
    if internal is not None and _may_create_all(auth, internal):
        return FORWARD

    async def then(services: LocalServices) -> Decision:
        names = internal
        if names is None:
            names = await _described_internal_topics(services, group)
            topologies.learn(group, names, time.monotonic() + _DESCRIBED_TTL_S)
            if _may_create_all(auth, names):
                return FORWARD
        missing = names - await services.upstream.existing_topics(names)
        if not missing or auth.cluster(CREATE, log_if_denied=False):
            return FORWARD
        unauthorized = sorted(n for n in missing if n not in auth.filter(TOPIC, CREATE, missing))
        if not unauthorized:
            return FORWARD
        return _waiting_for_topics(version, request, sorted(missing), unauthorized)

    return Decision(then=then)


def _may_create_all(auth: AuthHelper, names: frozenset[str]) -> bool:
    """Whether the principal may create every one of ``names`` (a probe: nothing is audited)."""
    if not names or auth.cluster(CREATE, log_if_allowed=False, log_if_denied=False):
        return True
    return all(auth.allowed(TOPIC, n, CREATE, log_if_allowed=False, log_if_denied=False) for n in names)


async def _described_internal_topics(services: LocalServices, group: str) -> frozenset[str]:
    """The internal topics of ``group``'s topology, asked of its coordinator (none if it has none)."""
    version = services.upstream.version(89)
    if version is None:
        return frozenset()
    node = await services.upstream.coordinator(group)
    cls = request_class(89, version)
    response = await services.upstream.call(89, make(cls, group_ids=(group,), include_authorized_operations=False),
                                            node_id=node)
    described = next((g for g in response.groups if g.group_id == group), None)
    if described is None or described.error_code != 0 or described.topology is None:
        return frozenset()
    return _internal_topics(described.topology.subtopologies)


def _summary(topics: list[str]) -> str:
    """Kafka's ``InternalTopicManager.summarizeTopics``."""
    shown = ", ".join(topics[:3])
    return shown + (f" and {len(topics) - 3} additional topics" if len(topics) > 3 else "")


def _waiting_for_topics(version: int, request: Any, missing: list[str], unauthorized: list[str]) -> Decision:
    """Kafka's answer to a heartbeat whose missing internal topics the sender may not create."""
    cls = response_class(88, version)
    status_cls = nested(cls, "status")
    detail = (f"Internal topics are missing: {_summary(missing)}; "
              f"Unauthorized to CREATE on topics {', '.join(unauthorized)}.")
    return Decision(respond=encode(_blank(
        cls, member_id=request.member_id, member_epoch=request.member_epoch, heartbeat_interval=_HEARTBEAT_INTERVAL,
        endpoint_information_epoch=request.endpoint_information_epoch,
        status=(make(status_cls, status_code=MISSING_INTERNAL_TOPICS, status_detail=detail),))))


SPECS = (
    ApiSpec(88, "StreamsGroupHeartbeat", inspect_decoded, enforce=_enforce_streams_heartbeat, versions=(0, 0)),
    ApiSpec(89, "StreamsGroupDescribe", inspect_decoded, enforce=_describe_family(
        89, "group_ids", _topics_of_streams_group, _STREAMS_TOPICS_DENIED), versions=(0, 0)),
)
