"""Authorizer metrics (KIP-608 names, KIP-877 mechanism) as Prometheus metrics.

Theory of operation
-------------------
Kafka 4.1+ StandardAuthorizer publishes, per authorizer instance, the attributes of the MBean
``kafka.server:type=plugins,config=authorizer.class.name,class=StandardAuthorizer,role=broker``:

* ``acls-total-count`` — gauge, current number of ACLs;
* ``authorization-{request,allowed,denied}-rate-per-minute`` — windowed rates (Kafka's
  default sample window, 2 × 30 s), recorded **per action** (KIP-430 probes and the
  KIP-679 ``hardcode`` probe included).

A Kafka operator scrapes those through Prometheus' JMX exporter, whose default rendering
turns them into ``kafka_server_plugins_<attribute>{class, config, role}``.  kgw exports the
same four series under exactly those names and labels, so a dashboard or alert written for
Kafka's authorizer works unchanged; and, because Prometheus prefers counters it can
``rate()`` itself, monotonic counters per listener and a bounded per-principal denial count:

===================================================================  =======  ===========================
metric                                                               type     labels
===================================================================  =======  ===========================
``kafka_server_plugins_acls_total_count``                            gauge    class, config, role
``kafka_server_plugins_authorization_request_rate_per_minute``       gauge    class, config, role
``kafka_server_plugins_authorization_allowed_rate_per_minute``       gauge    class, config, role
``kafka_server_plugins_authorization_denied_rate_per_minute``        gauge    class, config, role
``kgw_authorizer_authorization_requests_total``                      counter  listener
``kgw_authorizer_authorization_allowed_total``                       counter  listener
``kgw_authorizer_authorization_denied_total``                        counter  listener
``kgw_authorizer_denied_by_principal_total``                         counter  listener, principal
``kgw_authorizer_denied_by_topic_total``                             counter  listener, topic
===================================================================  =======  ===========================

(``requests`` = ``allowed`` + ``denied``.)  Principals and topics are client-chosen names (a
SASL user name, a certificate subject, any topic a request names): at most
``principal_labels`` distinct principals and ``topic_labels`` distinct topics get their own
label, later ones count as ``"other"``.  The topic count holds the TOPIC actions a client was
refused (``log_if_denied``: Kafka's mark of a denial that fails the request or hides what
was asked for), not KIP-430 probes or the silent filtering of an unnamed listing.

Cost: instead of several ``Counter.inc()`` calls per action (each takes a lock), the
authorizer adds a whole batch's tallies to its listener's counts and to the rate window
under one lock, once per ``authorize`` call.  The registry
reads them only when scraped, through this module's custom collector.  The ACL count is read
from the authorizer's current snapshot at scrape time, so it can never drift from the index.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Collection, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

__all__ = ["AuthorizerMetrics"]

_KAFKA = "kafka_server_plugins_"
ACLS_TOTAL = _KAFKA + "acls_total_count"
REQUEST_RATE = _KAFKA + "authorization_request_rate_per_minute"
ALLOWED_RATE = _KAFKA + "authorization_allowed_rate_per_minute"
DENIED_RATE = _KAFKA + "authorization_denied_rate_per_minute"
REQUESTS = "kgw_authorizer_authorization_requests"
ALLOWED = "kgw_authorizer_authorization_allowed"
DENIED = "kgw_authorizer_authorization_denied"
DENIED_BY_PRINCIPAL = "kgw_authorizer_denied_by_principal"
DENIED_BY_TOPIC = "kgw_authorizer_denied_by_topic"

#: Kafka's default metrics.sample.window.ms and metrics.num.samples
SAMPLE_WINDOW_S = 30.0
NUM_SAMPLES = 2


class _RateWindow:
    """Kafka's ``Rate`` over ``SampledStat``: NUM_SAMPLES windows of SAMPLE_WINDOW_S seconds;
    the rate is what the live windows hold, divided by the time they cover (at least
    (NUM_SAMPLES - 1) windows, so a fresh window does not read as a burst).  Recorded into by
    :meth:`AuthorizerMetrics.record` under ``lock``, the metrics' one lock."""

    __slots__ = ("lock", "samples", "last")

    def __init__(self, lock: threading.Lock) -> None:
        self.lock = lock
        #: [window start, allowed, denied], oldest first
        self.samples: list[list[float]] = []
        #: the newest window (its start is -inf before the first record: a window begins then)
        self.last: list[float] = [float("-inf"), 0, 0]

    def begin(self, now: float) -> list[float]:
        """A new window from ``now`` (the caller holds ``lock``)."""
        samples = self.samples
        self.last = last = [now, 0, 0]
        samples.append(last)
        if len(samples) > NUM_SAMPLES:
            del samples[0]
        return last

    def per_minute(self, now: float) -> tuple[float, float]:
        """(allowed, denied) per minute."""
        with self.lock:
            live = [s for s in self.samples if now - s[0] < NUM_SAMPLES * SAMPLE_WINDOW_S]
        if not live:
            return 0.0, 0.0
        elapsed = max(now - live[0][0], (NUM_SAMPLES - 1) * SAMPLE_WINDOW_S)
        return (sum(s[1] for s in live) * 60 / elapsed, sum(s[2] for s in live) * 60 / elapsed)


class _BoundedCounts:
    """Counts by (listener, name) where the names are client-chosen: the first ``limit``
    distinct names get their own label, later ones are counted as ``"other"``."""

    __slots__ = ("counts", "limit", "lock", "names")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.counts: dict[tuple[str, str], int] = {}
        self.names: set[str] = set()
        self.lock = threading.Lock()

    def add(self, listener: str, names: Iterable[str], n: int = 1) -> None:
        """Count ``n`` for each of ``names`` (one lock for a whole request's names)."""
        with self.lock:
            known, counts = self.names, self.counts
            for name in names:
                if name not in known:
                    if len(known) < self.limit:
                        known.add(name)
                    else:
                        name = "other"
                key = (listener, name)
                counts[key] = counts.get(key, 0) + n

    def items(self) -> list[tuple[tuple[str, str], int]]:
        with self.lock:
            return sorted(self.counts.items())


class AuthorizerMetrics(Collector):
    """The authorizer's metrics, registered on a host-supplied registry.

    Args:
        acl_count: the current number of ACLs, read at scrape time.
        class_name: the authorizer's simple class name (Kafka's ``class`` tag).
        principal_labels: distinct principals labelled in the denial count at most.
        topic_labels: distinct topics labelled in the denial count at most.
    """

    def __init__(self, acl_count: Callable[[], int], *, class_name: str = "StandardAuthorizer",
                 principal_labels: int = 100, topic_labels: int = 100,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._acl_count = acl_count
        self._kafka_labels = (class_name, "authorizer.class.name", "broker")
        #: one lock for every count below but the bounded ones (one acquisition per call)
        self._lock = threading.Lock()
        #: listener -> [allowed, denied]
        self._tallies: dict[str, list[int]] = {}
        self._window = _RateWindow(self._lock)
        self._clock = clock
        self._denied_by_principal = _BoundedCounts(principal_labels)
        self._denied_by_topic = _BoundedCounts(topic_labels)

    def register(self, registry: CollectorRegistry) -> None:
        registry.register(self)

    def record(self, listener: str, allowed: int, denied: int, principal: str | None = None,
               denied_topics: Collection[str] | None = None) -> None:
        """Add one ``authorize`` call's per-action outcomes for ``listener`` (and, when some
        were denied, the principal they were denied to and the topics a client was refused)."""
        now = self._clock()
        window = self._window
        with self._lock:
            tally = self._tallies.get(listener)
            if tally is None:
                tally = self._tallies[listener] = [0, 0]
            last = window.last
            if now - last[0] >= SAMPLE_WINDOW_S:
                last = window.begin(now)
            tally[0] += allowed
            last[1] += allowed
            if denied:  # (the usual call denies nothing)
                tally[1] += denied
                last[2] += denied
        if denied:
            if principal is not None:
                self._denied_by_principal.add(listener, (principal,), denied)
            if denied_topics:
                self._denied_by_topic.add(listener, denied_topics)

    # -- prometheus_client Collector protocol -------------------------------

    def _families(self) -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily,
                                 CounterMetricFamily, CounterMetricFamily, CounterMetricFamily,
                                 CounterMetricFamily, CounterMetricFamily]:
        kafka = ["class", "config", "role"]
        return (
            GaugeMetricFamily(ACLS_TOTAL, "Current number of ACLs held by the authorizer (Kafka's acls-total-count)",
                              labels=kafka),
            GaugeMetricFamily(REQUEST_RATE, "Authorization actions decided per minute over Kafka's 2 x 30 s "
                              "sample window (authorization-request-rate-per-minute)", labels=kafka),
            GaugeMetricFamily(ALLOWED_RATE, "Authorization actions allowed per minute (authorization-allowed-"
                              "rate-per-minute)", labels=kafka),
            GaugeMetricFamily(DENIED_RATE, "Authorization actions denied per minute (authorization-denied-"
                              "rate-per-minute)", labels=kafka),
            CounterMetricFamily(REQUESTS, "Authorization actions decided", labels=["listener"]),
            CounterMetricFamily(ALLOWED, "Authorization actions allowed", labels=["listener"]),
            CounterMetricFamily(DENIED, "Authorization actions denied", labels=["listener"]),
            CounterMetricFamily(DENIED_BY_PRINCIPAL, "Authorization actions denied, by principal (at most "
                                "100 principals; later ones as principal=\"other\")", labels=["listener", "principal"]),
            CounterMetricFamily(DENIED_BY_TOPIC, "TOPIC actions refused to a client, by topic (at most 100 "
                                "topics; later ones as topic=\"other\")", labels=["listener", "topic"]),
        )

    def describe(self) -> Iterator[Metric]:
        yield from self._families()

    def collect(self) -> Iterator[Metric]:
        acls, request_rate, allowed_rate, denied_rate, requests, allowed, denied, by_principal, by_topic = \
            self._families()
        kafka = list(self._kafka_labels)
        acls.add_metric(kafka, self._acl_count())
        a_rate, d_rate = self._window.per_minute(self._clock())
        request_rate.add_metric(kafka, a_rate + d_rate)
        allowed_rate.add_metric(kafka, a_rate)
        denied_rate.add_metric(kafka, d_rate)
        with self._lock:
            tallies = sorted((listener, tuple(tally)) for listener, tally in self._tallies.items())
        for listener, (a, d) in tallies:
            requests.add_metric([listener], a + d)
            allowed.add_metric([listener], a)
            denied.add_metric([listener], d)
        for (listener, principal), count in self._denied_by_principal.items():
            by_principal.add_metric([listener, principal], count)
        for (listener, topic), count in self._denied_by_topic.items():
            by_topic.add_metric([listener, topic], count)
        yield from (acls, request_rate, allowed_rate, denied_rate, requests, allowed, denied, by_principal, by_topic)
