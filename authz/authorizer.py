"""The Authorizer SPI (KIP-504), in Python.

Theory of operation
-------------------
The gateway loads one authorizer instance (``authorizer.class.name``, see
``authz.loader``) and shares it between all listeners; the request context
tells it which listener and security protocol a request came from.

Lifecycle, in this order (mirroring ``org.apache.kafka.server.authorizer``):

1. ``configure(configs)`` — once, with the gateway's whole config mapping.
2. ``monitor(registry)`` — if the authorizer is ``Monitorable``; the host
   hands over its Prometheus ``CollectorRegistry`` (KIP-877 / KIP-608 idea).
3. ``start(server_info)`` — returns one readiness awaitable per listener
   endpoint.  The gateway must not accept client connections on a listener
   before its readiness is set; ``early.start.listeners`` are ready at once.
   For ``StandardAuthorizer`` every other listener becomes ready when the
   first complete ACL snapshot has been loaded (KIP-801).
4. ``authorize(...)`` / ``acls(...)`` / ``create_acls`` / ``delete_acls`` —
   any number of times, from any task.
5. ``close()`` — once; afterwards the instance is not used again.

Threading model
---------------
kgw runs on Trio, so most calls come from one thread, but an implementation
must also be safe when ``authorize`` and ``acls`` are called from worker
threads (``trio.to_thread``) while ACLs change.

* ``authorize``, ``authorize_by_resource_type`` and ``acls`` are
  **synchronous** and must never block on I/O: they run on the event loop for
  every request.  An implementation keeps every ACL in memory.
* ``create_acls`` / ``delete_acls`` are **async**: they may await remote
  stores; they return once the change is durable (or has failed).

Contract of ``authorize``
-------------------------
* One ``AuthorizationResult`` per action, **in the same order as the actions**.
* Every action names a LITERAL resource pattern (the request layer never asks
  about PREFIXED patterns).
* ``Action.resource_reference_count`` is how many entries of the request the
  action stands for (for audit only; it never changes the decision).
* ``log_if_allowed`` / ``log_if_denied`` choose the audit level (see
  ``authz.audit``); they never change the decision either.
* The context's ``principal`` is the exact object the principal builder
  produced (KIP-111); implementations must not expect a particular class.
"""

from __future__ import annotations

import abc
import enum
import functools
import ipaddress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Collection, Iterable, Mapping, Protocol, runtime_checkable

from .acl import AclBinding, AclBindingFilter, AclOperation, AclPermissionType, PatternType
from .acl import AccessControlEntryFilter, ResourcePattern, ResourcePatternFilter, ResourceType
from .acl import WILDCARD_HOST, WILDCARD_RESOURCE
from .principal import KafkaPrincipal, WILDCARD_PRINCIPAL_KEY

if TYPE_CHECKING:  # pragma: no cover
    import prometheus_client

__all__ = [
    "PreviewsConfigs",
    "StoreUnavailableError",
    "Action",
    "AuthorizationResult",
    "AuthorizableRequestContext",
    "Endpoint",
    "AuthorizerServerInfo",
    "AclCreateResult",
    "AclBindingDeleteResult",
    "AclDeleteResult",
    "Authorizer",
    "DecisionMemo",
    "Reconfigurable",
    "Monitorable",
    "AuthorizerNotReadyError",
    "ConfigError",
    "ReadinessEvent",
    "jvm_host_address",
    "HARDCODE_RESOURCE_NAME",
    "check_by_resource_type_args",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class AuthorizationResult(enum.Enum):
    ALLOWED = "ALLOWED"
    DENIED = "DENIED"


@dataclass(frozen=True, slots=True)
class Action:
    """One question for the authorizer: may the caller do ``operation`` on
    ``resource_pattern`` (always LITERAL)?"""

    resource_pattern: ResourcePattern
    operation: AclOperation
    resource_reference_count: int = 1
    log_if_allowed: bool = True
    log_if_denied: bool = True


class AuthorizerNotReadyError(Exception):
    """``authorize`` was called before the initial ACL load completed.

    Kafka's ``AuthorizerNotReadyException``; it has no error code of its own,
    so clients see UNKNOWN_SERVER_ERROR (-1).
    """


class StoreUnavailableError(Exception):
    """The store behind ``acl_writer`` (or a config/credential write) could not make a change
    durable in time; retriable, and nothing of the change is applied unless the store
    applies all of it later.  Clients get REQUEST_TIMED_OUT."""


class ConfigError(ValueError):
    """An authorizer config value is malformed."""


@functools.lru_cache(maxsize=65536)  # one context per request, few distinct client addresses
def jvm_host_address(address: IPAddress | None) -> str:
    """Format a client IP the way the JVM's ``InetAddress.getHostAddress`` does.

    ACL host text is compared with this string (docs/authorization.md):

    * IPv4: dotted decimal.
    * IPv4-mapped IPv6 (``::ffff:a.b.c.d``): plain IPv4, as the JVM reports it.
    * IPv6: eight lower-case hex groups, no ``::`` compression, no leading
      zeros (``0:0:0:0:0:0:0:1``), with ``%scope`` appended when present.
    """
    if address is None:
        return ""
    if address.version == 4:
        return str(address)
    mapped = address.ipv4_mapped
    if mapped is not None:
        return str(mapped)
    packed = address.packed
    text = ":".join(format((packed[i] << 8) | packed[i + 1], "x") for i in range(0, 16, 2))
    scope = getattr(address, "scope_id", None)
    return f"{text}%{scope}" if scope else text


@dataclass(frozen=True, slots=True)
class AuthorizableRequestContext:
    """What the request layer knows about the request being authorized.

    ``principal`` is the exact principal object (KIP-111).  ``request_type``
    is the API key (the *inner* request for forwarded ones).
    ``host_address`` is the client IP formatted as the JVM would (computed
    once per context; the authorizer compares ACL hosts with it).
    """

    listener_name: str
    security_protocol: str
    principal: KafkaPrincipal
    client_address: IPAddress
    request_type: int
    request_version: int
    client_id: str | None
    correlation_id: int
    host_address: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "host_address", jvm_host_address(self.client_address))

    def for_request(self, request_type: int, request_version: int, client_id: str | None,
                    correlation_id: int) -> "AuthorizableRequestContext":
        """The same connection's context for another request: this listener, principal, address
        and host text, that request's key, version, client id and correlation id.  Equal to
        constructing it, at a third of the cost (a dataclass's frozen ``__init__`` goes through
        ``object.__setattr__`` field by field, and this runs for every authorized request)."""
        context = _new_context(AuthorizableRequestContext)
        _put_listener(context, self.listener_name)  # (a loop over the pairs costs half again)
        _put_protocol(context, self.security_protocol)
        _put_principal(context, self.principal)
        _put_address(context, self.client_address)
        _put_host(context, self.host_address)
        _put_type(context, request_type)
        _put_version(context, request_version)
        _put_client_id(context, client_id)
        _put_correlation_id(context, correlation_id)
        return context


# the slots' own setters: what the frozen dataclass's __init__ reaches through object.__setattr__
_new_context = object.__new__
_SLOTS: Mapping[str, Any] = AuthorizableRequestContext.__dict__
_put_listener = _SLOTS["listener_name"].__set__
_put_protocol = _SLOTS["security_protocol"].__set__
_put_principal = _SLOTS["principal"].__set__
_put_address = _SLOTS["client_address"].__set__
_put_host = _SLOTS["host_address"].__set__
_put_type = _SLOTS["request_type"].__set__
_put_version = _SLOTS["request_version"].__set__
_put_client_id = _SLOTS["client_id"].__set__
_put_correlation_id = _SLOTS["correlation_id"].__set__


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A listener the gateway serves on."""

    listener_name: str
    security_protocol: str
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class AuthorizerServerInfo:
    cluster_id: str
    broker_id: int
    endpoints: tuple[Endpoint, ...]
    inter_broker_endpoint: Endpoint | None
    early_start_listeners: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class AclCreateResult:
    """Result of one CreateAcls creation; ``error_code`` 0 means success."""

    error_code: int = 0
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_code == 0


AclCreateResult.SUCCESS = AclCreateResult()  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class AclBindingDeleteResult:
    """One binding removed by a delete filter (error 0) or that failed."""

    binding: AclBinding
    error_code: int = 0
    message: str | None = None


@dataclass(frozen=True, slots=True)
class AclDeleteResult:
    """Result of one DeleteAcls filter: a filter-level error, or the bindings
    it matched (each with its own error)."""

    error_code: int = 0
    message: str | None = None
    deleted: tuple[AclBindingDeleteResult, ...] = ()


@runtime_checkable
class ReadinessEvent(Protocol):
    """What ``start()`` returns per endpoint: a ``trio.Event``-like object."""

    def is_set(self) -> bool: ...

    async def wait(self) -> None: ...


#: The resource name the interface-default ``authorize_by_resource_type``
#: probes first (its audit line shows ``Topic:LITERAL:hardcode``).
HARDCODE_RESOURCE_NAME = "hardcode"


class Authorizer(abc.ABC):
    """Kafka's ``org.apache.kafka.server.authorizer.Authorizer``.

    See the module docstring for lifecycle and threading rules.
    """

    @abc.abstractmethod
    def configure(self, configs: Mapping[str, Any]) -> None:
        """Receive the gateway config.  Called once, before ``start``.  An authorizer that
        also has ``config_keys() -> Collection[str]``, defined by its own class, declares every
        key it reads: kgw then refuses any other key in ``authorizer.config`` (a typo) before
        calling this.  A subclass that does not define it is given any key."""

    @abc.abstractmethod
    def start(self, server_info: AuthorizerServerInfo) -> dict[Endpoint, ReadinessEvent]:
        """Start the authorizer; return one readiness event per endpoint of
        ``server_info.endpoints``.  A listener must accept clients only once
        its event is set."""

    @abc.abstractmethod
    def authorize(
        self, context: AuthorizableRequestContext, actions: Iterable[Action]
    ) -> list[AuthorizationResult]:
        """Authorize each action; results are in the same order as actions.

        Synchronous and non-blocking; may raise ``AuthorizerNotReadyError``.
        """

    @abc.abstractmethod
    async def create_acls(
        self, context: AuthorizableRequestContext | None, bindings: list[AclBinding]
    ) -> list[AclCreateResult]:
        """Create ACLs; one result per binding, in order.  Returns once the
        change is durable.  ``context`` is None for internal callers."""

    @abc.abstractmethod
    async def delete_acls(
        self, context: AuthorizableRequestContext | None, filters: list[AclBindingFilter]
    ) -> list[AclDeleteResult]:
        """Delete the ACLs matching each filter; one result per filter."""

    @abc.abstractmethod
    def acls(self, binding_filter: AclBindingFilter) -> Iterable[AclBinding]:
        """The ACLs matching ``binding_filter`` (DescribeAcls).  Synchronous;
        the result reflects one consistent view of the ACLs."""

    def authorize_by_resource_type(
        self, context: AuthorizableRequestContext, op: AclOperation, resource_type: ResourceType
    ) -> AuthorizationResult:
        """KIP-679: is the caller allowed ``op`` on *some* resource of the type?

        This is the interface default (Kafka's ``Authorizer.authorizeByResourceType``), written straight from
        the rules and deliberately simple: it lists every ACL of the type.
        ``StandardAuthorizer`` overrides it with an indexed version that gives
        the same answers.

        1. ANY/UNKNOWN op or resource type → ``ValueError``.
        2. Probe ``authorize`` on LITERAL ``hardcode`` (refCount 0, audit on
           allow only).  ALLOWED → ALLOWED (covers super users, and
           ``allow.everyone.if.no.acl.found`` when nothing covers ``hardcode``).
        3. Of the ACLs of that type whose host is the client's or ``*``, whose
           principal is the caller's or ``User:*`` and whose operation is
           ``op`` or ALL (no implied operations): a DENY on LITERAL ``*`` →
           DENIED; an ALLOW on LITERAL ``*`` → ALLOWED; an ALLOW literal not
           equal to a DENY literal and with no DENY prefix that starts it →
           ALLOWED; an ALLOW prefix with no DENY prefix that starts it →
           ALLOWED.  A DENY literal does not cancel an ALLOW prefix.
        4. Otherwise DENIED.
        """
        check_by_resource_type_args(op, resource_type)
        probe = Action(
            ResourcePattern(resource_type, HARDCODE_RESOURCE_NAME, PatternType.LITERAL),
            op,
            resource_reference_count=0,
            log_if_allowed=True,
            log_if_denied=False,
        )
        if self.authorize(context, [probe])[0] is AuthorizationResult.ALLOWED:
            return AuthorizationResult.ALLOWED

        principal_key = context.principal.key
        host = context.host_address
        deny_literals: set[str] = set()
        deny_prefixes: set[str] = set()
        allow_literals: set[str] = set()
        allow_prefixes: set[str] = set()
        wildcard_allow = False
        type_filter = AclBindingFilter(
            ResourcePatternFilter(resource_type, None, PatternType.ANY), AccessControlEntryFilter.ANY  # type: ignore[attr-defined]
        )
        for binding in self.acls(type_filter):
            entry, pattern = binding.entry, binding.pattern
            if entry.host != host and entry.host != WILDCARD_HOST:
                continue
            if entry.principal != principal_key and entry.principal != WILDCARD_PRINCIPAL_KEY:
                continue
            if entry.operation != op and entry.operation is not AclOperation.ALL:
                continue
            literal = pattern.pattern_type is PatternType.LITERAL
            if entry.permission_type is AclPermissionType.DENY:
                if literal and pattern.name == WILDCARD_RESOURCE:
                    return AuthorizationResult.DENIED
                (deny_literals if literal else deny_prefixes).add(pattern.name)
            elif entry.permission_type is AclPermissionType.ALLOW:
                if literal and pattern.name == WILDCARD_RESOURCE:
                    wildcard_allow = True
                else:
                    (allow_literals if literal else allow_prefixes).add(pattern.name)
        if wildcard_allow:
            return AuthorizationResult.ALLOWED

        def dominated_by_deny_prefix(name: str) -> bool:
            return any(name[:i] in deny_prefixes for i in range(1, len(name) + 1))

        for name in allow_literals:
            if name not in deny_literals and not dominated_by_deny_prefix(name):
                return AuthorizationResult.ALLOWED
        for name in allow_prefixes:
            if not dominated_by_deny_prefix(name):
                return AuthorizationResult.ALLOWED
        return AuthorizationResult.DENIED

    def decision_memo(self, context: AuthorizableRequestContext) -> "DecisionMemo | None":
        """A memo of this authorizer's decisions for the requests of one connection whose
        context (listener, principal, address) is ``context``'s, or None (the default: every
        action goes to :meth:`authorize`).  The connection asks for a new one whenever its
        principal changes."""
        return None

    def close(self) -> None:
        """Release resources.  Default: nothing to do."""


class DecisionMemo(abc.ABC):
    """One connection's memo of single actions it was allowed (an authorizer's, by
    :meth:`Authorizer.decision_memo`): a producer names the same topic request after request.
    It answers only where :meth:`Authorizer.authorize` would give the same result and log
    nothing, and counts the decisions it answers as ``authorize`` counts them."""

    @abc.abstractmethod
    def allows(self, action: Action, later: list[Any] | None = None) -> bool:
        """True: ``action`` is allowed now, decided as ``authorize`` would and counted; False:
        not known here (ask :meth:`decide`).  With ``later``, a caller that counts once the
        request has gone on (the data plane, after writing it upstream), the count is put there
        instead: an object whose ``inc()`` counts it."""

    @abc.abstractmethod
    def decide(self, context: AuthorizableRequestContext, action: Action) -> bool:
        """``authorize(context, (action,))`` is ALLOWED, remembered when it may be (``context``:
        a request of the connection the memo was made for)."""


def check_by_resource_type_args(op: AclOperation, resource_type: ResourceType) -> None:
    """Kafka's ``SecurityUtils.authorizeByResourceTypeCheckArgs``."""
    if op is AclOperation.ANY or op is AclOperation.UNKNOWN:
        raise ValueError(f"Must specify a non-filter operation type, got {op.name}")
    if resource_type is ResourceType.ANY or resource_type is ResourceType.UNKNOWN:
        raise ValueError(f"Must specify a non-filter resource type, got {resource_type.name}")


class Reconfigurable(abc.ABC):
    """A plug-in whose configs can change while it runs."""

    @abc.abstractmethod
    def reconfigurable_configs(self) -> Collection[str]:
        """Config keys that ``reconfigure`` accepts."""

    @abc.abstractmethod
    def validate_reconfiguration(self, configs: Mapping[str, Any]) -> None:
        """Raise ``ConfigError`` if ``configs`` cannot be applied."""

    @abc.abstractmethod
    def reconfigure(self, configs: Mapping[str, Any]) -> None:
        """Apply ``configs`` (already validated) atomically."""


@runtime_checkable
class PreviewsConfigs(Protocol):
    """A Reconfigurable authorizer that can say what it would decide under other configs (kgw
    refuses a super.users change that would lock its own caller out)."""

    def authorize_with_configs(self, configs: Mapping[str, Any], context: AuthorizableRequestContext,
                               actions: Iterable[Action]) -> list[AuthorizationResult]: ...


class Monitorable(abc.ABC):
    """A plug-in that registers its own metrics on the host's registry."""

    @abc.abstractmethod
    def monitor(self, registry: "prometheus_client.CollectorRegistry") -> None:
        """Register metrics on ``registry``.  Called after ``configure``."""
