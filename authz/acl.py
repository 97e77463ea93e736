"""Kafka's ACL value types, with their wire codes.

Theory of operation
-------------------
Everything the authorizer, the ACL APIs (DescribeAcls 29, CreateAcls 30,
DeleteAcls 31) and the metadata store exchange is built from the small value
types in this module.  They mirror ``org.apache.kafka.common.acl`` and
``org.apache.kafka.common.resource`` field for field:

* four ``IntEnum`` s whose values *are* the wire codes (Kafka's ``AuthHelper``).  A
  code the gateway does not recognise decodes to ``UNKNOWN`` (``_missing_``),
  exactly as the broker reads it; whether that is then an error is decided by
  the caller (Kafka's ``AclControlManager``), never by the decoder.
* ``ResourcePattern`` + ``AccessControlEntry`` = ``AclBinding``: one ACL.
* ``ResourcePatternFilter`` + ``AccessControlEntryFilter`` =
  ``AclBindingFilter``: the query side, with ``matches``,
  ``matches_at_most_one`` and ``find_indefinite_field`` behaving as Kafka's.

The value types are frozen, slotted dataclasses.  Like Kafka's constructors
for *filters*, they accept any enum member; unlike Kafka's ``ResourcePattern``
/ ``AccessControlEntry`` constructors they do not throw on ANY/MATCH, so that a
decoded CreateAcls creation can be carried to
``validate_acl_binding_for_create`` and answered with Kafka's error codes.

Also here: the supported operations per resource type and the KIP-430
"authorized operations" bitfield helper (Kafka's ``AuthHelper``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterable, Mapping

__all__ = [
    "ResourceType",
    "PatternType",
    "AclOperation",
    "AclPermissionType",
    "WILDCARD_RESOURCE",
    "WILDCARD_HOST",
    "CLUSTER_NAME",
    "ResourcePattern",
    "ResourcePatternFilter",
    "AccessControlEntry",
    "AccessControlEntryFilter",
    "AclBinding",
    "AclBindingFilter",
    "SUPPORTED_OPERATIONS",
    "AUTHORIZED_OPERATIONS_OMITTED",
    "authorized_operations_bitfield",
    "validate_acl_binding_for_create",
    "NONE_ERROR",
    "UNKNOWN_SERVER_ERROR",
    "INVALID_REQUEST",
    "POLICY_VIOLATION",
    "MAX_ACLS_PER_REQUEST",
]

# Kafka error codes used by the ACL model (Kafka's ``Errors``).
NONE_ERROR = 0
UNKNOWN_SERVER_ERROR = -1
REQUEST_TIMED_OUT = 7
INVALID_REQUEST = 42

POLICY_VIOLATION = 44

#: Kafka's controller refuses a single CreateAcls/DeleteAcls request that
#: would write more than this many records (Kafka's ``AclControlManager``).  Only
#: valid, new, distinct ACLs count towards the create limit.
MAX_ACLS_PER_REQUEST = 10_000

WILDCARD_RESOURCE = "*"
WILDCARD_HOST = "*"
#: The only legal name of the CLUSTER resource.
CLUSTER_NAME = "kafka-cluster"


class _KafkaEnum(enum.IntEnum):
    """An IntEnum whose unrecognised codes read as ``UNKNOWN`` (code 0)."""

    @classmethod
    def _missing_(cls, value: object) -> "_KafkaEnum":
        if isinstance(value, int):
            return cls(0)
        return None  # type: ignore[return-value]  # non-int: let Enum raise

    @property
    def is_unknown(self) -> bool:
        return self.value == 0


class ResourceType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7

    @property
    def pascal_name(self) -> str:
        """Kafka's audit-log spelling, e.g. ``TransactionalId``."""
        return _PASCAL_RESOURCE_NAMES[self]


_PASCAL_RESOURCE_NAMES = {
    rt: "".join(part.capitalize() for part in rt.name.split("_")) for rt in ResourceType
}


class PatternType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4

    @property
    def is_specific(self) -> bool:
        """LITERAL and PREFIXED describe stored ACLs; ANY and MATCH only filter."""
        return self is PatternType.LITERAL or self is PatternType.PREFIXED


class AclOperation(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(_KafkaEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# --------------------------------------------------------------------------
# Bindings
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    """A resource (type, name) and how ``name`` is matched (LITERAL/PREFIXED).

    LITERAL ``*`` is the wildcard resource; PREFIXED ``*`` is *not* a wildcard:
    it only covers names that begin with ``*`` (``StandardAuthorizerData``'s rule 5).
    """

    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    @property
    def is_unknown(self) -> bool:
        return self.resource_type.is_unknown or self.pattern_type.is_unknown

    def to_filter(self) -> "ResourcePatternFilter":
        return ResourcePatternFilter(self.resource_type, self.name, self.pattern_type)

    def audit_text(self) -> str:
        """``Topic:LITERAL:orders``: the form used in audit lines (Kafka's ``kafka.authorizer.logger``)."""
        return f"{self.resource_type.pascal_name}:{self.pattern_type.name}:{self.name}"

    def __str__(self) -> str:
        return (
            f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
            f"patternType={self.pattern_type.name})"
        )


@dataclass(frozen=True, slots=True)
class AccessControlEntry:
    """Who (principal text ``Type:Name``), from where (host text or ``*``),
    may or may not (permission) do what (operation).

    The principal is kept as *text*, as on the wire; the authorizer parses it
    once when the ACL enters its index.  The host is never validated (Kafka's ``AclControlManager``):
    only ``*`` and an exact client-IP text ever match.
    """

    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    @property
    def is_unknown(self) -> bool:
        return self.operation.is_unknown or self.permission_type.is_unknown

    def to_filter(self) -> "AccessControlEntryFilter":
        return AccessControlEntryFilter(self.principal, self.host, self.operation, self.permission_type)

    def __str__(self) -> str:
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission_type.name})"
        )


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: a resource pattern and an access-control entry."""

    pattern: ResourcePattern
    entry: AccessControlEntry

    def __hash__(self) -> int:
        # one call instead of the generated three (this one's, the pattern's, the entry's):
        # the metadata image hashes every ACL at start-up.  Equal bindings hash equal.
        p, e = self.pattern, self.entry
        return hash((p.resource_type, p.name, p.pattern_type, e.principal, e.host, e.operation, e.permission_type))

    @property
    def is_unknown(self) -> bool:
        return self.pattern.is_unknown or self.entry.is_unknown

    def to_filter(self) -> "AclBindingFilter":
        return AclBindingFilter(self.pattern.to_filter(), self.entry.to_filter())

    def __str__(self) -> str:
        return f"(pattern={self.pattern}, entry={self.entry})"


# --------------------------------------------------------------------------
# Filters (Kafka's ``AclBindingFilter`` matching)
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ResourcePatternFilter:
    """Selects resource patterns.

    * ``resource_type`` ANY: every type; otherwise exact.
    * ``name`` None: any name.
    * ``pattern_type`` ANY: any pattern type, but a given name must be equal.
      MATCH: the patterns that would *apply to* ``name`` — LITERAL ``name``,
      LITERAL ``*`` and every PREFIXED pattern that starts ``name``.
      LITERAL/PREFIXED: exact type and exact name (LITERAL ``*`` selects only
      the wildcard ACL).
    """

    resource_type: ResourceType
    name: str | None
    pattern_type: PatternType

    @property
    def is_unknown(self) -> bool:
        return self.resource_type.is_unknown or self.pattern_type.is_unknown

    def matches(self, pattern: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type != pattern.resource_type:
            return False
        pt = self.pattern_type
        if pt is not PatternType.ANY and pt is not PatternType.MATCH and pt != pattern.pattern_type:
            return False
        if self.name is None:
            return True
        if pt is PatternType.ANY or pt == pattern.pattern_type:
            return self.name == pattern.name
        # Only MATCH reaches here.
        if pattern.pattern_type is PatternType.LITERAL:
            return self.name == pattern.name or pattern.name == WILDCARD_RESOURCE
        if pattern.pattern_type is PatternType.PREFIXED:
            return self.name.startswith(pattern.name)
        raise ValueError(f"Unsupported PatternType: {pattern.pattern_type.name}")

    def matches_at_most_one(self) -> bool:
        return self.find_indefinite_field() is None

    def find_indefinite_field(self) -> str | None:
        """Kafka's wording for the first field that can match more than one value.

        Note: as in Kafka, ``pattern_type`` ANY with a name is *not* reported.
        """
        if self.resource_type is ResourceType.ANY:
            return "Resource type is ANY."
        if self.resource_type is ResourceType.UNKNOWN:
            return "Resource type is UNKNOWN."
        if self.name is None:
            return "Resource name is NULL."
        if self.pattern_type is PatternType.MATCH:
            return "Resource pattern type is MATCH."
        if self.pattern_type is PatternType.UNKNOWN:
            return "Resource pattern type is UNKNOWN."
        return None


ResourcePatternFilter.ANY = ResourcePatternFilter(ResourceType.ANY, None, PatternType.ANY)  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class AccessControlEntryFilter:
    """Selects entries.  ``None`` principal/host match anything; otherwise the
    text must be *equal* — ``User:*`` or ``*`` in a filter only selects ACLs
    that literally contain them.  ANY operation/permission match anything;
    otherwise exact, with no implied operations."""

    principal: str | None
    host: str | None
    operation: AclOperation
    permission_type: AclPermissionType

    @property
    def is_unknown(self) -> bool:
        return self.operation.is_unknown or self.permission_type.is_unknown

    def matches(self, entry: AccessControlEntry) -> bool:
        if self.principal is not None and self.principal != entry.principal:
            return False
        if self.host is not None and self.host != entry.host:
            return False
        if self.operation is not AclOperation.ANY and self.operation != entry.operation:
            return False
        return self.permission_type is AclPermissionType.ANY or self.permission_type == entry.permission_type

    def matches_at_most_one(self) -> bool:
        return self.find_indefinite_field() is None

    def find_indefinite_field(self) -> str | None:
        if self.principal is None:
            return "Principal is NULL"
        if self.host is None:
            return "Host is NULL"
        if self.operation is AclOperation.ANY:
            return "Operation is ANY"
        if self.operation is AclOperation.UNKNOWN:
            return "Operation is UNKNOWN"
        if self.permission_type is AclPermissionType.ANY:
            return "Permission type is ANY"
        if self.permission_type is AclPermissionType.UNKNOWN:
            return "Permission type is UNKNOWN"
        return None


AccessControlEntryFilter.ANY = AccessControlEntryFilter(None, None, AclOperation.ANY, AclPermissionType.ANY)  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A pattern filter and an entry filter; a binding matches if both do."""

    pattern_filter: ResourcePatternFilter
    entry_filter: AccessControlEntryFilter

    @property
    def is_unknown(self) -> bool:
        return self.pattern_filter.is_unknown or self.entry_filter.is_unknown

    def matches(self, binding: AclBinding) -> bool:
        return self.pattern_filter.matches(binding.pattern) and self.entry_filter.matches(binding.entry)

    def matches_at_most_one(self) -> bool:
        return self.pattern_filter.matches_at_most_one() and self.entry_filter.matches_at_most_one()

    def find_indefinite_field(self) -> str | None:
        indefinite = self.pattern_filter.find_indefinite_field()
        if indefinite is not None:
            return indefinite
        return self.entry_filter.find_indefinite_field()


AclBindingFilter.ANY = AclBindingFilter(ResourcePatternFilter.ANY, AccessControlEntryFilter.ANY)  # type: ignore[attr-defined]


# --------------------------------------------------------------------------
# CreateAcls validation (Kafka's ``AclControlManager.validateNewAcl``), in Kafka's order
# --------------------------------------------------------------------------


def validate_acl_binding_for_create(binding: AclBinding) -> tuple[int, str | None] | None:
    """Check one CreateAcls creation the way Kafka's broker + controller do.

    Returns ``None`` if the binding may be stored, else ``(error_code, message)``.

    Order (Kafka's ``AclControlManager.validateNewAcl``; the parse-level UNKNOWN-code-0 and v0 checks, and
    the CLUSTER:ALTER / no-authorizer checks, belong to the request handler):

    1. ANY/MATCH pattern type, ANY resource type, ANY operation or ANY
       permission: Kafka's binding constructor throws and the *whole request*
       fails with UNKNOWN_SERVER_ERROR (-1) and no message.  A caller seeing
       ``-1`` here must answer -1 for every creation of the request
       (``StandardAuthorizer.create_acls`` does).
    2. CLUSTER named anything but ``kafka-cluster``: 42 (broker's AclApis).
    3. Empty resource name: 42 (broker's AclApis).
    4. Unrecognised codes (read as UNKNOWN): 42 ``Invalid <field> UNKNOWN``
       (controller).
    5. Principal text without ``:``: 42 ``Could not parse principal …``.
    """
    pattern, entry = binding.pattern, binding.entry
    if (
        pattern.pattern_type in (PatternType.ANY, PatternType.MATCH)
        or pattern.resource_type is ResourceType.ANY
        or entry.operation is AclOperation.ANY
        or entry.permission_type is AclPermissionType.ANY
    ):
        return (UNKNOWN_SERVER_ERROR, None)
    if pattern.resource_type is ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return (INVALID_REQUEST, f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not pattern.name:
        return (INVALID_REQUEST, "Invalid empty resource name")
    if pattern.resource_type is ResourceType.UNKNOWN:
        return (INVALID_REQUEST, f"Invalid resourceType {pattern.resource_type.name}")
    if not pattern.pattern_type.is_specific:
        return (INVALID_REQUEST, f"Invalid patternType {pattern.pattern_type.name}")
    if entry.operation is AclOperation.UNKNOWN:
        return (INVALID_REQUEST, f"Invalid operation {entry.operation.name}")
    if entry.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return (INVALID_REQUEST, f"Invalid permissionType {entry.permission_type.name}")
    if ":" not in entry.principal:
        return (
            INVALID_REQUEST,
            f"Could not parse principal from `{entry.principal}` (no colon is present "
            "separating the principal type from the principal name)",
        )
    for field_name, text in (("resource name", pattern.name), ("principal", entry.principal), ("host", entry.host)):
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > MAX_RECORD_STRING_BYTES:
            # the AccessControlEntryRecord could not hold it (Kafka: "... is too long to be serialized")
            return (INVALID_REQUEST, f"The {field_name} is {size} UTF-8 bytes; at most "
                                     f"{MAX_RECORD_STRING_BYTES} can be stored")
    return None


#: the longest string a metadata record field holds (Kafka's int16 string length)
MAX_RECORD_STRING_BYTES = 0x7FFF


# --------------------------------------------------------------------------
# KIP-430 authorized operations
# --------------------------------------------------------------------------

_Op = AclOperation
#: Operations each resource type supports (Kafka's ``AuthHelper``).  ALL is never
#: part of an authorized-operations answer.
SUPPORTED_OPERATIONS: Mapping[ResourceType, frozenset[AclOperation]] = MappingProxyType(
    {
        ResourceType.TOPIC: frozenset(
            {_Op.READ, _Op.WRITE, _Op.CREATE, _Op.DELETE, _Op.ALTER, _Op.DESCRIBE,
             _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS}
        ),
        ResourceType.GROUP: frozenset(
            {_Op.READ, _Op.DESCRIBE, _Op.DELETE, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS}
        ),
        ResourceType.CLUSTER: frozenset(
            {_Op.CREATE, _Op.CLUSTER_ACTION, _Op.DESCRIBE_CONFIGS, _Op.ALTER_CONFIGS,
             _Op.IDEMPOTENT_WRITE, _Op.ALTER, _Op.DESCRIBE}
        ),
        ResourceType.TRANSACTIONAL_ID: frozenset({_Op.DESCRIBE, _Op.WRITE, _Op.TWO_PHASE_COMMIT}),
        ResourceType.DELEGATION_TOKEN: frozenset({_Op.DESCRIBE}),
        ResourceType.USER: frozenset({_Op.CREATE_TOKENS, _Op.DESCRIBE_TOKENS}),
    }
)

#: The value of an authorized-operations field that was not requested
#: (Java's ``Integer.MIN_VALUE``).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


def authorized_operations_bitfield(operations: Iterable[AclOperation]) -> int:
    """KIP-430: bit ``1 << code`` for each allowed operation (ALL never set).

    >>> authorized_operations_bitfield(SUPPORTED_OPERATIONS[ResourceType.TOPIC])
    3576
    """
    bits = 0
    for op in operations:
        if op is not AclOperation.ALL:
            bits |= 1 << int(op)
    return bits
