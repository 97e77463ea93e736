"""FindCoordinator (10): authorization of the coordinator keys (GROUP:DESCRIBE,
TRANSACTIONAL_ID:DESCRIBE, share-group keys) and the rewriting of the coordinator
addresses in the response to gateway addresses.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from authz.acl import AclOperation
from protocol.apis.base import FORWARD, ApiSpec, Decision, RequestInfo
from protocol.apis.generic import inspect_decoded
from protocol.auth_helper import AuthHelper
from protocol.codecs import decode_response, encode, nested, response_class
from protocol.merging import merge_in_request_order
from protocol.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    GROUP_AUTHORIZATION_FAILED,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
)
from protocol.headers import RequestHeader
from protocol.apis.group_common import DESCRIBE, GROUP, TXN, _MESSAGES, _blank, _request_body, _respond
from protocol.apis.base import NodeMap

__all__ = ["SPECS"]

# FindCoordinator key types
_KEY_GROUP, _KEY_TRANSACTION, _KEY_SHARE = 0, 1, 2


def _coordinator_check(auth: AuthHelper, key_type: int, key: str) -> int:
    """Kafka's getCoordinator auth part: the error code, 0 if allowed or not checked."""
    if key_type == _KEY_GROUP:
        return 0 if auth.allowed(GROUP, key, DESCRIBE) else GROUP_AUTHORIZATION_FAILED
    if key_type == _KEY_TRANSACTION:
        return 0 if auth.allowed(TXN, key, DESCRIBE) else TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    return 0


def _enforce_find_coordinator(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """FindCoordinator (docs/authorization.md): GROUP:DESCRIBE / TRANSACTIONAL_ID:DESCRIBE on the key(s);
    SHARE keys (v6+) CLUSTER:CLUSTER_ACTION, thrown: every key 31."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    v = header.api_version
    key_type = getattr(request, "key_type", _KEY_GROUP)
    if v < 4:
        code = _coordinator_check(auth, key_type, request.key)
        if code == 0:
            return FORWARD
        # sendErrorResponseMaybeThrottle -> prepareOldResponse(error, Node.noNode)
        return _respond(10, v, error_code=code, error_message=_MESSAGES[code], node_id=-1, host="", port=-1)
    cls = response_class(10, v)
    coord_cls = nested(cls, "coordinators")
    keys = list(request.coordinator_keys)
    if key_type == _KEY_SHARE and v >= 6:
        for _ in keys:
            if not auth.cluster(AclOperation.CLUSTER_ACTION):
                return Decision(respond=encode(_blank(cls, coordinators=tuple(
                    _blank(coord_cls, key=k, node_id=-1, host="", port=-1, error_code=CLUSTER_AUTHORIZATION_FAILED,
                           error_message=_MESSAGES[CLUSTER_AUTHORIZATION_FAILED]) for k in keys))))
        return FORWARD
    codes = [_coordinator_check(auth, key_type, k) for k in keys]
    if not any(codes):
        return FORWARD

    def denied_entry(k: Any, code: int) -> Any:
        return _blank(coord_cls, key=k, node_id=-1, host="", port=-1, error_code=code, error_message="")

    kept = [k for k, c in zip(keys, codes) if c == 0]
    if not kept:
        return Decision(respond=encode(_blank(cls, coordinators=tuple(
            denied_entry(k, c) for k, c in zip(keys, codes)))))

    def merge(buf: memoryview | bytes, off: int) -> bytes:
        response = decode_response(10, v, buf, off)
        merged = merge_in_request_order(
            zip(keys, codes), response.coordinators,
            denied_entry=lambda kc: denied_entry(*kc) if kc[1] else None, same=lambda e, kc: e.key == kc[0])
        return encode(replace(response, coordinators=merged))

    return Decision(request=_request_body(replace(request, coordinator_keys=tuple(kept))), merge=merge)



def _coordinator(entry: Any, nodes: NodeMap) -> Any:
    if entry.error_code != 0 or entry.node_id < 0:
        return entry
    nodes.learn(entry.node_id, entry.host, entry.port, None)
    address = nodes.advertise(entry.node_id)
    if address is None:
        return entry
    return replace(entry, host=address[0], port=address[1])


def _rewrite_find_coordinator(version: int, frame: memoryview, offset: int, nodes: NodeMap) -> bytes:
    response = decode_response(10, version, frame, offset)
    if version >= 4:
        return encode(replace(response, coordinators=tuple(_coordinator(c, nodes) for c in response.coordinators)))
    return encode(_coordinator(response, nodes))


SPECS = (
    ApiSpec(10, "FindCoordinator", inspect_decoded, rewrite_response=_rewrite_find_coordinator, enforce=_enforce_find_coordinator, versions=(0, 6)),
)
