"""KIP-848 regular-expression subscriptions, resolved with the member's authority, not kgw's.

Theory of operation
-------------------
A ConsumerGroupHeartbeat may subscribe with ``SubscribedTopicRegex``; the group
coordinator then resolves it against every topic of the cluster and keeps only the
topics the member may DESCRIBE, using the request context of the heartbeat that
triggered the resolution (Kafka's ``TopicRegexResolver``, 4.0.1+).  Through kgw that
context is kgw's super-user account: the coordinator would assign every matching
topic, internal ones included.  So kgw never forwards a regular expression.  It
resolves it itself, as the coordinator does, and forwards the result as
``SubscribedTopicNames`` (the regex field emptied); the broker is left nothing to
resolve:

* the expression is compiled with RE2 (Kafka uses RE2/J: the same syntax, linear
  time) and must match a whole topic name; one Kafka rejects is answered
  INVALID_REGULAR_EXPRESSION (128) before anything is forwarded;
* the topic names come from kgw's own listing of the cluster (at most
  :data:`REFRESH_MIN_INTERVAL_S` old, Kafka's ``REGEX_BATCH_REFRESH_MIN_INTERVAL_MS``),
  the matches are filtered by TOPIC:DESCRIBE for the heartbeat's principal with
  Kafka's flags (logIfAllowed true, logIfDenied false, one action per topic);
* explicit ``SubscribedTopicNames`` sent beside the expression stay (Kafka subscribes
  a member to both), each checked as any named subscription is;
* the member is remembered, gateway-wide, by (group, member id) with its expression,
  its explicit names and what was last forwarded.  Its later heartbeats (which send
  the expression only when it changes) are resolved again once the listing they
  were resolved against is older than the interval: a topic created since, or an
  ACL granted or revoked since, changes the names forwarded on that heartbeat.
  Leaving the group, rejoining without an expression or an empty expression forget
  it.  The table is bounded (:data:`MAX_MEMBERS`, least recently seen dropped); a
  member kgw does not know is forwarded as it is: the broker then holds the names
  kgw last forwarded for it, which were authorized when forwarded.

One difference with Kafka remains, in the safe direction: Kafka resolves one
expression once per group and shares the result between the members that use it,
whoever triggered the resolution; kgw resolves it per member, with that member's
authority, so a member never receives topics only another member may describe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from typing import Any
import re2

from authz.acl import AclOperation, ResourceType

__all__ = ["MAX_MEMBERS", "REFRESH_MIN_INTERVAL_S", "InvalidRegex", "RegexMember", "RegexSubscriptions",
           "compile_regex"]

#: Kafka's REGEX_BATCH_REFRESH_MIN_INTERVAL_MS: the least time between two resolutions
REFRESH_MIN_INTERVAL_S = 10.0
#: members remembered by one gateway
MAX_MEMBERS = 100_000
#: compiled expressions and their matches per listing, kept for reuse
_CACHE_MAX = 1024

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a client's bad expression is its error, not a line on kgw's stderr


class InvalidRegex(ValueError):
    """The expression does not compile (Kafka: INVALID_REGULAR_EXPRESSION)."""


def compile_regex(regex: str) -> Any:
    """The compiled expression; :class:`InvalidRegex` with Kafka's message when it does not compile."""
    try:
        return re2.compile(regex, _OPTIONS)
    except re2.error as e:
        reason = e.args[0].decode(errors="replace") if e.args and isinstance(e.args[0], bytes) else str(e)
        raise InvalidRegex(f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {reason}.") from None


def authorized(auth: Any, matched: tuple[str, ...]) -> tuple[str, ...]:
    """The matched topics the principal may DESCRIBE, with the coordinator's flags."""
    if not matched:
        return ()
    allowed = auth.filter(ResourceType.TOPIC, AclOperation.DESCRIBE, matched, log_if_allowed=True,
                          log_if_denied=False)
    return tuple(n for n in matched if n in allowed)


@dataclass(slots=True)
class RegexMember:
    """What kgw forwarded for one member subscribed by expression."""

    regex: str
    #: the explicit SubscribedTopicNames the member sent beside it (forwarded too)
    explicit: tuple[str, ...]
    #: the names last forwarded (explicit ones and the resolved ones, sorted)
    forwarded: tuple[str, ...]
    #: the listing the expression was last resolved against
    listing_version: int
    listing_at: float


class RegexSubscriptions:
    """The members subscribed by expression through this gateway, by (group id, member id)."""

    def __init__(self, max_members: int = MAX_MEMBERS) -> None:
        self.max_members = max_members
        self._members: OrderedDict[tuple[str, str], RegexMember] = OrderedDict()
        self._lock = threading.Lock()  # Trio and the data-plane thread both dispatch heartbeats
        #: compiled expressions, and their matches per listing, kept for reuse (bounded)
        self._compiled: OrderedDict[str, object] = OrderedDict()
        self._matched: OrderedDict[tuple[str, int], tuple[str, ...]] = OrderedDict()

    def compiled(self, regex: str) -> Any:
        """:func:`compile_regex`, remembered (the last :data:`_CACHE_MAX` expressions)."""
        with self._lock:
            pattern = self._compiled.get(regex)
        if pattern is not None:
            return pattern
        pattern = compile_regex(regex)
        with self._lock:
            self._compiled[regex] = pattern
            while len(self._compiled) > _CACHE_MAX:
                self._compiled.popitem(last=False)
        return pattern

    def matching(self, regex: str, names: Any, listing_version: int) -> tuple[str, ...]:
        """The names of a listing the whole expression matches, sorted (remembered per listing)."""
        key = (regex, listing_version)
        with self._lock:
            hit = self._matched.get(key)
        if hit is not None:
            return hit
        pattern = self.compiled(regex)
        found = tuple(sorted(n for n in names if pattern.fullmatch(n) is not None))
        with self._lock:
            self._matched[key] = found
            while len(self._matched) > _CACHE_MAX:
                self._matched.popitem(last=False)
        return found

    @classmethod
    def of(cls, gateway_state: dict[Any, Any]) -> RegexSubscriptions:
        table: RegexSubscriptions | None = gateway_state.get("regex_subscriptions")
        if table is None:
            table = gateway_state.setdefault("regex_subscriptions", cls())
        return table

    def get(self, group: str, member: str) -> RegexMember | None:
        with self._lock:
            entry = self._members.get((group, member))
            if entry is not None:
                self._members.move_to_end((group, member))
            return entry

    def put(self, group: str, member: str, entry: RegexMember) -> None:
        with self._lock:
            self._members[(group, member)] = entry
            self._members.move_to_end((group, member))
            while len(self._members) > self.max_members:
                self._members.popitem(last=False)

    def forget(self, group: str, member: str) -> None:
        with self._lock:
            self._members.pop((group, member), None)

    def __len__(self) -> int:
        return len(self._members)
