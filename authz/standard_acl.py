"""One ACL in the form the authorizer matches on (:class:`StandardAcl`, after Kafka's class
of that name), and the buckets the index keeps them in (:mod:`authz.acl_index`): a
resource name's ACLs keyed by ``(principal, host)``, or its single ACL itself."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from typing import final

from .acl import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from .principal import KafkaPrincipal, parse_principal

__all__ = ["Bucket", "StandardAcl", "bucket_acls", "bucket_all", "compact_bucket"]


@final
class StandardAcl:
    """One ACL in the form the authorizer matches on.

    Attributes are read-only by convention (the class is slotted and only
    built by ``from_binding``).  ``value_key`` is the 7-tuple Kafka compares
    to detect an "already existing" ACL at create time.
    """

    # Eight slots: what the authorizer's hot path reads, the binding, the rule and the id.  An
    # object of eight slots has the size of a decoded log record (96 bytes), so the index built
    # at start-up fills the memory the records it was built from left free (issue 17).
    __slots__ = (
        "kafka_principal",
        "principal",
        "host",
        "operation",
        "is_deny",
        "binding",
        "matching_rule",
        "acl_id",
    )

    kafka_principal: KafkaPrincipal
    principal: str
    host: str
    operation: AclOperation
    is_deny: bool
    binding: AclBinding
    matching_rule: object  # filled lazily by the authorizer with its rule object
    acl_id: uuid.UUID | None  # set when the ACL enters an index

    @classmethod
    def from_binding(cls, binding: AclBinding, principals: dict[str, KafkaPrincipal] | None = None) -> "StandardAcl":
        """:raises ValueError: if the binding is not a storable ACL (non-specific
        or UNKNOWN field, or a principal without ``:``).

        ``principals`` is an optional parse cache (principal text -> parsed),
        so a snapshot parses each distinct principal once."""
        pattern, entry = binding.pattern, binding.entry
        if pattern.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
            raise ValueError(f"Invalid resourceType {pattern.resource_type.name} in {binding}")
        if not pattern.pattern_type.is_specific:
            raise ValueError(f"Invalid patternType {pattern.pattern_type.name} in {binding}")
        if entry.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
            raise ValueError(f"Invalid operation {entry.operation.name} in {binding}")
        if entry.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
            raise ValueError(f"Invalid permissionType {entry.permission_type.name} in {binding}")
        self = cls.__new__(cls)
        parsed = principals.get(entry.principal) if principals is not None else None
        if parsed is None:
            parsed = parse_principal(entry.principal)  # parsed once, here
            if principals is not None:
                principals[entry.principal] = parsed
        self.kafka_principal = parsed
        self.principal = self.kafka_principal.key
        self.host = entry.host
        self.operation = entry.operation
        self.is_deny = entry.permission_type is AclPermissionType.DENY
        self.binding = binding
        self.matching_rule = None
        self.acl_id = None
        return self

    # Read from the binding, not stored (the hot path does not use them).
    @property
    def resource_type(self) -> ResourceType:
        return self.binding.pattern.resource_type

    @property
    def resource_name(self) -> str:
        return self.binding.pattern.name

    @property
    def pattern_type(self) -> PatternType:
        return self.binding.pattern.pattern_type

    @property
    def permission_type(self) -> AclPermissionType:
        return self.binding.entry.permission_type

    # Computed when asked (creating, deleting, indexing), not stored: two tuples per ACL
    # were 15 MB of 100,000 ACLs (issue 17).
    @property
    def value_key(self) -> tuple[ResourceType, str, PatternType, str, str, AclOperation, AclPermissionType]:
        """The 7 fields Kafka compares to find an "already existing" ACL."""
        return (self.resource_type, self.resource_name, self.pattern_type, self.principal, self.host,
                self.operation, self.permission_type)

    @property
    def bucket_key(self) -> tuple[str, str]:
        """``(principal, host)``: the key of this ACL inside its resource's bucket."""
        return (self.principal, self.host)

    def with_id(self, acl_id: uuid.UUID) -> "StandardAcl":
        """This ACL tagged with ``acl_id`` (a copy if it already has another id)."""
        if self.acl_id is None:
            self.acl_id = acl_id
            return self
        if self.acl_id == acl_id:
            return self
        return StandardAcl.from_binding(self.binding).with_id(acl_id)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StandardAcl):
            return NotImplemented
        return self.value_key == other.value_key

    def __hash__(self) -> int:
        return hash(self.value_key)

    def __str__(self) -> str:
        # The form Kafka prints in "based on rule MatchingAcl(acl=...)".
        return (
            f"StandardAcl(resourceType={self.resource_type.name}, resourceName={self.resource_name}, "
            f"patternType={self.pattern_type.name}, principal={self.principal}, host={self.host}, "
            f"operation={self.operation.name}, permissionType={self.permission_type.name})"
        )

    __repr__ = __str__


#: The ACLs of one (pattern type, resource name): ``{(principal, host) -> (StandardAcl, ...)}``, or,
#: when it holds a single ACL, that ``StandardAcl`` itself.  Most names carry one ACL, and a dict
#: plus a one-element tuple per name were 30 MB of 100,000 such ACLs (issue 17).
Bucket = Mapping[tuple[str, str], tuple[StandardAcl, ...]] | StandardAcl


def bucket_acls(bucket: Bucket, key: tuple[str, str]) -> tuple[StandardAcl, ...]:
    """The ACLs of ``bucket`` under ``(principal, host)``."""
    if type(bucket) is StandardAcl:
        return (bucket,) if (bucket.principal, bucket.host) == key else ()
    return bucket.get(key, ())


def bucket_all(bucket: Bucket) -> Iterator[StandardAcl]:
    """Every ACL of ``bucket``."""
    if type(bucket) is StandardAcl:
        yield bucket
    else:
        for acls in bucket.values():
            yield from acls


def compact_bucket(bucket: dict[tuple[str, str], tuple[StandardAcl, ...]]) -> Bucket:
    """A bucket in its stored form: one ACL alone is stored as itself."""
    if len(bucket) == 1:
        (acls,) = bucket.values()
        if len(acls) == 1:
            return acls[0]
    return bucket
