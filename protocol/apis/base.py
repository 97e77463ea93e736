"""What one API module tells the gateway: how to inspect a request, how to rewrite a response.

Theory of operation
-------------------
Each API family has one module that exports :class:`ApiSpec` values; the
registry (:mod:`protocol.apis.registry`) collects them into a read-only table
keyed by API key.  A spec is sans-IO:

* ``inspect(header, frame)`` decodes as much of the request as the gateway needs
  (the request decoded, or walked where decoding would cost too much; whether a
  response is expected, how long the broker may legitimately hold it) and returns
  a :class:`RequestInfo`.
* ``rewrite_response(version, frame, body_offset, nodes)`` returns a new response
  body, or ``None`` to forward the upstream's bytes untouched.  ``nodes`` is the
  :class:`NodeMap` of the listener the client came in on: it learns upstream
  broker addresses and answers which gateway address stands for a node id.
* ``enforce(auth, header, body, info)`` authorizes the request through an
  :class:`~protocol.auth_helper.AuthHelper` and returns a :class:`Decision`:
  forward as is, forward a reduced request and merge the denied part back
  into the response, answer entirely from kgw, or close the connection.
  An API without ``enforce`` is refused whenever an authorizer is configured.
* ``versions`` is the (min, max) range all of the above were written for: the
  registry refuses a spec without one, and ApiVersions never advertises a version
  outside it (fail closed when kio or the broker learn a newer version).
* ``answer(services, auth, header, info)`` (``answered_locally`` APIs, async)
  builds the whole response body in kgw from :class:`~protocol.services.LocalServices`, or returns a :class:`Decision` to
  forward part of the request (e.g. config APIs: BROKER resources answered by
  kgw, TOPIC resources forwarded and merged back).

Decisions that need the upstream first
--------------------------------------
Some requests make the broker *derive* something with the authority of the
connection that sent them (a regular expression resolved to topics, internal
topics created for a topology, the owner of a delegation token, the topics of an
all-topics listing).  Through kgw that connection is kgw's own super-user
account, so enforcement must decide with facts only the upstream has (which
topics exist, who owns a token).  Such an enforcer returns a :class:`Decision`
whose ``then`` is a coroutine function: the driver awaits
``then(services)`` (on Trio, the connection's later requests waiting behind it,
so responses stay in order) and applies the decision it returns instead.  An
upstream that does not answer in time closes the connection: nothing is
forwarded on a guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

from protocol.headers import RequestHeader

if TYPE_CHECKING:
    from protocol.services import LocalServices

__all__ = ["ApiSpec", "Decision", "FORWARD", "RefuseRequest", "NodeMap", "RequestInfo", "RequestInspector", "ResponseRewriter",
           "SESSIONS_PER_CONNECTION", "SESSION_PARTITIONS", "keep_session", "partition_count"]

#: Fetch sessions (KIP-227) and share sessions (KIP-932) kgw keeps for one client connection, at
#: most.  A client uses one per broker connection; one it opens beyond these drops the one kgw
#: kept longest, whose next incremental fetch kgw then answers as for a session it never saw
#: (the client starts over, each partition authorized again), as the broker's bounded session
#: cache evicts its own.  Without a bound, a client opening session after session on one
#: connection would grow kgw's memory without end.
SESSIONS_PER_CONNECTION = 16


#: partitions kgw keeps for one fetch or share session, at most: a fetch session that would hold
#: more is not kept (its fetch goes on with session epoch -1, a full fetch that creates none), a
#: share session growing past them ends (122); so incremental fetches naming partition after
#: partition cannot grow kgw's memory without end either.
SESSION_PARTITIONS = 10_000


def partition_count(session: dict[Any, Any]) -> int:
    """The partitions a session holds ({topic: set of partitions})."""
    return sum(len(parts) for parts in session.values())


def keep_session(sessions: dict[Any, Any], key: Any, value: Any) -> None:
    """Keep ``value`` as the connection's session ``key``, newest last, dropping the oldest
    beyond :data:`SESSIONS_PER_CONNECTION`."""
    sessions.pop(key, None)
    sessions[key] = value
    while len(sessions) > SESSIONS_PER_CONNECTION:
        del sessions[next(iter(sessions))]


class NodeMap(Protocol):
    def learn(self, node_id: int, host: str, port: int, rack: str | None) -> None:
        """Record an upstream broker's real address (seen in an upstream response)."""

    def advertise(self, node_id: int) -> tuple[str, int] | None:
        """The gateway address standing for ``node_id`` on this listener, or None if it has none."""


@dataclass(slots=True)  # not frozen: built for every request (see protocol/headers.py)
class RequestInfo:
    expects_response: bool = True
    #: seconds the broker may hold the request on purpose (Fetch max wait, JoinGroup rebalance)
    broker_wait_s: float = 0.0
    #: the decoded kio request when the module decoded it whole, a hot-path walker's own shape
    #: (Produce's ``ProduceShape``), or None
    decoded: Any = None


RequestInspector = Callable[[RequestHeader, memoryview], RequestInfo]
ResponseRewriter = Callable[[int, memoryview, int, NodeMap], "bytes | None"]
#: (response frame or body buffer, offset of the body) -> the body the client gets
ResponseMerger = Callable[[memoryview | bytes, int], "bytes | None"]


@dataclass(frozen=True, slots=True)
class Decision:
    """What enforcement decided for one request."""

    #: replacement request body (the bytes after the header) to forward; None = the original
    request: bytes | None = None
    #: a complete response body kgw answers with; nothing is forwarded
    respond: bytes | None = None
    #: applied to the upstream response body (after address rewriting)
    merge: ResponseMerger | None = None
    #: close the client connection with this reason, no response (e.g. denied acks=0 produce)
    close: str | None = None
    #: ``async then(services) -> Decision``: ask the upstream first (see the module doc); the
    #: other fields are ignored when it is set
    then: Callable[["LocalServices"], Awaitable["Decision"]] | None = None


FORWARD = Decision()


class RefuseRequest(Exception):
    """Raised by an enforcer or local answer: close the connection without a response,
    as a broker does for a request it cannot parse (e.g. an UNKNOWN code in an ACL request)."""
Enforcer = Callable[[Any, RequestHeader, memoryview, RequestInfo], Decision]
LocalAnswer = Callable[["LocalServices", Any, RequestHeader, RequestInfo], Awaitable["bytes | Decision"]]


@dataclass(frozen=True, slots=True)
class ApiSpec:
    api_key: int
    name: str
    inspect: RequestInspector
    rewrite_response: ResponseRewriter | None = None
    #: kgw answers this API itself and never forwards it
    answered_locally: bool = False
    enforce: Enforcer | None = None
    answer: LocalAnswer | None = None
    #: what forwarding alone needs (whether a response comes, how long the broker may hold
    #: it), used instead of ``inspect`` when no authorizer is configured; None: ``inspect``
    peek: RequestInspector | None = None
    #: (min, max) request versions this spec's inspection, enforcement and answers were written
    #: and tested for; nothing outside it is advertised or forwarded, whatever kio or the
    #: upstream offer (a newer kio widens nothing by itself).  None only for rewrite-only
    #: specs merged into another module's spec of the same API.
    versions: tuple[int, int] | None = None
    #: makes a sans-IO walker that passes a large response on while it arrives, its records
    #: moved without entering user space (e.g. :class:`protocol.apis.fetch.FetchResponseStream`);
    #: called with (version, head, bytes left, node map, smallest record set worth moving)
    stream_response: Callable[..., Any] | None = None
    #: the usual request's whole enforcement as one question: (header, info, the connection's
    #: enforcement state (``AuthHelper.connection_state``), the gateway's learned topic ids) ->
    #: the one LITERAL action (:func:`protocol.auth_helper.literal_action`) whose allowance alone
    #: makes ``enforce`` forward the request as it is and change nothing it keeps, or None when
    #: the request needs ``enforce``.  It reads the state, never changes it.  The dispatcher
    #: answers it from the connection's decision memo only (a remembered allowance); anything
    #: else goes through ``enforce``.
    sole_action: Callable[[RequestHeader, RequestInfo, dict[Any, Any], Any], Any] | None = None
    #: (frame, offset, version) of a flexible response body -> False when it ends with no tagged
    #: field, and ``rewrite_response``, which rewrites only those, would answer None; True or None
    #: (not known): ask ``rewrite_response``.  The data plane's C pairing asks this first, a C
    #: function where built, so the usual response costs no Python call.
    response_tags: Callable[[Any, int, int], bool | None] | None = None
