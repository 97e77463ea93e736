"""Apache Kafka for the tests: one KRaft node, a 3-node KRaft cluster, and Kafka's own tools.

The jars come from ``make setup`` (Maven, ``deploy/kafka/pom.xml``) in
``~/.cache/kgw/kafka-<version>/libs`` (``KGW_KAFKA_LIBS`` overrides).  A node is a
combined broker + controller, its storage formatted with Kafka's storage tool, its heap
capped, its ports free ones below the ephemeral range, its logs under the test's
directory; it is ready when its broker is unfenced (``RECOVERY to RUNNING``), and is
stopped by its own process id.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from .ports import HOST, free_port
from .processes import ManagedProcess, ProcessError

__all__ = ["KafkaCluster", "OAuthListener", "kafka_libs", "kafka_version", "run_tool", "start_kafka", "start_kafka_cluster"]

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 60.0
_READY = r"Transitioning from RECOVERY to RUNNING"

_LOG4J = """Configuration:
  Appenders:
    Console: {name: OUT, target: SYSTEM_OUT, PatternLayout: {pattern: "[%d] %p %m (%c)%n"}}
  Loggers:
    Root: {level: LEVEL, AppenderRef: [{ref: OUT}]}
    Logger:
      - {name: org.apache.kafka.server.BrokerLifecycleManager, level: INFO}
      - {name: kafka.server.BrokerServer, level: INFO}
"""


def kafka_version() -> str:
    pom = (REPO / "deploy" / "kafka" / "pom.xml").read_text()
    return re.search(r"<kafka.version>(.+?)</kafka.version>", pom).group(1)


def kafka_libs() -> Path:
    if shutil.which("java") is None:
        raise ProcessError("java not found: Apache Kafka and its tools need a JDK 17 on PATH")
    libs = Path(os.environ.get("KGW_KAFKA_LIBS") or Path.home() / ".cache" / "kgw" / f"kafka-{kafka_version()}" / "libs")
    if not any(libs.glob("kafka_2.13-*.jar")):
        raise ProcessError(f"Apache Kafka {kafka_version()} is not in {libs}: run `make setup` (it resolves it with Maven)")
    return libs


def _java(libs: Path, log4j: Path, heap: str = "256m") -> list[str]:
    return ["java", f"-Xmx{heap}", f"-Xms{min(int(heap[:-1]), 128)}m", "-XX:+UseSerialGC", "-cp", f"{libs}/*",
            f"-Dlog4j2.configurationFile={log4j}", "-Djava.awt.headless=true"]


def _log4j(directory: Path, level: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"log4j2-{level.lower()}.yaml"
    if not path.exists():
        path.write_text(_LOG4J.replace("LEVEL", level))
    return path


@dataclass(frozen=True)
class OAuthListener:
    """A second client listener, ``OAUTH`` (SASL_PLAINTEXT), that accepts only OAUTHBEARER tokens,
    validated by Kafka's own ``OAuthBearerValidatorCallbackHandler`` (KIP-768) against the
    provider's JWKS; the principal is ``User:<sub_claim>``."""

    jwks_url: str
    issuer: str
    audience: str
    sub_claim: str = "sub"
    #: connections.max.reauth.ms of that listener (KIP-368); 0: sessions do not expire
    max_reauth_ms: int = 0
    #: principals added to super.users (as "User:name")
    super_users: tuple[str, ...] = ()


@dataclass
class KafkaNode:
    node_id: int
    port: int
    controller_port: int
    process: ManagedProcess | None = None
    oauth_port: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"


@dataclass
class KafkaCluster:
    """One or more combined KRaft nodes sharing one cluster id."""

    nodes: list[KafkaNode]
    work: Path
    cluster_id: str
    libs: Path
    extra: dict = field(default_factory=dict)
    #: user -> password: clients connect with SASL/PLAIN and Kafka's own StandardAuthorizer
    #: decides (super user ``admin``; ``allow.everyone.if.no.acl.found=false``)
    sasl_users: dict = field(default_factory=dict)
    oauth: OAuthListener | None = None
    #: more PLAINTEXT listeners of a single node: NAME -> (bind port, advertised "host:port"), e.g.
    #: one advertised at a load balancer in front of it (bench/kafka_perf.py)
    extra_listeners: dict = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return ",".join(n.bootstrap for n in self.nodes)

    @property
    def oauth_bootstrap(self) -> str:
        return ",".join(f"{HOST}:{n.oauth_port}" for n in self.nodes)

    def _jvm(self) -> list[str]:
        if self.oauth is None:
            return []
        # Kafka 4 fetches only from URLs it is told to trust
        return [f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={self.oauth.jwks_url}"]

    @property
    def node_ids(self) -> tuple[int, ...]:
        return tuple(n.node_id for n in self.nodes)

    def node(self, node_id: int) -> KafkaNode:
        return next(n for n in self.nodes if n.node_id == node_id)

    def alive(self) -> bool:
        return all(n.process is not None and n.process.alive() for n in self.nodes)

    def stop(self) -> None:
        for n in self.nodes:
            if n.process is not None:
                n.process.stop(20)

    def kill(self, node_id: int) -> None:
        """SIGKILL one node (its process only; the data stays)."""
        node = self.node(node_id)
        assert node.process is not None
        node.process.kill()

    def restart(self, *node_ids: int) -> None:
        """Start killed or stopped nodes again on their data and ports (all at once, so a
        quorum can form when several are down); returns once every one is running."""
        log4j = _log4j(self.work, "WARN")
        heap = "512m" if len(self.nodes) == 1 else "384m"
        nodes = [self.node(i) for i in node_ids]
        for node in nodes:
            home = self.work / f"node-{node.node_id}"
            node.process = ManagedProcess(f"kafka-{node.node_id}-restarted",
                                          [*_java(self.libs, log4j, heap), *self._jvm(), "kafka.Kafka",
                                           str(home / "server.properties")],
                                          log_dir=home).start()
        for node in nodes:
            node.process.wait_for_line(_READY, READY_TIMEOUT)

    def describe_failure(self) -> str:
        return "\n".join(n.process.describe_failure(f"kafka node {n.node_id}") for n in self.nodes if n.process)


def _properties(cluster: KafkaCluster, node: KafkaNode) -> str:
    voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in cluster.nodes)
    rf = min(3, len(cluster.nodes))
    client = "SASL_PLAINTEXT" if cluster.sasl_users else "PLAINTEXT"
    props = {
        "process.roles": "broker,controller",
        "node.id": node.node_id,
        "controller.quorum.voters": voters,
        "listeners": f"{client}://{HOST}:{node.port},CONTROLLER://{HOST}:{node.controller_port}",
        "advertised.listeners": f"{client}://{HOST}:{node.port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": f"{client}:{client},CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": client,
        "log.dirs": str(cluster.work / f"node-{node.node_id}" / "data"),
        "offsets.topic.replication.factor": rf,
        "offsets.topic.num.partitions": 3,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": min(2, rf),
        "transaction.state.log.num.partitions": 3,
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": min(2, rf),
        "group.initial.rebalance.delay.ms": 0,
        "group.share.enable": "true",
        "num.partitions": 1,
        "default.replication.factor": rf,
        "auto.create.topics.enable": "true",
        "log.segment.bytes": 16 * 1024 * 1024,
        "num.network.threads": 2,
        "num.io.threads": 2,
        "background.threads": 2,
        **cluster.extra,
    }
    if cluster.sasl_users:
        users = " ".join(f'user_{u}="{p}"' for u, p in cluster.sasl_users.items())
        props.update({
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                "org.apache.kafka.common.security.plain.PlainLoginModule required "
                f'username="admin" password="{cluster.sasl_users["admin"]}" {users};',
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            # the controller listener is PLAINTEXT: the broker reaches it as ANONYMOUS
            "super.users": "User:admin;User:ANONYMOUS",
            "allow.everyone.if.no.acl.found": "false",
        })
    for name, (port, advertised) in cluster.extra_listeners.items():
        props["listeners"] += f",{name}://{HOST}:{port}"
        props["advertised.listeners"] += f",{name}://{advertised}"
        props["listener.security.protocol.map"] += f",{name}:PLAINTEXT"
    if cluster.oauth is not None:
        oauth = cluster.oauth
        props["listeners"] += f",OAUTH://{HOST}:{node.oauth_port}"
        props["advertised.listeners"] += f",OAUTH://{HOST}:{node.oauth_port}"
        props["listener.security.protocol.map"] += ",OAUTH:SASL_PLAINTEXT"
        prefix = "listener.name.oauth."
        props.update({
            f"{prefix}sasl.enabled.mechanisms": "OAUTHBEARER",
            f"{prefix}oauthbearer.sasl.jaas.config":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;",
            f"{prefix}oauthbearer.sasl.server.callback.handler.class":
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler",
            "sasl.oauthbearer.jwks.endpoint.url": oauth.jwks_url,
            "sasl.oauthbearer.expected.issuer": oauth.issuer,
            "sasl.oauthbearer.expected.audience": oauth.audience,
            "sasl.oauthbearer.sub.claim.name": oauth.sub_claim,
            f"{prefix}connections.max.reauth.ms": oauth.max_reauth_ms,
        })
        if oauth.super_users:
            props["super.users"] += ";" + ";".join(oauth.super_users)
    return "".join(f"{k}={v}\n" for k, v in props.items())


def _start(cluster: KafkaCluster, heap: str) -> KafkaCluster:
    log4j = _log4j(cluster.work, "WARN")
    for node in cluster.nodes:
        home = cluster.work / f"node-{node.node_id}"
        home.mkdir(parents=True, exist_ok=True)
        props = home / "server.properties"
        props.write_text(_properties(cluster, node))
        fmt = subprocess.run([*_java(cluster.libs, log4j), "kafka.tools.StorageTool", "format", f"--cluster-id={cluster.cluster_id}",
                              "-c", str(props)], capture_output=True, text=True, timeout=120)
        if fmt.returncode != 0:
            raise ProcessError(f"formatting kafka node {node.node_id} failed:\n{fmt.stdout}\n{fmt.stderr}")
    for node in cluster.nodes:
        home = cluster.work / f"node-{node.node_id}"
        node.process = ManagedProcess(f"kafka-{node.node_id}", [*_java(cluster.libs, log4j, heap), *cluster._jvm(),
                                                               "kafka.Kafka", str(home / "server.properties")],
                                      log_dir=home).start()
    try:
        for node in cluster.nodes:
            node.process.wait_for_line(_READY, READY_TIMEOUT)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _new(work: Path, count: int, extra: dict | None, sasl_users: dict | None = None,
         oauth: OAuthListener | None = None) -> KafkaCluster:
    nodes = [KafkaNode(node_id=i, port=free_port(), controller_port=free_port(),
                       oauth_port=free_port() if oauth is not None else None) for i in range(1, count + 1)]
    cid = uuid.uuid4()
    import base64

    cluster_id = base64.urlsafe_b64encode(cid.bytes).decode().rstrip("=")
    return KafkaCluster(nodes, work, cluster_id, kafka_libs(), dict(extra or {}), dict(sasl_users or {}), oauth)


def start_kafka(work: Path, *, extra: dict | None = None, sasl_users: dict | None = None,
                oauth: OAuthListener | None = None, extra_listeners: dict | None = None) -> KafkaCluster:
    """One combined broker + controller (node id 1); with ``sasl_users`` (must include ``admin``)
    a SASL/PLAIN listener and Kafka's own StandardAuthorizer; with ``oauth`` (and ``sasl_users``)
    also an OAUTHBEARER-only listener (:class:`OAuthListener`)."""
    assert oauth is None or sasl_users, "the OAUTH listener sits beside the SASL/PLAIN one"
    cluster = _new(work, 1, extra, sasl_users, oauth)
    cluster.extra_listeners = dict(extra_listeners or {})
    return _start(cluster, "512m")


def start_kafka_cluster(work: Path, count: int = 3, *, extra: dict | None = None) -> KafkaCluster:
    """``count`` combined nodes (ids 1..count), every one a voter: replication factor ``count``."""
    return _start(_new(work, count, extra), "384m")


def run_tool(main_class: str, *args: str, work: Path, timeout: float = 120,
             input: str | None = None) -> subprocess.CompletedProcess:
    """One of Kafka's command-line tools (``org.apache.kafka.tools.TopicCommand``, ...) from the
    resolved jars, as ``kafka-topics.sh`` would run it; WARN-level logs on stderr."""
    libs = kafka_libs()
    log4j = work / "log4j2-tools.yaml"
    if not log4j.exists():
        log4j.write_text(_LOG4J.replace("SYSTEM_OUT", "SYSTEM_ERR").replace("LEVEL", "WARN"))
    return subprocess.run([*_java(libs, log4j), main_class, *args], capture_output=True, text=True,
                          timeout=timeout, input=input)
