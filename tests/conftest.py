"""Shared fixtures: one tansu broker and one kgw gateway per test session.

* ``tansu``          session: the upstream broker (``.bootstrap``, ``.port``)
* ``gateway``        the session gateway in front of tansu (``.bootstrap``,
                     ``.admin_url``, ``.broker_addresses``, ``.stderr_path``)
* ``start_gateway``  factory: ``start_gateway(extra_yaml_dict)`` runs a
                     dedicated gateway (config = default deep-merged with
                     ``extra``), stopped at the end of the test
* ``topic_name``     a unique, valid topic name per test
* ``kafka``          session: one Apache Kafka KRaft node (``.bootstrap``, ``.node_ids``)
* ``kafka_cluster``  session: three Apache Kafka KRaft nodes (replication factor 3)
* ``kafka_gateway``  factory: ``kafka_gateway(extra, upstream=kafka)`` runs a kgw in front
                     of a Kafka (the single node by default), stopped at the end of the test

Processes are started lazily, only by tests that request them, so unit-only
runs never start tansu or kgw.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import (
    Gateway,
    TansuBroker,
    base_gateway_config,
    deep_merge,
    launch_gateway,
    start_tansu,
)
from tests.support.kafka import KafkaCluster, start_kafka, start_kafka_cluster
from tests.support.processes import ProcessError


@pytest.fixture(scope="session")
def _tansu_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TansuBroker]:
    broker = start_tansu(tmp_path_factory.mktemp("tansu"))
    try:
        yield broker
    finally:
        broker.process.stop()


@pytest.fixture
def tansu(_tansu_session: TansuBroker) -> TansuBroker:
    if not _tansu_session.process.alive():
        raise ProcessError(_tansu_session.process.describe_failure(
            f"tansu died earlier in the session (exit {_tansu_session.process.returncode})"))
    return _tansu_session


@pytest.fixture(scope="session")
def _gateway_session(
    _tansu_session: TansuBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    work = tmp_path_factory.mktemp("kgw")
    config = base_gateway_config(_tansu_session.bootstrap, work / "metadata")
    gw = launch_gateway("kgw-session", config, work)
    try:
        yield gw
    finally:
        rc = gw.stop()
        if rc not in (0, None):
            # Not an assertion (teardown errors are noisy); make it visible.
            print(f"\nkgw session gateway exited with code {rc} on SIGTERM; "
                  f"stderr: {gw.stderr_path}")


@pytest.fixture
def gateway(_gateway_session: Gateway, tansu: TansuBroker) -> Iterator[Gateway]:
    proc = _gateway_session.process
    if not proc.alive():
        raise ProcessError(proc.describe_failure(
            f"the session gateway died earlier in the session (exit {proc.returncode})"))
    yield _gateway_session
    if not proc.alive():
        raise ProcessError(proc.describe_failure(
            f"the session gateway died during this test (exit {proc.returncode})"))


@pytest.fixture
def start_gateway(
    tansu: TansuBroker, tmp_path: Path
) -> Iterator[Callable[..., Gateway]]:
    started: list[Gateway] = []

    def _start(extra: dict[str, Any] | None = None, *, name: str | None = None,
               ready_timeout: float | None = None) -> Gateway:
        gw_name = name or f"kgw-{len(started)}"
        work = tmp_path / gw_name
        config = deep_merge(base_gateway_config(tansu.bootstrap, work / "metadata"),
                            extra or {})
        kwargs = {} if ready_timeout is None else {"ready_timeout": ready_timeout}
        gw = launch_gateway(gw_name, config, work, **kwargs)
        started.append(gw)
        return gw

    _start.started = started  # type: ignore[attr-defined]
    try:
        yield _start
    finally:
        for gw in reversed(started):
            gw.stop()


# -- the Java client (marked tests only: `java`) -------------------------------------------

@pytest.fixture(scope="session")
def java4_check(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """KgwClientCheck on the kafka-clients of the resolved Apache Kafka (4.x), compiled once."""
    from tests.support.java import client_check_command
    from tests.support.kafka import kafka_libs

    return client_check_command(tmp_path_factory.mktemp("java4-classes"), sorted(kafka_libs().glob("*.jar")))


# -- Keycloak (marked tests only: `keycloak`) ----------------------------------------------

_KEYCLOAK: dict[str, Any] = {}


def pytest_collection_finish(session: pytest.Session) -> None:
    """Launch Keycloak as soon as the run is known to need it: it starts while other tests run."""
    if any(item.get_closest_marker("keycloak") for item in session.items) and not session.config.option.collectonly:
        from tests.support.keycloak import launch_keycloak

        work = Path(session.config._tmp_path_factory.mktemp("keycloak"))  # type: ignore[attr-defined]
        try:
            _KEYCLOAK["launched"] = launch_keycloak(work)
        except Exception as e:  # reported by the fixture, where the tests that need it fail
            _KEYCLOAK["error"] = e


@pytest.fixture(scope="session")
def keycloak(tmp_path_factory: pytest.TempPathFactory):
    from tests.support.keycloak import await_keycloak, start_keycloak

    if "error" in _KEYCLOAK:
        raise _KEYCLOAK["error"]
    launched = _KEYCLOAK.pop("launched", None)
    server = await_keycloak(launched) if launched is not None else start_keycloak(tmp_path_factory.mktemp("keycloak"))
    try:
        yield server
    finally:
        server.stop()


# -- Apache Kafka (marked tests only: `kafka`, `kafka_cluster`) ---------------------------

@pytest.fixture(scope="session")
def _kafka_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = start_kafka(tmp_path_factory.mktemp("kafka"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def _kafka_cluster_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    cluster = start_kafka_cluster(tmp_path_factory.mktemp("kafka-cluster"), 3)
    try:
        yield cluster
    finally:
        cluster.stop()


def _alive(cluster: KafkaCluster) -> KafkaCluster:
    if not cluster.alive():
        raise ProcessError(cluster.describe_failure())
    return cluster


@pytest.fixture
def kafka(_kafka_session: KafkaCluster) -> KafkaCluster:
    return _alive(_kafka_session)


@pytest.fixture
def kafka_cluster(_kafka_cluster_session: KafkaCluster) -> KafkaCluster:
    return _alive(_kafka_cluster_session)


@pytest.fixture
def kafka_gateway(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Gateway]]:
    """``kafka_gateway(extra=None, upstream=None, name=None)``: kgw in front of ``upstream``
    (default: the session's single Kafka node)."""
    started: list[Gateway] = []

    def _start(extra: dict[str, Any] | None = None, *, upstream: KafkaCluster | None = None,
               name: str | None = None, args: tuple[str, ...] = ()) -> Gateway:
        upstream = upstream or request.getfixturevalue("kafka")
        gw_name = name or f"kgw-{len(started)}"
        work = tmp_path / gw_name
        config = deep_merge(base_gateway_config(upstream.bootstrap, work / "metadata", upstream.node_ids), extra or {})
        gw = launch_gateway(gw_name, config, work, node_ids=upstream.node_ids, args=args)
        started.append(gw)
        return gw

    _start.started = started  # type: ignore[attr-defined]
    try:
        yield _start
    finally:
        for gw in reversed(started):
            gw.stop()


@pytest.fixture(autouse=True)
def _no_leaked_log_handlers() -> Iterator[None]:
    """A test that runs kgw's CLI in process (``configure_logging``) leaves a root handler on the
    stderr pytest captured for it, closed once the test ends: later tests' log lines would turn
    into "--- Logging error ---" on their own captured stderr.  Handlers a test added (pytest's
    own aside) and the root level are put back."""
    root = logging.getLogger()
    before, level = set(root.handlers), root.level
    yield
    for handler in root.handlers[:]:
        if handler not in before and not type(handler).__module__.startswith("_pytest"):
            root.removeHandler(handler)
    root.setLevel(level)


_TOPIC_BAD = re.compile(r"[^A-Za-z0-9._-]+")


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    stem = _TOPIC_BAD.sub("-", request.node.name).strip("-._")[:180] or "topic"
    return f"{stem}-{uuid.uuid4().hex[:8]}"


# -- diagnostics: attach process stderr tails to failing tests ---------------

@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    report = yield
    if report.failed:
        funcargs = getattr(item, "funcargs", {}) or {}
        procs = []
        gw = funcargs.get("gateway")
        if isinstance(gw, Gateway):
            procs.append(gw.process)
        for factory in (funcargs.get("start_gateway"), funcargs.get("kafka_gateway")):
            for g in getattr(factory, "started", []) or []:
                procs.append(g.process)
        tb = funcargs.get("tansu")
        if isinstance(tb, TansuBroker):
            procs.append(tb.process)
        for name in ("kafka", "kafka_cluster"):
            cluster = funcargs.get(name)
            if isinstance(cluster, KafkaCluster):
                procs.extend(n.process for n in cluster.nodes if n.process is not None)
        for p in procs:
            report.sections.append(
                (f"{p.name} stderr tail ({p.stderr_path})", p.stderr_tail(80) or "<empty>"))
    return report


# -- CI: a skip is a failure ----------------------------------------------------

def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """In CI (CI set, as .ci/run runs) every external tool is installed by `make setup`, so a
    skipped test can only mean a missing feature or a broken set-up: the run fails."""
    import os

    launched = _KEYCLOAK.pop("launched", None)
    if launched is not None:  # launched early, then never needed (a run cut short)
        launched.stop()
    if not os.environ.get("CI") or exitstatus != 0:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped:
        reporter.write_line(f"CI: {len(skipped)} test(s) skipped; in CI nothing may be skipped "
                            "(see the skip reasons above)", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
