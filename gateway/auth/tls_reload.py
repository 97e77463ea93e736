"""Listener certificates that change without a restart.

Theory of operation
-------------------
A TLS listener's ``ssl.SSLContext`` is built from the files its ``tls`` section names
(``cert_file``, ``key_file``, ``ca_file``).  Certificates expire, often every few weeks
when an ACME client or cert-manager renews them, and a gateway that must restart for a
new one drops every client.  :class:`TlsCertificates` builds a listener's context again
from the same files:

* on SIGHUP (``kgw run``; with ``--workers`` the supervisor passes it to every ready
  worker): every TLS listener;
* every ``tls.reload_check_ms`` (60 s by default, 0: only on SIGHUP): a listener whose
  files changed (inode, size or modification time of any of them: what a rewrite, a copy
  over the file and Kubernetes' symlink swap of a mounted secret change).

The new context replaces the old one by one assignment: connections accepted afterwards
handshake with the new certificate (and trust the new CA bundle), open connections keep the
session they have, as with Kafka's dynamic keystore update.  Files that do not make a
context (a key that does not match the certificate, a file half copied) leave the context in
use: one WARNING names the problem, ``result="failed"`` is counted, and those files are tried
again when they change again.  The paths themselves are read from the configuration at start
only.

Metrics: ``kgw_tls_certificate_expiry_timestamp_seconds{listener}`` (the earliest notAfter of
the chain in use) and ``kgw_tls_certificate_reloads_total{listener, result}``.
"""

from __future__ import annotations

import logging
import time

import trio
from prometheus_client import CollectorRegistry, Counter, Gauge

from gateway.auth.tls import TlsConfigError, certificate_expiry

__all__ = ["TlsCertificates"]

log = logging.getLogger("kgw.tls")


class TlsCertificates:
    """The TLS listeners' certificates: reloaded on demand or when their files change."""

    def __init__(self, listeners, registry: CollectorRegistry) -> None:
        self.listeners = [listener for listener in listeners if listener.security.uses_tls]
        self.expiry = Gauge("kgw_tls_certificate_expiry_timestamp_seconds",
                            "Unix time at which the earliest certificate of the listener's chain in use "
                            "expires", ["listener"], registry=registry)
        self.reloads = Counter("kgw_tls_certificate_reloads", "Certificate reloads of a TLS listener (SIGHUP "
                               "or changed files), by result: reloaded, failed", ["listener", "result"],
                               registry=registry)
        for listener in self.listeners:
            self._export_expiry(listener)

    def reload_all(self, why: str) -> dict[str, bool]:
        """Reload every TLS listener (SIGHUP); listener name -> whether it took the new files."""
        return {listener.name: self._reload(listener, why, only_if_changed=False) for listener in self.listeners}

    def check(self, listener) -> bool | None:
        """Reload ``listener`` if its files changed since the last build or attempt: True when
        reloaded, False when they did not make a context, None when unchanged."""
        return self._reload(listener, "its files changed", only_if_changed=True)

    async def watch(self) -> None:
        """Check each listener's files every ``tls.reload_check_ms`` (until cancelled)."""
        async with trio.open_nursery() as nursery:
            for listener in self.listeners:
                interval_ms = listener.config.tls.reload_check_ms
                if interval_ms > 0:
                    nursery.start_soon(self._watch_one, listener, interval_ms / 1000)

    async def _watch_one(self, listener, interval_s: float) -> None:
        while True:
            await trio.sleep(interval_s)
            self.check(listener)

    def _reload(self, listener, why: str, *, only_if_changed: bool) -> bool | None:
        tls = listener.config.tls
        try:
            if not listener.security.reload_tls(only_if_changed):
                return None
        except TlsConfigError as exc:
            self.reloads.labels(listener.name, "failed").inc()
            log.warning("listener %s: TLS certificate not reloaded (%s): %s; new connections keep getting "
                        "the certificate in use, and these files are tried again when they change",
                        listener.name, why, exc)
            return False
        self.reloads.labels(listener.name, "reloaded").inc()
        expiry = self._export_expiry(listener)
        log.info("listener %s: TLS certificate reloaded from %s (%s)%s", listener.name, tls.cert_file, why,
                 "" if expiry is None else time.strftime("; it expires %Y-%m-%dT%H:%M:%SZ", time.gmtime(expiry)))
        return True

    def _export_expiry(self, listener) -> float | None:
        expiry = certificate_expiry(listener.config.tls.cert_file)
        if expiry is not None:
            self.expiry.labels(listener.name).set(expiry)
        return expiry
