"""Config APIs answered by kgw: DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44).

Theory of operation
-------------------
A request names config resources; kgw splits it by resource type:

* **BROKER** resources (named by a node id kgw advertises, or ``""`` for the
  cluster-wide defaults) are *kgw itself*: described from and altered in
  ``LocalServices.broker_configs`` (:mod:`protocol.services`) (KIP-133 semantics,
  dynamic keys applied live and kept in the metadata log).
  **BROKER_LOGGER** resources are kgw's Python loggers (IncrementalAlterConfigs
  only, as in Kafka; not persisted).
* **TOPIC**, **GROUP** and **CLIENT_METRICS** resources belong to the
  upstream cluster: the authorized (and policy-accepted) ones are forwarded in
  a reduced request (``Decision(request=..., merge=...)``) and the upstream's
  per-resource results are merged back with kgw's own, in request order.  If
  the upstream lacks the API or the request's version (tansu has no
  AlterConfigs), those resources get UNSUPPORTED_VERSION (35) with a message
  naming the API: never a hang, never a closed connection.

Per resource, in Kafka's order (docs/authorization.md):

1. structural validation (alter APIs): a resource named twice in one request
   → INVALID_REQUEST (42) for each copy; duplicate keys, null values (except
   DELETE), unknown op codes, BROKER_LOGGER in legacy AlterConfigs, a BROKER
   name that is not ``""`` or an advertised node id → 42;
2. authorization, one single check per resource, log flags T/T: BROKER,
   BROKER_LOGGER, CLIENT_METRICS → CLUSTER:DESCRIBE_CONFIGS / ALTER_CONFIGS
   (31); TOPIC → TOPIC:… on the name (29); GROUP → GROUP:… (30);
3. semantic validation (unknown or read-only key, wrong type → INVALID_CONFIG
   40), the alter-configs policies (POLICY_VIOLATION 44), then the change.

DescribeConfigs with an unknown resource type fails every resource with 42
(Kafka throws for the whole request).  ``validate_only`` checks everything
and changes nothing (it is forwarded as is for upstream resources).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from authz.acl import CLUSTER_NAME, AclOperation, ResourceType
from configs.config_model import AlterConfigOp, AlterResult, ConfigChange, ConfigEntry, ConfigResource, ConfigResourceType
from configs.policies import RequestMetadata, run_policies
from protocol.apis.base import ApiSpec, Decision, RequestInfo
from protocol.apis.generic import inspect_decoded
from protocol.auth_helper import AuthHelper
from protocol.codecs import decode_response, encode, make, nested, response_class
from protocol.errors import (
    CLUSTER_AUTHORIZATION_FAILED,
    GROUP_AUTHORIZATION_FAILED,
    INVALID_REQUEST,
    POLICY_VIOLATION,
    TOPIC_AUTHORIZATION_FAILED,
    UNKNOWN_SERVER_ERROR,
    UNSUPPORTED_VERSION,
)
from protocol.headers import RequestHeader
from protocol.services import LocalServices

__all__ = ["SPECS", "LOCAL_KEYS"]

DESCRIBE_CONFIGS, ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS = 32, 33, 44
_API_NAMES = {32: "DescribeConfigs", 33: "AlterConfigs", 44: "IncrementalAlterConfigs"}

_T = ConfigResourceType
_LOCAL = frozenset({_T.BROKER, _T.BROKER_LOGGER})
_MESSAGES = {
    CLUSTER_AUTHORIZATION_FAILED: "Cluster authorization failed.",
    TOPIC_AUTHORIZATION_FAILED: "Topic authorization failed.",
    GROUP_AUTHORIZATION_FAILED: "Group authorization failed.",
}


def _authorize(auth: AuthHelper, rtype: ConfigResourceType, name: str, op: AclOperation) -> int:
    """0 if allowed, else the resource's authorization error code (one single check, T/T)."""
    if rtype is _T.TOPIC:
        return 0 if auth.allowed(ResourceType.TOPIC, name, op) else TOPIC_AUTHORIZATION_FAILED
    if rtype is _T.GROUP:
        return 0 if auth.allowed(ResourceType.GROUP, name, op) else GROUP_AUTHORIZATION_FAILED
    return 0 if auth.allowed(ResourceType.CLUSTER, CLUSTER_NAME, op) else CLUSTER_AUTHORIZATION_FAILED


def _upstream_gap(gw: LocalServices, api_key: int, version: int) -> str | None:
    """Why the upstream cannot take this request, or None if it can."""
    versions = gw.upstream_versions
    if versions is None:
        return None  # unknown: forward, the connection's deadline guards against a hang
    name = _API_NAMES[api_key]
    supported = versions.get(api_key)
    if supported is None:
        hint = "; alter them with IncrementalAlterConfigs (API key 44)" if api_key == ALTER_CONFIGS else ""
        return (f"The upstream cluster does not support {name} (API key {api_key}), so kgw cannot "
                f"forward this resource{hint}")
    if not supported.min <= version <= supported.max:
        return (f"The upstream cluster supports {name} v{supported.min}-v{supported.max}, "
                f"not v{version} as sent; kgw cannot forward this resource")
    return None


def _principal(auth: AuthHelper) -> str | None:
    context = auth.context
    return None if context is None else str(context.principal)


def _merge_in_order(total: int, local: dict[int, Any], forwarded: list[int], upstream: tuple[Any, ...], key_of: Callable[..., Any], missing: _Missing) -> tuple[Any, ...]:
    """Local results and upstream results (for ``forwarded`` indexes) in request order.  Upstream
    entries are matched by (type, name), in order among equal keys: a broker may reorder them."""
    by_index: dict[int, Any] = dict(local)
    pool: dict[tuple[int, str], list[Any]] = {}
    for entry in upstream:
        pool.setdefault(key_of(entry), []).append(entry)
    for i in forwarded:
        found = pool.get(missing.key(i))
        by_index[i] = found.pop(0) if found else missing.entry(i)
    return tuple(by_index[i] for i in range(total))


def _audit_resource(rtype: ConfigResourceType, name: str) -> str:
    """A config resource as audit text: ``Topic:LITERAL:orders``, ``Broker:LITERAL:<default>``."""
    pascal = "".join(part.capitalize() for part in rtype.name.split("_"))
    return f"{pascal}:LITERAL:{name or '<default>'}"


def _change_text(changes: list[ConfigChange], incremental: bool) -> str:
    """What a forwarded alteration asks: ``set retention.ms=3600000, deleted cleanup.policy``."""
    if not incremental:
        return "replaced with " + (", ".join(f"{c.name}={c.value}" for c in changes) or "nothing")
    verbs = {AlterConfigOp.SET: "set", AlterConfigOp.DELETE: "deleted", AlterConfigOp.APPEND: "appended to",
             AlterConfigOp.SUBTRACT: "subtracted from"}
    return ", ".join(f"{verbs.get(c.op, c.op.name)} {c.name}" + ("" if c.op is AlterConfigOp.DELETE else f"={c.value}")
                     for c in changes)


def _record_forwarded(auth: AuthHelper, asked: dict[tuple[int, str], str]) -> Callable[[tuple[Any, ...]], None]:
    """Record each forwarded resource the upstream altered (error 0): ``asked`` maps its
    (resource type, name) to the change asked (a resource is named once: duplicates are
    refused before)."""
    def done(upstream_results: tuple[Any, ...]) -> None:
        for entry in upstream_results:
            key = (int(entry.resource_type), entry.resource_name)
            if int(entry.error_code) == 0 and key in asked:
                auth.record_change("ALTER_CONFIGS", _audit_resource(ConfigResourceType.of(key[0]), key[1]), asked[key])
    return done


def _answer_rest_upstream(gw: LocalServices, api_key: int, version: int, request: Any, local: dict[int, Any],
                          forwarded: list[int], result: Callable[..., Any], response: Callable[..., bytes],
                          field: str, on_done: Callable[[tuple[Any, ...]], None] | None = None) -> bytes | Decision:
    """The answer to a config request whose ``local`` results kgw made itself: the whole
    response when nothing is left to forward (or the upstream cannot take it: those
    resources get UNSUPPORTED_VERSION), else the ``forwarded`` resources in one sub-request
    whose response list ``field`` is merged back in request order."""
    resources = request.resources
    if forwarded:
        gap = _upstream_gap(gw, api_key, version)
        if gap is not None:
            for i in forwarded:
                local[i] = result(resources[i], UNSUPPORTED_VERSION, gap)
            forwarded = []
    if not forwarded:
        return response(local[i] for i in range(len(resources)))

    sub = replace(request, resources=tuple(resources[i] for i in forwarded))
    missing = _Missing(resources, result)

    def merge(buf: memoryview | bytes, offset: int) -> bytes:
        upstream = decode_response(api_key, version, buf, offset)
        if on_done is not None:
            on_done(getattr(upstream, field))
        merged = _merge_in_order(len(resources), local, forwarded, getattr(upstream, field),
                                 lambda e: (int(e.resource_type), e.resource_name), missing)
        return encode(replace(upstream, **{field: merged}))

    return Decision(request=encode(sub), merge=merge)


class _Missing:
    def __init__(self, resources: Any, make_error: Callable[..., Any]) -> None:
        self.resources = resources
        self.make_error = make_error

    def key(self, i: int) -> tuple[int, str]:
        r = self.resources[i]
        return (int(r.resource_type), r.resource_name)

    def entry(self, i: int) -> Any:
        return self.make_error(self.resources[i], UNKNOWN_SERVER_ERROR, "The upstream did not answer for this resource")


# --------------------------------------------------------------------------- DescribeConfigs


async def _describe(gw: LocalServices, auth: AuthHelper, header: RequestHeader, info: RequestInfo) -> bytes | Decision:
    request = info.decoded
    version = header.api_version
    cls = response_class(DESCRIBE_CONFIGS, version)
    result_cls = nested(cls, "results")
    entry_cls = nested(result_cls, "configs")
    synonym_cls = nested(entry_cls, "synonyms")
    resources = request.resources

    def result(r: Any, code: int, message: str | None, configs: Any = ()) -> Any:
        return make(result_cls, error_code=ErrorCode(code), error_message=message, resource_type=r.resource_type,
                    resource_name=r.resource_name, configs=tuple(configs))

    def entry(e: ConfigEntry) -> Any:
        return make(entry_cls, name=e.name, value=e.value, read_only=e.read_only, config_source=i8(int(e.source)),
                    is_sensitive=e.sensitive, is_default=False, config_type=i8(int(e.type)),
                    documentation=e.documentation,
                    synonyms=tuple(make(synonym_cls, name=s.name, value=s.value, source=i8(int(s.source)))
                                   for s in e.synonyms))

    def response(results: Any, throttle: timedelta = timedelta(0)) -> bytes:
        return encode(make(cls, throttle_time=throttle, results=tuple(results)))

    unknown = next((r for r in resources if ConfigResourceType.of(r.resource_type) is _T.UNKNOWN), None)
    if unknown is not None:
        message = f"Unexpected resource type {unknown.resource_type} for resource {unknown.resource_name}"
        return response(result(r, INVALID_REQUEST, message) for r in resources)

    manager = gw.broker_configs
    await manager.ensure_loaded()
    include_synonyms = bool(getattr(request, "include_synonyms", False))
    include_documentation = bool(getattr(request, "include_documentation", False))
    local: dict[int, Any] = {}
    forwarded: list[int] = []
    for i, r in enumerate(resources):
        rtype = ConfigResourceType.of(r.resource_type)
        denied = _authorize(auth, rtype, r.resource_name, AclOperation.DESCRIBE_CONFIGS)
        if denied:
            local[i] = result(r, denied, _MESSAGES[denied])
        elif rtype in _LOCAL:
            problem = manager.broker_name_error(r.resource_name)
            if problem is not None:
                local[i] = result(r, INVALID_REQUEST, problem)
            elif rtype is _T.BROKER:
                entries = manager.describe(r.resource_name, r.configuration_keys, include_synonyms=include_synonyms,
                                           include_documentation=include_documentation)
                local[i] = result(r, 0, None, map(entry, entries))
            else:
                local[i] = result(r, 0, None, map(entry, manager.describe_loggers(r.configuration_keys)))
        else:
            forwarded.append(i)
    return _answer_rest_upstream(gw, DESCRIBE_CONFIGS, version, request, local, forwarded, result, response,
                                 "results")


# --------------------------------------------------------------------------- AlterConfigs / IncrementalAlterConfigs


def _structural_problem(r: Any, incremental: bool) -> str | None:
    names = Counter(c.name for c in r.configs)
    if any(n > 1 for n in names.values()):
        return "Error due to duplicate config keys"
    for c in r.configs:
        op = getattr(c, "config_operation", AlterConfigOp.SET) if incremental else AlterConfigOp.SET
        if op not in AlterConfigOp._value2member_map_:
            return f"Unknown alter config operation {op} for config {c.name}"
        if c.value is None and op != AlterConfigOp.DELETE:
            return f"Null value not supported for : {c.name}"
    return None


def _changes(r: Any, incremental: bool) -> list[ConfigChange]:
    return [ConfigChange(c.name, AlterConfigOp(c.config_operation) if incremental else AlterConfigOp.SET,
                         None if incremental and c.config_operation == AlterConfigOp.DELETE else c.value)
            for c in r.configs]


def _alter_api(api_key: int) -> Any:
    incremental = api_key == INCREMENTAL_ALTER_CONFIGS

    async def answer(gw: LocalServices, auth: AuthHelper, header: RequestHeader, info: RequestInfo) -> bytes | Decision:
        request = info.decoded
        version = header.api_version
        cls = response_class(api_key, version)
        resp_cls = nested(cls, "responses")
        resources = request.resources
        validate_only = bool(request.validate_only)
        principal = _principal(auth)

        def result(r: Any, code: int, message: str | None) -> Any:
            return make(resp_cls, error_code=ErrorCode(code), error_message=message,
                        resource_type=r.resource_type, resource_name=r.resource_name)

        def response(results: Any, throttle: timedelta = timedelta(0)) -> bytes:
            return encode(make(cls, throttle_time=throttle, responses=tuple(results)))

        manager = gw.broker_configs
        await manager.ensure_loaded()
        counts = Counter((int(r.resource_type), r.resource_name) for r in resources)
        local: dict[int, Any] = {}
        forwarded: list[int] = []
        for i, r in enumerate(resources):
            rtype = ConfigResourceType.of(r.resource_type)
            if counts[(int(r.resource_type), r.resource_name)] > 1:
                local[i] = result(r, INVALID_REQUEST, f"Duplicate resource {rtype.name}:{r.resource_name!r} "
                                                      "in one request")
                continue
            if rtype is _T.UNKNOWN:
                local[i] = result(r, INVALID_REQUEST, f"Unexpected resource type {r.resource_type} "
                                                      f"for resource {r.resource_name}")
                continue
            if rtype is _T.BROKER_LOGGER and not incremental:
                local[i] = result(r, INVALID_REQUEST, "AlterConfigs does not support BROKER_LOGGER resources; "
                                                      "use IncrementalAlterConfigs")
                continue
            problem = _structural_problem(r, incremental)
            if problem is None and rtype in _LOCAL:
                problem = manager.broker_name_error(r.resource_name)
            if problem is not None:
                local[i] = result(r, INVALID_REQUEST, problem)
                continue
            denied = _authorize(auth, rtype, r.resource_name, AclOperation.ALTER_CONFIGS)
            if denied:
                local[i] = result(r, denied, _MESSAGES[denied])
                continue
            changes = _changes(r, incremental)
            resource = ConfigResource(rtype, r.resource_name)
            if rtype is _T.BROKER:
                outcome = await manager.alter(resource, changes, validate_only, incremental=incremental,
                                              principal=principal, context=auth.context)
            elif rtype is _T.BROKER_LOGGER:
                outcome = manager.alter_loggers(changes, validate_only)
            else:
                violation = run_policies(manager.policies, RequestMetadata(
                    resource, {c.name: c.value for c in changes}, {c.name: c.op for c in changes}, principal,
                    validate_only))
                if violation is None:
                    forwarded.append(i)
                    continue
                outcome = AlterResult(POLICY_VIOLATION, violation)
            local[i] = result(r, outcome.error_code, outcome.message)
            if outcome.applied is not None:
                auth.record_change("ALTER_CONFIGS", _audit_resource(rtype, r.resource_name), f"set {outcome.applied}")
        on_done = None if validate_only else _record_forwarded(auth, {
            (int(resources[i].resource_type), resources[i].resource_name):
                _change_text(_changes(resources[i], incremental), incremental) for i in forwarded})
        return _answer_rest_upstream(gw, api_key, version, request, local, forwarded, result, response,
                                     "responses", on_done)

    answer.__name__ = f"_answer_{_API_NAMES[api_key]}"
    return answer


SPECS = (
    ApiSpec(DESCRIBE_CONFIGS, "DescribeConfigs", inspect_decoded, answered_locally=True, answer=_describe, versions=(1, 4)),
    ApiSpec(ALTER_CONFIGS, "AlterConfigs", inspect_decoded, answered_locally=True, answer=_alter_api(ALTER_CONFIGS), versions=(0, 2)),
    ApiSpec(INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigs", inspect_decoded, answered_locally=True,
            answer=_alter_api(INCREMENTAL_ALTER_CONFIGS), versions=(0, 1)),
)
LOCAL_KEYS = frozenset(spec.api_key for spec in SPECS)
