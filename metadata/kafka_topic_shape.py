"""The shape of the shared metadata backend's two topics (``metadata/kafka_topic.py``): created
when missing (one partition, replication factor ``min(3, brokers)`` unless configured,
``min.insync.replicas`` 2 capped at it, no unclean leader election, no time or size retention on
the log, compaction on the snapshots), and refused when an existing topic breaks the order or the
durability the log relies on (:class:`MetadataTopicShapeError`, every problem named).

Blocking librdkafka admin calls: run from the store's loading thread.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from metadata.kafka_messages import KafkaTopicSettings, MetadataTopicShapeError
from metadata.store import MetadataStoreUnavailableError

__all__ = ["ensure_topics"]

log = logging.getLogger("kgw.metadata.kafka")


def ensure_topics(admin: Any, s: KafkaTopicSettings, stop: threading.Event) -> None:
    """Create the two topics when missing; refuse a shape that breaks order or durability.
    ``stop`` set: give up waiting (the store is closing)."""
    from confluent_kafka.admin import ConfigResource, NewTopic  # type: ignore[attr-defined]

    metadata = admin.list_topics(timeout=s.load_timeout_s)
    brokers = len(metadata.brokers)
    rf = s.replication_factor or min(3, brokers)
    isr = min(s.min_insync_replicas, rf)
    wanted = {
        s.topic: {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"},
        s.snapshots: {"cleanup.policy": "compact"},
    }
    missing = [t for t in wanted if t not in metadata.topics or metadata.topics[t].error is not None]
    if missing:
        futures = admin.create_topics([
            NewTopic(t, 1, rf, config={**wanted[t], "min.insync.replicas": str(isr),
                                       "unclean.leader.election.enable": "false"}) for t in missing])
        for topic, future in futures.items():
            try:
                future.result(timeout=s.load_timeout_s)
                log.info("created metadata topic %s (1 partition, replication factor %d, "
                         "min.insync.replicas %d)", topic, rf, isr)
            except Exception as exc:  # noqa: BLE001 - a peer may have created it meanwhile
                if "TOPIC_ALREADY_EXISTS" not in str(exc):
                    raise MetadataStoreUnavailableError(f"cannot create metadata topic {topic}: {exc}") from exc
        deadline = time.monotonic() + s.load_timeout_s
        while True:  # a topic just created reaches the metadata of every broker a moment later
            metadata = admin.list_topics(timeout=s.load_timeout_s)
            if all(t in metadata.topics and metadata.topics[t].error is None
                   and 0 in metadata.topics[t].partitions for t in wanted):
                break
            if time.monotonic() > deadline:
                raise MetadataStoreUnavailableError(f"the metadata topics {', '.join(missing)} were created "
                                                    "but do not appear in the cluster's metadata")
            stop.wait(0.1)
    described = _describe_configs(admin, s, stop, [ConfigResource("topic", t) for t in wanted])
    problems = []
    for topic, expected in wanted.items():
        partitions = metadata.topics[topic].partitions
        configs = {k: v.value for k, v in described[topic].items()}
        if len(partitions) != 1:
            problems.append(f"{topic} has {len(partitions)} partitions (one order needs exactly 1)")
        replicas = len(partitions[0].replicas) if 0 in partitions else 0
        if replicas < rf:
            problems.append(f"{topic} has replication factor {replicas}, at least {rf} is needed")
        if int(configs.get("min.insync.replicas") or 1) < isr:
            problems.append(f"{topic} has min.insync.replicas {configs.get('min.insync.replicas')}, "
                            f"at least {isr} is needed")
        if configs.get("unclean.leader.election.enable") == "true":
            problems.append(f"{topic} allows unclean leader election (acknowledged records could be lost)")
        for key, value in expected.items():
            if configs.get(key) != value:
                problems.append(f"{topic} has {key}={configs.get(key)}, kgw needs {value}")
    if problems:
        raise MetadataTopicShapeError("the metadata topics break ordering or durability: " + "; ".join(problems))

def _describe_configs(admin: Any, s: KafkaTopicSettings, stop: threading.Event, resources: list[Any]) -> dict[str, Any]:
    """Topic configs by name; retried while the broker asked does not know a topic just
    created by this or another instance yet (UNKNOWN_TOPIC_OR_PART)."""
    deadline = time.monotonic() + s.load_timeout_s
    while True:
        try:
            return {r.name: f.result(timeout=s.load_timeout_s)
                    for r, f in admin.describe_configs(resources).items()}
        except Exception as exc:  # noqa: BLE001 - KafkaException
            error = exc.args[0] if exc.args else None
            if "UNKNOWN_TOPIC_OR_PART" not in str(error) or time.monotonic() > deadline:
                raise MetadataStoreUnavailableError(f"cannot describe the metadata topics: {exc}") from exc
            stop.wait(0.2)
