"""A stand-in for what ``Decision.then`` asks the upstream (``protocol.services.UpstreamQueries``),
for unit tests of enforcements; what is tested on the wire uses the gateway's own and a real broker."""

from __future__ import annotations

import time
from typing import Any, Callable

import trio

from protocol.apis.api_versions import KIO_VERSIONS
from protocol.apis.base import Decision
from protocol.services import TopicListing

__all__ = ["FakeServices", "FakeUpstream", "settle"]


class FakeUpstream:
    """Scripted answers: the cluster's topics, and a callable per API key for ``call``."""

    def __init__(self, topics=(), principal: str | None = "User:kgw") -> None:
        self.topics = set(topics)
        self.principal = principal
        self.version_of: dict[int, int] = {k: r.max for k, r in KIO_VERSIONS.items()}
        self.answers: dict[int, Callable[[Any, int | None], Any]] = {}
        self.asked: list[tuple[str, Any]] = []  # what was asked, in order
        self._listing: TopicListing | None = None
        self._version = 0

    async def topic_names(self, max_age_s: float) -> TopicListing:
        self.asked.append(("topic_names", max_age_s))
        listing = self._listing
        if listing is None or frozenset(self.topics) != listing.names or time.monotonic() - listing.fetched_at > max_age_s:
            self._version += 1
            listing = self._listing = TopicListing(frozenset(self.topics), self._version, time.monotonic())
        return listing

    async def existing_topics(self, names) -> frozenset[str]:
        self.asked.append(("existing_topics", frozenset(names)))
        return frozenset(n for n in names if n in self.topics)

    def version(self, api_key: int) -> int | None:
        return self.version_of.get(api_key)

    async def coordinator(self, group_id: str) -> int:
        self.asked.append(("coordinator", group_id))
        return 1

    async def call(self, api_key: int, request: Any, *, node_id: int | None = None) -> Any:
        self.asked.append(("call", api_key))
        return self.answers[api_key](request, node_id)


class FakeServices:
    def __init__(self, upstream: FakeUpstream | None = None) -> None:
        self.upstream = upstream if upstream is not None else FakeUpstream()


def settle(decision: Decision, services: FakeServices) -> Decision:
    """The decision a driver would apply: ``decision`` itself, or what its ``then`` decides."""
    if decision.then is None:
        return decision

    async def run():
        return await decision.then(services)

    return trio.run(run)
