"""A custom principal builder and an authorizer that decides on a field only its principal has.

Plugged in from a test gateway's YAML::

    listeners:
      - name: MTLS
        principal_builder: tests.support.custom_principal:DepartmentPrincipalBuilder
        ...
    authorizer:
      class_name: tests.support.custom_principal:DepartmentAuthorizer
      config:
        recording.file: /tmp/.../authz.jsonl     # it records like RecordingAuthorizer
        department.required: payments            # the default

:class:`DepartmentPrincipalBuilder` names the principal exactly as Kafka's
default builder would (mapping rules included) and returns a
:class:`DepartmentPrincipal`, a ``KafkaPrincipal`` subclass with one extra
field, ``department``:

* TLS client certificate: the certificate subject's OU;
* SASL: looked up in the JSON object ``{"user": "department"}`` in the file
  named by the environment variable ``KGW_TEST_DEPARTMENTS`` (the gateway
  process inherits the test's environment);
* otherwise None.

:class:`DepartmentAuthorizer` allows an action only when the principal carries
``department == department.required``; a plain ``KafkaPrincipal`` (no such
field) is always denied.  ACLs are not consulted: the point is to show the
authorizer receives the builder's very object.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from cryptography.x509.oid import NameOID

from authz.acl import AclOperation, ResourceType
from authz.authorizer import Action, AuthorizableRequestContext, AuthorizationResult
from authz.principal import KafkaPrincipal
from authz.principal_builder import (
    AuthenticationContext,
    DefaultKafkaPrincipalBuilder,
    SaslAuthenticationContext,
    SslAuthenticationContext,
)
from tests.support.recording_authorizer import RecordingAuthorizer

__all__ = ["DepartmentPrincipal", "DepartmentPrincipalBuilder", "DepartmentAuthorizer", "DEPARTMENTS_ENV"]

DEPARTMENTS_ENV = "KGW_TEST_DEPARTMENTS"


class DepartmentPrincipal(KafkaPrincipal):
    """A principal with the caller's department (None when unknown)."""

    def __init__(self, principal_type: str, name: str, department: str | None) -> None:
        super().__init__(principal_type, name)
        self.department = department

    def __repr__(self) -> str:
        return f"DepartmentPrincipal({self.principal_type!r}, {self.name!r}, department={self.department!r})"


class DepartmentPrincipalBuilder:
    """Kafka's default naming plus a ``department`` field (see the module docstring)."""

    def __init__(self) -> None:
        self._default = DefaultKafkaPrincipalBuilder()
        self.configs: dict[str, Any] = {}

    def configure(self, configs: Mapping[str, Any]) -> None:
        self.configs = dict(configs)
        self._default = DefaultKafkaPrincipalBuilder.from_configs(configs)

    def build(self, context: AuthenticationContext) -> KafkaPrincipal:
        base = self._default.build(context)
        department: str | None = None
        cert = None
        if isinstance(context, SslAuthenticationContext):
            cert = context.peer_certificate
        if cert is not None:
            ous = cert.subject.get_attributes_for_oid(NameOID.ORGANIZATIONAL_UNIT_NAME)
            department = str(ous[0].value) if ous else None
        elif isinstance(context, SaslAuthenticationContext):
            department = _departments().get(context.authorization_id)
        return DepartmentPrincipal(base.principal_type, base.name, department)


def _departments() -> dict[str, str]:
    path = os.environ.get(DEPARTMENTS_ENV)
    if not path:
        return {}
    with open(path, encoding="utf-8") as f:
        return dict(json.load(f))


class DepartmentAuthorizer(RecordingAuthorizer):
    """Allows only principals whose ``department`` is ``department.required`` (default ``payments``)."""

    def __init__(self) -> None:
        super().__init__()
        self.required = "payments"

    def configure(self, configs: Mapping[str, Any]) -> None:
        super().configure(configs)
        self.required = str(configs.get("department.required", "payments"))

    def _allowed(self, context: AuthorizableRequestContext) -> AuthorizationResult:
        department = getattr(context.principal, "department", None)
        return AuthorizationResult.ALLOWED if department == self.required else AuthorizationResult.DENIED

    def decide(self, context: AuthorizableRequestContext, actions: list[Action]) -> list[AuthorizationResult]:
        return [self._allowed(context)] * len(actions)

    def decide_by_resource_type(self, context: AuthorizableRequestContext, op: AclOperation,
                                resource_type: ResourceType) -> AuthorizationResult:
        return self._allowed(context)
