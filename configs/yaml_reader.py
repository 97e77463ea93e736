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
import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any
import yaml
from authz.credentials import PlainCredential, SaslMechanism, ScramCredential
from configs.policies import PolicyLoadError, parse_rules
from configs.gateway_config import AUDIT_LEVELS, AdminConfig, OAuthBearerConfig, AlterConfigsPolicyConfig, AuditConfig, AuthorizerConfig, ClientAuth, ConfigError, GatewayConfig, IoConfig, LOG_FORMATS, LOG_LEVELS, LimitsConfig, ListenerConfig, ListenerSaslConfig, ListenerTlsConfig, LoggingConfig, MetadataConfig, ProxyProtocolConfig, QuotasConfig, SniConfig, SecurityProtocol, UpstreamConfig, UpstreamOAuthConfig, UpstreamSaslConfig, UpstreamTlsConfig, UsersConfig, WILDCARD_HOSTS
from configs.yaml_checks import _REQUIRED, _fraction, _network, _str, _HTTP_URL, _BIND_PORT, _Ctx, _HOST, _IMPORT_PATH, _Invalid, _LISTENER_NAME, _Loader, _MECHANISM, _PORT, _POSITIVE, _PROTOCOL, _Reader, _SCRAM_ITERATIONS, _SCRAM_MECHANISM, _STR, _address, _base64, _bool, _choice, _config_map, _describe, _int, _join, _list, _path, _pbkdf2, _section, _sha256_hex, _yaml_error

__all__ = ["apply_overrides", "load_config", "parse_config"]

_SEGMENT = re.compile(r"^([A-Za-z_][\w.-]*?)((?:\[\d+\])*)$")

def apply_overrides(raw: Any, overrides: Sequence[str], source: str) -> Any:
    """``raw`` (a parsed YAML document) with each ``key.path=value`` of ``overrides`` set, in
    order: ``upstream.bootstrap_servers=[broker:9092]``, ``listeners[0].port=19092``,
    ``admin.port=0``.  The value is read as YAML (a number, a list, ``null``); a missing
    section is created.  A path through something that is not a section or list is an error
    naming the override, as is a list index past the end.

    :raises ConfigError: an override that cannot be applied.
    """
    doc = {} if raw is None else raw
    for override in overrides:
        where = f"--set {override}"
        key, sep, text = override.partition("=")
        if not sep or not key:
            raise ConfigError(source, [f"{where}: expected KEY.PATH=VALUE"])
        try:
            value = yaml.load(text, Loader=_Loader) if text.strip() else ""  # noqa: S506 - a SafeLoader
        except yaml.YAMLError as exc:
            raise ConfigError(source, [f"{where}: {_yaml_error(exc)}"]) from None
        steps: list[str | int] = []
        for part in key.split("."):
            m = _SEGMENT.match(part)
            if m is None:
                raise ConfigError(source, [f"{where}: {part!r} is not a key (letters, digits, _ and -, "
                                           "then optional [index])"])
            steps.append(m.group(1))
            steps.extend(int(i) for i in re.findall(r"\[(\d+)\]", m.group(2)))
        if not isinstance(doc, dict):
            raise ConfigError(source, [f"{where}: the configuration is not a mapping"])
        node: Any = doc
        for step, following in zip(steps, steps[1:]):
            if isinstance(step, int):
                if not isinstance(node, list) or step >= len(node):
                    raise ConfigError(source, [f"{where}: no item [{step}] there"])
                node = node[step]
            else:
                if not isinstance(node, dict):
                    raise ConfigError(source, [f"{where}: {step!r} is inside something that is not a section"])
                if node.get(step) is None:
                    node[step] = [] if isinstance(following, int) else {}
                node = node[step]
        last = steps[-1]
        if isinstance(last, int):
            if not isinstance(node, list) or last > len(node):
                raise ConfigError(source, [f"{where}: no item [{last}] there"])
            if last == len(node):
                node.append(value)
            else:
                node[last] = value
        elif isinstance(node, dict):
            node[last] = value
        else:
            raise ConfigError(source, [f"{where}: {last!r} is inside something that is not a section"])
    return doc


def load_config(path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> GatewayConfig:
    """Read, parse and validate a YAML configuration file, with ``overrides`` (``key.path=value``,
    see :func:`apply_overrides`) set before it is checked.

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
    if overrides:
        raw = apply_overrides(raw, overrides, source)
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
        reload_check_ms=r("reload_check_ms", _int(0), 60000),
    )
    if tls.client_auth not in (None, ClientAuth.NONE) and not r.given("ca_file"):
        r.error("ca_file", f'required when client_auth is "{tls.client_auth}"')
    return tls


@_section(OAuthBearerConfig)
def _oauthbearer(ctx: _Ctx, r: _Reader) -> OAuthBearerConfig:
    config = OAuthBearerConfig(
        jwks_endpoint_url=r("jwks_endpoint_url", _HTTP_URL, None),
        issuer_url=r("issuer_url", _HTTP_URL, None),
        jwks_file=r("jwks_file", _path, None),
        expected_audience=r("expected_audience", _list(_STR, csv=True, unique=True), ()),
        expected_issuer=r("expected_issuer", _STR, None),
        scope_claim_name=r("scope_claim_name", _STR, "scope"),
        sub_claim_name=r("sub_claim_name", _STR, "sub"),
        groups_claim=r("groups_claim", _STR, None),
        clock_skew_seconds=r("clock_skew_seconds", _int(0), 30),
        jwks_refresh_ms=r("jwks_refresh_ms", _int(1000), 3600000),
    )
    sources = [k for k in ("jwks_endpoint_url", "issuer_url", "jwks_file") if r.given(k)]
    if len(sources) != 1:
        r.error("jwks_endpoint_url", "exactly one of jwks_endpoint_url, issuer_url and jwks_file is required"
                + (f" (given: {', '.join(sources)})" if sources else ""))
    return config


@_section(ListenerSaslConfig)
def _listener_sasl(ctx: _Ctx, r: _Reader) -> ListenerSaslConfig:
    mechanisms = r("mechanisms", _list(_MECHANISM, unique=True))
    oauthbearer = r("oauthbearer", _oauthbearer, None)
    if mechanisms and SaslMechanism.OAUTHBEARER in mechanisms and oauthbearer is None:
        r.error("oauthbearer", "required when OAUTHBEARER is among the mechanisms (where the provider's keys are)")
    elif oauthbearer is not None and mechanisms and SaslMechanism.OAUTHBEARER not in mechanisms:
        r.error("oauthbearer", "not allowed unless OAUTHBEARER is among the mechanisms")
    return ListenerSaslConfig(mechanisms=mechanisms, oauthbearer=oauthbearer,
                              connections_max_reauth_ms=r("connections_max_reauth_ms", _int(0), 0))


@_section(ListenerConfig)
def _listener(ctx: _Ctx, r: _Reader) -> ListenerConfig:
    name = r("name", _LISTENER_NAME)
    protocol = r("security_protocol", _PROTOCOL, SecurityProtocol.PLAINTEXT)
    host = r("host", _HOST, "0.0.0.0")
    port = r("port", _BIND_PORT, 9192)
    advertised_host = r("advertised_host", _HOST, None) or ("localhost" if host in WILDCARD_HOSTS else host)
    advertised_port = r("advertised_port", _PORT, None) or port
    sni = r("sni", _sni, None)
    base = r("broker_port_base", _PORT, 0 if sni is not None else _REQUIRED)
    if sni is not None and protocol not in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL):
        r.error("sni", f"needs a TLS listener (security_protocol SSL or SASL_SSL), not {protocol}")
    if sni is not None and r.given("broker_port_base"):
        r.error("broker_port_base", "not used with sni: every broker is served on the listener's port")
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
        proxy_protocol=r("proxy_protocol", _proxy_protocol, None),
        sni=sni,
    )
    _check_protocol_sections(r, protocol, tls_required=True)
    return listener


_HOST_NAME = _str(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?", "a DNS name")
_HOST_PATTERN = _str(r"[A-Za-z0-9.-]*\{node_id\}[A-Za-z0-9.-]*", 'a DNS name with "{node_id}" once')


@_section(SniConfig)
def _sni(ctx: _Ctx, r: _Reader) -> SniConfig:
    config = SniConfig(bootstrap_host=r("bootstrap_host", _HOST_NAME), broker_host_pattern=r("broker_host_pattern",
                                                                                            _HOST_PATTERN))
    if config.broker_host_pattern and config.broker_host_pattern.count("{node_id}") != 1:
        r.error("broker_host_pattern", 'must hold "{node_id}" exactly once')
    return config


@_section(ProxyProtocolConfig)
def _proxy_protocol(ctx: _Ctx, r: _Reader) -> ProxyProtocolConfig:
    return ProxyProtocolConfig(trusted_networks=r("trusted_networks", _list(_network, csv=True, unique=True)))


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


@_section(UpstreamOAuthConfig)
def _upstream_oauth(ctx: _Ctx, r: _Reader) -> UpstreamOAuthConfig:
    config = UpstreamOAuthConfig(
        token_endpoint_url=r("token_endpoint_url", _HTTP_URL, None),
        issuer_url=r("issuer_url", _HTTP_URL, None),
        client_id=r("client_id", _STR),
        client_secret=r("client_secret", _STR),
        scope=r("scope", _STR, None),
        refresh_window_factor=r("refresh_window_factor", _fraction(0.5, 1.0), 0.8),
    )
    given = [k for k in ("token_endpoint_url", "issuer_url") if r.given(k)]
    if len(given) != 1:
        r.error("token_endpoint_url", "exactly one of token_endpoint_url and issuer_url is required"
                + (f" (given: {', '.join(given)})" if given else ""))
    return config


@_section(UpstreamSaslConfig)
def _upstream_sasl(ctx: _Ctx, r: _Reader) -> UpstreamSaslConfig:
    mechanism = r("mechanism", _choice(SaslMechanism.PLAIN, SaslMechanism.SCRAM_SHA_256, SaslMechanism.SCRAM_SHA_512,
                                       SaslMechanism.OAUTHBEARER))
    if mechanism == SaslMechanism.OAUTHBEARER:
        for key in ("username", "password"):
            if r.given(key):
                r.error(key, "not used with OAUTHBEARER (kgw logs in with upstream.sasl.oauthbearer's client)")
        return UpstreamSaslConfig(mechanism=mechanism, oauthbearer=r("oauthbearer", _upstream_oauth))
    if r.given("oauthbearer"):
        r.error("oauthbearer", f"only with mechanism OAUTHBEARER, not {mechanism}")
    return UpstreamSaslConfig(mechanism=mechanism, username=r("username", _STR), password=r("password", _STR))


_PRINCIPAL = _str(r"[^:\s]+:.+", 'a principal "Type:Name"')


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
        principal=r("principal", _PRINCIPAL, None),
    )
    _check_protocol_sections(r, protocol, tls_required=False)
    return upstream


def _host_limits(ctx: _Ctx, path: str, v: Any) -> Mapping[str, int]:
    """Client host (IP address or name) -> connection count >= 0 (Kafka's overrides)."""
    if not isinstance(v, Mapping):
        raise _Invalid(f"expected a mapping of client hosts to connection counts, got {_describe(v)}")
    out: dict[str, int] = {}
    for host, count in v.items():
        if not isinstance(host, str) or not host.strip() or any(c.isspace() for c in host):
            ctx.error(_join(path, str(host)), "must be an IP address or a host name")
        elif not isinstance(count, int) or isinstance(count, bool) or count < 0:
            ctx.error(_join(path, host), f"must be a connection count >= 0, got {_describe(count)}")
        else:
            out[host] = count
    return MappingProxyType(out)


@_section(LimitsConfig)
def _limits(ctx: _Ctx, r: _Reader) -> LimitsConfig:
    return LimitsConfig(
        max_frame_bytes=r("max_frame_bytes", _POSITIVE, 104857600),
        max_in_flight_per_connection=r("max_in_flight_per_connection", _POSITIVE, 1000),
        sasl_max_receive_bytes=r("sasl_max_receive_bytes", _POSITIVE, 524288),
        authentication_timeout_ms=r("authentication_timeout_ms", _POSITIVE, 10000),
        connections_max_idle_ms=r("connections_max_idle_ms", _POSITIVE, 600000),
        max_connections_per_ip=r("max_connections_per_ip", _POSITIVE, 2147483647),
        max_connections_per_ip_overrides=r("max_connections_per_ip_overrides", _host_limits, MappingProxyType({})),
        failed_authentication_delay_ms=r("failed_authentication_delay_ms", _int(0), 100),
        password_hash_threads=r("password_hash_threads", _POSITIVE, 1),
        offload_request_bytes=r("offload_request_bytes", _POSITIVE, 65536),
        offload_produce_bytes=r("offload_produce_bytes", _POSITIVE, 1048576),
        offload_response_bytes=r("offload_response_bytes", _POSITIVE, 1048576),
        drain_timeout_ms=r("drain_timeout_ms", _POSITIVE, 30000),
        max_unsent_bytes_per_connection=r("max_unsent_bytes_per_connection", _POSITIVE, 1048576),
        password_hashes_per_host=r("password_hashes_per_host", _POSITIVE, 1),
        max_connection_creation_rate_per_ip=r("max_connection_creation_rate_per_ip", _int(0), 0),
        max_connection_creation_rate=r("max_connection_creation_rate", _int(0), 0),
    )


@_section(IoConfig)
def _io(ctx: _Ctx, r: _Reader) -> IoConfig:
    return IoConfig(data_plane_thread=r("data_plane_thread", _bool, True),
                    splice_min_bytes=r("splice_min_bytes", _int(0), 131072),
                    splice_pipes=r("splice_pipes", _int(0), 64),
                    data_plane_cpus=r("data_plane_cpus", _list(_int(0, None, "a CPU number (0 or more)"),
                                                               nonempty=False, unique=True), ()))


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
        backend=r("backend", _METADATA_BACKEND, "directory"),
        path=r("path", _path, None) or ctx.resolve("kgw-data"),
        snapshot_every_records=r("snapshot_every_records", _POSITIVE, 10000),
        topic=r("topic", _TOPIC_NAME, "__kgw_metadata"),
        replication_factor=r("replication_factor", _POSITIVE, None),
        min_insync_replicas=r("min_insync_replicas", _POSITIVE, 2),
        write_timeout_ms=r("write_timeout_ms", _POSITIVE, 10000),
    )


_METADATA_BACKEND = _choice("directory", "kafka")
#: Kafka's legal topic names (Topic.java): at most 249 of [a-zA-Z0-9._-]
_TOPIC_NAME = _str(r"[A-Za-z0-9._-]{1,240}", "a Kafka topic name of at most 240 characters from [a-zA-Z0-9._-]")


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
        format=r("format", _choice("kgw", "ocsf"), "kgw"),
        chain_id=r("chain_id", _STR, None),
        checkpoint_interval_ms=r("checkpoint_interval_ms", _POSITIVE, 10000),
    )


@_section(QuotasConfig)
def _quotas(ctx: _Ctx, r: _Reader) -> QuotasConfig:
    return QuotasConfig(
        window_num=r("window_num", _int(2, 1000, "a number of samples from 2 to 1000"), 11),
        window_size_seconds=r("window_size_seconds", _int(1, 3600, "seconds from 1 to 3600"), 1),
        max_tracked=r("max_tracked", _int(1, 10_000_000), 100000),
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
        quotas=r.section("quotas", _quotas),
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
