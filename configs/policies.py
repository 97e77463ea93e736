"""Alter-configs policies (KIP-133 ``AlterConfigsPolicy``): a plug-in and a declarative one.

Theory of operation
-------------------
Before kgw applies (or forwards upstream) an alteration of one config
resource, every configured policy's ``validate(RequestMetadata)`` runs; a
:class:`PolicyViolation` refuses that resource only, with POLICY_VIOLATION
(44) and the exception's message.  Other resources of the request go on.

* A plug-in is any class with ``validate(request_metadata)`` (and optionally
  ``configure(configs)`` and ``close()``), named by import path
  ``"package.module:Class"`` and instantiated with no arguments, as Kafka's
  ``alter.configs.policy.class.name``.
* :class:`DeclarativePolicy` is built from YAML rules per resource type::

      alter_configs_policy:
        class_name: mypkg.policies:NoRetentionBelowOneHour   # optional plug-in
        config: {min.retention.ms: 3600000}                  # passed to its configure()
        rules:                                               # the built-in policy
          topic:
            allowed_keys: [retention.ms, cleanup.policy]     # anything else: violation
            denied_keys: [min.insync.replicas]
            bounds: {retention.ms: {min: 60000, max: 604800000}}
            patterns: {cleanup.policy: "delete|compact"}     # full match, like Java
          broker:
            allowed_keys: [allow.everyone.if.no.acl.found, super.users]

``RequestMetadata.configs`` maps each altered key to its new value, or None
when the key is deleted (IncrementalAlterConfigs DELETE, or a key legacy
AlterConfigs drops).  For APPEND/SUBTRACT it holds the operand, and
``operations`` says which operation each key had.  Violation messages never
quote a value of a sensitive key.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from configs.config_model import AlterConfigOp, ConfigResource, ConfigResourceType, looks_sensitive

__all__ = [
    "AlterConfigsPolicy",
    "DeclarativePolicy",
    "PolicyLoadError",
    "PolicyViolation",
    "RequestMetadata",
    "ResourceRules",
    "load_policies",
    "load_policy_class",
    "parse_rules",
    "run_policies",
]


class PolicyViolation(Exception):
    """Raised by ``validate``: the resource gets POLICY_VIOLATION (44) with this message."""


class PolicyLoadError(ValueError):
    """The policy configuration is invalid or the plug-in cannot be loaded."""


@dataclass(frozen=True, slots=True)
class RequestMetadata:
    """What a policy sees of one resource's alteration (KIP-133 ``RequestMetadata``)."""

    resource: ConfigResource
    configs: Mapping[str, str | None]
    #: the operation per key (SET for legacy AlterConfigs)
    operations: Mapping[str, AlterConfigOp] = field(default_factory=dict)
    #: "Type:Name" of the caller, or None (KIP-201's principal)
    principal: str | None = None
    validate_only: bool = False
    #: names of keys whose values are secrets: a policy must not echo them
    sensitive_keys: frozenset[str] = frozenset()

    def configs_dict(self) -> dict[str, str | None]:
        return dict(self.configs)


@runtime_checkable
class AlterConfigsPolicy(Protocol):
    def validate(self, request_metadata: RequestMetadata) -> None:
        """Raise :class:`PolicyViolation` if the alteration is not allowed."""


# --------------------------------------------------------------------------- declarative


@dataclass(frozen=True, slots=True)
class ResourceRules:
    allowed_keys: frozenset[str] | None = None
    denied_keys: frozenset[str] = frozenset()
    bounds: Mapping[str, tuple[float | None, float | None]] = field(default_factory=dict)
    patterns: Mapping[str, re.Pattern[str]] = field(default_factory=dict)


_TYPE_NAMES = {t.name.lower(): t for t in ConfigResourceType if t is not ConfigResourceType.UNKNOWN}
_RULE_KEYS = ("allowed_keys", "denied_keys", "bounds", "patterns")


def _number(v: Any, where: str, errors: list[str]) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        errors.append(f"{where}: must be a number, got {v!r}")
        return None
    return v


def _keys(v: Any, where: str, errors: list[str]) -> frozenset[str]:
    if not isinstance(v, (list, tuple)) or not all(isinstance(k, str) for k in v):
        errors.append(f"{where}: must be a list of config names")
        return frozenset()
    return frozenset(v)


def parse_rules(raw: Any, where: str = "alter_configs_policy.rules") -> dict[ConfigResourceType, ResourceRules]:
    """Validate the YAML ``rules`` mapping; raises :class:`PolicyLoadError` listing every problem."""
    errors: list[str] = []
    out: dict[ConfigResourceType, ResourceRules] = {}
    if raw is None:
        return out
    if not isinstance(raw, Mapping):
        raise PolicyLoadError(f"{where}: expected a mapping of resource types ({', '.join(_TYPE_NAMES)}) to rules")
    for type_name, body in raw.items():
        here = f"{where}.{type_name}"
        rtype = _TYPE_NAMES.get(str(type_name).lower())
        if rtype is None:
            errors.append(f"{here}: unknown resource type (expected one of {', '.join(_TYPE_NAMES)})")
            continue
        if not isinstance(body, Mapping):
            errors.append(f"{here}: expected a mapping with {', '.join(_RULE_KEYS)}")
            continue
        for key in body:
            if key not in _RULE_KEYS:
                errors.append(f"{here}.{key}: unknown rule (expected one of {', '.join(_RULE_KEYS)})")
        allowed = _keys(body["allowed_keys"], f"{here}.allowed_keys", errors) if "allowed_keys" in body else None
        denied = _keys(body.get("denied_keys", ()), f"{here}.denied_keys", errors)
        bounds: dict[str, tuple[float | None, float | None]] = {}
        for key, b in (body.get("bounds") or {}).items():
            if not isinstance(b, Mapping) or not set(b) <= {"min", "max"} or not b:
                errors.append(f"{here}.bounds.{key}: expected {{min: N, max: N}} (either may be left out)")
                continue
            lo = _number(b.get("min"), f"{here}.bounds.{key}.min", errors)
            hi = _number(b.get("max"), f"{here}.bounds.{key}.max", errors)
            if lo is not None and hi is not None and lo > hi:
                errors.append(f"{here}.bounds.{key}: min {lo} is greater than max {hi}")
            bounds[key] = (lo, hi)
        patterns: dict[str, re.Pattern[str]] = {}
        for key, p in (body.get("patterns") or {}).items():
            if not isinstance(p, str):
                errors.append(f"{here}.patterns.{key}: must be a regular expression string")
                continue
            try:
                patterns[key] = re.compile(p)
            except re.error as e:
                errors.append(f"{here}.patterns.{key}: invalid regular expression: {e}")
        out[rtype] = ResourceRules(allowed, denied, MappingProxyType(bounds), MappingProxyType(patterns))
    if errors:
        raise PolicyLoadError("\n".join(errors))
    return out


class DeclarativePolicy:
    """The built-in policy: allowed/denied keys, numeric bounds and value patterns per resource type."""

    def __init__(self, rules: Mapping[ConfigResourceType, ResourceRules]) -> None:
        self.rules = dict(rules)

    @classmethod
    def from_mapping(cls, raw: Any) -> "DeclarativePolicy":
        return cls(parse_rules(raw))

    def validate(self, request_metadata: RequestMetadata) -> None:
        rules = self.rules.get(request_metadata.resource.type)
        if rules is None:
            return
        what = f"{request_metadata.resource.type.name.lower()} {request_metadata.resource.name!r}"
        for key, value in request_metadata.configs.items():
            if key in rules.denied_keys or (rules.allowed_keys is not None and key not in rules.allowed_keys):
                raise PolicyViolation(f"Altering config '{key}' of {what} is not allowed by the alter-configs policy")
            if value is None:
                continue
            secret = key in request_metadata.sensitive_keys or looks_sensitive(key)
            shown = "[hidden]" if secret else repr(value)
            if key in rules.bounds:
                lo, hi = rules.bounds[key]
                try:
                    number = float(value)
                except ValueError:
                    raise PolicyViolation(f"Config '{key}' of {what} must be a number, got {shown}") from None
                if (lo is not None and number < lo) or (hi is not None and number > hi):
                    span = f"[{'-inf' if lo is None else _num(lo)}, {'inf' if hi is None else _num(hi)}]"
                    raise PolicyViolation(f"Config '{key}' of {what} must be in {span}, got {shown}")
            pattern = rules.patterns.get(key)
            if pattern is not None and pattern.fullmatch(value) is None:
                raise PolicyViolation(
                    f"Config '{key}' of {what} must match the pattern {pattern.pattern!r}, got {shown}")


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else str(v)


# --------------------------------------------------------------------------- loading


def load_policy_class(import_path: str) -> type:
    """Resolve ``"package.module:Class"`` (or ``"package.module.Class"``)."""
    path = (import_path or "").strip()
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise PolicyLoadError(f"policy class path {import_path!r} must look like 'package.module:Class'")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as e:  # ImportError, AttributeError, or an error while importing
        raise PolicyLoadError(f"cannot load alter-configs policy {import_path!r}: {e}") from e
    if not isinstance(obj, type) or not callable(getattr(obj, "validate", None)):
        raise PolicyLoadError(f"alter-configs policy {import_path!r} is not a class with a validate() method")
    return obj


def _field(section: Any, name: str, default: Any = None) -> Any:
    if section is None:
        return default
    if isinstance(section, Mapping):
        return section.get(name, default)
    return getattr(section, name, default)


def load_policies(section: Any) -> list[AlterConfigsPolicy]:
    """The policies of a YAML ``alter_configs_policy`` section (a mapping or a config dataclass):
    the declarative rules first, then the plug-in.  None → no policy."""
    policies: list[AlterConfigsPolicy] = []
    rules = _field(section, "rules")
    if rules:
        policies.append(rules if isinstance(rules, DeclarativePolicy) else DeclarativePolicy.from_mapping(rules))
    class_name = _field(section, "class_name")
    if class_name:
        policy = load_policy_class(class_name)()
        configure = getattr(policy, "configure", None)
        if callable(configure):
            configure(dict(_field(section, "config", None) or {}))
        policies.append(policy)
    return policies


def run_policies(policies: Sequence[AlterConfigsPolicy], request_metadata: RequestMetadata) -> str | None:
    """The first violation's message, or None.  A policy that fails otherwise is a violation too
    (fail closed), with a generic message: its exception text might quote a value."""
    for policy in policies:
        try:
            policy.validate(request_metadata)
        except PolicyViolation as e:
            return str(e) or "Alter-configs policy violation"
        except Exception as e:  # noqa: BLE001 - a broken plug-in must not let the change through
            return f"Alter-configs policy {type(policy).__name__} failed ({type(e).__name__})"
    return None
