"""KRaft metadata records, in Apache Kafka's exact wire form.

Theory of operation
===================

kgw keeps ACLs, dynamic configs and SCRAM credentials in a metadata log that uses
the same record format as a KRaft ``__cluster_metadata`` partition, so the bytes
can be read by Kafka tooling and so a later backend can share state through a real
Kafka topic.  This module is the sans-IO codec for the individual records; framing
them into record batches and files is :mod:`metadata.directory`'s job.

Every record is *framed* the way ``AbstractApiMessageSerde`` frames it::

    frame version   uvarint   always 1 (0 was the 2.8 preview, refused)
    api key         uvarint   which record (the "apiKey" of the JSON schema)
    version         uvarint   the record's schema version
    body            the message in Kafka's *flexible* encoding

Every record kgw knows has ``"flexibleVersions": "0+"``, so bodies use:

* ``int8``/``int32`` big-endian fixed width;
* ``uuid`` as 16 bytes (most significant 64 bits first, i.e. ``UUID.bytes``);
* ``string`` as a *compact* string: uvarint ``len(utf8) + 1`` then the bytes; a
  nullable string is ``0`` for null;
* ``bytes`` as compact bytes, length encoded the same way;
* a trailing *tagged-field* section: uvarint count, then per field uvarint tag,
  uvarint size, data.  kgw defines no tagged fields; unknown ones are skipped on
  read (as a newer writer may add them) and none are written.

The api keys and field lists are those of ``metadata/src/main/resources/common/
metadata/*.json`` in Apache Kafka (checked against trunk): AccessControlEntryRecord
is 18, RemoveAccessControlEntryRecord 19, ConfigRecord 4, UserScramCredentialRecord
11, RemoveUserScramCredentialRecord 22 and ClientQuotaRecord 14 (whose ``float64`` is 8
bytes big-endian IEEE 754, its ``bool`` one byte 0 or 1, and its entity a compact array:
uvarint ``count + 1``, then each element's fields and its own tagged-field section).

A record whose (api key, version) kgw does not know decodes to
:class:`UnknownMetadataRecord`, which keeps the raw body and re-encodes it byte for
byte, so a snapshot rewritten by an older kgw never drops a newer writer's data.

The record classes are plain frozen, slotted dataclasses holding ints, strings,
bytes and :class:`uuid.UUID`; they know nothing about ACL enums or principals.  The
gateway converts to and from its richer types (``authz/acl.py``).
"""

from __future__ import annotations
import sys
import uuid
from dataclasses import dataclass, fields
from typing import ClassVar, Final, TypeAlias
from metadata.record_codec import _read_bool, _read_compact_bytes, _read_compact_string, _read_float64, _read_int32, _read_int8, _read_nullable_compact_string, _read_uuid, _skip_tagged_fields, _write_bool, _write_compact_bytes, _write_compact_string, _write_float64, _write_int32, _write_int8, _write_no_tagged_fields, _write_nullable_compact_string, _write_uuid, read_uvarint, write_uvarint
from metadata.record_codec import MetadataRecordError

#: The only frame version Kafka writes or accepts (``DEFAULT_FRAME_VERSION``).
FRAME_VERSION: Final = 1




#: Kafka refuses frame versions, api keys and versions above ``Short.MAX_VALUE``.
_MAX_FRAME_FIELD: Final = 0x7FFF






def _decode_acl_fast(cls: type[AccessControlEntryRecord], buf: bytes | memoryview,
                     pos: int) -> tuple[AccessControlEntryRecord, int] | None:
    """``AccessControlEntryRecord.decode_body`` for the usual shape (strings under 127 bytes, no
    tagged fields, non-negative codes) in one function: a restart decodes every ACL (a third of
    the 0.8 s 100k ACLs took).  None for anything else, which the general path then reads (and
    refuses with its message if it is malformed).  Strings are interned: thousands of ACLs name
    one principal, host or topic, and the image and the index keep them."""
    # A record cut short anywhere raises IndexError at the next byte read (a short id or string
    # only yields a short slice), and the general path then refuses it with its message.
    p = pos + 16
    acl_id = _new_object(_UUID)  # as uuid.UUID(bytes=...) builds it, without its argument checks
    _set_attribute(acl_id, "int", _int_from_bytes(buf[pos:p], "big"))
    _set_attribute(acl_id, "is_safe", _SAFE_UNKNOWN)
    try:
        resource_type = buf[p]
        n = buf[p + 1]  # a compact string's length + 1, in one varint byte when under 127
        q = p + 1 + n
        if not 0 < n < 0x80:
            return None
        resource_name = _intern(str(buf[p + 2 : q], "utf-8"))
        pattern_type = buf[q]
        n = buf[q + 1]
        p = q + 1 + n
        if not 0 < n < 0x80:
            return None
        principal = _intern(str(buf[q + 2 : p], "utf-8"))
        n = buf[p]
        q = p + n
        if not 0 < n < 0x80:
            return None
        host = _intern(str(buf[p + 1 : q], "utf-8"))
        operation, permission_type, tags = buf[q], buf[q + 1], buf[q + 2]
    except (IndexError, UnicodeDecodeError):
        return None
    if tags or resource_type > 127 or pattern_type > 127 or operation > 127 or permission_type > 127:
        return None
    # the fields set through their slots: the frozen dataclass's __init__ costs 1.1 us against 0.45
    record = _new_object(cls)
    set_id, set_rtype, set_rname, set_ptype, set_principal, set_host, set_op, set_perm = _ACL_FIELD_SETTERS
    set_id(record, acl_id)
    set_rtype(record, resource_type)
    set_rname(record, resource_name)
    set_ptype(record, pattern_type)
    set_principal(record, principal)
    set_host(record, host)
    set_op(record, operation)
    set_perm(record, permission_type)
    return record, q + 3


_UUID, _SAFE_UNKNOWN = uuid.UUID, uuid.SafeUUID.unknown
_new_object, _set_attribute = object.__new__, object.__setattr__
_intern, _int_from_bytes = sys.intern, int.from_bytes


@dataclass(frozen=True, slots=True, kw_only=True)
class AccessControlEntryRecord:
    """A new ACL (in the log) or an existing ACL (in a snapshot).  Api key 18, v0."""

    API_KEY: ClassVar[int] = 18
    VERSION: ClassVar[int] = 0

    id: uuid.UUID
    """The unique ID of this ACL."""
    resource_type: int
    """The resource type (Kafka ``ResourceType`` code, int8)."""
    resource_name: str
    """The resource name."""
    pattern_type: int
    """The resource name pattern type (``PatternType`` code, int8)."""
    principal: str
    """The principal name, e.g. ``"User:alice"``."""
    host: str
    """The host name, ``"*"`` for any."""
    operation: int
    """The AclOperation code (int8)."""
    permission_type: int
    """The AclPermissionType code (int8)."""

    def encode_body(self, out: bytearray) -> None:
        where = "AccessControlEntryRecord"
        _write_uuid(out, self.id, f"{where}.id")
        _write_int8(out, self.resource_type, f"{where}.resource_type")
        _write_compact_string(out, self.resource_name, f"{where}.resource_name")
        _write_int8(out, self.pattern_type, f"{where}.pattern_type")
        _write_compact_string(out, self.principal, f"{where}.principal")
        _write_compact_string(out, self.host, f"{where}.host")
        _write_int8(out, self.operation, f"{where}.operation")
        _write_int8(out, self.permission_type, f"{where}.permission_type")
        _write_no_tagged_fields(out)

    @classmethod
    def decode_body(
        cls, buf: bytes | memoryview, pos: int
    ) -> tuple[AccessControlEntryRecord, int]:
        fast = _decode_acl_fast(cls, buf, pos)
        if fast is not None:
            return fast
        acl_id, pos = _read_uuid(buf, pos)
        resource_type, pos = _read_int8(buf, pos)
        resource_name, pos = _read_compact_string(buf, pos)
        pattern_type, pos = _read_int8(buf, pos)
        principal, pos = _read_compact_string(buf, pos)
        host, pos = _read_compact_string(buf, pos)
        operation, pos = _read_int8(buf, pos)
        permission_type, pos = _read_int8(buf, pos)
        pos = _skip_tagged_fields(buf, pos)
        # interned: thousands of ACLs name one principal, host or topic, and the image and
        # the authorizer's index keep these strings for as long as the ACL lives
        record = cls(
            id=acl_id,
            resource_type=resource_type,
            resource_name=sys.intern(resource_name),
            pattern_type=pattern_type,
            principal=sys.intern(principal),
            host=sys.intern(host),
            operation=operation,
            permission_type=permission_type,
        )
        return record, pos


#: the slot descriptors' setters of AccessControlEntryRecord's fields, in _decode_acl_fast's order
_ACL_FIELDS = ("id", "resource_type", "resource_name", "pattern_type", "principal", "host", "operation", "permission_type")
if tuple(f.name for f in fields(AccessControlEntryRecord)) != _ACL_FIELDS:
    raise ImportError("AccessControlEntryRecord's fields changed: update _decode_acl_fast")
_ACL_FIELD_SETTERS = tuple(AccessControlEntryRecord.__dict__[name].__set__ for name in _ACL_FIELDS)


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveAccessControlEntryRecord:
    """An ACL was deleted; appears only in the log, never in a snapshot.  Api key 19, v0."""

    API_KEY: ClassVar[int] = 19
    VERSION: ClassVar[int] = 0

    id: uuid.UUID
    """The ID of the AccessControlEntry to remove."""

    def encode_body(self, out: bytearray) -> None:
        _write_uuid(out, self.id, "RemoveAccessControlEntryRecord.id")
        _write_no_tagged_fields(out)

    @classmethod
    def decode_body(
        cls, buf: bytes | memoryview, pos: int
    ) -> tuple[RemoveAccessControlEntryRecord, int]:
        acl_id, pos = _read_uuid(buf, pos)
        pos = _skip_tagged_fields(buf, pos)
        return cls(id=acl_id), pos


@dataclass(frozen=True, slots=True, kw_only=True)
class ConfigRecord:
    """Set (or, with ``value=None``, delete) one dynamic config key.  Api key 4, v0."""

    API_KEY: ClassVar[int] = 4
    VERSION: ClassVar[int] = 0

    resource_type: int
    """The ``ConfigResource.Type`` code (2 topic, 4 broker, 8 broker logger, ...)."""
    resource_name: str
    """The name of the resource; empty for the cluster-wide default."""
    name: str
    """The name of the configuration key."""
    value: str | None
    """The value of the configuration, or None if it should be deleted."""

    def encode_body(self, out: bytearray) -> None:
        where = "ConfigRecord"
        _write_int8(out, self.resource_type, f"{where}.resource_type")
        _write_compact_string(out, self.resource_name, f"{where}.resource_name")
        _write_compact_string(out, self.name, f"{where}.name")
        _write_nullable_compact_string(out, self.value, f"{where}.value")
        _write_no_tagged_fields(out)

    @classmethod
    def decode_body(cls, buf: bytes | memoryview, pos: int) -> tuple[ConfigRecord, int]:
        resource_type, pos = _read_int8(buf, pos)
        resource_name, pos = _read_compact_string(buf, pos)
        name, pos = _read_compact_string(buf, pos)
        value, pos = _read_nullable_compact_string(buf, pos)
        pos = _skip_tagged_fields(buf, pos)
        record = cls(resource_type=resource_type, resource_name=resource_name, name=name, value=value)
        return record, pos


@dataclass(frozen=True, slots=True, kw_only=True)
class UserScramCredentialRecord:
    """A SCRAM credential for one user and mechanism.  Api key 11, v0."""

    API_KEY: ClassVar[int] = 11
    VERSION: ClassVar[int] = 0

    name: str
    """The user name."""
    mechanism: int
    """The SCRAM mechanism (1 SCRAM-SHA-256, 2 SCRAM-SHA-512)."""
    salt: bytes
    """A random salt generated by the client."""
    stored_key: bytes
    """The key the server uses to authenticate the client."""
    server_key: bytes
    """The key the client uses to validate the server's identity."""
    iterations: int
    """The number of iterations used in the SCRAM credential (int32)."""

    def encode_body(self, out: bytearray) -> None:
        where = "UserScramCredentialRecord"
        _write_compact_string(out, self.name, f"{where}.name")
        _write_int8(out, self.mechanism, f"{where}.mechanism")
        _write_compact_bytes(out, self.salt, f"{where}.salt")
        _write_compact_bytes(out, self.stored_key, f"{where}.stored_key")
        _write_compact_bytes(out, self.server_key, f"{where}.server_key")
        _write_int32(out, self.iterations, f"{where}.iterations")
        _write_no_tagged_fields(out)

    @classmethod
    def decode_body(
        cls, buf: bytes | memoryview, pos: int
    ) -> tuple[UserScramCredentialRecord, int]:
        name, pos = _read_compact_string(buf, pos)
        mechanism, pos = _read_int8(buf, pos)
        salt, pos = _read_compact_bytes(buf, pos)
        stored_key, pos = _read_compact_bytes(buf, pos)
        server_key, pos = _read_compact_bytes(buf, pos)
        iterations, pos = _read_int32(buf, pos)
        pos = _skip_tagged_fields(buf, pos)
        record = cls(
            name=name,
            mechanism=mechanism,
            salt=salt,
            stored_key=stored_key,
            server_key=server_key,
            iterations=iterations,
        )
        return record, pos


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveUserScramCredentialRecord:
    """A user's SCRAM credential for one mechanism was deleted.  Api key 22, v0."""

    API_KEY: ClassVar[int] = 22
    VERSION: ClassVar[int] = 0

    name: str
    """The user name."""
    mechanism: int
    """The SCRAM mechanism."""

    def encode_body(self, out: bytearray) -> None:
        where = "RemoveUserScramCredentialRecord"
        _write_compact_string(out, self.name, f"{where}.name")
        _write_int8(out, self.mechanism, f"{where}.mechanism")
        _write_no_tagged_fields(out)

    @classmethod
    def decode_body(
        cls, buf: bytes | memoryview, pos: int
    ) -> tuple[RemoveUserScramCredentialRecord, int]:
        name, pos = _read_compact_string(buf, pos)
        mechanism, pos = _read_int8(buf, pos)
        pos = _skip_tagged_fields(buf, pos)
        return cls(name=name, mechanism=mechanism), pos


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientQuotaRecord:
    """Set or remove one quota of one client-quota entity.  Api key 14, v0."""

    API_KEY: ClassVar[int] = 14
    VERSION: ClassVar[int] = 0

    entity: tuple[tuple[str, str | None], ...]
    """(entity type, entity name) pairs: ``user``, ``client-id``, ``ip``; a None name is the
    entity type's default."""
    key: str
    """The quota: ``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``,
    ``connection_creation_rate``, ..."""
    value: float
    """The quota's value (ignored when ``remove``)."""
    remove: bool
    """True: the key is removed from the entity."""

    def encode_body(self, out: bytearray) -> None:
        where = "ClientQuotaRecord"
        write_uvarint(out, len(self.entity) + 1)
        for entity_type, entity_name in self.entity:
            _write_compact_string(out, entity_type, f"{where}.entity.entity_type")
            _write_nullable_compact_string(out, entity_name, f"{where}.entity.entity_name")
            _write_no_tagged_fields(out)
        _write_compact_string(out, self.key, f"{where}.key")
        _write_float64(out, self.value, f"{where}.value")
        _write_bool(out, self.remove, f"{where}.remove")
        _write_no_tagged_fields(out)

    @classmethod
    def decode_body(cls, buf: bytes | memoryview, pos: int) -> tuple[ClientQuotaRecord, int]:
        count, pos = read_uvarint(buf, pos)
        if count == 0:
            raise MetadataRecordError("ClientQuotaRecord.entity is null")
        entity = []
        for _ in range(count - 1):
            entity_type, pos = _read_compact_string(buf, pos)
            entity_name, pos = _read_nullable_compact_string(buf, pos)
            pos = _skip_tagged_fields(buf, pos)
            entity.append((entity_type, entity_name))
        key, pos = _read_compact_string(buf, pos)
        value, pos = _read_float64(buf, pos)
        remove, pos = _read_bool(buf, pos)
        pos = _skip_tagged_fields(buf, pos)
        return cls(entity=tuple(entity), key=key, value=value, remove=remove), pos


@dataclass(frozen=True, slots=True, kw_only=True)
class UnknownMetadataRecord:
    """A record of an (api key, version) kgw does not model, kept verbatim.

    ``body`` is everything after the three frame varints; re-encoding reproduces the
    original bytes, so state written by a newer writer survives a snapshot by kgw.
    """

    api_key: int
    version: int
    body: bytes


MetadataRecord: TypeAlias = (
    AccessControlEntryRecord
    | RemoveAccessControlEntryRecord
    | ConfigRecord
    | UserScramCredentialRecord
    | RemoveUserScramCredentialRecord
    | ClientQuotaRecord
    | UnknownMetadataRecord
)


_KNOWN = (
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
    ConfigRecord,
    UserScramCredentialRecord,
    RemoveUserScramCredentialRecord,
    ClientQuotaRecord,
)


#: (api key, version) -> record class.  Read-only by convention; built once.
_DECODERS: Final = {(cls.API_KEY, cls.VERSION): cls for cls in _KNOWN}


def encode_record(record: MetadataRecord) -> bytes:
    """Frame and encode one record exactly as KRaft's ``MetadataRecordSerde`` does.

    :raises MetadataRecordError: a field is out of range, of the wrong type, or a
        string is too long.
    """
    out = bytearray()
    out.append(FRAME_VERSION)  # uvarint(1) is the single byte 0x01
    if isinstance(record, UnknownMetadataRecord):
        write_uvarint(out, record.api_key)
        write_uvarint(out, record.version)
        out += record.body
        return bytes(out)
    if type(record) not in _KNOWN:
        raise MetadataRecordError(f"not a metadata record: {type(record).__name__}")
    write_uvarint(out, record.API_KEY)
    write_uvarint(out, record.VERSION)
    record.encode_body(out)
    return bytes(out)


def _read_frame_field(buf: bytes | memoryview, pos: int, what: str) -> tuple[int, int]:
    try:
        value, pos = read_uvarint(buf, pos)
    except MetadataRecordError as exc:
        raise MetadataRecordError(f"error while reading {what}: {exc}") from exc
    if value > _MAX_FRAME_FIELD:
        raise MetadataRecordError(f"value for {what} was too large: {value}")
    return value, pos


def _read_frame(data: bytes | memoryview) -> tuple[int, int, int]:
    frame_version, pos = _read_frame_field(data, 0, "frame version")
    if frame_version != FRAME_VERSION:
        raise MetadataRecordError(
            f"unsupported metadata record frame version {frame_version} "
            f"(only {FRAME_VERSION} is supported)"
        )
    api_key, pos = _read_frame_field(data, pos, "api key")
    version, pos = _read_frame_field(data, pos, "version")
    return api_key, version, pos


def decode_record(data: bytes | memoryview) -> MetadataRecord:
    """Decode one framed record; the whole of ``data`` must be consumed.

    :raises MetadataRecordError: bad frame version, truncated body, invalid UTF-8,
        or trailing bytes after the message.
    """
    if len(data) >= 3 and data[0] == FRAME_VERSION and data[1] < 0x80 and data[2] < 0x80:
        api_key, version, pos = data[1], data[2], 3  # fast path: single-byte varints
    else:
        api_key, version, pos = _read_frame(data)
    cls = _DECODERS.get((api_key, version))
    if cls is None:
        return UnknownMetadataRecord(api_key=api_key, version=version, body=bytes(data[pos:]))
    try:
        record, end = cls.decode_body(data, pos)
    except MetadataRecordError as exc:
        raise MetadataRecordError(f"failed to decode {cls.__name__} v{version}: {exc}") from exc
    if end != len(data):
        raise MetadataRecordError(
            f"found {len(data) - end} byte(s) of garbage after {cls.__name__}"
        )
    return record
