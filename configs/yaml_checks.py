"""The machinery of the YAML reader: a context collecting every problem with its key path,
a section reader refusing unknown keys (with a did-you-mean hint), strict converters
(integers, strings, choices, lists, addresses, secrets), and PyYAML's safe loader with
YAML 1.2 booleans, no sexagesimal or leading-zero octal integers and no duplicate keys.

A converter is ``conv(ctx, path, value) -> parsed``.  It raises :class:`_Invalid` when the
value as a whole is unusable; the caller records that under ``path`` and carries on with
None.  Section (:func:`_section`) and list converters record their inner errors
themselves and return partial results, so one bad value never hides the others.
"""

from __future__ import annotations
import base64
import binascii
import difflib
import re
from collections.abc import Callable, Mapping
from dataclasses import fields
from pathlib import Path
from types import MappingProxyType
from typing import Any
import yaml
from authz.credentials import SCRAM_MIN_ITERATIONS, SaslMechanism, PBKDF2_HASHES
from configs.gateway_config import Address, SecurityProtocol

_REQUIRED: Any = object()


Converter = Callable[["_Ctx", str, Any], Any]


class _Invalid(Exception):
    """A value is unacceptable; the message says why (without the key path)."""


class _Ctx:
    """Error collector shared by every reader of one configuration."""

    def __init__(self, base_dir: Path | None) -> None:
        self.base_dir = base_dir
        self.errors: list[str] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append(f"{path}: {message}")

    def resolve(self, value: str) -> Path:
        path = Path(value).expanduser()
        return path if path.is_absolute() or self.base_dir is None else self.base_dir / path


def _join(path: str, key: Any) -> str:
    """Key path of `key` under `path`: listeners[0].port, authorizer.config["super.users"]."""
    key = str(key)
    if re.fullmatch(r"\w+", key):
        return f"{path}.{key}" if path else key
    return f'{path}["{key}"]'


def _describe(value: Any) -> str:
    """`value` as quoted in messages: "text", 42, boolean true, null, a list, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, str):
        return f'"{value}"' if value else "an empty string"
    if isinstance(value, int | float):
        return repr(value)
    return _kind(value)


def _kind(value: Any) -> str:
    """`value`'s type only, for values that may be secret."""
    if isinstance(value, str):
        return "a string" if value else "an empty string"
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None or isinstance(value, bool):
        return _describe(value)
    return {int: "an integer", float: "a number"}.get(type(value), f"a {type(value).__name__}")


class _Reader:
    """Typed access to one YAML mapping whose keys must be the fields of `model`."""

    def __init__(self, ctx: _Ctx, path: str, raw: Mapping[Any, Any], model: type) -> None:
        self.ctx, self.path, self.raw = ctx, path, raw
        valid = [f.name for f in fields(model)]
        #: keys an unknown key probably meant: their absence is that one mistake, not a second one
        self.misspelt: set[str] = set()
        for key in raw:
            if key not in valid:
                close = difflib.get_close_matches(str(key), valid, n=1)
                hint = f' (did you mean "{close[0]}"?)' if close else ""
                self.misspelt.update(close)
                ctx.error(_join(path, key), f"unknown key{hint}; valid keys: {', '.join(valid)}")

    def error(self, key: str | None, message: str) -> None:
        """A check across this section's keys.  Not reported while a key of the section is
        misspelt: the check ran on a default the user did not mean, and the typo is the error."""
        if not self.misspelt:
            self.ctx.error(self.path if key is None else _join(self.path, key), message)

    def given(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def __call__(self, key: str, conv: Converter, default: Any = _REQUIRED) -> Any:
        """The converted value of `key`; `default` if absent; None (and an error) if invalid."""
        path = _join(self.path, key)
        if key not in self.raw:
            if default is _REQUIRED:
                if key not in self.misspelt:
                    self.ctx.error(path, "required key is missing")
                return None
            return default
        value = self.raw[key]
        if value is None and default is None:
            return None
        try:
            return conv(self.ctx, path, value)
        except _Invalid as exc:
            self.ctx.error(path, str(exc))
            return None

    def section(self, key: str, parse: Converter) -> Any:
        """A nested section; when absent it is parsed from {} so defaults live in one place."""
        return self(key, parse) if key in self.raw else parse(self.ctx, _join(self.path, key), {})


def _section(model: type) -> Callable[[Callable[[_Ctx, _Reader], Any]], Converter]:
    """Turn `parse(ctx, reader)` into a converter of a YAML mapping with the keys of `model`."""

    def decorate(parse: Callable[[_Ctx, _Reader], Any]) -> Converter:
        def conv(ctx: _Ctx, path: str, raw: Any) -> Any:
            if not isinstance(raw, Mapping):
                raise _Invalid(f"expected a mapping, got {_describe(raw)}")
            return parse(ctx, _Reader(ctx, path, raw, model))

        return conv

    return decorate


def _int(lo: int = 1, hi: int | None = None, what: str | None = None) -> Converter:
    if what is None:
        what = f"an integer {lo}-{hi}" if hi is not None else "a positive integer" if lo == 1 else f"an integer >= {lo}"

    def conv(ctx: _Ctx, path: str, v: Any) -> int:
        if isinstance(v, int) and not isinstance(v, bool) and lo <= v and (hi is None or v <= hi):
            return v
        raise _Invalid(f"must be {what}, got {_describe(v)}")

    return conv


def _fraction(lo: float, hi: float) -> Converter:
    def conv(ctx: _Ctx, path: str, v: Any) -> float:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and lo <= v <= hi:
            return float(v)
        raise _Invalid(f"must be a number {lo:g}-{hi:g}, got {_describe(v)}")

    return conv


def _str(pattern: str | None = None, what: str = "", *, upper: bool = False) -> Converter:
    def conv(ctx: _Ctx, path: str, v: Any) -> str:
        if not isinstance(v, str) or not v.strip():
            raise _Invalid(f"must be a non-empty string, got {_kind(v)}")
        if pattern is not None and not re.fullmatch(pattern, v):
            raise _Invalid(f"expected {what}, got {_describe(v)}")
        return v.upper() if upper else v

    return conv


def _choice(*options: str) -> Converter:
    """One of `options`, matched case-insensitively, returned as the option itself."""

    def conv(ctx: _Ctx, path: str, v: Any) -> str:
        for option in options if isinstance(v, str) else ():
            if option.lower() == v.lower():
                return option
        raise _Invalid(f"must be one of {', '.join(options)}, got {_describe(v)}")

    return conv


def _list(item: Converter, *, csv: bool = False, nonempty: bool = True, unique: bool = False) -> Converter:
    def conv(ctx: _Ctx, path: str, v: Any) -> tuple[Any, ...]:
        if csv and isinstance(v, str):
            v = [part.strip() for part in v.split(",")]
        if not isinstance(v, list):
            alt = " or a comma-separated string" if csv else ""
            raise _Invalid(f"expected a list{alt}, got {_describe(v)}")
        if nonempty and not v:
            raise _Invalid("must not be empty")
        out: list[Any] = []
        for i, raw in enumerate(v):
            p = f"{path}[{i}]"
            try:
                value = item(ctx, p, raw)
            except _Invalid as exc:
                ctx.error(p, str(exc))
                value = None
            if unique and value is not None and value in out:
                ctx.error(p, f"duplicate {_describe(value)}")
            out.append(value)
        return tuple(out)

    return conv


def _bool(ctx: _Ctx, path: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    raise _Invalid(f"must be true or false, got {_describe(v)}")


def _path(ctx: _Ctx, path: str, v: Any) -> Path:
    return ctx.resolve(_STR(ctx, path, v))


def _base64(size: int | None = None) -> Converter:
    def conv(ctx: _Ctx, path: str, v: Any) -> bytes:
        try:
            data = base64.b64decode(_STR(ctx, path, v), validate=True)
        except binascii.Error:
            raise _Invalid("must be base64") from None
        if not data or (size is not None and len(data) != size):
            raise _Invalid(f"must be base64 of {size or 'at least 1'} bytes, got {len(data)} bytes")
        return data

    return conv


def _sha256_hex(ctx: _Ctx, path: str, v: Any) -> str:
    if isinstance(v, str) and re.fullmatch(r"[0-9a-fA-F]{64}", v):
        return v.lower()
    raise _Invalid(f"must be 64 hex digits (a SHA-256), got {_kind(v)}")


def _pbkdf2(ctx: _Ctx, path: str, v: Any) -> str:
    parts = v.split("$") if isinstance(v, str) else []
    try:
        ok = len(parts) == 4 and parts[0] in PBKDF2_HASHES and int(parts[1]) > 0
        ok = ok and all(base64.b64decode(p, validate=True) for p in parts[2:])
    except (ValueError, binascii.Error):
        ok = False
    if not ok:
        raise _Invalid(f'expected "pbkdf2_sha256$<iterations>$<salt base64>$<hash base64>", got {_kind(v)}')
    return v


_ADDRESS = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^\s:\[\]/,]+)):(?P<port>[0-9]{1,5})")


def _address(ctx: _Ctx, path: str, v: Any) -> Address:
    match = _ADDRESS.fullmatch(v) if isinstance(v, str) else None
    if match is None:
        raise _Invalid(f'expected "host:port", got {_describe(v)}')
    if not 1 <= int(match["port"]) <= 65535:
        raise _Invalid(f'expected "host:port" with a port 1-65535, got {_describe(v)}')
    return Address(match["v6"] or match["host"], int(match["port"]))


def _config_map(ctx: _Ctx, path: str, v: Any) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise _Invalid(f"expected a mapping of config names to values, got {_describe(v)}")
    scalar = (str, int, float, bool)
    out: dict[str, Any] = {}
    for key, value in v.items():
        if not isinstance(key, str):
            ctx.error(_join(path, key), "config names must be strings")
        elif isinstance(value, list) and all(isinstance(x, scalar) for x in value):
            out[key] = tuple(value)
        elif isinstance(value, scalar):
            out[key] = value
        else:
            message = "must be a string, number, boolean or a list of those"
            ctx.error(_join(path, key), f"{message}, got {_describe(value)}")
    return MappingProxyType(out)


_STR = _str()


def _network(ctx: _Ctx, path: str, v: Any) -> str:
    import ipaddress

    if isinstance(v, str):
        try:
            return str(ipaddress.ip_network(v.strip(), strict=False))
        except ValueError:
            pass
    raise _Invalid(f'expected a network such as "10.0.0.0/8" or "127.0.0.1", got {_describe(v)}')


_HOST = _str(r"[^\s/\[\]]+", "a host name or IP address")


_LISTENER_NAME = _str(r"[A-Za-z0-9_]+", "a listener name of letters, digits and _", upper=True)


_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"


_IMPORT_PATH = _str(f"{_DOTTED}:{_DOTTED}", 'an import path "package.module:Class"')


_PORT = _int(1, 65535)


_BIND_PORT = _int(0, 65535, "an integer 1-65535 (or 0 for an ephemeral port)")


_POSITIVE = _int()


_PROTOCOL = _choice(*SecurityProtocol)


_MECHANISM = _choice(*SaslMechanism)
_HTTP_URL = _str(r"https?://[^\s/]+(/\S*)?", "an http:// or https:// URL")


_SCRAM_MECHANISM = _choice(SaslMechanism.SCRAM_SHA_256, SaslMechanism.SCRAM_SHA_512)


_SCRAM_ITERATIONS = _int(SCRAM_MIN_ITERATIONS, what="an integer >= 4096 (the minimum Kafka clients accept)")


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans and integers, refusing duplicate keys."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = self.construct_object(key_node)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping", node.start_mark,
                        f"found duplicate key {key!r}", key_node.start_mark,
                    )
                seen.add(key)
        return super().construct_mapping(node, deep)


def _yaml_error(exc: yaml.YAMLError) -> str:
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return f"invalid YAML: {' '.join(str(exc).split())}"
    mark = exc.problem_mark
    context = f" ({exc.context})" if exc.context else ""
    return f"line {mark.line + 1}, column {mark.column + 1}: invalid YAML: {exc.problem}{context}"
