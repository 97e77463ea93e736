"""The gateway's Prometheus metrics, on a registry of its own.

Label children are cached per (listener, api) so the per-request cost is a
dictionary lookup and an increment.

The two series every request touches, ``kgw_requests_total`` and
``kgw_upstream_latency_seconds``, are not prometheus_client's Counter and Histogram: theirs
take a lock and a dozen Python calls per increment (about 19 µs of a small request's ~350 µs of
gateway CPU on the developers' machine, docs/benchmarks.md).  :class:`PerThreadCounter` and
:class:`PerThreadHistogram` keep each thread's counts apart (the data plane, the Trio thread
and worker threads each add only to their own, so nothing is locked and nothing lost) and sum
them when the registry is collected, so a scrape, or ``get_sample_value``, right after a
response counts it, as before; the exposition is the same text.  On the data plane the C steps
(gateway/connection/_plane_steps.c) add to a child's row for their thread themselves, as its
``inc`` and ``observe`` do, once that thread has one (named at the end of this module).
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from typing import Any, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, ProcessCollector, disable_created_metrics
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

# Counters and histograms get no `<name>_created` series: they double the series count and
# nothing an operator queries uses them (docs/metrics.md).
disable_created_metrics()

__all__ = ["GatewayMetrics", "PerThreadCounter", "PerThreadHistogram"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class _PerThread:
    """Rows of numbers by label values, one table per thread that adds to them.

    A thread's first addition makes its table (under a lock, once); later ones touch only that
    table.  Collecting copies each table (a C-level copy, whole under the GIL), sums them, and
    folds the tables of threads that have ended into one kept total, so short-lived worker
    threads do not make the list grow.
    """

    _child: type[_Child]

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...], width: int,
                 registry: CollectorRegistry) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = labelnames
        self._width = width
        self._local = threading.local()
        self._lock = threading.Lock()
        self._tables: list[tuple[threading.Thread, dict[tuple[str, ...], list[float]]]] = []
        self._ended: dict[tuple[str, ...], list[float]] = {}
        #: every label set a child was made for: exposed (at 0) before its first increment
        self._known: dict[tuple[str, ...], None] = {}
        registry.register(self)

    def labels(self, *values: str) -> Any:
        self._known[values] = None
        return self._child(self, values)

    def _new_row(self, key: tuple[str, ...]) -> list[float]:
        """This thread's row for ``key``, made (the children find it themselves after that)."""
        try:
            table = self._local.table
        except AttributeError:
            table = self._local.table = {}
            with self._lock:
                self._tables.append((threading.current_thread(), table))
        row = table.get(key)
        if row is None:
            row = table[key] = [0] * self._width
        return row

    def totals(self) -> dict[tuple[str, ...], list[float]]:
        """Every known label set's row, summed over the threads."""
        with self._lock:
            for entry in [e for e in self._tables if not e[0].is_alive()]:  # (their tables are final)
                self._tables.remove(entry)
                _add_rows(self._ended, entry[1])
            tables = [table for _thread, table in self._tables]
        out = {key: [0] * self._width for key in list(self._known)}
        _add_rows(out, self._ended)
        for table in tables:
            _add_rows(out, table)
        return out

    def _family(self) -> Metric:
        raise NotImplementedError

    def describe(self) -> list[Metric]:
        return [self._family()]  # (the names, for the registry's checks and name filters)


def _add_rows(into: dict[tuple[str, ...], list[float]], table: dict[tuple[str, ...], list[float]]) -> None:
    for key, row in list(table.items()):  # (list(): copied at once, whatever the owner adds meanwhile)
        total = into.get(key)
        if total is None:
            into[key] = list(row)
        else:
            for i, value in enumerate(list(row)):
                total[i] += value


class _Child:
    """One label set's handle: finds this thread's row."""

    __slots__ = ("_family", "_key")

    def __init__(self, family: _PerThread, key: tuple[str, ...]) -> None:
        self._family = family
        self._key = key


class _CounterChild(_Child):
    __slots__ = ()

    def inc(self, amount: float = 1) -> None:
        try:  # (this thread's row, looked up in line: every request counts one)
            row = self._family._local.table[self._key]
        except (AttributeError, KeyError):  # this thread's first time (for this key)
            row = self._family._new_row(self._key)
        row[0] += amount


class _HistogramChild(_Child):
    __slots__ = ("_bounds",)

    def __init__(self, family: PerThreadHistogram, key: tuple[str, ...]) -> None:
        super().__init__(family, key)
        self._bounds = family.bounds

    def observe(self, amount: float) -> None:
        try:  # (in line, as inc)
            row = self._family._local.table[self._key]
        except (AttributeError, KeyError):
            row = self._family._new_row(self._key)
        row[bisect_left(self._bounds, amount)] += 1
        row[-1] += amount


class PerThreadCounter(_PerThread):
    """A labelled counter (``<name>_total``) whose children's ``inc`` takes no lock."""

    _child = _CounterChild

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...], registry: CollectorRegistry) -> None:
        super().__init__(name, documentation, labelnames, 1, registry)

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self.name, self.documentation, labels=list(self.labelnames))

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for key, (value,) in self.totals().items():
            family.add_metric(list(key), value)
        yield family


class PerThreadHistogram(_PerThread):
    """A labelled histogram whose children's ``observe`` takes no lock: per label set, a count
    per bucket (the first bound at or above the value, as prometheus_client's) and the sum."""

    _child = _HistogramChild

    def __init__(self, name: str, documentation: str, labelnames: tuple[str, ...], buckets: tuple[float, ...],
                 registry: CollectorRegistry) -> None:
        self.bounds = tuple(float(b) for b in buckets)
        self._les = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
        super().__init__(name, documentation, labelnames, len(self.bounds) + 2, registry)  # buckets, +Inf, sum

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self.name, self.documentation, labels=list(self.labelnames))

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for key, row in self.totals().items():
            cumulative, buckets = 0.0, []
            for le, count in zip(self._les, row):
                cumulative += count
                buckets.append((le, cumulative))
            family.add_metric(list(key), buckets, row[-1])
        yield family


class ListenerSeries:
    """One listener's children of the series every connection touches (``prometheus_client``'s
    ``labels`` takes a lock and builds a key on every call: seven of them per connection)."""

    __slots__ = ("connections", "active", "bytes_in", "bytes_out", "bytes_spliced")

    def __init__(self, metrics: "GatewayMetrics", listener: str) -> None:
        self.connections = metrics.connections_total.labels(listener)
        self.active = metrics.connections_active.labels(listener)
        self.bytes_in = metrics.bytes_in.labels(listener)
        self.bytes_out = metrics.bytes_out.labels(listener)
        self.bytes_spliced = metrics.bytes_spliced.labels(listener)


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
        self.requests = PerThreadCounter("kgw_requests", "Requests received", ("listener", "api"), r)
        self.errors = Counter(
            "kgw_request_errors", "Requests that failed or closed the connection", ["listener", "api", "reason"], registry=r
        )
        self.upstream_latency = PerThreadHistogram(
            "kgw_upstream_latency_seconds", "Time from forwarding a request to its upstream response",
            ("listener", "api"), _LATENCY_BUCKETS, r,
        )
        self.bytes_in = Counter("kgw_bytes_in", "Bytes received from clients", ["listener"], registry=r)
        self.bytes_out = Counter("kgw_bytes_out", "Bytes sent to clients", ["listener"], registry=r)
        self.bytes_spliced = Counter(
            "kgw_bytes_spliced", "Bytes of Fetch record sets moved from the upstream to clients through a kernel pipe "
            "(never in kgw's memory; also counted in kgw_bytes_out)", ["listener"], registry=r)
        self.ready = Gauge("kgw_listener_ready", "1 when the listener accepts connections", ["listener"], registry=r)
        self._requests: dict[tuple[str, str], Any] = {}
        self._latency: dict[tuple[str, str], Any] = {}
        self._listeners: dict[str, ListenerSeries] = {}

    def listener(self, name: str) -> ListenerSeries:
        series = self._listeners.get(name)
        if series is None:
            series = self._listeners[name] = ListenerSeries(self, name)
        return series

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


try:  # the data plane's C counts what a request deferred and observes its response's latency: it may
    # add to these children's rows itself, as their inc and observe do
    from gateway.connection import _plane_steps
except ImportError:  # pragma: no cover - a build without a compiler: every child counts in Python
    pass
else:
    _plane_steps.configure_metrics(_CounterChild, _HistogramChild)
