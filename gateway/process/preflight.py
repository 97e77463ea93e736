"""What start-up checks beyond the YAML, without starting: ``kgw check`` and ``kgw run``.

The YAML reader (configs/yaml_reader.py) checks shapes and values; this module checks what
needs the machine: the authorizer and its configs (``super.users`` principals), principal
builders and alter-configs policies import and configure, certificate and key files are
readable and match, the metadata location is usable, the data-plane thread's CPUs are ones
the process may use, and the ports to bind are free.  It builds the same objects start-up
builds (``load_authorizer``, ``server_ssl_context``, ...), so a configuration it passes does
not fail at start-up for any of these reasons, except a port taken in between.

Each problem names its key path, as the YAML reader's errors do.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from authz.loader import AuthorizerLoadError, load_authorizer
from authz.principal_builder import PrincipalBuilderLoadError, load_principal_builder
from configs.policies import PolicyLoadError, load_policies
from gateway.auth.tls import TlsConfigError, client_ssl_context, server_ssl_context

__all__ = ["Problem", "build_authorizer", "problems"]


@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class AuthorizerConfigError(ValueError):
    """The authorizer cannot be loaded or refuses its configs; ``path`` is the key to fix."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.problem = Problem(path, message)


def build_authorizer(config: Any):
    """The configured authorizer, configured (None when none is configured).

    :raises AuthorizerConfigError: naming ``authorizer.class_name`` or ``authorizer.config``.
    """
    if not config.authorizer.class_name:
        return None
    try:
        authorizer = load_authorizer(config.authorizer.class_name)()
    except AuthorizerLoadError as e:
        raise AuthorizerConfigError("authorizer.class_name", str(e)) from None
    # the keys an authorizer class declares for itself (a subclass reading more keys than the
    # class it extends, without saying so, is not held to its parent's list)
    keys = getattr(authorizer, "config_keys", None) if "config_keys" in type(authorizer).__dict__ else None
    if callable(keys):
        known = set(keys())
        for key in config.authorizer.config:
            if key not in known:
                close = difflib.get_close_matches(str(key), sorted(known), n=1)
                hint = f' (did you mean "{close[0]}"?)' if close else ""
                raise AuthorizerConfigError(
                    f"authorizer.config.{key}",
                    f"not a key {type(authorizer).__name__} reads{hint}; it reads: {', '.join(sorted(known))}")
    try:
        authorizer.configure(dict(config.authorizer.config))
    except Exception as e:  # noqa: BLE001 - a plug-in's configure() may raise anything
        raise AuthorizerConfigError("authorizer.config", str(e) or type(e).__name__) from None
    return authorizer


def problems(config: Any, *, ports: bool = True) -> list[Problem]:
    """Every problem start-up would meet, in config order; empty when none.  ``ports``: also
    check that listener and admin ports can be bound now."""
    found: list[Problem] = []
    try:
        authorizer = build_authorizer(config)
        if authorizer is not None:
            authorizer.close()
    except AuthorizerConfigError as e:
        found.append(e.problem)
    for i, lc in enumerate(config.listeners):
        found += _listener_problems(f"listeners[{i}]", lc)
    found += _upstream_problems(config.upstream)
    try:
        load_policies(config.alter_configs_policy)
    except PolicyLoadError as e:
        found.append(Problem("alter_configs_policy", str(e).replace("\n", "; ")))
    found += _metadata_problems(config.metadata)
    found += _host_limit_problems(config.limits.max_connections_per_ip_overrides)
    found += _cpu_problems(config.io.data_plane_cpus)
    if ports:
        for i, lc in enumerate(config.listeners):
            if lc.port:
                found += _bind_problems(f"listeners[{i}].port", f"listener {lc.name}", lc.host, lc.port)
        if config.admin is not None and config.admin.port:
            found += _bind_problems("admin.port", "the admin endpoint", config.admin.host, config.admin.port)
    return found


def _listener_problems(path: str, lc: Any) -> list[Problem]:
    found = []
    protocol = str(lc.security_protocol)
    if protocol in ("SSL", "SASL_SSL") and lc.tls is not None:
        try:
            server_ssl_context(lc.tls)
        except TlsConfigError as e:
            found.append(_tls_problem(path, e))
    rules = lc.tls.principal_mapping_rules if lc.tls is not None else "DEFAULT"
    try:
        load_principal_builder(lc.principal_builder, {"ssl.principal.mapping.rules": rules,
                                                      "listener.name": lc.name, "security.protocol": protocol})
    except (PrincipalBuilderLoadError, ValueError) as e:
        key = "principal_builder" if lc.principal_builder else "tls.principal_mapping_rules"
        found.append(Problem(f"{path}.{key}", str(e)))
    keys = _oauthbearer_keys(lc)
    if keys is not None and keys.jwks_file is not None:  # a file must hold keys at start-up
        keys.fetch()
        if not keys.ready:
            found.append(Problem(f"{path}.sasl.oauthbearer.jwks_file", f"no keys in {keys.jwks_file}: {keys.error}"))
    return found


def _oauthbearer_keys(lc: Any) -> Any:
    from gateway.auth.oauthbearer import JwksSource

    cfg = lc.sasl.oauthbearer if lc.sasl is not None else None
    return None if cfg is None else JwksSource.from_config(cfg, timeout_s=5.0)


def warnings(config: Any) -> list[str]:
    """What may keep a started gateway from being ready without stopping the start: an
    OAUTHBEARER key URL that does not answer now, an upstream token endpoint that gives kgw no
    token now (the gateway keeps trying; /readyz says why)."""
    found = []
    for i, lc in enumerate(config.listeners):
        keys = _oauthbearer_keys(lc)
        if keys is not None and keys.jwks_file is None:
            keys.fetch()
            if not keys.ready:
                found.append(f"listeners[{i}].sasl.oauthbearer: no keys from {keys.where} now ({keys.error}); "
                             "the listener will not be ready until they can be fetched")
    sasl = config.upstream.sasl
    if sasl is not None and sasl.oauthbearer is not None:
        from gateway.upstream.oauth_token import ClientCredentialsToken, TokenUnavailable

        try:  # a token now, with the configured secret (not kept, not printed)
            ClientCredentialsToken(sasl.oauthbearer, timeout_s=5.0).fetch()
        except TokenUnavailable as e:
            found.append(f"upstream.sasl.oauthbearer: no token now ({e}); the upstream will not be ready "
                         "until kgw gets one")
    return found


def _tls_problem(path: str, e: TlsConfigError) -> Problem:
    """TlsConfigError messages start with the key inside the section (``tls.cert_file: ...``)."""
    key, sep, message = str(e).partition(": ")
    if sep and key.replace("_", "").replace(".", "").isalnum():
        return Problem(f"{path}.{key}", message)
    return Problem(f"{path}.tls", str(e))


def _upstream_problems(up: Any) -> list[Problem]:
    if str(up.security_protocol) not in ("SSL", "SASL_SSL"):
        return []
    try:
        client_ssl_context(up.tls)
    except TlsConfigError as e:
        key, sep, message = str(e).partition(": ")
        return [Problem(key, message) if sep and key.startswith("upstream.") else Problem("upstream.tls", str(e))]
    return []


def _host_limit_problems(overrides: Any) -> list[Problem]:
    from gateway.process.listeners import resolve_host_limits

    found = []
    for host, count in overrides.items():
        try:
            resolve_host_limits({host: count})
        except OSError as e:
            found.append(Problem(f'limits.max_connections_per_ip_overrides["{host}"]',
                                 f"cannot resolve {host}: {e.strerror or e}"))
    return found


def _cpu_problems(cpus: tuple[int, ...]) -> list[Problem]:
    """The data-plane thread's CPUs must be ones this process may run on."""
    if not cpus:
        return []
    if not hasattr(os, "sched_setaffinity"):
        return [Problem("io.data_plane_cpus", "CPU affinity is not supported on this platform")]
    allowed = os.sched_getaffinity(0)
    missing = sorted(set(cpus) - allowed)
    if missing:
        return [Problem("io.data_plane_cpus", f"CPU {', '.join(map(str, missing))} not available to this process "
                        f"(it may run on {', '.join(map(str, sorted(allowed)))})")]
    return []


def _metadata_problems(md: Any) -> list[Problem]:
    if md.backend == "kafka":
        if importlib.util.find_spec("confluent_kafka") is None:
            return [Problem("metadata.backend", "kafka needs the confluent-kafka package: "
                                                "pip install 'kgw[kafka-metadata]'")]
        return []
    path = Path(md.path)
    if path.exists():
        if not path.is_dir():
            return [Problem("metadata.path", f"{path} exists and is not a directory")]
        if not os.access(path, os.W_OK | os.X_OK):
            return [Problem("metadata.path", f"{path} is not writable by this user (uid {os.getuid()})")]
        return []
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        return [Problem("metadata.path", f"{path} does not exist and cannot be created: {parent} is not "
                                         f"a writable directory (uid {os.getuid()})")]
    return []


def _bind_problems(path: str, what: str, host: str, port: int) -> list[Problem]:
    """Bind every address ``host`` resolves to, as the listener will (SO_REUSEADDR), and let go."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        return [Problem(path, f"{what} cannot resolve {host}: {e.strerror}")]
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(address)
            except OSError as e:
                return [Problem(path, f"{what} cannot bind {host}:{port}: {e.strerror or e}")]
    return []
