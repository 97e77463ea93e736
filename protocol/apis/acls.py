"""ACL admin APIs answered by kgw: DescribeAcls (29), CreateAcls (30), DeleteAcls (31).

Theory of operation
-------------------
These never reach the upstream: kgw's authorizer and its metadata log are the
ACL store.  Each handler follows Kafka's ``AclApis`` (docs/authorization.md; Kafka's
``AclControlManager``):

1. a code 0 (UNKNOWN) in any enum field fails the request parse: the
   connection is closed (:class:`~protocol.apis.base.RefuseRequest`);
2. no authorizer configured: SECURITY_DISABLED (54);
3. the caller needs CLUSTER:DESCRIBE (describe) or CLUSTER:ALTER (create,
   delete), else CLUSTER_AUTHORIZATION_FAILED (31) on the whole response or on
   every creation / filter;
4. then the authorizer answers, per binding or per filter.  CreateAcls and
   DeleteAcls return only after the change is durable in the metadata log.
"""

from __future__ import annotations

from datetime import timedelta

from typing import Any
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from authz.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from protocol.apis.base import ApiSpec, RefuseRequest, RequestInfo
from protocol.apis.generic import inspect_decoded
from protocol.auth_helper import AuthHelper
from protocol.codecs import encode, make, nested, response_class
from protocol.errors import CLUSTER_AUTHORIZATION_FAILED, SECURITY_DISABLED
from protocol.headers import RequestHeader
from protocol.services import LocalServices

__all__ = ["SPECS", "LOCAL_KEYS"]



def cluster_denied(auth: AuthHelper, operation: AclOperation) -> str:
    """Kafka's text for an ACL API refused on the cluster (``AuthHelper.authorizeClusterOperation``:
    "Request Request(...) needs DESCRIBE permission.", what kafka-acls prints).  Where Kafka
    names its internal request object, kgw names the listener, the protocol, the principal and
    the client address."""
    c = auth.context
    return (f"Request Request(listenerName=ListenerName({c.listener_name}), securityProtocol={c.security_protocol}, "
            f"principal={c.principal}, clientAddress=/{c.host_address}) needs {operation.name} permission.")
_SECURITY_DISABLED = "No Authorizer is configured on the broker"


def _codes(entity: Any, *names: str) -> None:
    for name in names:
        if getattr(entity, name) == 0:
            raise RefuseRequest(f"{name} is UNKNOWN (0)")


def _pattern_filter(f: Any) -> ResourcePatternFilter:
    _codes(f, "resource_type_filter", "pattern_type_filter")
    return ResourcePatternFilter(ResourceType(f.resource_type_filter), f.resource_name_filter,
                                 PatternType(f.pattern_type_filter))


def _entry_filter(f: Any) -> AccessControlEntryFilter:
    _codes(f, "operation", "permission_type")
    return AccessControlEntryFilter(f.principal_filter, f.host_filter, AclOperation(f.operation),
                                    AclPermissionType(f.permission_type))


def _binding_filter(f: Any) -> AclBindingFilter:
    return AclBindingFilter(_pattern_filter(f), _entry_filter(f))


def _err(code: int) -> ErrorCode:
    return ErrorCode(code)


# --------------------------------------------------------------------------- DescribeAcls


async def _describe(gw: LocalServices, auth: AuthHelper, header: RequestHeader, info: RequestInfo) -> bytes:
    request = info.decoded
    binding_filter = _binding_filter(request)
    cls = response_class(29, header.api_version)

    def response(code: int, message: str | None, resources: Any = ()) -> bytes:
        return encode(make(cls, throttle_time=timedelta(0), error_code=_err(code), error_message=message,
                           resources=tuple(resources)))

    if gw.authorizer is None:
        return response(SECURITY_DISABLED, _SECURITY_DISABLED)
    if not auth.cluster(AclOperation.DESCRIBE):
        return response(CLUSTER_AUTHORIZATION_FAILED, cluster_denied(auth, AclOperation.DESCRIBE))
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding in gw.authorizer.acls(binding_filter):
        by_pattern.setdefault(binding.pattern, []).append(binding.entry)
    resource_cls = nested(cls, "resources")
    acl_cls = nested(resource_cls, "acls")
    resources = [
        make(resource_cls, resource_type=i8(p.resource_type), resource_name=p.name, pattern_type=i8(p.pattern_type),
             acls=tuple(acl_cls(principal=e.principal, host=e.host, operation=i8(e.operation),
                                permission_type=i8(e.permission_type)) for e in entries))
        for p, entries in by_pattern.items()
    ]
    return response(0, None, resources)


# --------------------------------------------------------------------------- CreateAcls


async def _create(gw: LocalServices, auth: AuthHelper, header: RequestHeader, info: RequestInfo) -> bytes:
    creations = info.decoded.creations
    bindings = []
    for c in creations:
        _codes(c, "resource_type", "resource_pattern_type", "operation", "permission_type")
        bindings.append(AclBinding(
            ResourcePattern(ResourceType(c.resource_type), c.resource_name, PatternType(c.resource_pattern_type)),
            AccessControlEntry(c.principal, c.host, AclOperation(c.operation), AclPermissionType(c.permission_type)),
        ))
    cls = response_class(30, header.api_version)
    result_cls = nested(cls, "results")

    def response(results: Any) -> bytes:
        return encode(make(cls, throttle_time=timedelta(0), results=tuple(
            result_cls(error_code=_err(code), error_message=message) for code, message in results)))

    if gw.authorizer is None:
        return response([(SECURITY_DISABLED, _SECURITY_DISABLED)] * len(bindings))
    if not auth.cluster(AclOperation.ALTER):
        return response([(CLUSTER_AUTHORIZATION_FAILED, cluster_denied(auth, AclOperation.ALTER))] * len(bindings))
    results = await gw.authorizer.create_acls(auth.context, bindings)
    for binding, r in zip(bindings, results):
        if r.error_code == 0:
            auth.record_change("CREATE", binding.pattern.audit_text(), f"created ACL {_entry_text(binding.entry)}")
    return response([(r.error_code, r.message) for r in results])


def _entry_text(entry: AccessControlEntry) -> str:
    """Kafka's ``AccessControlEntry.toString`` form."""
    return (f"(principal={entry.principal}, host={entry.host}, operation={AclOperation(entry.operation).name}, "
            f"permissionType={AclPermissionType(entry.permission_type).name})")


# --------------------------------------------------------------------------- DeleteAcls


async def _delete(gw: LocalServices, auth: AuthHelper, header: RequestHeader, info: RequestInfo) -> bytes:
    filters = [_binding_filter(f) for f in info.decoded.filters]
    cls = response_class(31, header.api_version)
    result_cls = nested(cls, "filter_results")
    match_cls = nested(result_cls, "matching_acls")

    def response(results: Any) -> bytes:
        return encode(make(cls, throttle_time=timedelta(0), filter_results=tuple(results)))

    def failed(code: int, message: str) -> Any:
        return result_cls(error_code=_err(code), error_message=message, matching_acls=())

    if gw.authorizer is None:
        return response([failed(SECURITY_DISABLED, _SECURITY_DISABLED)] * len(filters))
    if not auth.cluster(AclOperation.ALTER):
        return response([failed(CLUSTER_AUTHORIZATION_FAILED, cluster_denied(auth, AclOperation.ALTER))] * len(filters))
    results = await gw.authorizer.delete_acls(auth.context, filters)
    out = []
    for r in results:
        for d in r.deleted:
            if d.error_code == 0:
                auth.record_change("DELETE", d.binding.pattern.audit_text(),
                                   f"deleted ACL {_entry_text(d.binding.entry)}")
        matches = tuple(
            make(match_cls, error_code=_err(d.error_code), error_message=d.message,
                 resource_type=i8(d.binding.pattern.resource_type), resource_name=d.binding.pattern.name,
                 pattern_type=i8(d.binding.pattern.pattern_type), principal=d.binding.entry.principal,
                 host=d.binding.entry.host, operation=i8(d.binding.entry.operation),
                 permission_type=i8(d.binding.entry.permission_type))
            for d in r.deleted
        )
        out.append(result_cls(error_code=_err(r.error_code), error_message=r.message, matching_acls=matches))
    return response(out)


SPECS = (
    ApiSpec(29, "DescribeAcls", inspect_decoded, answered_locally=True, answer=_describe, versions=(1, 3)),
    ApiSpec(30, "CreateAcls", inspect_decoded, answered_locally=True, answer=_create, versions=(1, 3)),
    ApiSpec(31, "DeleteAcls", inspect_decoded, answered_locally=True, answer=_delete, versions=(1, 3)),
)
LOCAL_KEYS = frozenset(spec.api_key for spec in SPECS)
