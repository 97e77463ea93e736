"""The per-request series without prometheus_client's locks: the same exposition as its Counter
and Histogram, and every increment from every thread counted, also after the thread ended."""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from gateway.process.metrics import _LATENCY_BUCKETS, GatewayMetrics, PerThreadCounter, PerThreadHistogram

#: on a bound, between bounds, above the last one, zero
_VALUES = (0.0, 0.0005, 0.0007, 0.001, 0.02, 1.0, 29.9, 30.0, 31.0, 120.0)


def test_the_exposition_is_prometheus_clients_own():
    theirs, ours = CollectorRegistry(), CollectorRegistry()
    counters = (Counter("kgw_t_requests", "Requests received", ["listener", "api"], registry=theirs),
                PerThreadCounter("kgw_t_requests", "Requests received", ("listener", "api"), ours))
    histograms = (Histogram("kgw_t_latency_seconds", "Latency", ["listener", "api"], buckets=_LATENCY_BUCKETS,
                            registry=theirs),
                  PerThreadHistogram("kgw_t_latency_seconds", "Latency", ("listener", "api"), _LATENCY_BUCKETS, ours))
    for counter, histogram in zip(counters, histograms):
        counter.labels("A", "Produce")  # made, never incremented: exposed at 0
        histogram.labels("A", "Produce")
        for i, value in enumerate(_VALUES):
            counter.labels("A", "Fetch").inc()
            counter.labels("B", "Metadata").inc(i)
            histogram.labels("A", "Fetch").observe(value)
            histogram.labels("B", "Metadata").observe(value / 3)
    assert generate_latest(ours).decode() == generate_latest(theirs).decode()
    assert ours.get_sample_value("kgw_t_latency_seconds_count", {"listener": "A", "api": "Fetch"}) == len(_VALUES)


def test_increments_from_many_threads_are_all_counted_and_outlive_their_threads():
    metrics = GatewayMetrics()
    counter = metrics.request("T", "Produce")
    latency = metrics.latency("T", "Produce")
    start = threading.Barrier(4)

    def work():
        start.wait()
        for _ in range(5000):
            counter.inc()
            latency.observe(0.002)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    counter.inc()  # and one from this thread
    labels = {"listener": "T", "api": "Produce"}
    sample = metrics.registry.get_sample_value
    assert sample("kgw_requests_total", labels) == 20001
    assert sample("kgw_upstream_latency_seconds_count", labels) == 20000
    assert sample("kgw_upstream_latency_seconds_bucket", {**labels, "le": "0.0025"}) == 20000
    assert sample("kgw_upstream_latency_seconds_bucket", {**labels, "le": "0.001"}) == 0
    assert abs(sample("kgw_upstream_latency_seconds_sum", labels) - 40.0) < 1e-6
    # the ended threads' tables were folded into the kept total: only this thread's is left
    assert len(metrics.requests._tables) == 1 and len(metrics.upstream_latency._tables) == 0
    assert sample("kgw_requests_total", labels) == 20001
