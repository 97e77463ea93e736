"""The table of every API kgw handles, keyed by API key; it fails closed.

Theory of operation
-------------------
Each API family module exports ``SPECS``; this module merges the specs of one
API (e.g. the address rewriting of :mod:`protocol.apis.addresses` with the
enforcement of :mod:`protocol.apis.topics`) and freezes the result in a
``MappingProxyType``.  Only APIs that some family module declares, with the
version range it was written for (``ApiSpec.versions``), are in the table: an
API kio merely has schemas for is not.  An API key absent from the table is
never advertised in ApiVersions and, if a client sends it anyway, its
connection is closed, as a broker does for an API it does not know.  Inter-broker and
controller APIs are deliberately absent: clients have no business sending
them through a gateway.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Mapping

from kio.schema.index import api_key_map

from dataclasses import replace

from protocol.apis import (acls, admin, classic_groups, cluster, configs, consumer_groups, fetch, find_coordinator,
                           metadata, produce, quotas, scram, share_groups, streams_groups, topic_admin, topics,
                           transactions)
from protocol.apis.base import ApiSpec
from protocol.apis.generic import inspect_decoded

__all__ = ["REGISTRY", "LOCAL_KEYS"]

#: APIs only brokers, controllers or share-group coordinators send to each other.
_BROKER_INTERNAL = frozenset(
    {
        4, 5, 6, 7,  # LeaderAndIsr, StopReplica, UpdateMetadata, ControlledShutdown (pre-KRaft)
        27,  # WriteTxnMarkers
        52, 53, 54, 56, 58, 59,  # Vote, Begin/EndQuorumEpoch, AlterPartition, Envelope, FetchSnapshot
        62, 63, 64, 67, 70, 73,  # BrokerRegistration, BrokerHeartbeat, UnregisterBroker, AllocateProducerIds, ControllerRegistration, AssignReplicasToDirs
        80, 81, 82,  # Add/Remove/UpdateRaftVoter
        83, 84, 85, 86, 87,  # share-group state RPCs
    }
)

#: APIs kgw answers itself: ApiVersions, SASL, ACLs, configs, SCRAM users, client quotas.
LOCAL_KEYS = (frozenset({17, 18, 36}) | acls.LOCAL_KEYS | configs.LOCAL_KEYS | scram.LOCAL_KEYS
              | quotas.LOCAL_KEYS)


#: API family modules; a family may add enforcement to an API another module rewrites.
_MODULES = (acls, admin, classic_groups, cluster, configs, consumer_groups, fetch, find_coordinator, metadata, produce,
            quotas, scram, share_groups, streams_groups, topic_admin, topics, transactions)


def _merge(base: ApiSpec | None, spec: ApiSpec) -> ApiSpec:
    """Combine two specs of one API: the newer one's non-default parts win."""
    if base is None:
        return spec
    if base.enforce is not None and spec.enforce is not None:
        raise RuntimeError(f"two modules enforce API {spec.api_key} ({base.name})")
    versions = spec.versions or base.versions
    if base.versions is not None and spec.versions is not None:  # both declare: the overlap
        versions = (max(base.versions[0], spec.versions[0]), min(base.versions[1], spec.versions[1]))
    rewriter = spec if spec.rewrite_response is not None else base  # (its response_tags speaks for its rewrite)
    return replace(
        base,
        versions=versions,
        name=spec.name,
        inspect=spec.inspect if spec.inspect is not inspect_decoded else base.inspect,
        rewrite_response=rewriter.rewrite_response,
        response_tags=rewriter.response_tags,
        answered_locally=spec.answered_locally or base.answered_locally,
        enforce=spec.enforce or base.enforce,
        answer=spec.answer or base.answer,
        peek=spec.peek or base.peek,
        stream_response=spec.stream_response or base.stream_response,
        sole_action=spec.sole_action or base.sole_action,
    )


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _build() -> Mapping[int, ApiSpec]:
    table: dict[int, ApiSpec] = {}
    for key, name in api_key_map.items():
        if key not in _BROKER_INTERNAL:
            table[key] = ApiSpec(key, _camel(name), inspect_decoded)
    for module in _MODULES:
        for spec in module.SPECS:
            if spec.sole_action is not None and spec.enforce is None:  # it stands for that enforcement
                raise RuntimeError(f"API {spec.api_key} ({spec.name}): a sole action without its enforcement")
            if spec.response_tags is not None and spec.rewrite_response is None:  # it speaks for that rewrite
                raise RuntimeError(f"API {spec.api_key} ({spec.name}): response tags without a response rewrite")
            table[spec.api_key] = _merge(table.get(spec.api_key), spec)
    table[18] = ApiSpec(18, "ApiVersions", inspect_decoded, answered_locally=True, versions=(0, 4))
    for key, spec in list(table.items()):
        if spec.versions is None:
            if spec.enforce is not None or spec.answered_locally or spec.rewrite_response is not None:
                raise RuntimeError(f"API {key} ({spec.name}) declares no version range")
            del table[key]  # kio has a schema, no module handles it: unknown to kgw
        elif spec.versions[0] > spec.versions[1]:
            raise RuntimeError(f"API {key} ({spec.name}): empty version range {spec.versions}")
    return MappingProxyType(table)


REGISTRY: Mapping[int, ApiSpec] = _build()

