"""Questions kgw asks the upstream cluster on its own behalf, before it decides for a client.

Theory of operation
-------------------
Some requests make the broker derive something with the authority of the
connection that sent them; through kgw that is kgw's super-user account (see
``Decision.then`` in :mod:`protocol.apis.base`).  To decide such a request as
Kafka would for the *client*, the enforcement first asks the upstream a fact:
every topic name (a regular expression, an all-topics listing), whether some
topics exist (the internal topics of a streams topology), who owns a token.
:class:`UpstreamQueries` is the one place those questions are asked:

* a small pool of connections per target (a bootstrap broker, or broker N for
  what only the coordinator answers), opened with kgw's own identity, at most
  :data:`_PER_TARGET` at once per target, one request at a time on each, every
  request with the upstream request timeout; a connection that failed is dropped;
* the cluster's topic names are fetched by one request at a time (callers that
  arrive meanwhile wait for that answer) and kept with the time they were
  fetched, so callers say how old a listing they accept (regular expressions:
  Kafka's 10 s between two resolutions; a listing for a client: none);
* existence is always asked now: what kgw remembers of the upstream is never a
  reason to let the broker create, change or reveal anything.

Every failure is :class:`~gateway.upstream.cluster.UpstreamUnavailable`; the connection
that asked is then closed (the client retries), nothing is forwarded on a guess.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Collection
from typing import Any

import trio

from gateway.connection.core import CloseConnection
from gateway.upstream.cluster import UpstreamCluster, UpstreamUnavailable, open_upstream, roundtrip
from gateway.upstream.security import session_ending
from protocol.apis.api_versions import KIO_VERSIONS
from protocol.apis.base import Decision, RefuseRequest
from protocol.codecs import CodecError, make, nested, request_class
from protocol.services import TopicListing

__all__ = ["UpstreamQueries", "settle"]

log = logging.getLogger("kgw.upstream")

#: connections kept open per target (a bootstrap broker, or one broker)
_PER_TARGET = 4


class _Target:
    """The pooled connections to one target, and the slots that bound how many are in use."""

    __slots__ = ("idle", "slots")

    def __init__(self) -> None:
        self.idle: list[Any] = []
        self.slots = trio.Semaphore(_PER_TARGET)


class UpstreamQueries:
    """kgw's own requests to the upstream cluster (``protocol.services.UpstreamQueries``)."""

    def __init__(self, cluster: UpstreamCluster) -> None:
        self.cluster = cluster
        self._targets: dict[int | None, _Target] = {}
        self._listing: TopicListing | None = None
        self._listing_lock = trio.Lock()
        self._listings = 0
        #: requests made (by API key): tests and the metrics count them
        self.calls: dict[int, int] = {}

    @property
    def principal(self) -> str | None:
        """kgw's own principal as the brokers see it ("Type:Name"), or None when kgw cannot tell
        (``upstream.principal``, else the SASL user name)."""
        security = self.cluster.security
        return getattr(security, "own_principal", None) if security is not None else None

    # ---------------------------------------------------------------- questions
    async def topic_names(self, max_age_s: float) -> TopicListing:
        listing = self._listing
        if listing is not None and time.monotonic() - listing.fetched_at <= max_age_s:
            return listing
        asked_at = time.monotonic()
        async with self._listing_lock:
            listing = self._listing
            if listing is not None and listing.fetched_at >= asked_at:
                return listing  # fetched by another caller while this one waited: fresh enough
            response = await self._metadata(None)
            names = frozenset(t.name for t in response.topics if t.error_code == 0 and t.name)
            self._listings += 1
            self._listing = TopicListing(names, self._listings, time.monotonic())
            return self._listing

    async def existing_topics(self, names: Collection[str]) -> frozenset[str]:
        if not names:
            return frozenset()
        response = await self._metadata(sorted(set(names)))
        return frozenset(t.name for t in response.topics if t.error_code == 0 and t.name in names)

    def version(self, api_key: int) -> int | None:
        upstream = (self.cluster.versions or {}).get(api_key)
        ours = KIO_VERSIONS.get(api_key)
        if upstream is None or ours is None:
            return None
        top = min(upstream.max, ours.max)
        return top if top >= max(upstream.min, ours.min) else None

    async def call(self, api_key: int, request: Any, *, node_id: int | None = None) -> Any:
        self.calls[api_key] = self.calls.get(api_key, 0) + 1
        target = self._targets.get(node_id)
        if target is None:
            target = self._targets[node_id] = _Target()
        async with target.slots:
            while target.idle and session_ending(target.idle[-1]):  # kgw's SASL session ends (KIP-368)
                await trio.aclose_forcefully(target.idle.pop())
            stream = target.idle.pop() if target.idle else await self._connect(node_id)
            try:
                response = await roundtrip(stream, api_key, int(type(request).__version__), request,
                                           self.cluster.request_timeout_s)
            except BaseException as e:
                await trio.aclose_forcefully(stream)
                if isinstance(e, trio.TooSlowError):
                    raise UpstreamUnavailable(f"the upstream did not answer kgw's own request (API {api_key}) "
                                              f"within {self.cluster.request_timeout_s:g}s") from None
                if isinstance(e, (trio.BrokenResourceError, trio.ClosedResourceError, OSError, CodecError)):
                    raise UpstreamUnavailable(f"kgw's own request (API {api_key}) to the upstream failed: "
                                              f"{e}") from None
                raise
            target.idle.append(stream)
            return response

    async def coordinator(self, group_id: str) -> int:
        """The node id of ``group_id``'s coordinator (its address learned on the way)."""
        version = self.version(10)
        if version is None or version < 4:
            raise UpstreamUnavailable("the upstream does not speak FindCoordinator v4+")
        cls = request_class(10, version)
        response = await self.call(10, make(cls, key_type=0, coordinator_keys=(group_id,)))
        found = next((c for c in response.coordinators if c.key == group_id), None)
        if found is None or found.error_code != 0:
            code = int(found.error_code) if found is not None else "none"
            raise UpstreamUnavailable(f"no coordinator for group {group_id!r} (error {code})")
        self.cluster.learn(found.node_id, found.host, found.port)
        return found.node_id

    async def aclose(self) -> None:
        for target in self._targets.values():
            while target.idle:
                await trio.aclose_forcefully(target.idle.pop())

    # ---------------------------------------------------------------- helpers
    async def _connect(self, node_id: int | None):
        cluster = self.cluster
        if node_id is None:
            return await cluster.connect_bootstrap()
        node = cluster.nodes.get(node_id)
        if node is None:
            raise UpstreamUnavailable(f"upstream broker {node_id} is unknown")
        return await open_upstream(node.host, node.port, cluster.connect_timeout_s, cluster.security)

    async def _metadata(self, names: list[str] | None):
        """A Metadata request that creates nothing: every topic (``names`` None) or these."""
        if self.cluster.versions is None:
            await self.cluster.ensure_versions()
        version = self.version(3)
        if version is None:
            raise UpstreamUnavailable("the upstream does not speak Metadata")
        cls = request_class(3, version)
        fields = cls.__dataclass_fields__
        kw: dict[str, Any] = {}
        if names is None:
            kw["topics"] = None
        else:
            topic_cls = nested(cls, "topics")
            kw["topics"] = tuple(make(topic_cls, name=n, topic_id=None) for n in names)
        if "allow_auto_topic_creation" in fields:
            kw["allow_auto_topic_creation"] = False
        for flag in ("include_cluster_authorized_operations", "include_topic_authorized_operations"):
            if flag in fields:
                kw[flag] = False
        return await self.call(3, make(cls, **kw))


async def settle(question, services, timeout_s: float, what: str) -> Decision:
    """Ask the upstream what a decision needs (``Decision.then``) and return the decision it
    makes.  No answer in time, or none at all, closes the connection: nothing is forwarded
    on a guess."""
    try:
        with trio.fail_after(timeout_s):
            decided = await question(services)
    except trio.TooSlowError:
        raise CloseConnection(f"{what}: the upstream did not answer kgw's own question within {timeout_s:g}s; "
                              "nothing forwarded", "upstream") from None
    except UpstreamUnavailable as e:
        raise CloseConnection(f"{what}: {e}; nothing forwarded", "upstream") from None
    except RefuseRequest as e:
        raise CloseConnection(f"{what} refused: {e}", "refused") from None
    if decided.then is not None:
        raise RuntimeError(f"{what}: a decision made after asking the upstream asks again")
    return decided
