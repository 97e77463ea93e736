"""Client quotas enforced as a broker enforces them (KIP-13, KIP-124, KIP-219, KIP-612).

Theory of operation
-------------------
Which quota applies to a connection is Kafka's precedence (:mod:`metadata.client_quotas`),
read from the metadata image, so a quota altered through any gateway sharing the log applies
on the next request.  Each gateway measures the traffic it sees, as each broker does for its
own.

Rates are Kafka's ``Rate`` over a ``SampledStat`` (:class:`Rate`): ``quota.window.num``
samples of ``quota.window.size.seconds``; a sample is complete when its window has passed, a
sample older than all the windows together is reset, and the rate divides the samples' sum
by the time they span, counted as at least ``window.num - 1`` full windows.  One rate per
(quota, user tag, client tag): clients that share a quota share its rate.

Recording a value that takes the rate above the quota gives the client a throttle time,
``(rate - quota) / quota * window`` (Kafka's ``QuotaUtils.throttleTime``), in ms:

* produce: the request's size, recorded when it is forwarded, so that the requests a client
  pipelined behind the one that went over are held (a broker reads one request of a
  connection at a time: the same effect);
* fetch: the response's size, when it completes;
* request_percentage: the time kgw's own threads spent on the request (dispatch and
  completion), as a percentage of one thread over the window; its throttle is at most one
  window (as Kafka's request quota);

and, as a broker does since KIP-219, the response carries ``throttle_time_ms`` (the larger of
the upstream's and kgw's) and the gateway reads nothing more from that connection until the
time has passed, so clients back off by themselves and nothing is dropped.

Bounds: at most ``quotas.max_tracked`` rates are kept (least recently used forgotten: a
client chooses its client id), and per connection the resolved quotas are cached until the
image's ``quota_version`` or the client id changes.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import CollectorRegistry

from metadata.client_quotas import Resolved, resolve, resolve_ip

__all__ = ["ConnectionQuotas", "QuotaManager", "Rate"]

PRODUCE, FETCH = 0, 1
#: quota kinds -> the quota key they are set with
KEYS = {"produce": "producer_byte_rate", "fetch": "consumer_byte_rate", "request": "request_percentage"}
_INT32_MAX = 2**31 - 1


class Rate:
    """Kafka's ``Rate`` of a ``WindowedSum`` (``SampledStat``), in units per second; times in ms."""

    __slots__ = ("samples", "window_ms", "_starts", "_values", "_current")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.samples = samples
        self.window_ms = window_ms
        self._starts: list[float] = []
        self._values: list[float] = []
        self._current = 0

    def record(self, value: float, now_ms: float) -> None:
        starts = self._starts
        if not starts:
            starts.append(now_ms)
            self._values.append(0.0)
        i = self._current
        if now_ms - starts[i] >= self.window_ms:  # the current sample is complete: the next
            i = self._current = (i + 1) % self.samples
            if i >= len(starts):
                starts.append(now_ms)
                self._values.append(0.0)
            else:
                starts[i] = now_ms
                self._values[i] = 0.0
        self._values[i] += value

    def _purge(self, now_ms: float) -> None:
        expire = self.samples * self.window_ms
        starts, values = self._starts, self._values
        for i, start in enumerate(starts):
            if now_ms - start >= expire:
                starts[i] = now_ms
                values[i] = 0.0

    def window_size_ms(self, now_ms: float) -> float:
        """The time the samples span (Kafka's ``Rate.windowSize``)."""
        self._purge(now_ms)
        oldest = min(self._starts) if self._starts else now_ms
        elapsed = now_ms - oldest
        full = int(elapsed // self.window_ms)
        if full < self.samples - 1:
            elapsed += (self.samples - 1 - full) * self.window_ms
        return max(elapsed, 1.0)

    def measure(self, now_ms: float) -> float:
        size = self.window_size_ms(now_ms)  # purges first
        return sum(self._values) / (size / 1000.0)


class _Sensor:
    """One quota's rate, shared by every connection its tags cover."""

    __slots__ = ("rate", "lock")

    def __init__(self, samples: int, window_ms: int) -> None:
        self.rate = Rate(samples, window_ms)
        self.lock = threading.Lock()  # the data-plane thread and Trio record into one sensor

    def record(self, value: float, bound: float, now_ms: float, max_throttle_ms: float | None) -> int:
        """Record ``value``; the throttle time in ms if the rate is now above ``bound``."""
        with self.lock:
            rate = self.rate
            rate.record(value, now_ms)
            measured = rate.measure(now_ms)
            if measured <= bound:
                return 0
            throttle = (measured - bound) / bound * rate.window_size_ms(now_ms)
        if max_throttle_ms is not None:
            throttle = min(throttle, max_throttle_ms)
        return int(round(min(throttle, _INT32_MAX)))  # throttle_time_ms is an int32


class ConnectionQuotas:
    """The quotas that apply to one connection (a user and a client id), with their sensors."""

    __slots__ = ("manager", "version", "client_id", "produce", "fetch", "request")

    def __init__(self, manager: "QuotaManager", version: int, client_id: str,
                 found: Mapping[str, tuple[Resolved, _Sensor] | None]) -> None:
        self.manager = manager
        self.version = version
        self.client_id = client_id
        self.produce = found.get("produce")
        self.fetch = found.get("fetch")
        self.request = found.get("request")

    def on_request(self, api_key: int, request_bytes: int) -> int:
        """Record a request as it is forwarded (produce: its bytes); the throttle time in ms.
        Recorded here, not when it is answered: a client's pipelined requests are held from
        the first one over the quota on (a broker reads one request of a connection at a time)."""
        if api_key == PRODUCE and self.produce is not None:
            return self.manager.record("produce", self.produce, request_bytes, time.monotonic() * 1000.0)
        return 0

    def on_response(self, api_key: int, response_bytes: int, busy_s: float) -> int:
        """Record a completed request (fetch: the response's bytes; kgw's time on it); the
        throttle time in ms (0: none)."""
        now_ms = time.monotonic() * 1000.0
        manager = self.manager
        throttle = 0
        if api_key == FETCH and self.fetch is not None:
            throttle = manager.record("fetch", self.fetch, response_bytes, now_ms)
        if self.request is not None:
            throttle = max(throttle, manager.record("request", self.request, busy_s * 100.0, now_ms))
        return throttle


class QuotaManager:
    """The gateway's quotas: resolution from the image, the shared sensors, the metrics."""

    def __init__(self, image: Any, window_num: int = 11, window_size_seconds: int = 1, max_tracked: int = 100000,
                 registry: CollectorRegistry | None = None) -> None:
        self.image = image
        self.samples = window_num
        self.window_ms = window_size_seconds * 1000
        self.max_tracked = max_tracked
        self._sensors: OrderedDict[tuple[str, str, str], _Sensor] = OrderedDict()
        self._lock = threading.Lock()
        #: (kind, level) -> [throttled responses, throttle ms, recorded amount]
        self._counts: dict[tuple[str, str], list[float]] = {}
        if registry is not None:
            registry.register(_QuotaCollector(self))

    @property
    def version(self) -> int:
        image = self.image
        return -1 if image is None else image.quota_version

    def for_connection(self, user: str, client_id: str | None,
                       current: ConnectionQuotas | None) -> ConnectionQuotas | None:
        """The connection's quotas, ``current`` if still valid; None when none applies."""
        client_id = client_id or ""
        version = self.version
        if current is not None and current.version == version and current.client_id == client_id:
            return current
        quotas = self.image.quotas if self.image is not None else {}
        found: dict[str, tuple[Resolved, _Sensor] | None] = {}
        for kind, key in KEYS.items():
            resolved = resolve(quotas, user, client_id, key)
            found[kind] = None if resolved is None else (resolved, self._sensor(kind, resolved.tags))
        if not any(found.values()):
            return ConnectionQuotas(self, version, client_id, {})
        return ConnectionQuotas(self, version, client_id, found)

    def _sensor(self, kind: str, tags: tuple[str, str]) -> _Sensor:
        key = (kind, *tags)
        with self._lock:
            sensor = self._sensors.get(key)
            if sensor is None:
                sensor = self._sensors[key] = _Sensor(self.samples, self.window_ms)
                while len(self._sensors) > self.max_tracked:
                    self._sensors.popitem(last=False)
            else:
                self._sensors.move_to_end(key)
            return sensor

    def record(self, kind: str, quota: tuple[Resolved, _Sensor], value: float, now_ms: float) -> int:
        resolved, sensor = quota
        limit = self.window_ms if kind == "request" else None
        throttle = sensor.record(value, resolved.value, now_ms, limit)
        with self._lock:
            counts = self._counts.setdefault((kind, resolved.level), [0, 0, 0.0])
            counts[2] += value
            if throttle:
                counts[0] += 1
                counts[1] += throttle
        return throttle

    def connection_throttle_ms(self, address: str) -> int:
        """A new connection from ``address`` (KIP-612): how long to hold it before closing it,
        if its connection creation rate is above its quota (0: accept it)."""
        if self.image is None or not self.image.quotas:
            return 0
        resolved = resolve_ip(self.image.quotas, address)
        if resolved is None:
            return 0
        now_ms = time.monotonic() * 1000.0
        return self.record("connection_creation", (resolved, self._sensor("connection_creation", (address, ""))),
                           1.0, now_ms)

    def counts(self) -> dict[tuple[str, str], list[float]]:
        with self._lock:
            return {k: list(v) for k, v in self._counts.items()}


class _QuotaCollector:
    """``kgw_quota_*`` per quota kind and the precedence level that set the quota (bounded:
    4 kinds x 10 levels, never a user or client id)."""

    def __init__(self, manager: QuotaManager) -> None:
        self.manager = manager

    def collect(self):
        throttled = CounterMetricFamily("kgw_quota_throttled_responses", "Responses that carried a throttle time "
                                        "(or connections held, KIP-612) because a client quota was exceeded",
                                        labels=["quota", "entity"])
        seconds = CounterMetricFamily("kgw_quota_throttle_time_seconds", "Throttle time given to clients over "
                                      "their quota", labels=["quota", "entity"])
        recorded = CounterMetricFamily("kgw_quota_recorded", "What client quotas measured: bytes (produce, "
                                       "fetch), percent-seconds of a thread (request), connections (connection_creation)",
                                       labels=["quota", "entity"])
        counts = self.manager.counts()
        if not counts:  # no quota measured anything yet: the series appear on first use
            return
        for (kind, level), (n, ms, amount) in sorted(counts.items()):
            throttled.add_metric([kind, level], n)
            seconds.add_metric([kind, level], ms / 1000.0)
            recorded.add_metric([kind, level], amount)
        yield throttled
        yield seconds
        yield recorded
