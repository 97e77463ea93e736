"""Authentication failures: the exception, a metric, and a bounded per-address counter.

Theory of operation
-------------------
Every failed authentication on a listener (TLS handshake refused, SASL
exchange refused) is reported once to an :class:`AuthFailureTracker`, which

* increments ``kgw_authentication_failures_total{listener, mechanism}``
  (mechanism is ``SSL`` for TLS handshakes, else the SASL mechanism, or
  ``unknown`` when the client failed before choosing one);
* increments ``kgw_authentication_failures_by_client_total{listener, client_software,
  cause}``: the client library and version its ApiVersions request named (KIP-511,
  ``librdkafka/2.0.2``; ``unknown`` when it did not) and a fixed cause word
  (``credentials``, ``scram_nonce_repeated``, ``other``), so a failure that is a client
  library's bug is told apart from wrong passwords.  The names come from unauthenticated
  clients: at most ``software_labels`` distinct values are used, later ones count as ``other``;
* counts failures per client *host* (the port changes with every connection,
  so it is not part of the key) and logs one WARNING when a host reaches
  ``warn_threshold`` failures, then again each time its count doubles, so a
  client hammering the gateway with a wrong password is visible without
  flooding the log.

The per-host table is an LRU bounded by ``capacity`` (default 4096 hosts):
recording a failure for a new host when the table is full forgets the host
that failed least recently.  Memory is therefore bounded whatever the number
of distinct attackers; the price is that a host evicted by a flood of others
starts again from zero.  A successful authentication calls :meth:`forget`,
so the count is of failures since the host's last success.

Nothing here logs a secret: the log line names the listener, mechanism, host
and count only.  Failures are recorded from Trio and from the worker threads
that verify password hashes, so the table is guarded by a lock.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter

__all__ = ["AuthenticationFailed", "AuthFailureTracker"]

log = logging.getLogger("kgw.auth")


class AuthenticationFailed(Exception):
    """A client failed to authenticate; the connection must be closed.

    The message is safe to log (no secrets) and says what went wrong.
    ``mechanism`` is ``"SSL"`` for TLS failures, else the SASL mechanism.
    """

    def __init__(self, message: str, *, mechanism: str = "SSL") -> None:
        super().__init__(message)
        self.mechanism = mechanism


class AuthFailureTracker:
    """Counts authentication failures per client host and as a Prometheus counter.

    Args:
        registry: where ``kgw_authentication_failures_total`` is registered
            (normally ``GatewayMetrics.registry``); None = a private registry.
        capacity: hosts remembered at most (LRU).
        warn_threshold: a host's failure count that triggers the first WARNING.
    """

    def __init__(
        self, registry: CollectorRegistry | None = None, *, capacity: int = 4096, warn_threshold: int = 5,
        software_labels: int = 50,
    ) -> None:
        if capacity < 1 or warn_threshold < 1:
            raise ValueError("capacity and warn_threshold must be >= 1")
        self.registry = registry if registry is not None else CollectorRegistry()
        self.counter = Counter(
            "kgw_authentication_failures",
            "Failed client authentications (TLS handshakes and SASL exchanges)",
            ["listener", "mechanism"],
            registry=self.registry,
        )
        self.by_client = Counter(
            "kgw_authentication_failures_by_client",
            "Failed SASL authentications by the client library and version the client announced (KIP-511) "
            "and a cause: credentials, scram_nonce_repeated (librdkafka before 2.6.1) or other",
            ["listener", "client_software", "cause"],
            registry=self.registry,
        )
        self.successes = Counter(
            "kgw_authentications", "Successful SASL authentications", ["listener", "mechanism"], registry=self.registry)
        self.software_labels = software_labels
        #: where failed authentications go as audit events (the audit publisher's offer), if anywhere
        self.audit: Callable[[Mapping[str, Any]], Any] | None = None
        self._software_seen: set[str] = set()
        self.capacity = capacity
        self.warn_threshold = warn_threshold
        self._counts: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def record_failure(self, address: str | tuple, *, listener: str = "unknown", mechanism: str = "unknown",
                       client_software: str | None = None, cause: str = "other", user: str | None = None,
                       reason: str | None = None) -> int:
        """Count one failure of ``address`` (a host, or a (host, port, ...) tuple); return the host's count.
        ``client_software`` (SASL failures only): "name/version" or "unknown"; ``user``: the user
        name the client tried, if it gave one; ``reason``: the log's reason.  With an ``audit``
        sink set, the failure is also an audit event (operation AUTHENTICATE, denied)."""
        host = _host(address)
        if self.audit is not None:
            self.audit(authentication_failure_fields(host, listener, mechanism or "unknown", user, reason))
        self.counter.labels(listener, mechanism or "unknown").inc()
        with self._lock:
            if client_software is not None:
                if client_software not in self._software_seen:
                    if len(self._software_seen) < self.software_labels:
                        self._software_seen.add(client_software)
                    else:
                        client_software = "other"
                self.by_client.labels(listener, client_software, cause).inc()
            count = self._counts.pop(host, 0) + 1
            self._counts[host] = count
            if len(self._counts) > self.capacity:
                self._counts.popitem(last=False)
        if count >= self.warn_threshold and _is_power_of_two(count // self.warn_threshold) and (
            count % self.warn_threshold == 0
        ):
            log.warning(
                "repeated authentication failures from %s: %d", host, count,
                extra={"kgw": {"listener": listener, "mechanism": mechanism, "client": host, "failures": count}},
            )
        return count

    def succeeded(self, listener: str, mechanism: str) -> None:
        self.successes.labels(listener, mechanism).inc()

    def forget(self, address: str | tuple) -> None:
        """Reset a host's count (call after a successful authentication)."""
        with self._lock:
            self._counts.pop(_host(address), None)

    def count(self, address: str | tuple) -> int:
        """Failures recorded for a host and still remembered."""
        return self._counts.get(_host(address), 0)

    def __len__(self) -> int:
        return len(self._counts)


#: the longest user name and reason an audit event carries (both come from the client)
_AUDIT_TEXT_MAX = 256


def authentication_failure_fields(host: str, listener: str, mechanism: str, user: str | None,
                                  reason: str | None) -> dict[str, Any]:
    """The audit fields (``authz.audit_events.audit_event``'s input) of one failed login: the
    principal the client tried (``User:<name>``; none when it named none, as after a failed TLS
    handshake), denied operation AUTHENTICATE on ``Authentication:LITERAL:<mechanism>``."""
    return {
        "kgw_event": "authentication",
        "kgw_principal": f"User:{user[:_AUDIT_TEXT_MAX]}" if user else None,
        "kgw_allowed": False,
        "kgw_operation": "AUTHENTICATE",
        "kgw_resource": f"Authentication:LITERAL:{mechanism}",
        "kgw_listener": listener,
        "kgw_host": host,
        "kgw_mechanism": mechanism,
        "kgw_reason": (reason or "")[:_AUDIT_TEXT_MAX],
    }


def _host(address: str | tuple) -> str:
    return str(address[0]) if isinstance(address, tuple) else str(address)


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0
