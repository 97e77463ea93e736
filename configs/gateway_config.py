"""The gateway's YAML configuration model: a tree of frozen, slotted, keyword-only
dataclasses whose field names are exactly the YAML keys, so the file, the model and
``GatewayConfig.to_dict()`` share one vocabulary.  :mod:`configs.yaml_reader` reads and
validates a file into it; SASL credentials are :mod:`authz.credentials`' types.
"""

from __future__ import annotations

import base64
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

from authz.credentials import PlainCredential, SaslMechanism, ScramCredential




class ConfigError(ValueError):
    """The configuration is invalid; the message has one line per problem.

    `errors` holds the problems as ``"<key path>: <message>"`` strings and
    `source` the file name (or ``"<string>"``) each line is prefixed with.
    """

    def __init__(self, source: str, errors: Sequence[str]) -> None:
        self.source = source
        self.errors = tuple(errors)
        super().__init__("\n".join(f"{source}: {e}" for e in self.errors))


class SecurityProtocol(enum.StrEnum):
    """Kafka security.protocol values."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_tls(self) -> bool:
        return self.value.endswith("SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.value.startswith("SASL_")


class ClientAuth(enum.StrEnum):
    """Kafka ssl.client.auth: whether TLS clients must present a certificate."""

    NONE = "none"
    REQUESTED = "requested"
    REQUIRED = "required"


class Address(NamedTuple):
    """A host and port; str() gives "host:port" ("[v6]:port" for IPv6)."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


AUDIT_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "OFF")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_FORMATS = ("text", "json")
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::"})

_model = dataclass(frozen=True, slots=True, kw_only=True)


def _secret(**kwargs: Any) -> Any:
    """A field kept out of repr() and shown as "[hidden]" by to_dict()."""
    return field(repr=False, metadata={"secret": True}, **kwargs)


# --------------------------------------------------------------------------- model


@_model
class ListenerTlsConfig:
    """TLS server side of a listener (security_protocol SSL or SASL_SSL)."""

    cert_file: Path
    """PEM certificate chain presented to clients."""
    key_file: Path
    """PEM private key of `cert_file`."""
    ca_file: Path | None = None
    """PEM CA bundle that verifies client certificates; needed when client_auth is not none."""
    client_auth: ClientAuth = ClientAuth.NONE
    """Whether clients must present a certificate (Kafka ssl.client.auth)."""
    principal_mapping_rules: str = "DEFAULT"
    """Kafka ssl.principal.mapping.rules: how a certificate's DN becomes a principal name."""
    reload_check_ms: int = 60000
    """How often the certificate, key and CA files are checked for a change (then reloaded for
    new connections, as on SIGHUP); 0: only on SIGHUP."""


@_model
class OAuthBearerConfig:
    """How a listener validates OAUTHBEARER tokens (Kafka's KIP-768 broker settings,
    ``sasl.oauthbearer.*``); exactly one of the three key sources."""

    jwks_endpoint_url: str | None = None
    """sasl.oauthbearer.jwks.endpoint.url: the provider's JWKS."""
    issuer_url: str | None = None
    """OpenID Connect discovery: <issuer_url>/.well-known/openid-configuration names the JWKS
    and the issuer tokens must carry."""
    jwks_file: Path | None = None
    """A JWKS file (no route to the provider); read at start-up and on SIGHUP-free reload."""
    expected_audience: tuple[str, ...] = ()
    """sasl.oauthbearer.expected.audience: a token must name one of these in `aud` (empty: not checked)."""
    expected_issuer: str | None = None
    """sasl.oauthbearer.expected.issuer: the `iss` a token must carry (default: the discovered one)."""
    scope_claim_name: str = "scope"
    """sasl.oauthbearer.scope.claim.name."""
    sub_claim_name: str = "sub"
    """sasl.oauthbearer.sub.claim.name: the claim naming the principal (User:<value>)."""
    groups_claim: str | None = None
    """A claim (or dotted path) listing groups: each becomes a Group:<name> principal."""
    clock_skew_seconds: int = 30
    """sasl.oauthbearer.clock.skew.seconds."""
    jwks_refresh_ms: int = 3600000
    """sasl.oauthbearer.jwks.endpoint.refresh.ms."""


@_model
class ListenerSaslConfig:
    """SASL settings of a listener (security_protocol SASL_PLAINTEXT or SASL_SSL)."""

    mechanisms: tuple[SaslMechanism, ...]
    """Mechanisms offered to clients, in order of preference; non-empty, no duplicates."""
    oauthbearer: OAuthBearerConfig | None = None
    """Token validation; required when OAUTHBEARER is offered."""
    connections_max_reauth_ms: int = 0
    """connections.max.reauth.ms (KIP-368): a login's session lasts at most this long (an
    OAUTHBEARER one at most until its token expires); the client re-authenticates on the same
    connection before then, or it is closed at its first request after.  0: sessions never
    expire (Kafka's default)."""


@_model
class SniConfig:
    """One TLS port for bootstrap and every broker: the name a client asks for in TLS (SNI)
    says where it goes."""

    bootstrap_host: str
    """The name of the bootstrap address (e.g. "bootstrap.kgw.example.com")."""
    broker_host_pattern: str
    """The name of broker N, with "{node_id}" where N goes (e.g. "broker-{node_id}.kgw.example.com");
    advertised in Metadata, FindCoordinator, DescribeCluster and KIP-951 endpoints with the
    listener's advertised_port."""

    def broker_host(self, node_id: int) -> str:
        return self.broker_host_pattern.replace("{node_id}", str(node_id))


@_model
class ProxyProtocolConfig:
    """The load balancers allowed to speak for clients on a listener."""

    trusted_networks: tuple[str, ...]
    """Networks ("10.0.0.0/8", "127.0.0.1/32", "::1/128") a balancer connects from; a connection
    from anywhere else is closed before anything is read."""


@_model
class ListenerConfig:
    """One client-facing listener: a bootstrap port plus one port per upstream node.

    Port-per-broker scheme: upstream node N is served on bind port
    `broker_port_base` + N and advertised as `advertised_host`:
    `advertised_broker_port_base` + N.
    """

    name: str
    """Listener name (letters, digits, _), stored upper-case; unique across listeners."""
    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    """How clients connect: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL."""
    host: str = "0.0.0.0"
    """Bind host."""
    port: int = 9192
    """Bind port of the bootstrap address; 0 = ephemeral (tests)."""
    advertised_host: str = "localhost"
    """Host put in Metadata responses; defaults to `host`, or "localhost" when `host` is a wildcard."""
    advertised_port: int = 9192
    """Advertised bootstrap port; defaults to `port` (0 when `port` is 0: use the bound port)."""
    broker_port_base: int
    """Upstream node N is served at bind port broker_port_base + N."""
    advertised_broker_port_base: int
    """Upstream node N is advertised at advertised_broker_port_base + N; defaults to broker_port_base."""
    max_connections: int = 10000
    """Connection limit of this listener."""
    tls: ListenerTlsConfig | None = None
    """TLS settings; present exactly when security_protocol is SSL or SASL_SSL."""
    sasl: ListenerSaslConfig | None = None
    """SASL settings; present exactly when security_protocol is SASL_PLAINTEXT or SASL_SSL."""
    principal_builder: str | None = None
    """Import path "pkg.mod:Class" of a custom principal builder; None = built-in."""
    sni: SniConfig | None = None
    """SNI routing (TLS listeners): one port, brokers told apart by name; no per-broker ports."""
    proxy_protocol: ProxyProtocolConfig | None = None
    """PROXY protocol (v1 and v2) from a load balancer in front: every connection must come from
    one of its trusted networks and open with a header, whose client address kgw then uses
    everywhere; None = off (a header is never accepted)."""

    def node_bind_port(self, node_id: int) -> int | None:
        """Bind port serving upstream node `node_id`; None if it would exceed 65535 (or with SNI
        routing, where the listener's one port serves every node)."""
        if self.sni is not None:
            return None
        return _node_port(self.broker_port_base, node_id)

    def node_advertised_address(self, node_id: int) -> Address | None:
        """(host, port) advertised for upstream node `node_id`; None if the port would exceed 65535."""
        if self.sni is not None:
            return Address(self.sni.broker_host(node_id), self.advertised_port)
        port = _node_port(self.advertised_broker_port_base, node_id)
        return None if port is None else Address(self.advertised_host, port)


def _node_port(base: int, node_id: int) -> int | None:
    return base + node_id if 0 <= node_id <= 65535 - base else None


@_model
class UpstreamTlsConfig:
    """TLS client side towards the upstream cluster."""

    ca_file: Path | None = None
    """PEM CA bundle that verifies the brokers; None = system trust store."""
    cert_file: Path | None = None
    """PEM client certificate chain (mTLS); set together with key_file."""
    key_file: Path | None = None
    """PEM private key of cert_file."""
    check_hostname: bool = True
    """Verify that broker certificates match the broker host names."""


@_model
class UpstreamOAuthConfig:
    """kgw's own OAUTHBEARER login upstream: an access token from the provider's token endpoint
    with the client-credentials grant (Kafka's KIP-768 client settings, ``sasl.oauthbearer.*``);
    exactly one of token_endpoint_url and issuer_url."""

    token_endpoint_url: str | None = None
    """sasl.oauthbearer.token.endpoint.url."""
    issuer_url: str | None = None
    """OpenID Connect discovery: <issuer_url>/.well-known/openid-configuration names the token endpoint."""
    client_id: str
    """sasl.oauthbearer.client.credentials.client.id."""
    client_secret: str = _secret()
    """sasl.oauthbearer.client.credentials.client.secret (hidden from repr and to_dict)."""
    scope: str | None = None
    """sasl.oauthbearer.scope: the scope asked for, if the provider needs one."""
    refresh_window_factor: float = 0.8
    """sasl.login.refresh.window.factor: a token is replaced once this share of its lifetime has passed."""


@_model
class UpstreamSaslConfig:
    """The gateway's own SASL credentials towards the upstream cluster."""

    mechanism: SaslMechanism
    """PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER."""
    username: str | None = None
    """User name the gateway authenticates as (PLAIN and SCRAM)."""
    password: str | None = _secret(default=None)
    """Password of `username` (hidden from repr and to_dict)."""
    oauthbearer: UpstreamOAuthConfig | None = None
    """Where kgw gets its token (OAUTHBEARER)."""


@_model
class UpstreamConfig:
    """The Kafka cluster behind the gateway."""

    bootstrap_servers: tuple[Address, ...]
    """Bootstrap brokers; YAML: a list of "host:port" or one comma-separated string."""
    security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    """How the gateway connects to the brokers."""
    tls: UpstreamTlsConfig | None = None
    """TLS settings; allowed only with SSL/SASL_SSL (None there = system defaults)."""
    sasl: UpstreamSaslConfig | None = None
    """SASL credentials; required with SASL_PLAINTEXT/SASL_SSL, refused otherwise."""
    connect_timeout_ms: int = 10000
    """Timeout for opening a connection to a broker."""
    request_timeout_ms: int = 30000
    """Timeout for one upstream request."""
    metadata_max_age_ms: int = 300000
    """Refresh cached upstream metadata at least this often."""
    principal: str | None = None
    """kgw's own principal as the brokers see it ("Type:Name"); None: ``User:<sasl.username>``
    with PLAIN or SCRAM, unknown otherwise (with OAUTHBEARER: the broker's principal for kgw's
    token, ``User:<sub claim>``).  Delegation tokens created through kgw name it as a renewer, so
    that kgw can renew and expire them for their owners (docs/security.md)."""

    @property
    def own_principal(self) -> str | None:
        """``principal``, or the one SASL gives kgw, or None when kgw cannot tell."""
        if self.principal is not None:
            return self.principal
        return f"User:{self.sasl.username}" if self.sasl is not None and self.sasl.username else None


@_model
class LimitsConfig:
    """Per-connection protocol limits."""

    max_frame_bytes: int = 104857600
    """Largest request frame accepted (Kafka socket.request.max.bytes)."""
    max_in_flight_per_connection: int = 1000
    """Requests a client may have outstanding on one connection."""
    sasl_max_receive_bytes: int = 524288
    """Largest frame accepted on a SASL listener before the client has authenticated
    (Kafka sasl.server.max.receive.size)."""
    authentication_timeout_ms: int = 10000
    """Time a client has from connecting to finishing its TLS handshake and SASL exchange;
    past it the connection is closed."""
    connections_max_idle_ms: int = 600000
    """A connection with nothing in flight that sends nothing for this long is closed
    (Kafka connections.max.idle.ms)."""
    max_connections_per_ip: int = 2147483647
    """Connections one client host may hold open, over all listeners (Kafka
    max.connections.per.ip, unlimited by default like Kafka's); further ones are closed at
    once.  Behind a TCP load balancer every client has the balancer's address: set it for
    direct clients only, or use the PROXY protocol so kgw sees the clients' own."""
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """Per client host (an IP address, or a name resolved at start-up) its own
    max_connections_per_ip, 0 refusing it (Kafka max.connections.per.ip.overrides)."""
    failed_authentication_delay_ms: int = 100
    """A failed SASL authentication is answered, and its connection closed, only after this
    delay (Kafka connection.failed.authentication.delay.ms); 0 = at once."""
    password_hash_threads: int = 1
    """Worker threads that may verify stretched (PLAIN) password hashes at once; a flood of
    logins then costs at most this many cores."""
    offload_request_bytes: int = 65536
    """Requests larger than this (Produce: larger than offload_produce_bytes) are inspected and
    authorized on a worker thread, never on the loop that serves every other connection."""
    offload_produce_bytes: int = 1048576
    """The same for Produce, whose walk costs per partition, not per byte (clients' default
    max.request.size is 1 MiB: ordinary Produce requests stay on the fast path)."""
    drain_timeout_ms: int = 30000
    """On SIGTERM kgw stops accepting and reading, and answers what is in flight for at most
    this long before it closes the remaining connections."""
    offload_response_bytes: int = 1048576
    """Upstream responses larger than this that kgw must decode (merging a partly denied
    request's answers, rewriting Metadata) are processed on a worker thread."""
    max_unsent_bytes_per_connection: int = 1048576
    """While more answers than this wait for one client to read them, kgw reads nothing more
    from it (Kafka mutes a channel while its response is unsent): a client that sends and never
    reads holds this much, not what it sent."""
    password_hashes_per_host: int = 1
    """Stretched (PLAIN) password hashes one client host may have running or queued at once;
    its further logins wait their turn, so a flood from one host delays another host's login
    by at most this many hashes."""
    max_connection_creation_rate_per_ip: int = 0
    """New connections one client host may open per second (Kafka's KIP-612 connection rate
    quota per IP); beyond it a new connection is closed at once.  0: unlimited (Kafka's
    default; behind a load balancer without the PROXY protocol every client shares its address)."""
    max_connection_creation_rate: int = 0
    """New connections each listener accepts per second (Kafka max.connection.creation.rate);
    beyond it accepting waits.  0: unlimited (Kafka's default)."""


@_model
class IoConfig:
    """How client connections are served."""

    data_plane_thread: bool = True
    """Serve the forwarding path of plain-TCP connections (client and upstream both
    without TLS) on one dedicated epoll thread instead of Trio's scheduler; TLS
    connections and requests kgw answers itself stay on Trio.  See gateway/connection/data_plane.py."""
    splice_min_bytes: int = 131072
    """On the data plane (Linux), a Fetch response's record set with at least this many bytes
    still to arrive is moved from the upstream socket to the client's through a kernel pipe
    (``splice``) instead of being read into kgw and written out again.  0: never."""
    splice_pipes: int = 64
    """Kernel pipes kept for that (two file descriptors and up to 1 MiB of buffered bytes
    each); a response that finds none free is read and written as usual."""
    data_plane_cpus: tuple[int, ...] = ()
    """The CPUs (Linux numbers) the data-plane thread runs on, as HAProxy's ``cpu-map``;
    empty: wherever the scheduler puts it.  Kept on its CPUs, the thread finds its code and
    data still in their caches at the next request; on a shared CPU it waits for whatever else
    runs there.  Every worker process's thread gets the same set."""


@_model
class AdminConfig:
    """Admin HTTP endpoint (/metrics, /healthz, /readyz)."""

    host: str = "127.0.0.1"
    """Bind host."""
    port: int = 9190
    """Bind port; 0 = ephemeral."""


@_model
class AuthorizerConfig:
    """The authorizer plugin."""

    class_name: str | None = None
    """Import path "pkg.mod:Class"; None = no authorizer, everything is allowed."""
    config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """Read-only mapping handed to configure(), e.g. super.users, allow.everyone.if.no.acl.found."""


@_model
class AlterConfigsPolicyConfig:
    """Alter-configs policies (KIP-133): a plug-in and/or declarative rules."""

    class_name: str | None = None
    """Import path "pkg.mod:Class" of a policy with validate(request_metadata); None = none."""
    config: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """Handed to the plug-in's configure()."""
    rules: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """Per resource type (topic, broker, group, ...): allowed_keys, denied_keys, bounds {k: {min, max}},
    patterns {k: regex}."""


@_model
class MetadataConfig:
    """Where ACLs, dynamic configs and SCRAM users live: a local directory (one gateway) or a
    topic on the upstream cluster that several gateways share (docs/operations.md)."""

    backend: str = "directory"
    """``directory`` (the embedded default) or ``kafka``."""
    path: Path = Path("kgw-data")
    """Directory of the log (directory backend)."""
    snapshot_every_records: int = 10000
    """Write a snapshot after this many records."""
    topic: str = "__kgw_metadata"
    """The one-partition log topic (kafka backend); snapshots go to ``<topic>_snapshots``."""
    replication_factor: int | None = None
    """Replication factor of the topics kgw creates; None: min(3, brokers)."""
    min_insync_replicas: int = 2
    """min.insync.replicas of the topics kgw creates (capped at the replication factor)."""
    write_timeout_ms: int = 10000
    """How long a write may wait for the cluster before the client gets REQUEST_TIMED_OUT."""


@_model
class UsersConfig:
    """SASL credentials known to the gateway."""

    scram: tuple[ScramCredential, ...] = ()
    """SCRAM users."""
    plain: tuple[PlainCredential, ...] = ()
    """PLAIN users; names unique."""


@_model
class AuditConfig:
    """The authorization audit log."""

    log_level: str = "INFO"
    """DEBUG, INFO, WARNING, ERROR or OFF."""
    publish: bool = False
    """Also publish every allowed/denied decision as JSON to `topic` on the upstream cluster."""
    topic: str = "kgw-audit"
    """Audit topic (created with `partitions` partitions if missing)."""
    partitions: int = 1
    """Partitions of the audit topic when kgw creates it."""
    max_buffered: int = 10000
    """Events held while the topic is slow or unreachable; beyond that they are dropped and counted."""
    batch_max_events: int = 500
    """Events per Produce request."""
    linger_ms: int = 200
    """How often buffered events are sent."""
    format: str = "kgw"
    """The published events' schema: "kgw" (authz/audit_events.py; what kgw_spark.audit_job
    reads) or "ocsf" (OCSF 1.3.0 API Activity and Authentication events, authz/audit_ocsf.py)."""
    chain_id: str | None = None
    """The hash chain this process's events form (authz/audit_chain.py); a restart with the same
    id resumes it from its last checkpoint. Default "<cluster_id>@<host name>" (and
    "/worker<i>" per worker of `kgw run --workers`)."""
    checkpoint_interval_ms: int = 10000
    """How often the chain's head is written to the metadata log (and at a graceful stop)."""


@_model
class QuotasConfig:
    """Client quotas (KIP-13/124/612): how rates are measured.  The quotas themselves are
    ClientQuota records in the metadata log (AlterClientQuotas, `kafka-configs`)."""

    window_num: int = 11
    """Samples a rate is measured over (Kafka's quota.window.num)."""
    window_size_seconds: int = 1
    """The length of one sample (Kafka's quota.window.size.seconds)."""
    max_tracked: int = 100000
    """Rate sensors kept at most (one per user, client id or pair with a quota); the least
    recently used beyond that are forgotten (client ids are the client's to choose)."""


@_model
class LoggingConfig:
    """Process logging."""

    level: str = "INFO"
    """DEBUG, INFO, WARNING, ERROR or CRITICAL."""
    format: str = "text"
    """text or json (one object per line)."""


@_model
class GatewayConfig:
    """The whole gateway configuration (the root of the YAML file)."""

    cluster_id: str = "kgw"
    """Cluster id reported to clients."""
    listeners: tuple[ListenerConfig, ...]
    """Client-facing listeners; at least one, names and bind addresses unique."""
    upstream: UpstreamConfig
    """The Kafka cluster behind the gateway."""
    limits: LimitsConfig = LimitsConfig()
    """Per-connection protocol limits."""
    io: IoConfig = IoConfig()
    """How client connections are served (the data-plane thread)."""
    admin: AdminConfig | None = AdminConfig()
    """Admin HTTP endpoint; None (YAML `admin: null`) disables it."""
    authorizer: AuthorizerConfig = AuthorizerConfig()
    """Authorizer plugin."""
    metadata: MetadataConfig = MetadataConfig()
    """Local metadata log."""
    users: UsersConfig = UsersConfig()
    """SASL credentials."""
    audit: AuditConfig = AuditConfig()
    """Authorization audit log."""
    quotas: QuotasConfig = QuotasConfig()
    """How client quotas are measured."""
    logging: LoggingConfig = LoggingConfig()
    """Process logging."""
    alter_configs_policy: AlterConfigsPolicyConfig = AlterConfigsPolicyConfig()
    """Policies applied to AlterConfigs / IncrementalAlterConfigs (KIP-133)."""

    def to_dict(self) -> dict[str, Any]:
        """Plain YAML/JSON-able values (for describe-configs); secrets show as "[hidden]"."""
        return _plain(self)




def _plain(value: Any) -> Any:
    if is_dataclass(value):
        return {
            f.name: "[hidden]" if f.metadata.get("secret") and getattr(value, f.name) is not None
            else _plain(getattr(value, f.name))
            for f in fields(value)
        }
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Address):
        return str(value)
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value
