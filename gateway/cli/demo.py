"""The demo: a local broker as kgw's upstream (tansu, embedded; or Apache Kafka from the jars
`make setup` resolved), and a sample topic."""

from __future__ import annotations

import base64
import logging
import os
import subprocess
import uuid
from datetime import timedelta
from pathlib import Path

import trio

from gateway.upstream.cluster import UpstreamCluster, roundtrip
from protocol.codecs import request_class

__all__ = ["KAFKA_VERSION", "create_topic", "default_kafka_libs", "start_kafka", "start_tansu"]

#: the Apache Kafka release `make setup` resolves (deploy/kafka/pom.xml; a test keeps them equal)
KAFKA_VERSION = "4.3.1"

log = logging.getLogger("kgw.demo")


async def start_tansu(binary: str, port: int, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run tansu on 127.0.0.1:port with in-memory storage; started once it reports ready."""
    argv = [binary, "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
            "--advertised-listener-url", f"tcp://127.0.0.1:{port}", "--storage-engine", "memory://tansu/"]
    process = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.stdout is not None
    seen = b""
    with trio.fail_after(30):
        while b"ready in" not in seen:
            chunk = await process.stdout.receive_some(4096)
            if not chunk:
                raise RuntimeError(f"tansu exited before it was ready: {seen.decode(errors='replace')}")
            seen += chunk
    log.info("tansu broker running on 127.0.0.1:%d (pid %d)", port, process.pid)
    task_status.started(process)
    async for _ in process.stdout:  # keep draining its output
        pass
    await process.wait()


async def create_topic(cluster: UpstreamCluster, name: str, partitions: int = 1) -> None:
    cls = request_class(19, 5)
    topic_cls = cls.__dataclass_fields__["topics"].type.__args__[0]
    request = cls(
        topics=(topic_cls(name=name, num_partitions=partitions, replication_factor=1, assignments=(), configs=()),),
        timeout=timedelta(seconds=10), validate_only=False,
    )
    stream = await cluster.connect_bootstrap()
    async with stream:
        response = await roundtrip(stream, 19, 5, request, cluster.request_timeout_s)
    for topic in response.topics:
        if topic.error_code not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS
            raise RuntimeError(f"creating topic {name} failed with error {topic.error_code}")


def default_kafka_libs() -> Path:
    return Path(os.environ.get("KGW_KAFKA_LIBS") or Path.home() / ".cache" / "kgw" / f"kafka-{KAFKA_VERSION}" / "libs")


async def start_kafka(libs: Path, work: Path, port: int, controller_port: int,
                      task_status=trio.TASK_STATUS_IGNORED) -> None:
    """One Apache Kafka KRaft node (broker + controller, node id 1) on 127.0.0.1:port, its storage
    formatted in ``work``; started once its broker is unfenced."""
    if not any(libs.glob("kafka_2.13-*.jar")):
        raise RuntimeError(f"Apache Kafka {KAFKA_VERSION} is not in {libs}: run `make setup` (or pass --kafka-libs)")
    work.mkdir(parents=True, exist_ok=True)
    props = work / "server.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in {
        "process.roles": "broker,controller", "node.id": 1,
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}", "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": work / "data", "offsets.topic.replication.factor": 1,
        "transaction.state.log.replication.factor": 1, "transaction.state.log.min.isr": 1,
        "share.coordinator.state.topic.replication.factor": 1, "share.coordinator.state.topic.min.isr": 1,
        "group.initial.rebalance.delay.ms": 0,
    }.items()))
    log4j = work / "log4j2.yaml"
    log4j.write_text("Configuration:\n  Appenders:\n    Console: {name: OUT, target: SYSTEM_OUT, PatternLayout: "
                     "{pattern: \"[%d] %p %m (%c)%n\"}}\n  Loggers:\n    Root: {level: WARN, AppenderRef: [{ref: OUT}]}\n"
                     "    Logger: [{name: org.apache.kafka.server.BrokerLifecycleManager, level: INFO}]\n")
    java = ["java", "-Xmx512m", "-cp", f"{libs}/*", f"-Dlog4j2.configurationFile={log4j}"]
    if not (work / "data" / "meta.properties").exists():
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        await trio.run_process([*java, "kafka.tools.StorageTool", "format", f"--cluster-id={cluster_id}", "-c", str(props)],
                               capture_stdout=True, capture_stderr=True)
    process = await trio.lowlevel.open_process([*java, "kafka.Kafka", str(props)], stdout=subprocess.PIPE,
                                               stderr=subprocess.STDOUT)
    assert process.stdout is not None
    seen = b""
    with trio.fail_after(60):
        while b"Transitioning from RECOVERY to RUNNING" not in seen:
            chunk = await process.stdout.receive_some(4096)
            if not chunk:
                raise RuntimeError(f"Kafka exited before it was ready: {seen.decode(errors='replace')[-2000:]}")
            seen += chunk
    log.info("Apache Kafka %s running on 127.0.0.1:%d (pid %d)", KAFKA_VERSION, port, process.pid)
    task_status.started(process)
    async for _ in process.stdout:  # keep draining its output
        pass
    await process.wait()
