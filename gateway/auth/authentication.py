"""Client authentication on a listener: TLS, SASL, and the principal that reaches the authorizer.

Theory of operation
-------------------
Each :class:`~gateway.process.listeners.Listener` owns one :class:`ListenerSecurity`
built from its YAML: the TLS context (SSL, SASL_SSL), the principal builder
(Kafka's default or a class named in YAML), and the credential store (SASL).
For every accepted connection :meth:`ListenerSecurity.accept` runs, inside that
connection's own task so a slow handshake delays nobody else:

* TLS listeners do the handshake (with a deadline) and keep the client
  certificate;
* PLAINTEXT and SSL connections get their principal at once from the builder
  (``User:ANONYMOUS``, or the certificate's mapped DN);
* SASL connections get a :class:`ConnectionAuth` holding a
  :class:`~gateway.auth.sasl.SaslSession`; until it completes only ApiVersions,
  SaslHandshake and SaslAuthenticate are accepted (``gate``), and the principal
  is the exact object the builder returns (KIP-111: custom fields survive).

Failures are logged once with the client address, counted per address
(:class:`~gateway.auth.failures.AuthFailureTracker`) and close only that
connection.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from authz.principal import ANONYMOUS, KafkaPrincipal
from authz.principal_builder import (
    PlaintextAuthenticationContext,
    PrincipalBuildError,
    SslAuthenticationContext,
    load_principal_builder,
)
from gateway.auth.oauthbearer import OAuthBearerValidator
from gateway.auth.failures import AuthenticationFailed, AuthFailureTracker
from gateway.auth.sasl import SaslSession
from metadata.scram_credentials import MetadataCredentialStore
from gateway.auth.tls import (SniRoutes, peer_certificate, release_tls_stream, server_ssl_context, tls_files_fingerprint,
                              tls_handshake)


__all__ = ["ConnectionAuth", "ListenerSecurity", "AuthenticationFailed"]

log = logging.getLogger("kgw.authentication")
_HANDSHAKE_TIMEOUT_S = 10.0


class ConnectionAuth:
    """Who is on a connection: the principal once known, and the SASL session if any."""

    __slots__ = ("principal", "session")

    def __init__(self, principal: KafkaPrincipal | None, session: SaslSession | None) -> None:
        self.principal = principal
        self.session = session

    @property
    def authenticated(self) -> bool:
        return self.session is None or self.session.authenticated


class ListenerSecurity:
    def __init__(self, listener: Any, users: Any, failures: AuthFailureTracker) -> None:
        cfg = listener.config
        protocol = str(cfg.security_protocol)
        self.listener_name = cfg.name
        self.protocol = protocol
        self.uses_tls = protocol in ("SSL", "SASL_SSL")
        self.uses_sasl = protocol in ("SASL_PLAINTEXT", "SASL_SSL")
        #: what the TLS files were when ``ssl_context`` was built from them (taken first, so a
        #: change during the build is seen by the next check)
        self.tls_fingerprint = tls_files_fingerprint(cfg.tls) if self.uses_tls else None
        #: SNI routing (one port for every broker), known brokers being the cluster's
        self.sni = (SniRoutes(cfg.sni, lambda node_id: node_id in listener.gateway.cluster.nodes)
                    if cfg.sni is not None and self.uses_tls else None)
        self.ssl_context = server_ssl_context(cfg.tls, self.sni) if self.uses_tls else None
        rules = cfg.tls.principal_mapping_rules if cfg.tls is not None else "DEFAULT"
        self.builder = load_principal_builder(
            cfg.principal_builder,
            {"ssl.principal.mapping.rules": rules, "listener.name": cfg.name, "security.protocol": protocol},
        )
        gateway = listener.gateway
        # YAML users first, then SCRAM users managed over the wire (metadata log), on every lookup
        self.credentials = (MetadataCredentialStore(users, lambda: getattr(gateway, "image", None))
                            if self.uses_sasl else None)
        self.failures = failures
        self._config = cfg
        #: PLAIN passwords verified recently, shared by the gateway's listeners
        self._verified = gateway.password_hashing.verified
        #: OAUTHBEARER token validation (its keys fetched by the gateway's background task)
        self.oauthbearer = OAuthBearerValidator.from_config(cfg.sasl.oauthbearer) if (
            self.uses_sasl and cfg.sasl is not None and cfg.sasl.oauthbearer is not None) else None

    def reload_tls(self, only_if_changed: bool = False) -> bool:
        """Build the TLS context again from the listener's files: connections accepted from now
        on handshake with it, open ones keep theirs.  Returns False when ``only_if_changed`` and
        the files are as they were at the last build or attempt.

        :raises TlsConfigError: the files do not make a context; the one in use stays, and the
            same files are not tried again until they change.
        """
        fingerprint = tls_files_fingerprint(self._config.tls)
        if only_if_changed and fingerprint == self.tls_fingerprint:
            return False
        self.tls_fingerprint = fingerprint
        self.ssl_context = server_ssl_context(self._config.tls, self.sni)
        return True

    async def accept(self, stream: trio.abc.Stream, client_address: str) -> tuple[trio.abc.Stream, ConnectionAuth]:
        """TLS handshake if needed, then the principal or a SASL session.

        :raises AuthenticationFailed: the connection must be closed (already logged and counted).
        """
        cert = None
        if self.ssl_context is not None:
            try:
                stream, der = await tls_handshake(stream, self.ssl_context, _HANDSHAKE_TIMEOUT_S)
            except AuthenticationFailed as e:
                self._failed(client_address, "SSL", str(e))
                raise
            cert = peer_certificate(der)
            base = SslAuthenticationContext(client_address=client_address, listener_name=self.listener_name,
                                            security_protocol=self.protocol, peer_certificate=cert)
        else:
            base = PlaintextAuthenticationContext(client_address=client_address, listener_name=self.listener_name,
                                                  security_protocol=self.protocol)
        if self.uses_sasl:
            session = SaslSession(self._config, self.credentials, self.builder, base, failures=self.failures,
                                  verified=self._verified, oauthbearer=self.oauthbearer)
            return stream, ConnectionAuth(None, session)
        if self.protocol == "PLAINTEXT" and self._config.principal_builder is None:
            return stream, ConnectionAuth(ANONYMOUS, None)
        try:
            return stream, ConnectionAuth(self.builder.build(base), None)
        except PrincipalBuildError as e:
            self._failed(client_address, self.protocol, f"no principal for the client: {e}")
            release_tls_stream(stream)
            raise AuthenticationFailed(str(e)) from None

    def _failed(self, client_address: str, mechanism: str, reason: str) -> None:
        count = self.failures.record_failure(client_address, listener=self.listener_name, mechanism=mechanism,
                                             reason=reason)
        log.info("authentication failed on listener %s from %s: %s (failure %d from this address)",
                 self.listener_name, client_address, reason, count)
