"""``kgw audit verify``: check the audit topic against the chains and their checkpoints.

Reads every record of the audit topic (all partitions, from the earliest offset to the end as
of the start) with kgw's own upstream identity (``upstream`` in the gateway YAML, librdkafka),
reads the chains' checkpoints from the metadata log (read-only, also while gateways run), and
reports per chain what :func:`authz.audit_chain.verify` found, with the first bad offset.
Exit status 0 when nothing shows tampering, 1 when something does, 2 when the topic or the log
cannot be read.

``kgw audit checkpoints`` prints the checkpoints alone, as JSON (chain -> run -> checkpoint), for
the Spark audit job's ``--checkpoints``: the job reads the topic, not the metadata log.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import trio

from authz.audit_chain import CHECKPOINT_RESOURCE_TYPE, verify
from gateway.process.metadata_backend import librdkafka_settings, metadata_location, offline_image

__all__ = ["register", "read_topic"]


def read_topic(client_settings: dict[str, Any], topic: str, timeout_s: float = 30.0) -> list[tuple[int, int, bytes]]:
    """Every record of ``topic`` as (partition, offset, value): each partition read from its
    beginning until the broker says its end is reached."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    consumer = Consumer({**client_settings, "group.id": "kgw-audit-verify", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "enable.partition.eof": True})
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s)
        described = metadata.topics.get(topic)
        if described is None or described.error is not None:
            raise RuntimeError(f"audit topic {topic!r} cannot be read: {described.error if described else 'missing'}")
        partitions = sorted(described.partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        records: list[tuple[int, int, bytes]] = []
        done: set[int] = set()
        while len(done) < len(partitions):
            message = consumer.poll(timeout_s)
            if message is None:
                raise RuntimeError(f"reading {topic} stalled for {timeout_s:g}s")
            partition = message.partition()
            if message.error() is not None:
                if message.error().code() == -191:  # _PARTITION_EOF: its end as of now
                    done.add(partition)
                    continue
                raise KafkaException(message.error())
            if partition not in done:
                records.append((partition, message.offset(), message.value() or b""))
        return records
    finally:
        consumer.close()


async def _checkpoints(config: Any, data_dir: Path | None) -> dict[str, dict[str, str]]:
    async with offline_image(config, data_dir, read_only=True) as image:
        return {name: dict(entries) for (rtype, name), entries in image.configs.items()
                if rtype == CHECKPOINT_RESOURCE_TYPE}


def cmd_audit(args) -> int:
    from configs.yaml_reader import load_config

    config = load_config(args.config)
    topic = args.topic or config.audit.topic
    if args.action == "checkpoints":
        try:
            md_config, data_dir = metadata_location(args.config, None)
            checkpoints = trio.run(_checkpoints, md_config, data_dir)
        except Exception as e:  # noqa: BLE001 - told to the operator, exit 2
            print(f"kgw audit checkpoints: {e}", file=sys.stderr)
            return 2
        print(json.dumps(checkpoints, indent=2, sort_keys=True))
        return 0
    try:
        records = read_topic(librdkafka_settings(config.upstream), topic)
        md_config, data_dir = metadata_location(args.config, None)
        checkpoints = trio.run(_checkpoints, md_config, data_dir)
    except Exception as e:  # noqa: BLE001 - told to the operator, exit 2
        print(f"kgw audit verify: {e}", file=sys.stderr)
        return 2
    report = verify(records, checkpoints)
    if args.json:
        print(json.dumps({"ok": report.ok, "records": len(records), "chains": report.chains,
                          "findings": [dataclasses.asdict(f) for f in report.findings]},
                         indent=2, sort_keys=True))
        return 0 if report.ok else 1
    print(f"{topic}: {len(records)} records, {len(report.chains)} chain(s)")
    for chain, summary in sorted(report.chains.items()):
        bad = report.first_bad(chain)
        state = "TAMPERED, first bad offset " + bad if bad else "intact"
        print(f"chain {chain}: {summary['events']} events in {summary['runs']} run(s): {state}")
    for finding in report.findings:
        mark = "!!" if finding.tampering else "--"
        where = f" at {finding.where}" if finding.where else ""
        print(f"  {mark} {finding.chain}: {finding.kind}{where}: {finding.detail}")
    return 0 if report.ok else 1


def register(sub) -> None:
    p = sub.add_parser("audit", help="verify the audit topic's tamper evidence, or print its checkpoints",
                       description="verify: read the whole audit topic and the audit chains' checkpoints in the "
                       "metadata log; report every edited, inserted, deleted, rewritten or reordered event per chain "
                       "with the first bad offset (partition:offset), and restarts, duplicates and the unverified tail "
                       "after the last checkpoint for the record. Exit 0: intact; 1: tampered; 2: unreadable. "
                       "checkpoints: print the chains' checkpoints as JSON (the Spark audit job's --checkpoints).")
    p.add_argument("action", choices=["verify", "checkpoints"])
    p.add_argument("--config", required=True, help="gateway YAML (upstream, audit.topic, metadata)")
    p.add_argument("--topic", help="the topic to check (default: audit.topic)")
    p.add_argument("--json", action="store_true", help="the report as JSON")
    p.set_defaults(func=cmd_audit)
