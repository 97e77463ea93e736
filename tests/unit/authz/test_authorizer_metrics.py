"""AuthorizerMetrics: Kafka's windowed rates (2 x 30 s samples) and the bounded principal and topic labels."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from authz.metrics import AuthorizerMetrics

KAFKA = {"class": "StandardAuthorizer", "config": "authorizer.class.name", "role": "broker"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _metrics(**kw):
    clock = Clock()
    registry = CollectorRegistry()
    metrics = AuthorizerMetrics(lambda: 7, clock=clock, **kw)
    metrics.register(registry)
    return metrics, clock, lambda name, **labels: registry.get_sample_value(name, labels)


def test_rates_follow_kafkas_sampled_window():
    metrics, clock, value = _metrics()
    rate = "kafka_server_plugins_authorization_request_rate_per_minute"
    assert value(rate, **KAFKA) == 0
    metrics.record("L", 30, 0)
    assert value(rate, **KAFKA) == pytest.approx(60)  # 30 over at least one 30 s window
    clock.now += 45  # a second window begins; the first still counts
    metrics.record("L", 0, 15)
    assert value(rate, **KAFKA) == pytest.approx(45 * 60 / 45)
    assert value("kafka_server_plugins_authorization_denied_rate_per_minute", **KAFKA) == pytest.approx(20)
    clock.now += 40  # the first window (85 s old) is out; the second (40 s old) stays
    assert value(rate, **KAFKA) == pytest.approx(15 * 60 / 40)
    clock.now += 100  # nothing recorded for two windows: no rate
    assert value(rate, **KAFKA) == 0
    assert value("kgw_authorizer_authorization_requests_total", listener="L") == 45  # counters never decay
    assert value("kafka_server_plugins_acls_total_count", **KAFKA) == 7


def test_denials_by_principal_are_bounded():
    metrics, _, value = _metrics(principal_labels=2)
    metrics.record("L", 1, 0, "User:allowed-only")  # no denial: no label spent
    for principal in ("User:a", "User:b", "User:c", "User:d"):
        metrics.record("L", 0, 2, principal)
    name = "kgw_authorizer_denied_by_principal_total"
    assert value(name, listener="L", principal="User:a") == 2
    assert value(name, listener="L", principal="User:b") == 2
    assert value(name, listener="L", principal="other") == 4
    assert value(name, listener="L", principal="User:allowed-only") is None


def test_denials_by_topic_are_bounded():
    metrics, _, value = _metrics(topic_labels=2)
    metrics.record("L", 3, 0, "User:a")  # nothing refused: no label spent
    metrics.record("L", 0, 3, "User:a", ["t1", "t2", "t1"])
    metrics.record("M", 0, 3, "User:a", ["t3", "t1", "t4"])  # past the bound: "other"
    name = "kgw_authorizer_denied_by_topic_total"
    assert value(name, listener="L", topic="t1") == 2
    assert value(name, listener="L", topic="t2") == 1
    assert value(name, listener="M", topic="t1") == 1
    assert value(name, listener="M", topic="other") == 2
    assert value(name, listener="M", topic="t3") is None
