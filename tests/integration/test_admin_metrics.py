"""The admin endpoint: /metrics carries gateway and authorizer metrics, /healthz and /readyz answer."""

from __future__ import annotations

import re
import urllib.request

import pytest
from confluent_kafka.admin import AdminClient

from tests.support.acls import seed_acls

pytestmark = pytest.mark.integration

def _get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.status, r.read().decode()


def _value(metrics: str, name: str, **labels: str) -> float:
    wanted = ",".join(f'{k}="{v}"' for k, v in labels.items())
    pattern = re.compile(rf"^{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", re.M)
    for m in pattern.finditer(metrics):
        if all(f'{k}="{v}"' in (m.group(1) or "") for k, v in labels.items()):
            return float(m.group(2))
    raise AssertionError(f"{name}{{{wanted}}} not in /metrics")


def test_metrics_count_requests_connections_and_authorizer_decisions(start_gateway, tmp_path, topic_name):
    data_dir = tmp_path / "metrics" / "metadata"
    seed_acls(data_dir, ["--cluster", "--operation", "DESCRIBE"], ["--topic", topic_name, "--operation", "DESCRIBE"])
    gw = start_gateway({"authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer"}}, name="metrics")
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    admin.list_topics(topic_name, timeout=20)  # one allowed DESCRIBE
    admin.list_topics("not-allowed-" + topic_name, timeout=20)  # one denied DESCRIBE
    status, text = _get(gw.admin_url + "/metrics")
    assert status == 200
    assert _value(text, "kafka_server_plugins_acls_total_count", **{"class": "StandardAuthorizer"}) == 2
    assert _value(text, "kgw_requests_total", listener="EXTERNAL", api="Metadata") >= 2
    assert _value(text, "kgw_connections_total", listener="EXTERNAL") >= 1
    assert _value(text, "kgw_bytes_in_total", listener="EXTERNAL") > 0
    assert _value(text, "kgw_upstream_latency_seconds_count", listener="EXTERNAL", api="Metadata") >= 1
    assert _value(text, "kgw_authorizer_denied_by_principal_total", listener="EXTERNAL", principal="User:ANONYMOUS") >= 1
    assert _value(text, "kgw_authorizer_denied_by_topic_total", listener="EXTERNAL", topic="not-allowed-" + topic_name) >= 1
    assert _value(text, "kafka_server_plugins_authorization_denied_rate_per_minute") > 0
    assert "_created" not in text
    assert _value(text, "kgw_authorizer_authorization_requests_total", listener="EXTERNAL") >= 2
    assert _value(text, "kgw_authorizer_authorization_allowed_total", listener="EXTERNAL") >= 1
    assert _value(text, "kgw_authorizer_authorization_denied_total", listener="EXTERNAL") >= 1
    assert _get(gw.admin_url + "/healthz")[0] == 200
    status, body = _get(gw.admin_url + "/readyz")
    assert status == 200 and "EXTERNAL ready" in body
