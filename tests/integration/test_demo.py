"""`kgw demo`: a local broker (tansu, or Apache Kafka with --broker kafka) and a gateway in front
of it, a sample topic, a clean stop."""

from __future__ import annotations

import os
import re

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.acls import kgw_command
from tests.support.cluster import gateway_env
from tests.support.ports import free_port_base
from tests.support.processes import ManagedProcess

pytestmark = pytest.mark.integration


def _children(pid: int) -> list[int]:
    """Child processes of ``pid`` (of any of its threads)."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/children") as f:
            out += [int(p) for p in f.read().split()]
    return out


@pytest.mark.parametrize("broker", ["tansu", pytest.param("kafka", marks=pytest.mark.kafka)])
def test_demo_serves_the_sample_topic_and_stops_both_on_sigterm(tmp_path, broker):
    node = {"tansu": 111, "kafka": 1}[broker]
    port = free_port_base((0, 1 + node))  # the bootstrap port, and the broker's node at port + 1 + node id
    argv = [*kgw_command(), "demo", "--port", str(port), "--data-dir", str(tmp_path / "data"), "--broker", broker]
    with ManagedProcess("kgw-demo", argv, log_dir=tmp_path, env=gateway_env(), cwd=tmp_path).start() as proc:
        _, line = proc.wait_for_line(r"^bootstrap: ", 60)
        bootstrap = re.match(r"^bootstrap: (\S+)", line).group(1)
        assert bootstrap == f"127.0.0.1:{port}"
        (broker_pid,) = _children(proc.pid)

        producer = Producer({"bootstrap.servers": bootstrap})
        producer.produce("demo", key=b"k", value=b"hello through kgw", partition=0)
        assert producer.flush(20) == 0
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "demo-check", "enable.auto.commit": False})
        consumer.assign([TopicPartition("demo", 0, 0)])
        msg = consumer.poll(20)
        consumer.close()
        assert msg is not None and msg.error() is None and msg.value() == b"hello through kgw"
        metadata = Producer({"bootstrap.servers": bootstrap}).list_topics("demo", timeout=20)
        assert len(metadata.topics["demo"].partitions) == 3
        assert {f"{b.host}:{b.port}" for b in metadata.brokers.values()} == {f"127.0.0.1:{port + 1 + node}"}

        assert proc.stop() == 0, proc.describe_failure("kgw demo did not exit 0 on SIGTERM")
    assert not os.path.exists(f"/proc/{broker_pid}"), f"kgw demo left its {broker} broker running"


def test_the_demo_runs_the_kafka_release_make_setup_resolves():
    from gateway.cli.demo import KAFKA_VERSION
    from tests.support.kafka import kafka_version

    assert KAFKA_VERSION == kafka_version()


def test_demo_without_a_data_dir_removes_its_temporary_directory_on_exit(tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    port = free_port_base((0, 112))  # the bootstrap port and tansu's node 111 at port + 1 + 111
    env = {**gateway_env(), "TMPDIR": str(scratch)}
    with ManagedProcess("kgw-demo", [*kgw_command(), "demo", "--port", str(port)], log_dir=tmp_path, env=env,
                        cwd=tmp_path).start() as proc:
        proc.wait_for_line(r"^bootstrap: ", 60)
        (made,) = [p for p in scratch.iterdir() if p.name.startswith("kgw-demo-")]
        assert (made / "metadata").is_dir()
        assert proc.stop() == 0
    assert not made.exists()
