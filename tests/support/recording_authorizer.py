"""An authorizer for tests that writes down who asked what, one JSON line per call.

Plugged in from a test gateway's YAML::

    authorizer:
      class_name: tests.support.recording_authorizer:RecordingAuthorizer
      config:
        recording.file: /tmp/.../authz.jsonl
        allow.everyone.if.no.acl.found: true     # or super.users, or recording.allow.all

Every ``authorize()`` (and ``authorize_by_resource_type()``) call appends one
line with what the request layer handed over: the principal (type, name, its
Python class and every extra attribute a custom builder put on it), the
listener name and security protocol of the client's listener, the client
address and the request type.  Decisions are StandardAuthorizer's (so ACLs,
``super.users`` and ``allow.everyone.if.no.acl.found`` work as usual) unless
``recording.allow.all`` is true, in which case every action is allowed.

:func:`read_records` loads the file back for assertions.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from authz.acl import AclOperation, ResourceType
from authz.authorizer import Action, AuthorizableRequestContext, AuthorizationResult
from authz.principal import KafkaPrincipal
from authz.standard_authorizer import StandardAuthorizer

__all__ = ["RecordingAuthorizer", "RECORDING_FILE", "ALLOW_ALL", "principal_record", "read_records"]

RECORDING_FILE = "recording.file"
ALLOW_ALL = "recording.allow.all"


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    return repr(value)


def principal_record(principal: KafkaPrincipal) -> dict[str, Any]:
    """The principal as the recorder writes it: type, name, class and extra fields."""
    cls = type(principal)
    return {
        "principal_type": principal.principal_type,
        "principal_name": principal.name,
        "principal": principal.key,
        "principal_class": f"{cls.__module__}.{cls.__qualname__}",
        "principal_fields": _jsonable(dict(getattr(principal, "__dict__", {}))),
        "token_authenticated": principal.token_authenticated,
    }


class RecordingAuthorizer(StandardAuthorizer):
    """StandardAuthorizer that appends one JSON line per authorization call to ``recording.file``."""

    def __init__(self) -> None:
        super().__init__()
        self._recording: Path | None = None
        self._allow_all = False

    def configure(self, configs: Mapping[str, Any]) -> None:
        super().configure(configs)
        path = configs.get(RECORDING_FILE)
        if not path:
            raise ValueError(f"RecordingAuthorizer needs {RECORDING_FILE!r} in authorizer.config")
        self._recording = Path(path)
        self._recording.parent.mkdir(parents=True, exist_ok=True)
        self._allow_all = str(configs.get(ALLOW_ALL, "false")).strip().lower() == "true"

    # -- decisions (overridable by subclasses) -------------------------------------------------

    def decide(self, context: AuthorizableRequestContext, actions: list[Action]) -> list[AuthorizationResult]:
        if self._allow_all:
            return [AuthorizationResult.ALLOWED] * len(actions)
        return super().authorize(context, actions)

    def decide_by_resource_type(self, context: AuthorizableRequestContext, op: AclOperation,
                                resource_type: ResourceType) -> AuthorizationResult:
        if self._allow_all:
            return AuthorizationResult.ALLOWED
        return super().authorize_by_resource_type(context, op, resource_type)

    # -- the SPI -------------------------------------------------------------------------------

    def authorize(self, context: AuthorizableRequestContext, actions: Iterable[Action]) -> list[AuthorizationResult]:
        actions = list(actions)
        results = self.decide(context, actions)
        self._record(context, "authorize", results=[r.value for r in results], actions=[
            {"resource_type": a.resource_pattern.resource_type.name, "resource_name": a.resource_pattern.name,
             "operation": a.operation.name} for a in actions])
        return results

    def authorize_by_resource_type(self, context: AuthorizableRequestContext, op: AclOperation,
                                   resource_type: ResourceType) -> AuthorizationResult:
        result = self.decide_by_resource_type(context, op, resource_type)
        self._record(context, "authorize_by_resource_type", results=[result.value], actions=[
            {"resource_type": resource_type.name, "resource_name": None, "operation": op.name}])
        return result

    def _record(self, context: AuthorizableRequestContext, call: str, **extra: Any) -> None:
        if self._recording is None:
            return
        line = {
            "call": call,
            **principal_record(context.principal),
            "listener_name": context.listener_name,
            "security_protocol": context.security_protocol,
            "client_address": str(context.client_address),
            "request_type": context.request_type,
            "request_version": context.request_version,
            "client_id": context.client_id,
            "correlation_id": context.correlation_id,
            "pid": os.getpid(),
            **extra,
        }
        with open(self._recording, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, sort_keys=True) + "\n")


def read_records(path: str | os.PathLike[str], **match: Any) -> list[dict[str, Any]]:
    """The recorded lines (all, or those whose fields equal every ``match`` value)."""
    p = Path(path)
    if not p.exists():
        return []
    out = []
    for text in p.read_text(encoding="utf-8").splitlines():
        if not text.strip():
            continue
        record = json.loads(text)
        if all(record.get(k) == v for k, v in match.items()):
            out.append(record)
    return out
