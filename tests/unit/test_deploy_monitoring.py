"""The Prometheus alert rules and the Grafana dashboard under deploy/ (#15 item 5): the rules pass
`promtool check rules` and fire as `promtool test rules` expects; every metric the rules and the
dashboard query is one docs/metrics.md documents (which test_metrics_reference.py holds to what
a gateway exports); the dashboard's queries are valid PromQL."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import yaml

from tests.support.metrics_doc import documented

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy" / "prometheus" / "kgw-alerts.yaml"
RULE_TESTS = REPO / "deploy" / "prometheus" / "kgw-alerts.test.yaml"
DASHBOARD = REPO / "deploy" / "grafana" / "kgw-dashboard.json"
_METRIC = re.compile(r"\b((?:kgw|kafka_server_plugins)_[a-z_]+)")
_HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")


def _promtool(*args: str) -> subprocess.CompletedProcess:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: `make setup` installs Debian's prometheus package"
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=60, check=False)


def _queried(expr: str) -> set[str]:
    histograms = {n for n, (kind, _, _) in documented().items() if kind == "histogram"}
    names = set()
    for name in _METRIC.findall(expr):
        for part in _HISTOGRAM_PARTS:
            if name.endswith(part) and name[: -len(part)] in histograms:
                name = name[: -len(part)]
        names.add(name)
    return names


def _dashboard_exprs() -> list[str]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = [t["expr"] for p in panels for t in p["targets"]]
    assert len(exprs) >= 12
    return exprs


def _rule_exprs() -> list[str]:
    return [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def test_alert_rules_pass_promtool_check():
    done = _promtool("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr


def test_alert_rules_fire_as_expected():
    done = _promtool("test", "rules", str(RULE_TESTS))
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_alert_the_issue_asks_for_is_there():
    alerts = {r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    assert {"KgwDown", "KgwNotReady", "KgwUpstreamErrors", "KgwAuthenticationFailureSpike",
            "KgwAuthorizationDenialSpike", "KgwMetadataStale", "KgwAuditEventsDropped"} <= alerts


def test_rules_and_dashboard_query_only_documented_metrics():
    doc = set(documented())
    for where, exprs in (("deploy/prometheus/kgw-alerts.yaml", _rule_exprs()),
                         ("deploy/grafana/kgw-dashboard.json", _dashboard_exprs())):
        unknown = sorted(set().union(*map(_queried, exprs)) - doc)
        assert not unknown, f"{where} queries metrics docs/metrics.md does not list (kgw does not export): {unknown}"


def test_dashboard_queries_are_valid_promql(tmp_path):
    """promtool parses each query as a recording rule (Grafana's variables given values)."""
    def concrete(expr: str) -> str:
        return expr.replace("$__rate_interval", "5m").replace("$job", "kgw").replace("$instance", ".*")

    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"kgw:dashboard_query_{i}", "expr": concrete(e)} for i, e in enumerate(_dashboard_exprs())]}]}
    path = tmp_path / "dashboard-queries.yaml"
    path.write_text(yaml.safe_dump(rules))
    done = _promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
