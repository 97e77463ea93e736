"""Fetch (1): requests walked, responses walked around their records.

Theory of operation
-------------------
A request is read by :func:`walk_fetch_request` (what authorization needs: replica id, max
wait, session, topic entries, forgotten topics) when it has a consumer's usual shape, no
tagged field set; anything else (a follower's ``replica_state``, a null count, a request that
ends early) is decoded by kio, the walk's reference, into the same :class:`FetchRequestShape`.
kio decodes a walked request only when kgw must rebuild it (some topics denied or unknown).

A Fetch response is mostly record batches and is forwarded as the upstream's
bytes.  From v16 on it may end with ``node_endpoints`` (KIP-951) in its
top-level tagged fields, which must carry gateway addresses.  To find them,
:func:`top_level_tags_offset` walks the response skipping every ``records``
field by its length; if the tagged section is empty (the common case) the
response passes untouched.  Otherwise the body is rebuilt as the untouched
bytes up to the tagged section followed by a freshly encoded tagged section:
the record slices are never decoded or re-encoded.

On the data plane a large response need not be whole to be forwarded:
:class:`FetchResponseStream` walks the same structure while the response arrives
(:func:`_walk`, a generator asking for bytes), hands on what precedes each record set and
names the record set, which the driver splices socket to socket; the top-level tagged section
is rewritten at its original size, since the length prefix has already gone
(:func:`same_size_tags`).

Authorization (Kafka's ``KafkaApis.handleFetchRequest``; docs/authorization.md)
-------------------------------------------------------------------------------------
* **Follower fetch** (``replica_id`` >= 0, from v15 on ``replica_state.replica_id``):
  one check of CLUSTER:CLUSTER_ACTION.  Allowed: forwarded as is.  Denied:
  kgw answers, every requested partition with TOPIC_AUTHORIZATION_FAILED (29,
  not 31), unknown topic ids included, as Kafka does.
* **Consumer fetch**: v13+ names topics by id.  An id the gateway cannot name
  gets UNKNOWN_TOPIC_ID (100) *before* authorization and takes no part in it.
  Then one batch filter (:meth:`AuthHelper.filter`) of TOPIC:READ, one action
  per distinct topic name, ``resource_reference_count`` = how many distinct
  partitions of that topic the fetch names, log flags T/T.

  - everything allowed: the request goes upstream untouched (``FORWARD``) or,
    if it uses a fetch session, with its session epoch patched (see below);
    the response is never touched beyond the address rewrite above;
  - nothing allowed (every partition denied or unknown): kgw answers alone,
    a response built with kio (no records are involved);
  - mixed: the request is rebuilt with kio without the denied and unknown
    topics (requests hold no records), and the upstream response is *walked*:
    its topic entries are kept as one untouched byte slice, the topic-array
    length is rewritten, the error entries (encoded with kio when the request
    was authorized) are appended, and the top-level tagged fields (already
    address-rewritten) follow.  Record batches are never decoded or copied
    piecemeal.  The error entries come after the upstream's topics: Kafka too
    puts its erroneous partitions (100 first, then 29) after the fetched ones,
    grouped by consecutive topic, in request order.

Fetch sessions (KIP-227)
------------------------
Kafka re-authorizes every partition *cached in an incremental fetch session*
on each fetch, not only the partitions the request lists (Kafka's
``KafkaApis.handleFetchRequest``).  kgw keeps, per client connection (``auth.connection_state``),
the partitions of each session it saw created: a full fetch that creates one
(epoch 0) is authorized as a whole and forwarded untouched, and the session id
the upstream assigns is read from its response (no copy); each incremental
fetch (epoch > 0) updates that set with the request's partitions and forgotten
topics and authorizes *all* of them, the request's among them, in one batch, as Kafka does,
before forwarding it untouched.  Whenever something is denied, or a session kgw does not know is
used, the fetch is sent with ``session_epoch = -1`` (FINAL) and the session is
dropped: KIP-227 defines (id, -1) as "close session *id*, make a full fetch,
create no session", so the upstream answers ``session_id = 0`` and the client
starts over with a full fetch listing all its partitions, each authorized.
Neither side can hold a session the other does not know about.  Session-less
requests (librdkafka sends (0, -1)) and v4-v6 requests are forwarded byte for
byte.  With no authorizer configured Fetch is forwarded untouched.

Topic ids (v13+)
----------------
The authorizer needs names: they come from the gateway's learned topic ids (``AuthHelper.topics``),
the gateway-wide cache of the (name, id) pairs in the upstream Metadata,
DescribeTopicPartitions and CreateTopics responses kgw forwards (clients learn
ids from those same responses, so a client's ids are known before it fetches
by them).  An id the cache does not hold gets UNKNOWN_TOPIC_ID (100), as from
a broker that does not know it; the client then refreshes its metadata, which
teaches the cache.
"""

from __future__ import annotations

import io
import struct
from dataclasses import replace
from datetime import timedelta
from typing import Any, Iterator
from uuid import UUID

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v16.response import NodeEndpoint
from kio.serial import entity_reader, entity_writer
from kio.serial.readers import read_compact_array_length
from kio.serial.writers import write_compact_array_length, write_unsigned_varint
from kio.static.primitive import i32 as i32_
from kio.static.primitive import i64 as i64_

from authz.acl import AclOperation, ResourceType
from protocol.apis.addresses import rewrite_node_list
from protocol.apis.base import (FORWARD, SESSION_PARTITIONS, ApiSpec, Decision, NodeMap, RefuseRequest, RequestInfo,
                                keep_session, partition_count)
from protocol.auth_helper import AuthHelper, literal_action
from protocol.codecs import CodecError, decode_request, encode, make, nested, response_class
from protocol.errors import TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID
from protocol.headers import RequestHeader
from protocol.topic_ids import TopicCache
from protocol.wire import WalkError, array_len, i16, i32, skip_string, skip_tagged, uvarint, uvarint_bytes

__all__ = [
    "SPECS",
    "FetchResponseShape",
    "FetchResponseStream",
    "top_level_tags_offset",
    "walk_fetch_response",
]

_FINAL_EPOCH = b"\xff\xff\xff\xff"  # session_epoch -1


# ---------------------------------------------------------------- requests


class FetchRequestShape:
    """What enforcement reads of a Fetch request.  ``topics`` and ``forgotten`` are its topic
    entries and forgotten topics in request order, each (key, partitions): the key is the
    name before v13, the id from v13 on (None for the all-zero id, as kio reads it), the
    partitions as listed.  ``request`` is the kio request when kio decoded it (None when
    :func:`walk_fetch_request` walked it: enforcement decodes it only to rebuild it)."""

    __slots__ = ("replica_id", "max_wait_ms", "session_id", "session_epoch", "topics", "forgotten", "request")

    def __init__(self, replica_id: int, max_wait_ms: int, session_id: int, session_epoch: int,
                 topics: list[tuple[Any, list[int]]], forgotten: list[tuple[Any, list[int]]],
                 request: Any = None) -> None:
        self.replica_id = replica_id
        self.max_wait_ms = max_wait_ms
        self.session_id = session_id
        self.session_epoch = session_epoch
        self.topics = topics
        self.forgotten = forgotten
        self.request = request

    def fields(self) -> tuple[Any, ...]:
        """Everything but ``request`` (what the walk and kio must agree on)."""
        return (self.replica_id, self.max_wait_ms, self.session_id, self.session_epoch, self.topics, self.forgotten)


def _shape_of(request: Any, version: int) -> FetchRequestShape:
    """The shape of a request kio decoded (the reference :func:`walk_fetch_request` is tested against)."""
    by_id = version >= 13
    try:
        topics = [(e.topic_id if by_id else e.topic, [p.partition for p in e.partitions]) for e in request.topics]
        forgotten = [(f.topic_id if by_id else f.topic, list(f.partitions))
                     for f in request.forgotten_topics_data] if version >= 7 else []
    except (TypeError, AttributeError) as e:  # a null array where the schema has none
        raise CodecError(f"malformed Fetch v{version} request: {type(e).__name__}: {e}") from None
    return FetchRequestShape(_replica_id(request), request.max_wait // _MS, getattr(request, "session_id", 0),
                             getattr(request, "session_epoch", -1), topics, forgotten, request)


_MS = timedelta(milliseconds=1)
_I32_AT = struct.Struct(">i").unpack_from
_II_AT = struct.Struct(">ii").unpack_from
_ZERO_ID = bytes(16)


try:  # the request walk and the walk to a response's top-level tags in C, built by pip where a
    # compiler is found (setup.py); the Python walks are their references
    from protocol import _native
except ImportError:  # pragma: no cover - a build without a compiler: the references alone
    _native_walk = _native_tags_at = None
else:
    _native_walk = _native.walk_fetch
    _native_tags_at = _native.fetch_response_tags


def _partition_size(version: int) -> int:
    """Bytes of a request partition after its index: current_leader_epoch (v9+), fetch_offset,
    last_fetched_epoch (v12+), log_start_offset (v5+), partition_max_bytes; its tagged fields
    (v12+) follow."""
    return (4 if version >= 9 else 0) + 8 + (4 if version >= 12 else 0) + (8 if version >= 5 else 0) + 4


_PARTITION_SIZE = {v: _partition_size(v) for v in range(4, 19)}


def _count(buf: memoryview, off: int, flexible: bool) -> tuple[int, int]:
    """An array's element count (negative: null or negative, which the walk leaves to kio)."""
    if flexible:
        n = buf[off]
        if n < 0x80:
            return n - 1, off + 1
        n, off = uvarint(buf, off)
        return n - 1, off
    return _I32_AT(buf, off)[0], off + 4


#: topic ids' UUIDs by their bytes (a UUID is immutable; making one costs a microsecond), at
#: most _UUIDS_KEPT, the table emptied when full
_UUIDS: dict[bytes, UUID] = {}
_UUIDS_KEPT = 16384


def _key(buf: memoryview, off: int, by_id: bool, flexible: bool) -> tuple[Any, int]:
    """A topic key: its id (v13+; None for the all-zero id, as kio reads it) or its name."""
    if by_id:
        end = off + 16
        raw = bytes(buf[off:end])
        topic_id = _UUIDS.get(raw)
        if topic_id is not None:
            return topic_id, end
        if len(raw) != 16:
            raise WalkError("buffer ends inside a topic id")
        if raw == _ZERO_ID:
            return None, end
        if len(_UUIDS) >= _UUIDS_KEPT:
            _UUIDS.clear()
        topic_id = _UUIDS[raw] = UUID(bytes=raw)
        return topic_id, end
    name, off = skip_string(buf, off, flexible)
    if name is None:
        raise WalkError("null topic name")
    return name, off


def _entries(buf: memoryview, off: int, flexible: bool, by_id: bool,
             part_size: int | None) -> tuple[list[tuple[Any, list[int]]] | None, int]:
    """The request's topic entries (``part_size``: a partition's bytes after its index, its
    tagged fields following when flexible) or forgotten topics (None: bare int32 partitions),
    each (key, partitions); None for what the walk leaves to kio (a negative or null count, a
    tagged field set)."""
    n, off = _count(buf, off, flexible)
    if n < 0:
        return None, off
    entries = []
    for _ in range(n):
        key, off = _key(buf, off, by_id, flexible)
        count, off = _count(buf, off, flexible)
        if count < 0:
            return None, off
        partitions = []
        for _ in range(count):
            partitions.append(_I32_AT(buf, off)[0])
            off += 4
            if part_size is not None:
                off += part_size
                if flexible:
                    if buf[off] != 0:
                        return None, off  # replica_directory_id (a follower's) or an unknown tag
                    off += 1
        if flexible:
            if buf[off] != 0:
                return None, off
            off += 1
        entries.append((key, partitions))
    return entries, off


def walk_fetch_request(version: int, buf: memoryview, off: int) -> FetchRequestShape | None:
    """The request's shape, read without kio when it has the usual shape: in C
    (``protocol/_native.c``) where it was built, else by :func:`walk_fetch_request_python`, the
    reference (which also reads what the C walk declines: long varints)."""
    if _native_walk is not None:
        walked = _native_walk(buf, off, version)
        if walked is not None:
            return FetchRequestShape(*walked)
    return walk_fetch_request_python(version, buf, off)


def walk_fetch_request_python(version: int, buf: memoryview, off: int) -> FetchRequestShape | None:
    """The request's shape, read without kio when it has the usual shape: every length and
    count present and not negative, no tagged field set anywhere (a consumer sets none), every
    string UTF-8.  None for anything else: kio decodes it then (:func:`_inspect`), and names
    what is malformed.  Bytes after the body are ignored, as kio and the broker ignore them.
    kio's decode is the reference this is tested against (tests/unit/protocol/test_fetch_walk.py)."""
    flexible = version >= 12
    by_id = version >= 13
    part_size = _PARTITION_SIZE.get(version)
    if part_size is None:
        return None
    try:
        if version < 15:
            replica_id = _I32_AT(buf, off)[0]
            off += 4
        else:
            replica_id = -1  # in replica_state, a tagged field (none set: a consumer's -1)
        max_wait_ms = _I32_AT(buf, off)[0]
        off += 13  # max_wait, min_bytes, max_bytes, isolation_level
        if version >= 7:
            session_id, session_epoch = _II_AT(buf, off)
            off += 8
        else:
            session_id, session_epoch = 0, -1
        topics, off = _entries(buf, off, flexible, by_id, part_size)
        forgotten: list[tuple[Any, list[int]]] | None = []
        if version >= 7 and topics is not None:
            forgotten, off = _entries(buf, off, flexible, by_id, None)
        if topics is None or forgotten is None:
            return None
        if version >= 11:
            rack, off = skip_string(buf, off, flexible)
            if rack is None:
                return None
        if flexible:
            if buf[off] != 0:
                return None  # cluster_id or replica_state (a follower's) set
        elif off > len(buf):  # (fixed-size fields are stepped over: past the end, it ended in them)
            return None
    except (WalkError, struct.error, IndexError, UnicodeDecodeError):
        return None
    return FetchRequestShape(replica_id, max_wait_ms, session_id, session_epoch, topics, forgotten)


def _inspect(header: RequestHeader, frame: memoryview) -> RequestInfo:
    shape = walk_fetch_request(header.api_version, frame, header.size)
    if shape is None:
        shape = _shape_of(decode_request(1, header.api_version, frame, header.size), header.api_version)
    return RequestInfo(decoded=shape, broker_wait_s=max(shape.max_wait_ms, 0) / 1000.0)


_MAX_WAIT = struct.Struct(">i")


def _peek(header: RequestHeader, frame: memoryview) -> RequestInfo:
    """Without an authorizer only ``max_wait`` matters (the broker may hold the request that
    long: the request's deadline); the request is not decoded (the broker validates what it
    parses, as it would without kgw).  It follows ``replica_id`` before v15, leads after."""
    version = header.api_version
    try:
        (max_wait_ms,) = _MAX_WAIT.unpack_from(frame, header.size + (4 if version < 15 else 0))
    except struct.error as e:
        raise CodecError(f"malformed Fetch v{version} request: {e}") from e
    return RequestInfo(broker_wait_s=max(max_wait_ms, 0) / 1000.0)


def _replica_id(request: Any) -> int:
    state = getattr(request, "replica_state", None)
    replica_id: int = state.replica_id if state is not None else getattr(request, "replica_id", -1)
    return replica_id


def _session_epoch_offset(version: int) -> int:
    """Offset of ``session_epoch`` in a v7+ request body: the fields before it are fixed-size
    (tagged fields such as ``cluster_id`` and ``replica_state`` are encoded at the end)."""
    # replica_id (v<15), max_wait, min_bytes, max_bytes, isolation_level, session_id
    return (4 if version < 15 else 0) + 4 + 4 + 4 + 1 + 4


def _uses_session(version: int, shape: FetchRequestShape) -> bool:
    return version >= 7 and shape.session_epoch != -1


class _Topic:
    """One topic entry of the request: its key (name, or id from v13 on), name, distinct partitions."""

    __slots__ = ("key", "name", "partitions")

    def __init__(self, key: Any, name: str | None, partitions: list[int]) -> None:
        self.key = key
        self.name = name
        self.partitions = partitions


def _request_topics(shape: FetchRequestShape, version: int, names: TopicCache) -> list[_Topic]:
    """The request's topic entries; a partition named twice counts once (Kafka keys its
    fetch map by topic-partition).  Hot path: one set per topic, ints hashed, no per-partition tuples."""
    by_id = version >= 13
    out = []
    seen: dict[Any, Any] = {}
    for key, partitions in shape.topics:
        name = names.name_of(key) if by_id else key
        taken = seen.get(key)
        if taken is None:
            taken = seen[key] = set(partitions)
            if len(taken) != len(partitions):
                partitions = list(dict.fromkeys(partitions))
        else:
            partitions = [p for p in dict.fromkeys(partitions) if p not in taken]
            taken.update(partitions)
        out.append(_Topic(key, name, partitions))
    return out


# --------------------------------------------------------------- responses


class FetchResponseShape:
    """Where the parts of a Fetch response body are, found without decoding any record batch."""

    __slots__ = ("error_code", "session_id", "topics_at", "first_topic", "n_topics", "topics_end")

    def __init__(self) -> None:
        self.error_code = self.session_id = 0
        #: offset of the topic-array length, of the first topic entry, and just after the last one
        self.topics_at = self.first_topic = self.n_topics = self.topics_end = 0


#: what :func:`_walk` asks of its reader: more bytes (or a malformed response when none are left)
NEED = 0


def _header(buf: Any, off: int, flexible: bool) -> tuple[int, int]:
    """The length prefix, the correlation id and (flexible) the header's tagged fields."""
    off += 8
    if flexible:
        off = skip_tagged(buf, off)
    return 0, off


def _preamble(buf: Any, off: int, version: int, shape: FetchResponseShape) -> tuple[int, int]:
    off += 4  # throttle_time_ms
    if version >= 7:
        shape.error_code, off = i16(buf, off)
        shape.session_id, off = i32(buf, off)
    shape.topics_at = off
    n_topics, off = array_len(buf, off, version >= 12)
    shape.first_topic = off
    return n_topics, off


def _topic_head(buf: Any, off: int, version: int) -> tuple[int, int]:
    if version >= 13:
        off += 16  # topic_id
    else:
        _name, off = skip_string(buf, off, version >= 12)
    return array_len(buf, off, version >= 12)


def _partition_head(buf: Any, off: int, version: int) -> tuple[int, int]:
    """A partition's fields up to its records' length (0 for null records)."""
    flexible = version >= 12
    # partition_index, error_code, high_watermark, last_stable_offset (v4+), log_start_offset (v5+)
    off += 4 + 2 + 8 + 8 + (8 if version >= 5 else 0)
    n_aborted, off = array_len(buf, off, flexible)
    for _ in range(max(n_aborted, 0)):
        off += 16  # producer_id, first_offset
        if flexible:
            off = skip_tagged(buf, off)
    if version >= 11:
        off += 4  # preferred_read_replica
    if flexible:
        size, off = uvarint(buf, off)
        return max(size - 1, 0), off
    size, off = i32(buf, off)
    if size < -1:
        raise WalkError(f"negative byte-field length {size}")
    return max(size, 0), off


def _tags(buf: Any, off: int) -> tuple[int, int]:
    return 0, skip_tagged(buf, off)


class _Reader:
    """The bytes of a response still arriving, as :func:`_walk` walks them."""

    __slots__ = ("buf", "pos", "left", "value", "start", "version", "splice_min", "moving", "out", "tags_at")

    def __init__(self, version: int, buf: bytearray, left: int, splice_min: int) -> None:
        self.version = version
        self.buf = buf
        self.pos = 0
        #: bytes of the response neither received nor moved yet
        self.left = left
        #: the last element's value, and where it started
        self.value = self.start = 0
        self.splice_min = splice_min
        #: bytes of records to move past the user space now (0: none)
        self.moving = 0
        #: bytes to hand on before anything else
        self.out: list[bytes | bytearray | memoryview] = []
        #: where the top-level tagged fields start in ``buf`` (-1 until they are walked)
        self.tags_at = -1

    def parse(self, fn: Any, *args: Any) -> bool:
        """Read one element with ``fn`` at ``pos``: False if more bytes must be received first."""
        try:
            value, end = fn(self.buf, self.pos, *args)
        except WalkError as e:
            if not self.left:
                raise CodecError(f"malformed Fetch v{self.version} response: {e}") from e
            return False
        except UnicodeDecodeError as e:
            raise CodecError(f"malformed Fetch v{self.version} response: {e}") from e
        if end > len(self.buf):
            if not self.left:
                raise CodecError(f"malformed Fetch v{self.version} response: it ends early")
            return False
        self.value, self.start, self.pos = value, self.pos, end
        return True

    def records(self, size: int) -> bool:
        """Pass over ``size`` bytes of records: False if they must be received first.  When at
        least ``splice_min`` of them are still to come, everything before them is handed on
        and they are to be moved (:attr:`moving`)."""
        buf = self.buf
        end = self.pos + size
        if end <= len(buf):
            self.pos = end
            return True
        rest = end - len(buf)
        if rest > self.left:
            raise CodecError(f"malformed Fetch v{self.version} response: it ends inside a record set")
        if rest < self.splice_min:
            return False
        self.out.append(buf)
        self.buf, self.pos = bytearray(), 0
        self.left -= rest
        self.moving = rest
        return True

    def hand_on(self) -> None:
        """Hand on the bytes walked so far (kept: the top-level tags, which may be rewritten)."""
        if self.tags_at < 0 and self.pos:
            buf, pos = self.buf, self.pos
            self.out.append(memoryview(buf)[:pos])  # (the buffer itself: only its unwalked rest is copied)
            self.buf, self.pos = bytearray(memoryview(buf)[pos:]), 0


def _walk(r: _Reader, shape: FetchResponseShape) -> Iterator[int]:
    """Walk a Fetch v4+ response from its length prefix, records passed over by length (the
    structure of :func:`walk_fetch_response`); yields NEED when ``r`` must receive more bytes
    (each element is then read again from its start)."""
    version = r.version
    flexible = version >= 12
    parse = r.parse
    while not parse(_header, flexible):
        yield NEED
    while not parse(_preamble, version, shape):
        yield NEED
    for _ in range(max(r.value, 0)):
        while not parse(_topic_head, version):
            yield NEED
        for _ in range(max(r.value, 0)):
            while not parse(_partition_head, version):
                yield NEED
            if r.value:
                while not r.records(r.value):
                    yield NEED
            if flexible:
                while not parse(_tags):
                    yield NEED
        if flexible:
            while not parse(_tags):
                yield NEED
    if flexible:
        while not parse(_tags):
            yield NEED
        r.tags_at = r.start
    while r.left:  # bytes after the last field: passed on as they are, as by the copying path
        yield NEED
        r.pos = len(r.buf)


def walk_fetch_response(version: int, buf: memoryview | bytes, offset: int) -> FetchResponseShape:
    """Walk a Fetch v4+ response body at ``buf[offset:]`` to its end, skipping records by length.

    The loop of :func:`_walk` for a response already whole, its elements read the same way
    without a generator's turns (every v16+ response is walked: this is the hot path)."""
    flexible = version >= 12
    shape = FetchResponseShape()
    try:
        n_topics, off = _preamble(buf, offset, version, shape)
        n_topics = shape.n_topics = max(n_topics, 0)
        for _ in range(n_topics):
            n_parts, off = _topic_head(buf, off, version)
            for _ in range(max(n_parts, 0)):
                size, off = _partition_head(buf, off, version)
                off += size
                if flexible:
                    off = skip_tagged(buf, off)
            if flexible:
                off = skip_tagged(buf, off)
        shape.topics_end = off
        if flexible:
            off = skip_tagged(buf, off)
    except (WalkError, UnicodeDecodeError) as e:
        raise CodecError(f"malformed Fetch v{version} response: {e}") from e
    if off > len(buf):
        raise CodecError(f"malformed Fetch v{version} response: it ends {off - len(buf)} bytes early")
    return shape


def top_level_tags_offset(frame: memoryview | bytes, offset: int, version: int = 13) -> int:
    """Offset of the top-level tagged-field section of a v13+ Fetch response body: found in C
    (``protocol/_native.c``) where it was built and the response reads as it expects, else by
    :func:`walk_fetch_response`, the reference, which names what is malformed.  Every v16+
    response completed whole comes here."""
    if _native_tags_at is not None:
        at: int | None = _native_tags_at(frame, offset, version)
        if at is not None:
            return at
    end: int = walk_fetch_response(version, frame, offset).topics_end
    return end


def _array_len(n: int, flexible: bool) -> bytes:
    if flexible:
        out = io.BytesIO()
        write_unsigned_varint(out, n + 1)  # type: ignore[arg-type]  # kio: an int subclass, same bytes
        return out.getvalue()
    return struct.pack(">i", n)


def _error_topics(version: int, errors: list[tuple[_Topic, int]]) -> list[Any]:
    """Kio topic entries for (topic, error) pairs, partitions grouped by consecutive topic as Kafka does.

    Each partition is Kafka's ``FetchResponse.partitionResponse`` as it reaches the wire: high
    watermark, last stable and log start offsets -1, no aborted transactions, preferred replica -1
    and an *empty* record set -- Kafka's response conversion turns the null records of an error
    partition into ``MemoryRecords.EMPTY``, and librdkafka rejects a null record set
    ("invalid MessageSetSize -1") and never reports the partition's error.
    """
    topic_cls = nested(response_class(1, version), "responses")
    part_cls = nested(topic_cls, "partitions")
    key_field = "topic_id" if version >= 13 else "topic"
    grouped: list[tuple[object, list[Any]]] = []
    for topic, error in errors:
        parts = [
            make(part_cls, partition_index=i32_(p), error_code=ErrorCode(error), high_watermark=i64_(-1),
                 last_stable_offset=i64_(-1), log_start_offset=i64_(-1), aborted_transactions=(),
                 preferred_read_replica=i32_(-1), records=b"")
            for p in topic.partitions
        ]
        if not parts:
            continue
        if grouped and grouped[-1][0] == topic.key:
            grouped[-1][1].extend(parts)
        else:
            grouped.append((topic.key, parts))
    return [topic_cls(**{key_field: key, "partitions": tuple(parts)}) for key, parts in grouped]


def _error_response(version: int, errors: list[tuple[_Topic, int]]) -> bytes:
    return encode(make(response_class(1, version), throttle_time=timedelta(0), error_code=ErrorCode.none,
                       session_id=i32_(0), responses=tuple(_error_topics(version, errors)), node_endpoints=()))


def _merger(version: int, errors: list[tuple[_Topic, int]]) -> Any:
    """Append the error entries to the upstream response, leaving its topic entries untouched."""
    entries = _error_topics(version, errors)
    appended = b"".join(encode(e) for e in entries)
    count = len(entries)
    flexible = version >= 12

    def merge(buf: memoryview | bytes, off: int) -> bytes:
        shape = walk_fetch_response(version, buf, off)
        if shape.error_code != 0:
            # a top-level error carries no partitions (Kafka answers the same way)
            return bytes(buf[off:])
        return b"".join((
            buf[off : shape.topics_at],
            _array_len(shape.n_topics + count, flexible),
            buf[shape.first_topic : shape.topics_end],
            appended,
            buf[shape.topics_end :],
        ))

    return merge


# ------------------------------------------------------------- enforcement


_SESSIONS = "fetch_sessions"  # connection_state key: session id -> {topic name: set of partitions}



def _session_after(cached: dict[str, set[int]], shape: FetchRequestShape, topics: list[_Topic], version: int,
                   names: TopicCache) -> dict[str, set[int]] | None:
    """The session's partitions once this incremental fetch is applied (``cached`` itself when
    it changes nothing: the usual fetch); None if a topic is unknown."""
    if not shape.forgotten:
        for t in topics:
            if t.partitions:
                held = cached.get(t.name) if t.name is not None else None
                if held is None or not held.issuperset(t.partitions):
                    break
        else:
            return cached
    after = {name: set(parts) for name, parts in cached.items()}
    for t in topics:
        if t.partitions:
            if t.name is None:
                return None
            after.setdefault(t.name, set()).update(t.partitions)
    for key, partitions in shape.forgotten:
        name = names.name_of(key) if version >= 13 else key
        if name in after:
            after[name].difference_update(partitions)
            if not after[name]:
                del after[name]
    return after


def _learn_session(sessions: dict[Any, Any], version: int, partitions: dict[str | None, set[int]]) -> Any:
    """A merge that records the session id the upstream created, leaving the response as it is."""

    def merge(buf: memoryview | bytes, off: int) -> None:
        shape = walk_fetch_response(version, buf, off)
        if shape.error_code == 0 and shape.session_id != 0:
            keep_session(sessions, shape.session_id, partitions)
        return None

    return merge


def _sessionless(header: RequestHeader, body: memoryview, shape: FetchRequestShape) -> Decision:
    """Forward as is, or with session_epoch -1 if the request would create or use a session."""
    if not _uses_session(header.api_version, shape):
        return FORWARD
    at = header.size + _session_epoch_offset(header.api_version)
    return Decision(request=b"".join((body[header.size : at], _FINAL_EPOCH, body[at + 4 :])))


_TOPIC, _READ = ResourceType.TOPIC, AclOperation.READ


def _sole_action(header: RequestHeader, info: RequestInfo, state: dict[Any, Any], names: TopicCache) -> Any:
    """A consumer's usual fetch: incremental, on a session of one topic kgw keeps, naming none
    or some of the partitions the session holds, forgetting none.  :func:`_enforce` authorizes
    TOPIC READ on that topic, counted by the session's partitions, and forwards the request as
    it is, the session unchanged: that action.  None for any other fetch."""
    shape: FetchRequestShape = info.decoded
    if shape.replica_id >= 0 or shape.forgotten or shape.session_epoch in (0, -1):  # (v4-v6: -1)
        return None
    sessions = state.get(_SESSIONS)
    cached = sessions.get(shape.session_id) if sessions else None
    if cached is None or len(cached) != 1:
        return None
    ((name, held),) = cached.items()
    topics = shape.topics
    if topics:
        if len(topics) != 1:
            return None
        key, partitions = topics[0]
        if not partitions or (names.name_of(key) if header.api_version >= 13 else key) != name:
            return None
        if not held.issuperset(partitions):
            return None
    return literal_action(_TOPIC, name, _READ, len(held))


def _kio_request(header: RequestHeader, body: memoryview, shape: FetchRequestShape) -> Any:
    """The kio request, for the rare fetch kgw rebuilds (decoded then if the walk read it)."""
    if shape.request is not None:
        return shape.request
    try:
        return decode_request(1, header.api_version, body, header.size)
    except CodecError as e:  # (the walk reads only what kio reads: tests/unit/protocol/test_fetch_walk.py)
        raise RefuseRequest(f"malformed Fetch v{header.api_version} request: {e}") from None


def _enforce(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """Fetch (docs/authorization.md): follower CLUSTER:CLUSTER_ACTION, consumer TOPIC:READ per topic.
    The usual session fetch's path through here is also :func:`_sole_action` (the dispatcher's
    shortcut): keep them in step."""
    if not auth.enabled:
        return FORWARD
    shape: FetchRequestShape = info.decoded
    version = header.api_version
    topics = _request_topics(shape, version, auth.topics)
    if shape.replica_id >= 0:
        if auth.cluster(AclOperation.CLUSTER_ACTION):
            return FORWARD
        return Decision(respond=_error_response(version, [(t, TOPIC_AUTHORIZATION_FAILED) for t in topics]))
    uses_session = _uses_session(version, shape)
    sessions: dict[Any, Any] = auth.connection_state.setdefault(_SESSIONS, {}) if uses_session else {}
    cached = after = None
    if uses_session and shape.session_epoch != 0:  # an incremental fetch: its session ends here unless kept
        cached = sessions.pop(shape.session_id, None)
        if cached is not None:
            after = _session_after(cached, shape, topics, version, auth.topics)
    if after is not None:
        # Kafka authorizes the session's every partition, the request's among them, in one batch
        allowed = auth.filter(ResourceType.TOPIC, AclOperation.READ, {n: len(p) for n, p in after.items()})
    else:
        counts: dict[str, int] = {}
        for t in topics:
            if t.name is not None and t.partitions:
                counts[t.name] = counts.get(t.name, 0) + len(t.partitions)
        allowed = auth.filter(ResourceType.TOPIC, AclOperation.READ, counts)
    # an entry without partitions fetches nothing, so it is neither checked nor answered (as in
    # Kafka); it is not forwarded either: its name or id was never authorized
    unknown = [(t, UNKNOWN_TOPIC_ID) for t in topics if t.partitions and t.name is None]
    denied = [(t, TOPIC_AUTHORIZATION_FAILED) for t in topics if t.partitions and t.name is not None
              and t.name not in allowed]
    empty = False
    for t in topics:
        if not t.partitions:
            empty = True
            break
    if not unknown and not denied and not empty:
        if uses_session:
            if shape.session_epoch == 0:  # a new session: this full fetch lists all its partitions
                sessions.pop(shape.session_id, None)
                partitions = {t.name: set(t.partitions) for t in topics if t.partitions}
                if partition_count(partitions) <= SESSION_PARTITIONS:
                    return Decision(merge=_learn_session(sessions, version, partitions))
            elif (after is not None and len(allowed) == len(after)  # kept: every partition allowed
                  and (after is cached or partition_count(after) <= SESSION_PARTITIONS)):
                sessions[shape.session_id] = after
                return FORWARD
        return _sessionless(header, body, shape)  # a session kgw does not know, or a denied partition in it
    if version >= 7:
        sessions.pop(shape.session_id, None)
    errors = unknown + denied  # Kafka: unknown ids are found first, then the auth check
    request = _kio_request(header, body, shape)
    kept = tuple(e for e, t in zip(request.topics, topics) if t.partitions and t.name in allowed)
    if not kept:
        return Decision(respond=_error_response(version, errors))
    changes: dict[str, Any] = {"topics": kept}
    if version >= 7:
        changes.update(session_epoch=i32_(-1), forgotten_topics_data=())
    return Decision(request=encode(replace(request, **changes)), merge=_merger(version, errors))


# ----------------------------------------------------------------- rewrite


_node_writer = entity_writer(NodeEndpoint)
_node_reader = entity_reader(NodeEndpoint)


def _read_node_endpoints(buf: memoryview) -> tuple[NodeEndpoint, ...]:
    reader = _node_reader
    n, off = read_compact_array_length(buf, 0)
    out = []
    for _ in range(max(n or 0, 0)):  # a null array (None) holds nothing
        node, size = reader(buf, off)
        off += size
        out.append(node)
    return tuple(out)


def _encode_tag(tag: int, value: bytes) -> bytes:
    out = io.BytesIO()
    write_unsigned_varint(out, tag)  # type: ignore[arg-type]
    write_unsigned_varint(out, len(value))  # type: ignore[arg-type]
    out.write(value)
    return out.getvalue()


def _rewrite_tags(tags: memoryview, nodes: NodeMap) -> bytes | None:
    """The top-level tagged section ``tags`` with gateway addresses in ``node_endpoints``; None
    if nothing changes (e.g. an empty section, the usual case)."""
    if tags[0] == 0:
        return None
    try:
        count, off = uvarint(tags, 0)
        fields = []
        for _ in range(count):
            tag, off = uvarint(tags, off)
            size, off = uvarint(tags, off)
            fields.append((tag, tags[off : off + size]))
            off += size
    except WalkError as e:
        raise CodecError(f"malformed Fetch response tagged fields: {e}") from e
    out = io.BytesIO()
    write_unsigned_varint(out, len(fields))  # type: ignore[arg-type]
    for tag, value in fields:
        if tag == 0:
            endpoints = rewrite_node_list(_read_node_endpoints(value), nodes)
            body = io.BytesIO()
            write_compact_array_length(body, len(endpoints))
            for node in endpoints:
                _node_writer(body, node)
            out.write(_encode_tag(0, body.getvalue()))
        else:
            out.write(_encode_tag(tag, bytes(value)))
    new = out.getvalue()
    return None if new == tags[:off] else new


def _rewrite(version: int, frame: memoryview, offset: int, nodes: NodeMap) -> bytes | None:
    if version < 16:
        return None
    tags_at = top_level_tags_offset(frame, offset, version)
    tags = _rewrite_tags(frame[tags_at:], nodes)
    if tags is None:
        return None  # forward the upstream frame without a copy
    return b"".join((frame[offset:tags_at], tags, frame[tags_at + len(_tag_section(frame, tags_at)):]))


def _tag_section(buf: Any, at: int) -> memoryview:
    return memoryview(buf)[at : skip_tagged(buf, at)]


#: the tag kgw pads a rewritten tagged section with when its size is fixed (see :func:`same_size_tags`);
#: unknown to Kafka, so every client skips it
PADDING_TAG = 10_000


def same_size_tags(new: bytes, size: int) -> bytes:
    """``new`` (a tagged section) made exactly ``size`` bytes long, for a response whose length
    prefix is already on its way: padded with a :data:`PADDING_TAG` field of zeros, or, if it
    does not fit, replaced by that field alone (the client then learns moved leaders from a
    metadata refresh instead of ``node_endpoints``)."""
    if len(new) == size:
        return new
    count, off = uvarint(new, 0)
    empty = uvarint_bytes(PADDING_TAG) + uvarint_bytes(0)  # a second, empty field where one cannot fill the gap
    for kept, fields in ((count, new[off:]), (0, b"")):
        for extra in (b"", empty):
            head = uvarint_bytes(kept + 1 + (1 if extra else 0)) + fields + extra + uvarint_bytes(PADDING_TAG)
            for pad in range(max(size - len(head) - 3, 0), size - len(head)):
                padding = uvarint_bytes(pad) + bytes(pad)
                if len(head) + len(padding) == size:
                    return head + padding
    raise CodecError(f"cannot fit a rewritten tagged section into {size} bytes")


class FetchResponseStream:
    """A large Fetch response passed on while it arrives, its record sets never in user space.

    Sans-IO, driven by the data plane (gateway/connection/data_plane.py): the head that arrived
    first is given at creation; :meth:`next` then says what to do, until it returns DONE:

    * ``NEED`` (0): :meth:`receive` up to :attr:`left` more bytes of the response;
    * ``n > 0``: the next ``n`` bytes of the response are records: move them from the upstream to
      the client without looking at them (``os.splice``), then call :meth:`next` again;
    * ``DONE`` (-1): the response is whole.

    Before acting on what :meth:`next` returned, send :meth:`take`'s bytes to the client: they
    precede what comes next.  Only record sets of at least ``splice_min`` bytes are moved; smaller
    ones are walked over in the bytes received (at most about ``splice_min`` + one read are held).
    The top-level tagged fields (v16+ ``node_endpoints``) are rewritten like :func:`_rewrite` does,
    at the size the upstream gave them (:func:`same_size_tags`).
    """

    DONE = -1

    __slots__ = ("_reader", "_walk", "_nodes", "_ended", "_done")

    def __init__(self, version: int, head: bytes | memoryview, left: int, nodes: NodeMap, splice_min: int) -> None:
        self._reader = _Reader(version, bytearray(head), left, max(splice_min, 1))
        self._walk = _walk(self._reader, FetchResponseShape())
        self._nodes = nodes
        self._ended = self._done = False

    @property
    def left(self) -> int:
        """Bytes of the response neither received nor moved yet."""
        return self._reader.left

    def receive(self, data: bytes) -> None:
        r = self._reader
        if len(data) > r.left:
            raise ValueError(f"{len(data)} bytes received, {r.left} left in the response")
        r.buf += data
        r.left -= len(data)

    def take(self) -> list[bytes | bytearray | memoryview]:
        """The bytes to hand on now, in order."""
        r = self._reader
        out, r.out = r.out, []
        return out

    def next(self) -> int:
        r = self._reader
        if self._ended:
            return self._finish()
        try:
            next(self._walk)
        except StopIteration:
            self._ended = True
        if r.moving:
            moving, r.moving = r.moving, 0
            return moving
        if self._ended:
            return self._finish()
        if r.pos >= 65536:
            r.hand_on()  # bytes walked go on while the walk waits
        return NEED

    def _finish(self) -> int:
        r = self._reader
        if not self._done:
            self._done = True
            if r.tags_at >= 0 and r.version >= 16:
                section = _tag_section(r.buf, r.tags_at)
                tags = _rewrite_tags(memoryview(bytes(section)), self._nodes)  # (kio reads read-only buffers)
                if tags is not None:
                    r.buf[r.tags_at : r.tags_at + len(section)] = same_size_tags(tags, len(section))
            if r.buf:
                r.out.append(r.buf)
        return self.DONE


SPECS = (ApiSpec(1, "Fetch", _inspect, _rewrite, enforce=_enforce, peek=_peek, versions=(4, 18),
                 stream_response=FetchResponseStream, sole_action=_sole_action),)
