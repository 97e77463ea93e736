"""Authorizer metrics (KIP-608 names, KIP-877 mechanism) as Prometheus metrics.

Theory of operation
-------------------
Kafka 4.1+ StandardAuthorizer publishes, per authorizer instance:

* ``acls-total-count`` — gauge, current number of ACLs;
* ``authorization-{request,allowed,denied}-rate-per-minute`` — windowed rates,
  recorded **per action** (KIP-430 probes and the KIP-679 ``hardcode`` probe
  included).

Prometheus derives rates itself, so kgw exports monotonically increasing
counters and lets ``rate()`` do the windowing:

===========================================  ===========  ============
metric                                       type         labels
===========================================  ===========  ============
``kgw_authorizer_acls_total_count``          gauge        —
``kgw_authorizer_authorization_requests_total``  counter  ``listener``
``kgw_authorizer_authorization_allowed_total``   counter  ``listener``
``kgw_authorizer_authorization_denied_total``    counter  ``listener``
===========================================  ===========  ============

(``requests`` = ``allowed`` + ``denied``.)

Cost: instead of three ``Counter.inc()`` calls per action (each takes a lock),
the authorizer adds a whole batch's tallies to a per-listener ``_Tally``
(cached by listener name) under one small lock per ``authorize`` call.  The
registry reads the tallies only when scraped, through this module's custom
collector.  The ACL count is read from the authorizer's current snapshot at
scrape time, so it can never drift from the index.
"""

from __future__ import annotations

import threading
from typing import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

__all__ = ["AuthorizerMetrics"]

ACLS_TOTAL = "kgw_authorizer_acls_total_count"
REQUESTS = "kgw_authorizer_authorization_requests"
ALLOWED = "kgw_authorizer_authorization_allowed"
DENIED = "kgw_authorizer_authorization_denied"


class _Tally:
    __slots__ = ("allowed", "denied", "lock")

    def __init__(self) -> None:
        self.allowed = 0
        self.denied = 0
        self.lock = threading.Lock()


class AuthorizerMetrics(Collector):
    """The authorizer's metrics, registered on a host-supplied registry."""

    def __init__(self, acl_count: Callable[[], int]) -> None:
        self._acl_count = acl_count
        self._tallies: dict[str, _Tally] = {}
        self._tallies_lock = threading.Lock()

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(self)

    def record(self, listener: str, allowed: int, denied: int) -> None:
        """Add one ``authorize`` call's per-action outcomes for ``listener``."""
        tally = self._tallies.get(listener)
        if tally is None:
            with self._tallies_lock:
                tally = self._tallies.setdefault(listener, _Tally())
        with tally.lock:
            tally.allowed += allowed
            tally.denied += denied

    # -- prometheus_client Collector protocol -------------------------------

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(ACLS_TOTAL, "Current number of ACLs held by the authorizer")
        yield CounterMetricFamily(REQUESTS, "Authorization actions decided", labels=["listener"])
        yield CounterMetricFamily(ALLOWED, "Authorization actions allowed", labels=["listener"])
        yield CounterMetricFamily(DENIED, "Authorization actions denied", labels=["listener"])

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            ACLS_TOTAL, "Current number of ACLs held by the authorizer", value=self._acl_count()
        )
        requests = CounterMetricFamily(REQUESTS, "Authorization actions decided", labels=["listener"])
        allowed = CounterMetricFamily(ALLOWED, "Authorization actions allowed", labels=["listener"])
        denied = CounterMetricFamily(DENIED, "Authorization actions denied", labels=["listener"])
        for listener, tally in sorted(self._tallies.items()):
            with tally.lock:
                a, d = tally.allowed, tally.denied
            requests.add_metric([listener], a + d)
            allowed.add_metric([listener], a)
            denied.add_metric([listener], d)
        yield requests
        yield allowed
        yield denied
