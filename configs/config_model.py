"""Kafka's config-resource model: the wire enums (resource types, config types, sources,
alter operations), config resources and entries, a config key's definition
(:class:`ConfigDef`) and the outcome of a change.  kgw's own keys are in
:mod:`configs.broker_configs`.
"""

from __future__ import annotations
import enum
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

class ConfigResourceType(enum.IntEnum):
    """``ConfigResource.Type`` wire codes."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32

    @classmethod
    def of(cls, code: int) -> "ConfigResourceType":
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN


class ConfigType(enum.IntEnum):
    """``DescribeConfigsResponse.ConfigType`` (the ``config_type`` field, v3+)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """``DescribeConfigsResponse.ConfigSource``."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class AlterConfigOp(enum.IntEnum):
    """``IncrementalAlterConfigs`` operation codes (KIP-339)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class ConfigResource:
    type: ConfigResourceType
    name: str

    def __str__(self) -> str:
        return f"{self.type.name}:{self.name!r}"


class InvalidConfig(ValueError):
    """A value or key refused with INVALID_CONFIG (40); the message is safe to return."""


_SENSITIVE_WORDS = re.compile(r"password|secret|token|credential|(^|[._])key$|sasl\.jaas", re.IGNORECASE)


def looks_sensitive(name: str) -> bool:
    """A key of a free-form section (the authorizer's config) treated as a secret by its name."""
    return bool(_SENSITIVE_WORDS.search(name))


Validator = Callable[[Any], Any]


"""Takes the typed value, raises ValueError with a reason, returns the (possibly normalised) value."""


_INT_RANGE = {ConfigType.INT: (-(2**31), 2**31 - 1), ConfigType.SHORT: (-(2**15), 2**15 - 1),
              ConfigType.LONG: (-(2**63), 2**63 - 1)}



@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: ConfigType
    doc: str
    default: str | None = None
    """The value when neither the YAML file nor a dynamic override sets one (text form)."""
    read_only: bool = True
    """True: only the YAML file (and a restart) changes it; AlterConfigs answers INVALID_CONFIG."""
    sensitive: bool = False
    validator: Validator | None = None
    #: the GatewayConfig attribute path(s) this key stands for (documentation and the coverage test)
    source_path: str = ""
    #: item separator of a LIST value ("," as Kafka; super.users uses ";")
    separator: str = ","

    def parse(self, text: str | None) -> Any:
        """The typed value of ``text``; raises :class:`InvalidConfig`."""
        if text is None:
            return None
        shown = "[hidden]" if self.sensitive else repr(text)

        def bad(reason: str) -> InvalidConfig:
            return InvalidConfig(f"Invalid value {shown} for configuration {self.name}: {reason}")

        t = self.type
        stripped = text.strip()
        if t is ConfigType.BOOLEAN:
            if stripped.lower() not in ("true", "false"):
                raise bad("Expected value to be either true or false")
            value: Any = stripped.lower() == "true"
        elif t in _INT_RANGE:
            lo, hi = _INT_RANGE[t]
            if not re.fullmatch(r"[-+]?[0-9]+", stripped) or not lo <= int(stripped) <= hi:
                raise bad(f"Not a number of type {t.name}")
            value = int(stripped)
        elif t is ConfigType.DOUBLE:
            try:
                value = float(stripped)
            except ValueError:
                raise bad("Not a number of type DOUBLE") from None
            if not math.isfinite(value):
                raise bad("Not a finite number")
        elif t is ConfigType.LIST:
            value = [item.strip() for item in text.split(self.separator) if item.strip()]
        elif t is ConfigType.CLASS:
            if stripped and not re.fullmatch(r"[A-Za-z_][\w.]*(:[A-Za-z_][\w.]*)?", stripped):
                raise bad('expected an import path "package.module:Class"')
            value = stripped
        else:
            value = text
        if self.validator is not None:
            try:
                value = self.validator(value)
            except ValueError as e:
                raise bad(str(e)) from None
        return value

    def format(self, value: Any) -> str | None:
        """The text form of a typed value (what is stored and described)."""
        if value is None:
            return None
        if self.type is ConfigType.BOOLEAN:
            return "true" if value else "false"
        if self.type is ConfigType.LIST:
            return self.separator.join(str(v) for v in value)
        return str(value)

    def canonical(self, text: str | None) -> str | None:
        return self.format(self.parse(text))


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource
    read_only: bool
    sensitive: bool
    type: ConfigType
    documentation: str | None = None
    synonyms: tuple[ConfigSynonym, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class ConfigChange:
    """One change of an AlterConfigs / IncrementalAlterConfigs resource."""

    name: str
    op: AlterConfigOp
    value: str | None


@dataclass(frozen=True, slots=True)
class AlterResult:
    """The outcome of altering one config resource: an error code and message, and on success
    what was changed (``applied``: "k=v, k2 deleted", a sensitive value hidden; None when
    nothing changed), for the record of who changed what (``authz.audit.ChangeLog``)."""

    error_code: int = 0
    message: str | None = None
    applied: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_code == 0
