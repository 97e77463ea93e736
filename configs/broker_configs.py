"""kgw's own configuration seen as a BROKER config resource (the types: :mod:`configs.config_model`).

Theory of operation
-------------------
The config APIs (DescribeConfigs 32, AlterConfigs 33, IncrementalAlterConfigs
44; KIP-133, KIP-339) talk about *config resources* (a type code and a name)
holding *config entries* (name, value, source, flags).  This module has the
wire enums and, for the BROKER resources kgw answers itself, the catalogue of
kgw's keys:

* :func:`gateway_config_defs` flattens a :class:`~configs.gateway_config.GatewayConfig`
  into Kafka-style names (``listeners``, ``super.users``,
  ``socket.request.max.bytes``, ``listener.name.<n>.max.connections`` ...),
  one :class:`ConfigDef` each: type, default, documentation, whether it is
  read-only (needs a restart: the YAML file is the only way to change it) or
  dynamic (applied live), whether it is sensitive (never returned), and a
  validator.  Every leaf of the YAML model maps to one key, or is listed in
  :data:`NOT_EXPOSED` with the key that stands for it (see the coverage test).
* :class:`ConfigDef.canonical` parses and validates a proposed value and
  returns the text that is stored (``"TRUE "`` → ``"true"``); it raises
  :class:`InvalidConfig`, whose message never contains a sensitive value.
* :class:`BrokerConfigModel.describe` answers a DescribeConfigs for the
  gateway: each key's effective value and its source, in Kafka's precedence
  order — DYNAMIC_BROKER_CONFIG (this instance) > DYNAMIC_DEFAULT_BROKER_CONFIG
  (the ``""`` resource) > STATIC_BROKER_CONFIG (the YAML file) > DEFAULT_CONFIG
  — with the lower levels as synonyms when asked.  The YAML model does not
  record which keys the file spelled out, so a static value equal to the
  default is reported as DEFAULT_CONFIG.

Sensitive values are replaced by ``None`` before any entry leaves this module.
"""

from __future__ import annotations
import enum
from collections.abc import Collection, Iterable, Mapping
from dataclasses import fields, is_dataclass
from typing import Any
from authz.principal import parse_principal
from configs.gateway_config import AUDIT_LEVELS, LOG_FORMATS, LOG_LEVELS
from configs.config_model import ConfigDef, ConfigEntry, ConfigSource, ConfigSynonym, ConfigType, InvalidConfig, Validator, looks_sensitive

SUPER_USERS_CONFIG = "super.users"


ALLOW_EVERYONE_CONFIG = "allow.everyone.if.no.acl.found"


AUDIT_LEVEL_CONFIG = "audit.log.level"


LOG_LEVEL_CONFIG = "log.level"




def _range(lo: int | None = None, hi: int | None = None) -> Validator:
    def check(v: int) -> int:
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise ValueError(f"Value must be {'at least ' + str(lo) if hi is None else f'in [{lo}, {hi}]'}")
        return v

    return check


def _choice(*choices: str) -> Validator:
    by_upper = {c.upper(): c for c in choices}

    def check(v: str) -> str:
        found = by_upper.get(v.strip().upper())
        if found is None:
            raise ValueError(f"String must be one of: {', '.join(choices)}")
        return found

    return check


def _principal_list(items: list[str]) -> list[str]:
    for item in items:
        parse_principal(item)  # ValueError with the reason
    return items


def listener_max_connections_key(listener_name: str) -> str:
    return f"listener.name.{listener_name.lower()}.max.connections"


#: Secret or bulky YAML leaves that have no key of their own, with the key that stands for them.
NOT_EXPOSED = {
    "users.scram.salt": "sasl.user.credentials",
    "users.scram.iterations": "sasl.user.credentials",
    "users.scram.stored_key": "sasl.user.credentials",
    "users.scram.server_key": "sasl.user.credentials",
    "users.scram.mechanism": "sasl.scram.users",
    "users.plain.password_sha256": "sasl.user.credentials",
    "users.plain.password_hash": "sasl.user.credentials",
    "listeners.advertised_host": "advertised.listeners",
    "listeners.advertised_port": "advertised.listeners",
    "listeners.host": "listeners",
    "listeners.port": "listeners",
    "listeners.name": "listeners",
    "listeners.security_protocol": "listener.security.protocol.map",
    "alter_configs_policy.config": "alter.configs.policy.class.name",
    "alter_configs_policy.rules": "alter.configs.policy.class.name",
}


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if obj is None:
            return None
        obj = getattr(obj, part, None)
    return obj


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, (tuple, list)):
        return ",".join(str(_text(v)) for v in value)
    return str(value)


def gateway_config_defs(config: Any, reconfigurable: Collection[str] = ()) -> tuple[list[ConfigDef], dict[str, str | None]]:
    """kgw's keys for ``config`` (a GatewayConfig), and their static (YAML) values as text.

    ``reconfigurable`` are the authorizer's ``Reconfigurable.reconfigurable_configs()``:
    those keys are dynamic; other authorizer config keys are read-only.
    """
    defs: list[ConfigDef] = []
    static: dict[str, str | None] = {}

    def add(d: ConfigDef, value: Any) -> None:
        defs.append(d)
        static[d.name] = _text(value)

    # -- general and listeners
    add(ConfigDef("cluster.id", ConfigType.STRING, "Cluster id reported to clients.", "kgw",
                  source_path="cluster_id"), config.cluster_id)
    listeners = tuple(config.listeners or ())
    add(ConfigDef("listeners", ConfigType.LIST, "Client-facing listeners (NAME://bind-host:bootstrap-port).",
                  source_path="listeners"),
        [f"{lc.name}://{lc.host}:{lc.port}" for lc in listeners])
    add(ConfigDef("advertised.listeners", ConfigType.LIST,
                  "Bootstrap addresses advertised to clients (NAME://host:port).", source_path="listeners"),
        [f"{lc.name}://{lc.advertised_host}:{lc.advertised_port}" for lc in listeners])
    add(ConfigDef("listener.security.protocol.map", ConfigType.LIST,
                  "Security protocol of each listener (NAME:PROTOCOL).", source_path="listeners"),
        [f"{lc.name}:{lc.security_protocol}" for lc in listeners])
    for lc in listeners:
        prefix = f"listener.name.{lc.name.lower()}."
        add(ConfigDef(listener_max_connections_key(lc.name), ConfigType.INT,
                      f"Connection limit of listener {lc.name}; dynamic: applies to new connections at once.",
                      "10000", read_only=False, validator=_range(1), source_path="listeners.max_connections"),
            lc.max_connections)
        add(ConfigDef(prefix + "broker.port.base", ConfigType.INT,
                      "Upstream node N is served at bind port broker.port.base + N.",
                      source_path="listeners.broker_port_base"), lc.broker_port_base)
        add(ConfigDef(prefix + "advertised.broker.port.base", ConfigType.INT,
                      "Upstream node N is advertised at port advertised.broker.port.base + N.",
                      source_path="listeners.advertised_broker_port_base"), lc.advertised_broker_port_base)
        add(ConfigDef(prefix + "principal.builder.class", ConfigType.CLASS,
                      "Custom principal builder (import path); empty = built-in.",
                      source_path="listeners.principal_builder"), lc.principal_builder)
        for key, attr, doc in (("sni.bootstrap.host", "bootstrap_host", "SNI name of the bootstrap address."),
                               ("sni.broker.host.pattern", "broker_host_pattern", "SNI name of broker {node_id}.")):
            add(ConfigDef(prefix + key, ConfigType.STRING, doc, source_path=f"listeners.sni.{attr}"),
                getattr(lc.sni, attr) if lc.sni is not None else None)
        add(ConfigDef(prefix + "proxy.protocol.trusted.networks", ConfigType.LIST,
                      "Networks of the load balancers whose PROXY protocol headers the listener takes; empty = off.",
                      source_path="listeners.proxy_protocol.trusted_networks"),
            list(lc.proxy_protocol.trusted_networks) if lc.proxy_protocol is not None else None)
        if lc.tls is not None:
            for key, attr, doc in (
                ("ssl.certificate.location", "cert_file", "PEM certificate chain presented to clients."),
                ("ssl.key.location", "key_file", "PEM private key file of the certificate (a path, not the key)."),
                ("ssl.ca.location", "ca_file", "PEM CA bundle that verifies client certificates."),
                ("ssl.client.auth", "client_auth", "Whether clients must present a certificate."),
                ("ssl.principal.mapping.rules", "principal_mapping_rules",
                 "How a certificate's distinguished name becomes a principal name."),
            ):
                add(ConfigDef(prefix + key, ConfigType.STRING, doc, source_path=f"listeners.tls.{attr}"),
                    getattr(lc.tls, attr))
        if lc.sasl is not None:
            add(ConfigDef(prefix + "sasl.enabled.mechanisms", ConfigType.LIST, "SASL mechanisms offered to clients.",
                          source_path="listeners.sasl.mechanisms"), lc.sasl.mechanisms)

    # -- upstream
    up = config.upstream
    add(ConfigDef("upstream.bootstrap.servers", ConfigType.LIST, "Bootstrap brokers of the upstream cluster.",
                  source_path="upstream.bootstrap_servers"), [str(a) for a in up.bootstrap_servers])
    add(ConfigDef("upstream.security.protocol", ConfigType.STRING, "How kgw connects to the upstream brokers.",
                  "PLAINTEXT", source_path="upstream.security_protocol"), up.security_protocol)
    for key, attr, typ, default, doc in (
        ("ssl.ca.location", "ca_file", ConfigType.STRING, None, "PEM CA bundle that verifies the upstream brokers."),
        ("ssl.certificate.location", "cert_file", ConfigType.STRING, None, "PEM client certificate (mTLS)."),
        ("ssl.key.location", "key_file", ConfigType.STRING, None, "PEM private key file of the client certificate."),
        ("ssl.endpoint.identification.enabled", "check_hostname", ConfigType.BOOLEAN, "true",
         "Verify that broker certificates match the broker host names."),
    ):
        add(ConfigDef("upstream." + key, typ, doc, default, source_path=f"upstream.tls.{attr}"), _get(up.tls, attr))
    add(ConfigDef("upstream.sasl.mechanism", ConfigType.STRING, "SASL mechanism kgw authenticates with upstream.",
                  source_path="upstream.sasl.mechanism"), _get(up.sasl, "mechanism"))
    add(ConfigDef("upstream.sasl.username", ConfigType.STRING, "User name kgw authenticates as upstream.",
                  source_path="upstream.sasl.username"), _get(up.sasl, "username"))
    add(ConfigDef("upstream.sasl.password", ConfigType.PASSWORD, "Password of upstream.sasl.username.",
                  sensitive=True, source_path="upstream.sasl.password"), _get(up.sasl, "password"))
    oauth = _get(up.sasl, "oauthbearer")
    for key, attr, typ, default, doc, sensitive in (
        ("token.endpoint.url", "token_endpoint_url", ConfigType.STRING, None,
         "Token endpoint of kgw's OAUTHBEARER login upstream.", False),
        ("issuer.url", "issuer_url", ConfigType.STRING, None,
         "OpenID Connect issuer whose discovery names the token endpoint.", False),
        ("client.credentials.client.id", "client_id", ConfigType.STRING, None,
         "kgw's client id at the provider.", False),
        ("client.credentials.client.secret", "client_secret", ConfigType.PASSWORD, None,
         "kgw's client secret at the provider.", True),
        ("scope", "scope", ConfigType.STRING, None, "Scope kgw asks for.", False),
        ("refresh.window.factor", "refresh_window_factor", ConfigType.DOUBLE, "0.8",
         "Share of a token's lifetime after which kgw fetches a new one.", False),
    ):
        add(ConfigDef("upstream.sasl.oauthbearer." + key, typ, doc, default, sensitive=sensitive,
                      source_path=f"upstream.sasl.oauthbearer.{attr}"), _get(oauth, attr))
    add(ConfigDef("upstream.connect.timeout.ms", ConfigType.INT, "Timeout for opening an upstream connection.",
                  "10000", source_path="upstream.connect_timeout_ms"), up.connect_timeout_ms)
    add(ConfigDef("upstream.request.timeout.ms", ConfigType.INT, "Timeout for one upstream request.", "30000",
                  source_path="upstream.request_timeout_ms"), up.request_timeout_ms)
    add(ConfigDef("upstream.metadata.max.age.ms", ConfigType.LONG, "Refresh upstream metadata at least this often.",
                  "300000", source_path="upstream.metadata_max_age_ms"), up.metadata_max_age_ms)
    add(ConfigDef("upstream.principal", ConfigType.STRING, "kgw's own principal as the brokers see it.",
                  source_path="upstream.principal"), up.principal)

    # -- limits, admin, metadata
    add(ConfigDef("socket.request.max.bytes", ConfigType.INT, "Largest request frame accepted.", "104857600",
                  source_path="limits.max_frame_bytes"), config.limits.max_frame_bytes)
    add(ConfigDef("max.in.flight.requests.per.connection", ConfigType.INT,
                  "Requests a client may have outstanding on one connection.", "1000",
                  source_path="limits.max_in_flight_per_connection"), config.limits.max_in_flight_per_connection)
    lim = config.limits
    for key, kind, doc, field in (
        ("sasl.server.max.receive.size", ConfigType.INT, "Largest frame accepted before SASL authentication.",
         "sasl_max_receive_bytes"),
        ("authentication.timeout.ms", ConfigType.INT, "Time to finish the TLS handshake and SASL exchange.",
         "authentication_timeout_ms"),
        ("connections.max.idle.ms", ConfigType.LONG, "Close connections idle for this long.",
         "connections_max_idle_ms"),
        ("max.connections.per.ip", ConfigType.INT, "Connections one client host may hold open.",
         "max_connections_per_ip"),
        ("connection.failed.authentication.delay.ms", ConfigType.INT, "Delay before answering a failed login.",
         "failed_authentication_delay_ms"),
        ("password.hash.threads", ConfigType.INT, "Threads verifying password hashes at once.",
         "password_hash_threads"),
        ("offload.request.bytes", ConfigType.INT, "Requests larger than this are inspected on a worker thread.",
         "offload_request_bytes"),
        ("offload.produce.bytes", ConfigType.INT, "Produce requests larger than this are walked on a worker thread.",
         "offload_produce_bytes"),
        ("offload.response.bytes", ConfigType.INT, "Responses larger than this are decoded on a worker thread.",
         "offload_response_bytes"),
        ("shutdown.drain.timeout.ms", ConfigType.INT, "On SIGTERM, time to answer what is in flight.",
         "drain_timeout_ms"),
        ("max.unsent.bytes.per.connection", ConfigType.INT,
         "Answers waiting for one client beyond which kgw stops reading it.", "max_unsent_bytes_per_connection"),
        ("password.hashes.per.host", ConfigType.INT,
         "Stretched password hashes one client host may have running or queued.", "password_hashes_per_host"),
        ("connection.creation.rate.per.ip", ConfigType.INT,
         "New connections one client host may open per second (0: unlimited).", "max_connection_creation_rate_per_ip"),
        ("max.connection.creation.rate", ConfigType.INT,
         "New connections each listener accepts per second (0: unlimited).", "max_connection_creation_rate"),
    ):
        default = type(lim).__dataclass_fields__[field].default
        add(ConfigDef(key, kind, doc, str(default), source_path=f"limits.{field}"), getattr(lim, field))
    add(ConfigDef("max.connections.per.ip.overrides", ConfigType.STRING,
                  "Per client host (IP or name) connection limits, host:count comma-separated.", "",
                  source_path="limits.max_connections_per_ip_overrides"),
        ",".join(f"{host}:{count}" for host, count in lim.max_connections_per_ip_overrides.items()))
    add(ConfigDef("data.plane.thread.enable", ConfigType.BOOLEAN,
                  "Serve plain-TCP connections' forwarding path on a dedicated epoll thread.", "true",
                  source_path="io.data_plane_thread"), config.io.data_plane_thread)
    add(ConfigDef("data.plane.splice.min.bytes", ConfigType.INT,
                  "Fetch record sets at least this large move socket to socket through a kernel pipe (0: never).",
                  "131072", source_path="io.splice_min_bytes"), config.io.splice_min_bytes)
    add(ConfigDef("data.plane.splice.pipes", ConfigType.INT, "Kernel pipes kept for moving record sets.", "64",
                  source_path="io.splice_pipes"), config.io.splice_pipes)
    add(ConfigDef("data.plane.cpus", ConfigType.LIST, "CPUs the data-plane thread runs on; empty = any.", "",
                  source_path="io.data_plane_cpus"), ",".join(str(cpu) for cpu in config.io.data_plane_cpus))
    admin = config.admin
    add(ConfigDef("admin.listener", ConfigType.STRING, "Admin HTTP endpoint (host:port); empty = disabled.",
                  "127.0.0.1:9190", source_path="admin.host,admin.port"),
        None if admin is None else f"{admin.host}:{admin.port}")
    add(ConfigDef("metadata.log.dir", ConfigType.STRING, "Directory of kgw's metadata log (ACLs, dynamic configs).",
                  source_path="metadata.path"), config.metadata.path)
    add(ConfigDef("metadata.snapshot.every.records", ConfigType.INT,
                  "Write a metadata snapshot after this many records.", "10000",
                  source_path="metadata.snapshot_every_records"), config.metadata.snapshot_every_records)
    md = config.metadata
    add(ConfigDef("metadata.backend", ConfigType.STRING, "Where ACLs, dynamic configs and SCRAM users live: "
                  "directory (one gateway) or kafka (a topic several gateways share).", "directory",
                  source_path="metadata.backend"), md.backend)
    add(ConfigDef("metadata.topic", ConfigType.STRING, "The shared metadata log topic (kafka backend).",
                  "__kgw_metadata", source_path="metadata.topic"), md.topic)
    add(ConfigDef("metadata.topic.replication.factor", ConfigType.INT, "Replication factor of the metadata "
                  "topics kgw creates (default: min(3, brokers)).", None,
                  source_path="metadata.replication_factor"), md.replication_factor)
    add(ConfigDef("metadata.topic.min.insync.replicas", ConfigType.INT, "min.insync.replicas of the metadata "
                  "topics kgw creates.", "2", source_path="metadata.min_insync_replicas"), md.min_insync_replicas)
    add(ConfigDef("metadata.write.timeout.ms", ConfigType.LONG, "How long a metadata write may wait for the "
                  "cluster before the client gets REQUEST_TIMED_OUT.", "10000",
                  source_path="metadata.write_timeout_ms"), md.write_timeout_ms)

    # -- authorizer
    authz = config.authorizer
    add(ConfigDef("authorizer.class.name", ConfigType.CLASS, "Authorizer import path; empty = no authorization.",
                  source_path="authorizer.class_name"), authz.class_name)
    authz_config = dict(authz.config or {})
    reconfigurable = set(reconfigurable)
    super_users = authz_config.pop(SUPER_USERS_CONFIG, None)
    if isinstance(super_users, (tuple, list)):
        super_users = ";".join(map(str, super_users))
    add(ConfigDef(SUPER_USERS_CONFIG, ConfigType.LIST,
                  "';'-separated Type:Name principals allowed everything; dynamic (APPEND/SUBTRACT add and "
                  "remove principals).", "", read_only=False, validator=_principal_list,
                  source_path="authorizer.config", separator=";"), super_users)
    add(ConfigDef(ALLOW_EVERYONE_CONFIG, ConfigType.BOOLEAN,
                  "Allow an action on a resource no ACL covers; dynamic.", "false", read_only=False,
                  source_path="authorizer.config"), authz_config.pop(ALLOW_EVERYONE_CONFIG, None))
    for key in sorted(set(authz_config) | (reconfigurable - {SUPER_USERS_CONFIG, ALLOW_EVERYONE_CONFIG})):
        sensitive = looks_sensitive(key)
        add(ConfigDef(key, ConfigType.PASSWORD if sensitive else ConfigType.STRING,
                      "Authorizer configuration" + ("; dynamic." if key in reconfigurable else "."),
                      read_only=key not in reconfigurable, sensitive=sensitive, source_path="authorizer.config"),
            authz_config.get(key))

    # -- users (names only; credentials are one sensitive key)
    users = config.users
    add(ConfigDef("sasl.scram.users", ConfigType.LIST, "SCRAM users known to kgw (name:mechanism).",
                  source_path="users.scram.name"), [f"{u.name}:{u.mechanism}" for u in users.scram] or None)
    add(ConfigDef("sasl.plain.users", ConfigType.LIST, "SASL/PLAIN users known to kgw.",
                  source_path="users.plain.name"), [u.name for u in users.plain] or None)
    add(ConfigDef("sasl.user.credentials", ConfigType.PASSWORD, "Stored SASL credentials (never shown).",
                  sensitive=True, source_path="users"),
        "[set]" if users.scram or users.plain else None)

    # -- logging
    add(ConfigDef(AUDIT_LEVEL_CONFIG, ConfigType.STRING,
                  "Level of the authorization audit logger kgw.authorizer (DEBUG shows allowed actions, INFO "
                  "denials, OFF nothing); dynamic.", "INFO", read_only=False, validator=_choice(*AUDIT_LEVELS),
                  source_path="audit.log_level"), config.audit.log_level)
    audit = config.audit
    for key, field_name, ctype, default, doc in (
        ("audit.publish.enable", "publish", ConfigType.BOOLEAN, "false",
         "Publish audit events as JSON to an upstream topic."),
        ("audit.publish.topic", "topic", ConfigType.STRING, "kgw-audit", "Upstream topic of the audit events."),
        ("audit.publish.partitions", "partitions", ConfigType.INT, "1",
         "Partitions of the audit topic when kgw creates it."),
        ("audit.publish.max.buffered", "max_buffered", ConfigType.INT, "10000",
         "Events buffered before new ones are dropped (and counted)."),
        ("audit.publish.batch.max.events", "batch_max_events", ConfigType.INT, "500",
         "Events per Produce request at most."),
        ("audit.publish.linger.ms", "linger_ms", ConfigType.INT, "200", "How long a batch waits for more events."),
        ("audit.publish.format", "format", ConfigType.STRING, "kgw", "Schema of published audit events: kgw or ocsf."),
        ("audit.chain.id", "chain_id", ConfigType.STRING, None, "The hash chain this process's audit events form."),
        ("audit.chain.checkpoint.interval.ms", "checkpoint_interval_ms", ConfigType.INT, "10000",
         "How often the audit chain's head is written to the metadata log."),
    ):
        add(ConfigDef(key, ctype, doc, default, source_path=f"audit.{field_name}"), getattr(audit, field_name))
    quotas = config.quotas
    for key, field_name, default, doc in (
        ("quota.window.num", "window_num", "11", "The number of samples client quota rates are measured over."),
        ("quota.window.size.seconds", "window_size_seconds", "1", "The time span of each client quota sample."),
        ("quota.max.tracked", "max_tracked", "100000", "Client quota rate sensors kept at most (kgw's bound)."),
    ):
        add(ConfigDef(key, ConfigType.INT, doc, default, source_path=f"quotas.{field_name}"),
            getattr(quotas, field_name))
    add(ConfigDef(LOG_LEVEL_CONFIG, ConfigType.STRING, "Level of the process log (root logger); dynamic.", "INFO",
                  read_only=False, validator=_choice(*LOG_LEVELS), source_path="logging.level"),
        config.logging.level)
    add(ConfigDef("log.format", ConfigType.STRING, "Process log format: text or json.", "text",
                  validator=_choice(*LOG_FORMATS), source_path="logging.format"), config.logging.format)

    # -- the alter-configs policy (section added to GatewayConfig as alter_configs_policy)
    policy = getattr(config, "alter_configs_policy", None)
    add(ConfigDef("alter.configs.policy.class.name", ConfigType.CLASS,
                  "AlterConfigsPolicy plug-in (import path) run on every alter; empty = none.",
                  source_path="alter_configs_policy.class_name"), _policy_field(policy, "class_name"))
    return defs, static


def _policy_field(policy: Any, name: str) -> Any:
    if policy is None:
        return None
    if isinstance(policy, Mapping):
        return policy.get(name)
    return getattr(policy, name, None)


def leaf_paths(cls: type, prefix: str = "") -> Iterable[str]:
    """Every leaf attribute path of a config dataclass (tuples of dataclasses descend)."""
    import typing

    hints = typing.get_type_hints(cls)
    for f in fields(cls):
        tp = hints[f.name]
        inner = [a for a in typing.get_args(tp) if a is not type(None) and a is not Ellipsis] or [tp]
        nested = [a for a in inner if isinstance(a, type) and is_dataclass(a)]
        if not nested:
            args = [a for a in inner for a in typing.get_args(a) if isinstance(a, type) and is_dataclass(a)]
            nested = args
        if nested:
            yield from leaf_paths(nested[0], f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}"


class BrokerConfigModel:
    """kgw's BROKER configuration: definitions, static values, and describe/validate over overrides."""

    def __init__(self, config: Any, reconfigurable: Collection[str] = ()) -> None:
        defs, self.static = gateway_config_defs(config, reconfigurable)
        self.defs: dict[str, ConfigDef] = {d.name: d for d in defs}

    def dynamic_keys(self) -> list[str]:
        return [name for name, d in self.defs.items() if not d.read_only]

    def _levels(self, name: str, instance: Mapping[str, str], default: Mapping[str, str],
                scope_is_default: bool) -> list[tuple[ConfigSource, str | None]]:
        d = self.defs[name]
        levels: list[tuple[ConfigSource, str | None]] = []
        if not scope_is_default and name in instance:
            levels.append((ConfigSource.DYNAMIC_BROKER_CONFIG, instance[name]))
        if name in default:
            levels.append((ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, default[name]))
        if scope_is_default:
            return levels
        static = self.static.get(name)
        if static is not None and static != d.default:
            levels.append((ConfigSource.STATIC_BROKER_CONFIG, static))
        if d.default is not None:
            levels.append((ConfigSource.DEFAULT_CONFIG, d.default))
        return levels

    def effective(self, instance: Mapping[str, str], default: Mapping[str, str]) -> dict[str, str | None]:
        """Effective value of every key (sensitive ones included: for internal use only)."""
        out: dict[str, str | None] = {}
        for name in self.defs:
            levels = self._levels(name, instance, default, False)
            out[name] = levels[0][1] if levels else None
        return out

    def describe(
        self,
        instance: Mapping[str, str],
        default: Mapping[str, str],
        *,
        scope_is_default: bool,
        keys: Iterable[str] | None = None,
        include_synonyms: bool = False,
        include_documentation: bool = False,
    ) -> list[ConfigEntry]:
        """Entries of a BROKER resource: a node id (``scope_is_default=False``: every key) or
        ``""`` (the cluster-wide defaults: only keys with a dynamic default, as Kafka)."""
        wanted = None if keys is None else set(keys)
        out = []
        for name, d in self.defs.items():
            if wanted is not None and name not in wanted:
                continue
            levels = self._levels(name, instance, default, scope_is_default)
            if scope_is_default and not levels:
                continue
            source, value = levels[0] if levels else (ConfigSource.DEFAULT_CONFIG, None)
            synonyms = ()
            if include_synonyms:
                synonyms = tuple(ConfigSynonym(name, None if d.sensitive else v, s) for s, v in levels)
            out.append(ConfigEntry(
                name=name,
                value=None if d.sensitive else value,
                source=source,
                read_only=d.read_only,
                sensitive=d.sensitive,
                type=d.type,
                documentation=d.doc if include_documentation else None,
                synonyms=synonyms,
            ))
        return out

    def check_alterable(self, name: str) -> ConfigDef:
        d = self.defs.get(name)
        if d is None:
            raise InvalidConfig(
                f"Unknown config key '{name}' for a kgw BROKER resource: through kgw, BROKER config resources "
                "are the gateway itself (its own dynamic configs), not the Kafka brokers behind it; change a "
                "broker's configs with kafka-configs --bootstrap-server pointed at the broker itself "
                "(docs/operations.md, 'Config resources')")
        if d.read_only:
            raise InvalidConfig(
                f"Cannot update config '{name}': it is read-only (set it in kgw's YAML file and restart)")
        return d
