"""The cluster, its replicas and partitions: DescribeCluster (with its broker addresses
rewritten), DescribeLogDirs, AlterReplicaLogDirs, ElectLeaders and the partition
reassignment APIs.
"""

from __future__ import annotations

from dataclasses import replace
import dataclasses
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32
from protocol.apis.base import FORWARD, ApiSpec, Decision, RequestInfo
from protocol.apis.generic import inspect_decoded
from protocol.auth_helper import AuthHelper
from protocol.codecs import decode_response, encode, make, response_class
from protocol.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
)
from protocol.headers import RequestHeader
from protocol.apis.topic_common import CLUSTER, OPS_NOT_REQUESTED, Op, _ZERO_TIME, _cluster_message, _elem
from protocol.apis.addresses import rewrite_node_list
from protocol.apis.base import NodeMap

__all__ = ["SPECS"]


def _enforce_describe_cluster(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """DescribeCluster (docs/authorization.md): no check on the body; cluster authorized ops when requested
    (CLUSTER:DESCRIBE T/T first, 0 if denied), computed by kgw."""
    if not auth.enabled:
        return FORWARD
    request = info.decoded
    version = header.api_version
    ops = OPS_NOT_REQUESTED
    # Kafka validates the endpoint type (BROKER = 1) before any check
    if getattr(request, "endpoint_type", 1) == 1 and request.include_cluster_authorized_operations:
        ops = auth.authorized_operations(CLUSTER, "kafka-cluster") if auth.cluster(Op.DESCRIBE) else 0

    def merge(buf: memoryview | bytes, off: int) -> bytes:
        response = decode_response(60, version, buf, off)
        value = ops if response.error_code == 0 else OPS_NOT_REQUESTED
        return encode(dataclasses.replace(response, cluster_authorized_operations=i32(value)))

    return Decision(merge=merge)


def _enforce_describe_log_dirs(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """DescribeLogDirs (docs/authorization.md): CLUSTER:DESCRIBE; v3+ top-level 31 with empty results, v1-2 empty results."""
    if not auth.enabled or auth.cluster(Op.DESCRIBE):
        return FORWARD
    cls = response_class(35, header.api_version)
    return Decision(respond=encode(make(cls, throttle_time=_ZERO_TIME, error_code=ErrorCode(CLUSTER_AUTHORIZATION_FAILED),
                                        results=())))


def _enforce_alter_replica_log_dirs(auth: AuthHelper, header: RequestHeader, body: memoryview,
                                    info: RequestInfo) -> Decision:
    """AlterReplicaLogDirs (docs/authorization.md): CLUSTER:ALTER; W 31 on every partition (one result per dir and topic)."""
    if not auth.enabled or auth.cluster(Op.ALTER):
        return FORWARD
    request = info.decoded
    cls = response_class(34, header.api_version)
    topic_cls = _elem(cls, "results")
    part_cls = _elem(topic_cls, "partitions")
    results = tuple(
        topic_cls(topic_name=t.name, partitions=tuple(
            part_cls(partition_index=p, error_code=ErrorCode(CLUSTER_AUTHORIZATION_FAILED)) for p in t.partitions))
        for d in request.dirs for t in d.topics)
    return Decision(respond=encode(make(cls, throttle_time=_ZERO_TIME, results=results)))


def _enforce_elect_leaders(auth: AuthHelper, header: RequestHeader, body: memoryview, info: RequestInfo) -> Decision:
    """ElectLeaders (docs/authorization.md): CLUSTER:ALTER (thrown); W top-level 31 (v1+) plus 31 on each listed partition."""
    if not auth.enabled or auth.cluster(Op.ALTER):
        return FORWARD
    request = info.decoded
    cls = response_class(43, header.api_version)
    topic_cls = _elem(cls, "replica_election_results")
    part_cls = _elem(topic_cls, "partition_result")
    message = _cluster_message("ElectLeaders", Op.ALTER)
    results = tuple(
        topic_cls(topic=t.topic, partition_result=tuple(
            part_cls(partition_id=p, error_code=ErrorCode(CLUSTER_AUTHORIZATION_FAILED), error_message=message)
            for p in t.partitions))
        for t in request.topic_partitions or ())
    return Decision(respond=encode(make(cls, throttle_time=_ZERO_TIME, error_code=ErrorCode(CLUSTER_AUTHORIZATION_FAILED),
                                        replica_election_results=results)))


def _enforce_alter_partition_reassignments(auth: AuthHelper, header: RequestHeader, body: memoryview,
                                           info: RequestInfo) -> Decision:
    """AlterPartitionReassignments (docs/authorization.md): CLUSTER:ALTER (thrown); W top-level plus per-partition 31."""
    if not auth.enabled or auth.cluster(Op.ALTER):
        return FORWARD
    request = info.decoded
    cls = response_class(45, header.api_version)
    topic_cls = _elem(cls, "responses")
    part_cls = _elem(topic_cls, "partitions")
    message = _cluster_message("AlterPartitionReassignments", Op.ALTER)
    responses = tuple(
        topic_cls(name=t.name, partitions=tuple(
            part_cls(partition_index=p.partition_index, error_code=ErrorCode(CLUSTER_AUTHORIZATION_FAILED),
                     error_message=message) for p in t.partitions))
        for t in request.topics)
    return Decision(respond=encode(make(cls, throttle_time=_ZERO_TIME, allow_replication_factor_change=True,
                                        error_code=ErrorCode(CLUSTER_AUTHORIZATION_FAILED), error_message=message,
                                        responses=responses)))


def _enforce_list_partition_reassignments(auth: AuthHelper, header: RequestHeader, body: memoryview,
                                          info: RequestInfo) -> Decision:
    """ListPartitionReassignments (docs/authorization.md): CLUSTER:DESCRIBE (thrown); W 31, requested partitions echoed empty."""
    if not auth.enabled or auth.cluster(Op.DESCRIBE):
        return FORWARD
    request = info.decoded
    cls = response_class(46, header.api_version)
    topic_cls = _elem(cls, "topics")
    part_cls = _elem(topic_cls, "partitions")
    message = _cluster_message("ListPartitionReassignments", Op.DESCRIBE)
    topics = tuple(
        topic_cls(name=t.name, partitions=tuple(part_cls(partition_index=p) for p in t.partition_indexes))
        for t in request.topics or ())
    return Decision(respond=encode(make(cls, throttle_time=_ZERO_TIME, error_code=ErrorCode(CLUSTER_AUTHORIZATION_FAILED),
                                        error_message=message, topics=topics)))



def _rewrite_describe_cluster(version: int, frame: memoryview, offset: int, nodes: NodeMap) -> bytes:
    response = decode_response(60, version, frame, offset)
    return encode(replace(response, brokers=rewrite_node_list(response.brokers, nodes, "broker_id")))


SPECS = (
    ApiSpec(34, "AlterReplicaLogDirs", inspect_decoded, enforce=_enforce_alter_replica_log_dirs, versions=(1, 2)),
    ApiSpec(35, "DescribeLogDirs", inspect_decoded, enforce=_enforce_describe_log_dirs, versions=(1, 5)),
    ApiSpec(43, "ElectLeaders", inspect_decoded, enforce=_enforce_elect_leaders, versions=(0, 2)),
    ApiSpec(45, "AlterPartitionReassignments", inspect_decoded, enforce=_enforce_alter_partition_reassignments, versions=(0, 1)),
    ApiSpec(46, "ListPartitionReassignments", inspect_decoded, enforce=_enforce_list_partition_reassignments, versions=(0, 0)),
    ApiSpec(60, "DescribeCluster", inspect_decoded, rewrite_response=_rewrite_describe_cluster, enforce=_enforce_describe_cluster, versions=(0, 2)),
)
