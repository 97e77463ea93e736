"""kcat (librdkafka CLI) through the gateway: metadata listing (-L), keyed
produce (-P -K:), consume back (-C -e -f) with exact comparison, offset query
(-Q) and a balanced consumer group (-G).

kcat cannot create topics; the topic is created through the gateway with
confluent-kafka's AdminClient first."""

from __future__ import annotations

import json
import shutil
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support.kafka_data import (
    PARTITIONS,
    Rec,
    assert_gateway_addresses,
    assert_same_records,
    expected_end_offsets,
    expected_records,
)
from tests.support.processes import run_tool

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kcat") is None,
                       reason="kcat not installed (make setup installs it)"),
]

# Short timeouts everywhere; -m is kcat's metadata timeout in seconds.
X = ["-X", "socket.timeout.ms=10000", "-X", "broker.address.family=v4", "-m", "10"]
GROUP_X = ["-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=1000",
           "-X", "max.poll.interval.ms=10000"]
FMT = "%p|%o|%k|%s\\n"  # kcat's -f understands \n escapes


def kcat(*args: str, input: bytes | None = None, timeout: float = 30):
    return run_tool(["kcat", *args], input=input, timeout=timeout)


def parse_records(out: bytes) -> list[Rec]:
    recs = []
    for line in out.decode().splitlines():
        if not line:
            continue
        p, o, k, v = line.split("|", 3)
        recs.append(Rec(int(p), int(o), k.encode(), v.encode()))
    return recs


def test_kcat_roundtrip(gateway, tansu, topic_name):
    bs = gateway.bootstrap
    expected = expected_records(topic_name, "kcat")

    admin = AdminClient({"bootstrap.servers": bs, "broker.address.family": "v4"})
    assert admin.create_topics([NewTopic(topic_name, PARTITIONS, 1)])[topic_name] \
        .result(timeout=15) is None

    # -- metadata listing: only gateway addresses ---------------------------
    md = json.loads(kcat("-b", bs, "-L", "-J", "-t", topic_name, *X).stdout)
    assert_gateway_addresses([(b["id"], *b["name"].rsplit(":", 1)) for b in md["brokers"]],
                             gateway, tansu.port, "kcat -L")
    [t] = md["topics"]
    assert t["topic"] == topic_name and "error" not in t, t
    assert sorted(p["partition"] for p in t["partitions"]) == list(range(PARTITIONS))
    for p in t["partitions"]:
        assert p["leader"] in gateway.broker_addresses, p
    # The plain-text listing, as people read it, shows the same.
    text = kcat("-b", bs, "-L", "-t", topic_name, *X).stdout.decode()
    assert f"broker 111 at {gateway.broker_addresses[111]}" in text, text
    assert f":{tansu.port}" not in text, text

    # -- produce: one kcat -P per record (one record per batch) -------------
    for rec in expected:
        kcat("-b", bs, "-P", "-t", topic_name, "-p", str(rec.partition), "-K:", *X,
             input=rec.key + b":" + rec.value + b"\n")

    # -- consume everything back from the beginning -------------------------
    out = kcat("-b", bs, "-C", "-t", topic_name, "-o", "beginning", "-e", "-f", FMT, *X).stdout
    assert_same_records(parse_records(out), expected, "kcat -C -o beginning -e")

    # ... and from an offset in one partition
    out = kcat("-b", bs, "-C", "-t", topic_name, "-p", "1", "-o", "1", "-e", "-f", FMT,
               *X).stdout
    assert_same_records(parse_records(out),
                        [r for r in expected if r.partition == 1 and r.offset >= 1],
                        "kcat -C -p 1 -o 1 -e")

    # -- offsets: -Q with timestamp -2 (earliest) / -1 (latest) ---------------
    def query(ts: int) -> dict[int, int]:
        args = []
        for p in range(PARTITIONS):
            args += ["-t", f"{topic_name}:{p}:{ts}"]
        # {"<topic>": {"topic": "<topic>", "<p>": {"partition": p, "offset": o}, ...}}
        res = json.loads(kcat("-b", bs, "-Q", "-J", *args, *X).stdout)[topic_name]
        return {int(e["partition"]): int(e["offset"])
                for k, e in res.items() if k != "topic"}

    assert query(-2) == {p: 0 for p in range(PARTITIONS)}
    assert query(-1) == expected_end_offsets()

    # -- balanced consumer group ----------------------------------------------
    group = f"{topic_name}-group-{uuid.uuid4().hex[:6]}"
    out = kcat("-b", bs, "-G", group, topic_name, "-X", "auto.offset.reset=earliest",
               "-e", "-f", FMT, *GROUP_X, *X, timeout=60).stdout
    assert_same_records(parse_records(out), expected, f"kcat -G {group}")
