"""The gateway's Prometheus metrics, on a registry of its own.

Label children are cached per (listener, api) so the per-request cost is a
dictionary lookup and an increment.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, disable_created_metrics

# Counters and histograms get no `<name>_created` series: they double the series count and
# nothing an operator queries uses them (docs/metrics.md).
disable_created_metrics()

__all__ = ["GatewayMetrics"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        if registry is None:
            registry = CollectorRegistry()
            # process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds, ...:
            # what an operator's standard dashboards and alerts expect of any exporter
            ProcessCollector(registry=registry)
        self.registry = registry
        r = self.registry
        self.connections_active = Gauge("kgw_connections_active", "Open client connections", ["listener"], registry=r)
        self.connections_total = Counter("kgw_connections", "Accepted client connections", ["listener"], registry=r)
        self.requests = Counter("kgw_requests", "Requests received", ["listener", "api"], registry=r)
        self.errors = Counter(
            "kgw_request_errors", "Requests that failed or closed the connection", ["listener", "api", "reason"], registry=r
        )
        self.upstream_latency = Histogram(
            "kgw_upstream_latency_seconds", "Time from forwarding a request to its upstream response",
            ["listener", "api"], buckets=_LATENCY_BUCKETS, registry=r,
        )
        self.bytes_in = Counter("kgw_bytes_in", "Bytes received from clients", ["listener"], registry=r)
        self.bytes_out = Counter("kgw_bytes_out", "Bytes sent to clients", ["listener"], registry=r)
        self.bytes_spliced = Counter(
            "kgw_bytes_spliced", "Bytes of Fetch record sets moved from the upstream to clients through a kernel pipe "
            "(never in kgw's memory; also counted in kgw_bytes_out)", ["listener"], registry=r)
        self.ready = Gauge("kgw_listener_ready", "1 when the listener accepts connections", ["listener"], registry=r)
        self._requests: dict[tuple[str, str], Counter] = {}
        self._latency: dict[tuple[str, str], Histogram] = {}

    def request(self, listener: str, api: str):
        child = self._requests.get((listener, api))
        if child is None:
            child = self._requests[(listener, api)] = self.requests.labels(listener, api)
        return child

    def latency(self, listener: str, api: str):
        child = self._latency.get((listener, api))
        if child is None:
            child = self._latency[(listener, api)] = self.upstream_latency.labels(listener, api)
        return child
