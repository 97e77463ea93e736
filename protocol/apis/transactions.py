"""Transaction APIs: authorization as Kafka's request layer does it (docs/authorization.md).

Theory of operation
-------------------
Every request here is small, so it is decoded whole (``inspect_decoded``) and
checked through :class:`~protocol.auth_helper.AuthHelper`:

* InitProducerId (22): with a transactional id, TRANSACTIONAL_ID:WRITE, then
  TWO_PHASE_COMMIT when ``enable2_pc`` is set (v6+), else 53; without one,
  CLUSTER:IDEMPOTENT_WRITE (A=true, D=false), else ``authorizeByResourceType
  (WRITE, TOPIC)`` (KIP-679), else 31.  Whole-request error (``getErrorResponse``:
  producer id / epoch -1).
* AddPartitionsToTxn (24): v0-3 (clients) TRANSACTIONAL_ID:WRITE (else 53 on
  every partition), then the TOPIC:WRITE batch filter over the partitions
  (refCount = partitions of the topic) with internal topics left out of the
  check and always denied.  Any denied topic: denied partitions 29, every other
  partition 55 OPERATION_NOT_ATTEMPTED, and nothing reaches the coordinator.
  v4+ is the broker-to-broker form: CLUSTER:CLUSTER_ACTION, else top-level 31.
* AddOffsetsToTxn (25): TRANSACTIONAL_ID:WRITE (53), then GROUP:READ (30).
* EndTxn (26): TRANSACTIONAL_ID:WRITE (53).
* TxnOffsetCommit (28): TRANSACTIONAL_ID:WRITE (53 on every partition), GROUP:READ
  (30 on every partition), then the TOPIC:READ batch filter (refCount = topic
  entries): denied topics get 29 per partition and are dropped from the
  forwarded request; Kafka's response builder lists them first, then the
  coordinator's answer.
* DescribeTransactions (65): TRANSACTIONAL_ID:DESCRIBE per id, one call each
  (denied: a 53 entry in its place, the id is not forwarded); then, on the
  answer, TOPIC:DESCRIBE per topic of each returned state, denied topics removed.
* ListTransactions (66): the answer is filtered: states whose id lacks
  TRANSACTIONAL_ID:DESCRIBE are dropped (T/T: denials logged at INFO).

Differences that come from being a proxy (see the module's report): Kafka
answers 3 UNKNOWN_TOPIC_OR_PARTITION instead of 55 for an allowed but missing
partition of a failed AddPartitionsToTxn; kgw has no metadata and says 55.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
from datetime import datetime, timedelta, timezone

from typing import Any
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i64

from authz.acl import AclOperation, ResourceType
from protocol.apis.base import FORWARD, ApiSpec, Decision, RequestInfo
from protocol.apis.generic import inspect_decoded
from protocol.auth_helper import AuthHelper
from protocol.codecs import decode_response, encode, make, nested, response_class
from protocol.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    GROUP_AUTHORIZATION_FAILED,
    OPERATION_NOT_ATTEMPTED,
    TOPIC_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
)
from protocol.headers import RequestHeader

__all__ = ["SPECS", "INTERNAL_TOPICS"]

#: Kafka's ``Topic.isInternal`` set: never authorized for AddPartitionsToTxn, always 29.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})

_T = ResourceType
_Op = AclOperation
_ZERO = timedelta(0)
_EPOCH = datetime.fromtimestamp(0, tz=timezone.utc)


def _ec(code: int) -> ErrorCode:
    return ErrorCode(code)


# --------------------------------------------------------------------------- InitProducerId (22)


def _init_producer_id_error(version: int, code: int) -> bytes:
    cls = response_class(22, version)
    return encode(make(cls, throttle_time=_ZERO, error_code=_ec(code), producer_id=i64(-1), producer_epoch=i16(-1),
                       ongoing_txn_producer_id=i64(-1), ongoing_txn_producer_epoch=i16(-1)))


def _enforce_init_producer_id(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    txn = request.transactional_id
    if txn is not None:
        if not auth.allowed(_T.TRANSACTIONAL_ID, txn, _Op.WRITE):
            return Decision(respond=_init_producer_id_error(header.api_version, TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        if getattr(request, "enable2_pc", False) and not auth.allowed(_T.TRANSACTIONAL_ID, txn, _Op.TWO_PHASE_COMMIT):
            return Decision(respond=_init_producer_id_error(header.api_version, TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
        return FORWARD
    if auth.cluster(_Op.IDEMPOTENT_WRITE, log_if_allowed=True, log_if_denied=False):
        return FORWARD
    if auth.by_resource_type(_Op.WRITE, _T.TOPIC):
        return FORWARD
    return Decision(respond=_init_producer_id_error(header.api_version, CLUSTER_AUTHORIZATION_FAILED))


# --------------------------------------------------------------------------- AddPartitionsToTxn (24)


def _add_partitions_v3_response(version: int, topics: Any, code_of: Callable[..., Any]) -> bytes:
    """v0-3 response: one result per request topic (request order), ``code_of(topic)`` per partition."""
    cls = response_class(24, version)
    topic_cls = nested(cls, "results_by_topic_v3_and_below")
    part_cls = nested(topic_cls, "results_by_partition")
    merged: dict[str, list[Any]] = {}
    for t in topics:  # Kafka's result collection is keyed by topic name
        code = _ec(code_of(t.name))
        merged.setdefault(t.name, []).extend(
            part_cls(partition_index=i32(p), partition_error_code=code) for p in t.partitions)
    results = tuple(topic_cls(name=name, results_by_partition=tuple(parts)) for name, parts in merged.items())
    return encode(make(cls, throttle_time=_ZERO, results_by_topic_v3_and_below=results))


def _enforce_add_partitions(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    version = header.api_version
    if version >= 4:
        if auth.cluster(_Op.CLUSTER_ACTION):
            return FORWARD
        cls = response_class(24, version)
        return Decision(respond=encode(make(cls, throttle_time=_ZERO, error_code=_ec(CLUSTER_AUTHORIZATION_FAILED),
                                            results_by_transaction=())))
    topics = request.v3_and_below_topics
    if not auth.allowed(_T.TRANSACTIONAL_ID, request.v3_and_below_transactional_id, _Op.WRITE):
        return Decision(respond=_add_partitions_v3_response(
            version, topics, lambda _name: TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    counts: dict[str, int] = {}
    for t in topics:
        if t.name not in INTERNAL_TOPICS:
            counts[t.name] = counts.get(t.name, 0) + len(t.partitions)
    allowed = auth.filter(_T.TOPIC, _Op.WRITE, counts)
    if all(t.name in allowed for t in topics):
        return FORWARD
    return Decision(respond=_add_partitions_v3_response(
        version, topics, lambda name: OPERATION_NOT_ATTEMPTED if name in allowed else TOPIC_AUTHORIZATION_FAILED))


# --------------------------------------------------------------------------- AddOffsetsToTxn (25), EndTxn (26)


def _top_level_error(api_key: int, version: int, code: int) -> bytes:
    cls = response_class(api_key, version)
    return encode(make(cls, throttle_time=_ZERO, error_code=_ec(code), producer_id=i64(-1), producer_epoch=i16(-1)))


def _enforce_add_offsets(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    if not auth.allowed(_T.TRANSACTIONAL_ID, request.transactional_id, _Op.WRITE):
        return Decision(respond=_top_level_error(25, header.api_version, TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    if not auth.allowed(_T.GROUP, request.group_id, _Op.READ):
        return Decision(respond=_top_level_error(25, header.api_version, GROUP_AUTHORIZATION_FAILED))
    return FORWARD


def _enforce_end_txn(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    if not auth.enabled:
        return FORWARD
    if not auth.allowed(_T.TRANSACTIONAL_ID, info.decoded.transactional_id, _Op.WRITE):
        return Decision(respond=_top_level_error(26, header.api_version, TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    return FORWARD


# --------------------------------------------------------------------------- TxnOffsetCommit (28)


def _txn_offset_topics(version: int, topics: Any, code: int) -> list[Any]:
    """Kafka's ``TxnOffsetCommitResponse.Builder``: one entry per distinct name, partitions in order."""
    cls = response_class(28, version)
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    merged: dict[str, list[Any]] = {}
    for t in topics:
        merged.setdefault(t.name, []).extend(
            part_cls(partition_index=p.partition_index, error_code=_ec(code)) for p in t.partitions)
    return [topic_cls(name=name, partitions=tuple(parts)) for name, parts in merged.items()]


def _txn_offset_whole(version: int, topics: Any, code: int) -> bytes:
    """``TxnOffsetCommitRequest.getErrorResponse``: the error on every requested partition."""
    cls = response_class(28, version)
    topic_cls = nested(cls, "topics")
    part_cls = nested(topic_cls, "partitions")
    out = tuple(topic_cls(name=t.name, partitions=tuple(
        part_cls(partition_index=p.partition_index, error_code=_ec(code)) for p in t.partitions)) for t in topics)
    return encode(make(cls, throttle_time=_ZERO, topics=out))


def _enforce_txn_offset_commit(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    version = header.api_version
    if not auth.allowed(_T.TRANSACTIONAL_ID, request.transactional_id, _Op.WRITE):
        return Decision(respond=_txn_offset_whole(version, request.topics, TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    if not auth.allowed(_T.GROUP, request.group_id, _Op.READ):
        return Decision(respond=_txn_offset_whole(version, request.topics, GROUP_AUTHORIZATION_FAILED))
    allowed = auth.filter(_T.TOPIC, _Op.READ, [t.name for t in request.topics])
    denied = [t for t in request.topics if t.name not in allowed]
    if not denied:
        return FORWARD
    errors = _txn_offset_topics(version, denied, TOPIC_AUTHORIZATION_FAILED)
    cls = response_class(28, version)
    kept = tuple(t for t in request.topics if t.name in allowed)
    if not kept:
        return Decision(respond=encode(make(cls, throttle_time=_ZERO, topics=tuple(errors))))
    reduced = encode(dataclasses.replace(request, topics=kept))

    def merge(buf: memoryview | bytes, off: int) -> bytes:
        response = decode_response(28, version, buf, off)
        by_name = {t.name: i for i, t in enumerate(errors)}
        out = list(errors)
        for t in response.topics:
            i = by_name.get(t.name)
            if i is None:
                by_name[t.name] = len(out)
                out.append(t)
            else:
                out[i] = dataclasses.replace(out[i], partitions=out[i].partitions + t.partitions)
        return encode(dataclasses.replace(response, topics=tuple(out)))

    return Decision(request=reduced, merge=merge)


# --------------------------------------------------------------------------- DescribeTransactions (65)


def _filter_state_topics(auth: AuthHelper, state: Any) -> Any:
    """Keep the topics of one transaction state the caller may DESCRIBE (one call per topic, T/T)."""
    kept = tuple(t for t in state.topics if auth.allowed(_T.TOPIC, t.topic, _Op.DESCRIBE))
    return state if len(kept) == len(state.topics) else dataclasses.replace(state, topics=kept)


def _enforce_describe_transactions(auth: AuthHelper, header: RequestHeader, body: memoryview,
                                   info: RequestInfo) -> Decision:
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    version = header.api_version
    ids = request.transactional_ids
    verdicts = [auth.allowed(_T.TRANSACTIONAL_ID, txn, _Op.DESCRIBE) for txn in ids]
    cls = response_class(65, version)
    state_cls = nested(cls, "transaction_states")

    def denied_state(txn: str) -> Any:
        return make(state_cls, error_code=_ec(TRANSACTIONAL_ID_AUTHORIZATION_FAILED), transactional_id=txn,
                    transaction_state="", transaction_timeout=_ZERO, transaction_start_time=_EPOCH,
                    producer_id=i64(0), producer_epoch=i16(0), topics=())

    if not any(verdicts) and ids:
        return Decision(respond=encode(make(cls, throttle_time=_ZERO,
                                            transaction_states=tuple(denied_state(t) for t in ids))))
    allowed_ids = tuple(t for t, ok in zip(ids, verdicts) if ok)

    def merge(buf: memoryview | bytes, off: int) -> bytes:
        response = decode_response(65, version, buf, off)
        upstream = list(response.transaction_states)
        out = []
        for txn, ok in zip(ids, verdicts):
            if not ok:
                out.append(denied_state(txn))
                continue
            idx = next((i for i, s in enumerate(upstream) if s.transactional_id == txn), None)
            if idx is not None:
                out.append(_filter_state_topics(auth, upstream.pop(idx)))
        out.extend(_filter_state_topics(auth, s) for s in upstream)
        return encode(dataclasses.replace(response, transaction_states=tuple(out)))

    if len(allowed_ids) == len(ids):
        return Decision(merge=merge)
    return Decision(request=encode(dataclasses.replace(request, transactional_ids=allowed_ids)), merge=merge)


# --------------------------------------------------------------------------- ListTransactions (66)


def _enforce_list_transactions(auth: AuthHelper, header: RequestHeader, body: memoryview,
                               info: RequestInfo) -> Decision:
    if not auth.enabled:
        return FORWARD
    version = header.api_version

    def merge(buf: memoryview | bytes, off: int) -> bytes:
        response = decode_response(66, version, buf, off)
        kept = tuple(s for s in response.transaction_states
                     if auth.allowed(_T.TRANSACTIONAL_ID, s.transactional_id, _Op.DESCRIBE))
        if len(kept) == len(response.transaction_states):
            return bytes(buf[off:])
        return encode(dataclasses.replace(response, transaction_states=kept))

    return Decision(merge=merge)


SPECS = (
    ApiSpec(22, "InitProducerId", inspect_decoded, enforce=_enforce_init_producer_id, versions=(0, 6)),
    ApiSpec(24, "AddPartitionsToTxn", inspect_decoded, enforce=_enforce_add_partitions, versions=(0, 5)),
    ApiSpec(25, "AddOffsetsToTxn", inspect_decoded, enforce=_enforce_add_offsets, versions=(0, 4)),
    ApiSpec(26, "EndTxn", inspect_decoded, enforce=_enforce_end_txn, versions=(0, 5)),
    ApiSpec(28, "TxnOffsetCommit", inspect_decoded, enforce=_enforce_txn_offset_commit, versions=(0, 5)),
    ApiSpec(65, "DescribeTransactions", inspect_decoded, enforce=_enforce_describe_transactions, versions=(0, 0)),
    ApiSpec(66, "ListTransactions", inspect_decoded, enforce=_enforce_list_transactions, versions=(0, 2)),
)
