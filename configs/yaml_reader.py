"""Reading and validating the gateway's YAML configuration into :mod:`configs.gateway_config`.

Theory of operation
-------------------
`load_config(path)` reads a YAML file and `parse_config(mapping)` validates an
already-parsed mapping. Both return a `GatewayConfig`: a tree of frozen,
slotted, keyword-only dataclasses whose field names are exactly the YAML keys,
so the file, the model and `GatewayConfig.to_dict()` share one vocabulary.

All validation happens here, once, at load time. The rules:

1. Report every problem, not just the first. Readers record an error and carry
   on with a placeholder (None); one `ConfigError` is raised at the end, with
   one line per problem: ``<file>: <key path>: <message>``, for example
   ``gw.yaml: listeners[1].port: must be an integer 1-65535, got 70000``.
2. Unknown keys are errors (with a did-you-mean hint and the valid keys): a
   typo that silently falls back to a default is worse than refusing to start.
3. Types are strict: "9092" is not a port and `true` is not an integer.
   Enumerated strings (protocols, levels) are case-insensitive and stored in
   their canonical spelling.
4. null is accepted only where a field is optional (its default is None or
   derived from other fields); elsewhere it is a type error. `admin: null`
   disables the admin endpoint.
5. No I/O other than reading the file. Certificate files, import paths and the
   metadata directory are checked by the code that uses them. Relative paths
   are resolved against the config file's directory.

The YAML loader is PyYAML's safe loader with three changes: YAML 1.2 booleans
(only true/false, so `log_level: OFF` stays a string), no YAML 1.1
sexagesimal or leading-zero octal integers (`1:30` and `010` stay strings) and
duplicate keys are an error.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import hashlib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml
from authz.credentials import PlainCredential, SCRAM_MIN_ITERATIONS, SaslMechanism, ScramCredential, PBKDF2_HASHES
from configs.policies import PolicyLoadError, parse_rules
from configs.gateway_config import AUDIT_LEVELS, Address, AdminConfig, AlterConfigsPolicyConfig, AuditConfig, AuthorizerConfig, ClientAuth, ConfigError, GatewayConfig, IoConfig, LOG_FORMATS, LOG_LEVELS, LimitsConfig, ListenerConfig, ListenerSaslConfig, ListenerTlsConfig, LoggingConfig, MetadataConfig, SecurityProtocol, UpstreamConfig, UpstreamSaslConfig, UpstreamTlsConfig, UsersConfig, WILDCARD_HOSTS


__all__ = ["load_config", "parse_config"]


# --------------------------------------------------------------------------- entry points


def load_config(path: str | os.PathLike[str]) -> GatewayConfig:
    """Read, parse and validate a YAML configuration file.

    Relative paths in the file are resolved against the file's directory.

    :raises ConfigError: the file is unreadable, not valid YAML, or invalid;
        every line of the message starts with the file name.
    """
    path = Path(path)
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(source, [f"cannot read config file: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(source, [f"config file is not UTF-8: {exc.reason} at byte {exc.start}"]) from None
    try:
        raw = yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.YAMLError as exc:
        raise ConfigError(source, [_yaml_error(exc)]) from None
    return parse_config(raw, source, base_dir=path.parent.absolute())


def parse_config(
    mapping: Any, source: str = "<string>", *, base_dir: str | os.PathLike[str] | None = None
) -> GatewayConfig:
    """Validate an already-parsed configuration mapping (None counts as empty).

    Relative paths are joined to `base_dir`; with None they stay relative
    (to the process's working directory).

    :raises ConfigError: listing every problem, each line prefixed with `source`.
    """
    if mapping is None:
        mapping = {}
    if not isinstance(mapping, Mapping):
        raise ConfigError(source, [f"expected a mapping at the top level, got {_describe(mapping)}"])
    ctx = _Ctx(None if base_dir is None else Path(base_dir))
    config = _gateway(ctx, mapping)
    if ctx.errors:
        raise ConfigError(source, ctx.errors)
    return config


# --------------------------------------------------------------------------- validation helpers
#
# A converter is `conv(ctx, path, value) -> parsed`. It raises _Invalid("why")
# when the value as a whole is unusable; the caller records that under `path`
# and carries on with None. Section (@_section) and list converters record
# their inner errors themselves and return partial results, so one bad value
# never hides the others.

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
        for key in raw:
            if key not in valid:
                close = difflib.get_close_matches(str(key), valid, n=1)
                hint = f' (did you mean "{close[0]}"?)' if close else ""
                ctx.error(_join(path, key), f"unknown key{hint}; valid keys: {', '.join(valid)}")

    def error(self, key: str | None, message: str) -> None:
        self.ctx.error(self.path if key is None else _join(self.path, key), message)

    def given(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def __call__(self, key: str, conv: Converter, default: Any = _REQUIRED) -> Any:
        """The converted value of `key`; `default` if absent; None (and an error) if invalid."""
        path = _join(self.path, key)
        if key not in self.raw:
            if default is _REQUIRED:
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
_HOST = _str(r"[^\s/\[\]]+", "a host name or IP address")
_LISTENER_NAME = _str(r"[A-Za-z0-9_]+", "a listener name of letters, digits and _", upper=True)
_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_IMPORT_PATH = _str(f"{_DOTTED}:{_DOTTED}", 'an import path "package.module:Class"')
_PORT = _int(1, 65535)
_BIND_PORT = _int(0, 65535, "an integer 1-65535 (or 0 for an ephemeral port)")
_POSITIVE = _int()
_PROTOCOL = _choice(*SecurityProtocol)
_MECHANISM = _choice(*SaslMechanism)
_SCRAM_MECHANISM = _choice(SaslMechanism.SCRAM_SHA_256, SaslMechanism.SCRAM_SHA_512)
_SCRAM_ITERATIONS = _int(SCRAM_MIN_ITERATIONS, what="an integer >= 4096 (the minimum Kafka clients accept)")


# --------------------------------------------------------------------------- sections


def _check_protocol_sections(r: _Reader, protocol: SecurityProtocol | None, *, tls_required: bool) -> None:
    """tls only with *SSL, sasl exactly with SASL_*; a block that would be ignored is an error."""
    if protocol is None:
        return
    for key, wanted, required, allowed in (
        ("tls", protocol.uses_tls, tls_required, "SSL or SASL_SSL"),
        ("sasl", protocol.uses_sasl, True, "SASL_PLAINTEXT or SASL_SSL"),
    ):
        if wanted and required and not r.given(key):
            r.error(key, f"required when security_protocol is {protocol}")
        elif not wanted and r.given(key):
            r.error(key, f"not allowed when security_protocol is {protocol} (only with {allowed})")


@_section(ListenerTlsConfig)
def _listener_tls(ctx: _Ctx, r: _Reader) -> ListenerTlsConfig:
    tls = ListenerTlsConfig(
        cert_file=r("cert_file", _path),
        key_file=r("key_file", _path),
        ca_file=r("ca_file", _path, None),
        client_auth=r("client_auth", _choice(*ClientAuth), ClientAuth.NONE),
        principal_mapping_rules=r("principal_mapping_rules", _STR, "DEFAULT"),
    )
    if tls.client_auth not in (None, ClientAuth.NONE) and not r.given("ca_file"):
        r.error("ca_file", f'required when client_auth is "{tls.client_auth}"')
    return tls


@_section(ListenerSaslConfig)
def _listener_sasl(ctx: _Ctx, r: _Reader) -> ListenerSaslConfig:
    return ListenerSaslConfig(mechanisms=r("mechanisms", _list(_MECHANISM, unique=True)))


@_section(ListenerConfig)
def _listener(ctx: _Ctx, r: _Reader) -> ListenerConfig:
    name = r("name", _LISTENER_NAME)
    protocol = r("security_protocol", _PROTOCOL, SecurityProtocol.PLAINTEXT)
    host = r("host", _HOST, "0.0.0.0")
    port = r("port", _BIND_PORT, 9192)
    advertised_host = r("advertised_host", _HOST, None) or ("localhost" if host in WILDCARD_HOSTS else host)
    advertised_port = r("advertised_port", _PORT, None) or port
    base = r("broker_port_base", _PORT)
    listener = ListenerConfig(
        name=name,
        security_protocol=protocol,
        host=host,
        port=port,
        advertised_host=advertised_host,
        advertised_port=advertised_port,
        broker_port_base=base,
        advertised_broker_port_base=r("advertised_broker_port_base", _PORT, None) or base,
        max_connections=r("max_connections", _POSITIVE, 10000),
        tls=r("tls", _listener_tls, None),
        sasl=r("sasl", _listener_sasl, None),
        principal_builder=r("principal_builder", _IMPORT_PATH, None),
    )
    _check_protocol_sections(r, protocol, tls_required=True)
    return listener


@_section(UpstreamTlsConfig)
def _upstream_tls(ctx: _Ctx, r: _Reader) -> UpstreamTlsConfig:
    tls = UpstreamTlsConfig(
        ca_file=r("ca_file", _path, None),
        cert_file=r("cert_file", _path, None),
        key_file=r("key_file", _path, None),
        check_hostname=r("check_hostname", _bool, True),
    )
    for key, other in (("cert_file", "key_file"), ("key_file", "cert_file")):
        if r.given(other) and not r.given(key):
            r.error(key, f"required when {other} is set")
    return tls


@_section(UpstreamSaslConfig)
def _upstream_sasl(ctx: _Ctx, r: _Reader) -> UpstreamSaslConfig:
    return UpstreamSaslConfig(
        mechanism=r("mechanism", _MECHANISM), username=r("username", _STR), password=r("password", _STR)
    )


@_section(UpstreamConfig)
def _upstream(ctx: _Ctx, r: _Reader) -> UpstreamConfig:
    protocol = r("security_protocol", _PROTOCOL, SecurityProtocol.PLAINTEXT)
    upstream = UpstreamConfig(
        bootstrap_servers=r("bootstrap_servers", _list(_address, csv=True)),
        security_protocol=protocol,
        tls=r("tls", _upstream_tls, None),
        sasl=r("sasl", _upstream_sasl, None),
        connect_timeout_ms=r("connect_timeout_ms", _POSITIVE, 10000),
        request_timeout_ms=r("request_timeout_ms", _POSITIVE, 30000),
        metadata_max_age_ms=r("metadata_max_age_ms", _POSITIVE, 300000),
    )
    _check_protocol_sections(r, protocol, tls_required=False)
    return upstream


@_section(LimitsConfig)
def _limits(ctx: _Ctx, r: _Reader) -> LimitsConfig:
    return LimitsConfig(
        max_frame_bytes=r("max_frame_bytes", _POSITIVE, 104857600),
        max_in_flight_per_connection=r("max_in_flight_per_connection", _POSITIVE, 1000),
        sasl_max_receive_bytes=r("sasl_max_receive_bytes", _POSITIVE, 524288),
        authentication_timeout_ms=r("authentication_timeout_ms", _POSITIVE, 10000),
        connections_max_idle_ms=r("connections_max_idle_ms", _POSITIVE, 600000),
        max_connections_per_ip=r("max_connections_per_ip", _POSITIVE, 1000),
        failed_authentication_delay_ms=r("failed_authentication_delay_ms", _int(0), 100),
        password_hash_threads=r("password_hash_threads", _POSITIVE, 1),
        offload_request_bytes=r("offload_request_bytes", _POSITIVE, 65536),
        offload_produce_bytes=r("offload_produce_bytes", _POSITIVE, 1048576),
        offload_response_bytes=r("offload_response_bytes", _POSITIVE, 1048576),
        drain_timeout_ms=r("drain_timeout_ms", _POSITIVE, 30000),
    )


@_section(IoConfig)
def _io(ctx: _Ctx, r: _Reader) -> IoConfig:
    return IoConfig(data_plane_thread=r("data_plane_thread", _bool, True))


@_section(AdminConfig)
def _admin(ctx: _Ctx, r: _Reader) -> AdminConfig:
    return AdminConfig(host=r("host", _HOST, "127.0.0.1"), port=r("port", _BIND_PORT, 9190))


@_section(AuthorizerConfig)
def _authorizer(ctx: _Ctx, r: _Reader) -> AuthorizerConfig:
    authorizer = AuthorizerConfig(
        class_name=r("class_name", _IMPORT_PATH, None),
        config=r("config", _config_map, MappingProxyType({})),
    )
    if r.raw.get("config") and r.raw.get("class_name") is None:
        r.error("config", "given but class_name is null, so it would be ignored")
    return authorizer


def _policy_rules(ctx: _Ctx, path: str, v: Any) -> Mapping[str, Any]:
    try:
        parse_rules(v, path)
    except PolicyLoadError as e:
        raise _Invalid(str(e).replace("\n", "; ")) from None
    return MappingProxyType(dict(v))


@_section(AlterConfigsPolicyConfig)
def _alter_configs_policy(ctx: _Ctx, r: _Reader) -> AlterConfigsPolicyConfig:
    return AlterConfigsPolicyConfig(
        class_name=r("class_name", _IMPORT_PATH, None),
        config=r("config", _config_map, MappingProxyType({})),
        rules=r("rules", _policy_rules, MappingProxyType({})),
    )


@_section(MetadataConfig)
def _metadata(ctx: _Ctx, r: _Reader) -> MetadataConfig:
    return MetadataConfig(
        path=r("path", _path, None) or ctx.resolve("kgw-data"),
        snapshot_every_records=r("snapshot_every_records", _POSITIVE, 10000),
    )


@_section(ScramCredential)
def _scram_user(ctx: _Ctx, r: _Reader) -> ScramCredential:
    name = r("name", _STR)
    mechanism = r("mechanism", _SCRAM_MECHANISM)
    key_size = hashlib.new(mechanism.hash_name).digest_size if mechanism else None
    return ScramCredential(
        name=name,
        mechanism=mechanism,
        salt=r("salt", _base64()),
        iterations=r("iterations", _SCRAM_ITERATIONS),
        stored_key=r("stored_key", _base64(key_size)),
        server_key=r("server_key", _base64(key_size)),
    )


@_section(PlainCredential)
def _plain_user(ctx: _Ctx, r: _Reader) -> PlainCredential:
    user = PlainCredential(
        name=r("name", _STR),
        password_sha256=r("password_sha256", _sha256_hex, None),
        password_hash=r("password_hash", _pbkdf2, None),
    )
    if r.given("password_sha256") == r.given("password_hash"):
        r.error(None, "exactly one of password_sha256 or password_hash is required")
    return user


@_section(UsersConfig)
def _users(ctx: _Ctx, r: _Reader) -> UsersConfig:
    users = UsersConfig(
        scram=r("scram", _list(_scram_user, nonempty=False), ()),
        plain=r("plain", _list(_plain_user, nonempty=False), ()),
    )
    for key, entries, identity in (
        ("scram", users.scram or (), lambda u: (u.name, u.mechanism)),
        ("plain", users.plain or (), lambda u: u.name),
    ):
        seen: dict[Any, int] = {}
        for i, user in enumerate(entries):
            if user is not None and user.name is not None:
                first = seen.setdefault(identity(user), i)
                if first != i:
                    ctx.error(f"{r.path}.{key}[{i}].name", f'duplicate user "{user.name}" (see {r.path}.{key}[{first}])')
    return users


@_section(AuditConfig)
def _audit(ctx: _Ctx, r: _Reader) -> AuditConfig:
    return AuditConfig(
        log_level=r("log_level", _choice(*AUDIT_LEVELS), "INFO"),
        publish=r("publish", _bool, False),
        topic=r("topic", _STR, "kgw-audit"),
        partitions=r("partitions", _POSITIVE, 1),
        max_buffered=r("max_buffered", _POSITIVE, 10000),
        batch_max_events=r("batch_max_events", _POSITIVE, 500),
        linger_ms=r("linger_ms", _POSITIVE, 200),
    )


@_section(LoggingConfig)
def _logging(ctx: _Ctx, r: _Reader) -> LoggingConfig:
    return LoggingConfig(
        level=r("level", _choice(*LOG_LEVELS), "INFO"), format=r("format", _choice(*LOG_FORMATS), "text")
    )


def _gateway(ctx: _Ctx, raw: Mapping[str, Any]) -> GatewayConfig:
    r = _Reader(ctx, "", raw, GatewayConfig)
    config = GatewayConfig(
        cluster_id=r("cluster_id", _STR, "kgw"),
        listeners=r("listeners", _list(_listener)),
        upstream=r("upstream", _upstream),
        limits=r.section("limits", _limits),
        io=r.section("io", _io),
        admin=r("admin", _admin, None) if "admin" in raw else AdminConfig(),
        authorizer=r.section("authorizer", _authorizer),
        metadata=r.section("metadata", _metadata),
        users=r.section("users", _users),
        audit=r.section("audit", _audit),
        logging=r.section("logging", _logging),
        alter_configs_policy=r.section("alter_configs_policy", _alter_configs_policy),
    )
    _check_listeners(ctx, config.listeners or (), config.admin)
    return config


def _check_listeners(ctx: _Ctx, listeners: Sequence[ListenerConfig | None], admin: AdminConfig | None) -> None:
    """Unique listener names; no two sockets on the same (overlapping host, port)."""
    names: dict[str, int] = {}
    for i, listener in enumerate(listeners):
        if listener is not None and listener.name is not None:
            first = names.setdefault(listener.name, i)
            if first != i:
                ctx.error(f"listeners[{i}].name", f'duplicate listener name "{listener.name}" (see listeners[{first}])')

    # Each claim: (host, port, description). Port 0 is ephemeral and never collides.
    claims: list[tuple[str, int, str]] = []

    def claim(path: str, host: str | None, port: int | None, what: str) -> None:
        if not host or not port:
            return
        for other_host, other_port, other in claims:
            if port == other_port and (host == other_host or WILDCARD_HOSTS & {host, other_host}):
                ctx.error(path, f"{port} on {host} collides with the {other}")
                return
        claims.append((host, port, what))

    for i, listener in enumerate(listeners):
        if listener is not None:
            p = f"listeners[{i}]"
            claim(f"{p}.port", listener.host, listener.port, f"bootstrap port of {p} ({listener.name})")
            base = listener.broker_port_base
            claim(f"{p}.broker_port_base", listener.host, base, f"node 0 port of {p} ({listener.name})")
    if admin is not None:
        claim("admin.port", admin.host, admin.port, "admin port")


# --------------------------------------------------------------------------- YAML and output


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


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int")]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?(?:0|[1-9][0-9_]*)|0x[0-9a-fA-F_]+)$"), list("-+0123456789")
)


def _yaml_error(exc: yaml.YAMLError) -> str:
    if not isinstance(exc, yaml.MarkedYAMLError) or exc.problem_mark is None:
        return f"invalid YAML: {' '.join(str(exc).split())}"
    mark = exc.problem_mark
    context = f" ({exc.context})" if exc.context else ""
    return f"line {mark.line + 1}, column {mark.column + 1}: invalid YAML: {exc.problem}{context}"


