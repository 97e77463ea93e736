"""Client quotas through kgw in front of Apache Kafka 4.x, with Kafka's own tool and real clients.

* ``kafka-configs --alter/--describe`` for users, client ids and both, through kgw, print what
  the same commands print against a Kafka broker directly; a quota set through one gateway is
  described by another sharing the metadata topic, and by it again after its restart;
* a producer over its quota through kgw is held to it (the bytes kgw counted over two whole
  rate windows, 22 s, within 10 % of the quota, the client told with ``throttle_time_ms``) while a
  producer beside it with no quota is not slowed.
"""

from __future__ import annotations

import subprocess
import threading
import time
import urllib.request
import uuid

import pytest
from confluent_kafka import Producer

from tests.integration.test_shared_metadata import PASSWORDS, applied_offset, shared_config, until
from tests.support.acls import kgw_command
from tests.support.cluster import gateway_env
from tests.support.kafka import run_tool

pytestmark = pytest.mark.kafka

CONFIGS = "kafka.admin.ConfigCommand"


def _configs(bootstrap: str, work, *args: str, props=None) -> str:
    extra = ("--command-config", str(props)) if props else ()
    done = run_tool(CONFIGS, "--bootstrap-server", bootstrap, *extra, *args, work=work)
    assert done.returncode == 0, f"kafka-configs {' '.join(args)}: {done.stdout}\n{done.stderr}"
    return done.stdout


def _admin_props(work) -> object:
    path = work / "admin.properties"
    path.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                    "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                    f'username="admin" password="{PASSWORDS["admin"]}";\n')
    return path


def test_kafka_configs_quotas_through_kgw_read_as_on_kafka_and_are_shared_and_durable(kafka, kafka_gateway, tmp_path):
    uid = uuid.uuid4().hex[:8]
    user, client = f"alice-{uid}", f"etl-{uid}"
    gw_a, gw_b = (kafka_gateway(shared_config(f"kgw-md-quotas-{uid}", kafka.node_ids), name=f"kgw-{n}-{uid}")
                  for n in "ab")
    props = _admin_props(tmp_path)
    alterations = [
        ("--entity-type", "users", "--entity-name", user, "--add-config",
         "producer_byte_rate=1048576,consumer_byte_rate=2097152"),
        ("--entity-type", "users", "--entity-name", user, "--entity-type", "clients", "--entity-name", client,
         "--add-config", "request_percentage=50.5"),
        ("--entity-type", "clients", "--entity-name", client, "--add-config", "producer_byte_rate=4096"),
        ("--entity-type", "users", "--entity-name", user, "--delete-config", "consumer_byte_rate"),
    ]
    describes = [
        ("--entity-type", "users", "--entity-name", user),
        ("--entity-type", "users", "--entity-name", user, "--entity-type", "clients", "--entity-name", client),
        ("--entity-type", "clients", "--entity-name", client),
        ("--entity-type", "clients"),
    ]
    try:
        for args in alterations:
            through = _configs(gw_a.bootstrap, tmp_path, "--alter", *args, props=props)
            direct = _configs(kafka.bootstrap, tmp_path, "--alter", *args)
            assert through == direct
        until(lambda: applied_offset(gw_b) >= applied_offset(gw_a), "gateway b to apply a's quotas")

        def described(bootstrap, props=None) -> list[str]:
            out = [_configs(bootstrap, tmp_path, "--describe", *args, props=props) for args in describes]
            # only this test's entities (the broker and other tests may hold others)
            return ["\n".join(line for line in text.splitlines() if uid in line) for text in out]

        expected = described(kafka.bootstrap)
        assert f"Quota configs for user-principal '{user}' are producer_byte_rate=1048576.0" in expected[0]
        assert described(gw_b.bootstrap, props) == expected  # the other gateway, from the shared log
        gw_b.stop()
        again = kafka_gateway(shared_config(f"kgw-md-quotas-{uid}", kafka.node_ids), name=f"kgw-b-{uid}")
        assert described(again.bootstrap, props) == expected  # after a restart

        # kgw's log, in Kafka's metadata-shell view
        done = subprocess.run([*kgw_command(), "metadata", "cat",
                               f"/client-quotas/client-id/{client}/user/{user}/request_percentage",
                               "--config", str(gw_a.config_path)], env=gateway_env(), capture_output=True, text=True,
                              timeout=120)
        assert (done.returncode, done.stdout) == (0, "50.5\n"), done.stderr
    finally:
        for args in alterations[:3]:  # the broker's own copy, removed
            entity = [a for a in args if a not in ("--add-config",)][:-1]
            keys = ",".join(kv.split("=")[0] for kv in args[-1].split(","))
            run_tool(CONFIGS, "--bootstrap-server", kafka.bootstrap, "--alter", *entity, "--delete-config", keys,
                     work=tmp_path)


def _scrape(gw, name: str, labels: dict[str, str]) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"{gw.admin_url}/metrics", timeout=5).read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


class _Producing:
    """A producer sending 1 KiB records as fast as it is let (or at ``pace`` bytes a second),
    counting acknowledged bytes and the throttle times it was told (librdkafka's throttle_cb)."""

    def __init__(self, bootstrap: str, client_id: str, topic: str, pace: float | None = None) -> None:
        self.pace = pace
        self.throttles: list[int] = []
        self.acked: list[tuple[float, int]] = []
        self.producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                                  "batch.size": 16384, "broker.address.family": "v4", "acks": 1,
                                  "throttle_cb": lambda event: self.throttles.append(int(event.throttle_time * 1000))})
        self.topic = topic
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked.append((time.monotonic(), len(msg.value())))

    def _run(self) -> None:
        value = b"q" * 1024
        started, offered = time.monotonic(), 0
        while not self.stop.is_set():
            if self.pace is not None and offered > self.pace * (time.monotonic() - started):
                self.producer.poll(0.005)  # ahead of its pace
                continue
            offered += len(value)
            try:
                self.producer.produce(self.topic, value, on_delivery=self._delivered)
            except BufferError:
                self.producer.poll(0.05)
                continue
            self.producer.poll(0)
        self.producer.purge()
        self.producer.flush(10)
        self.producer = None  # destroyed now (its callbacks refer to this object): no reconnects later

    def rate(self, start: float, end: float) -> float:
        return sum(n for t, n in self.acked if start <= t < end) / (end - start)


def test_a_producer_over_its_quota_is_held_to_it_and_one_beside_it_is_not(kafka, kafka_gateway, tmp_path):
    from confluent_kafka.admin import AdminClient, NewTopic

    uid = uuid.uuid4().hex[:8]
    topic, slow_id, fast_id = f"quota-{uid}", f"slow-{uid}", f"fast-{uid}"
    creator = AdminClient({"bootstrap.servers": kafka.bootstrap})  # kept alive until its future is done
    creator.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    gw = kafka_gateway(name=f"kgw-quota-{uid}")
    quota = 100 * 1024
    _configs(gw.bootstrap, tmp_path, "--alter", "--entity-type", "clients", "--entity-name", slow_id,
             "--add-config", f"producer_byte_rate={quota}")
    # beside it, a client with no quota at ten times the quota (paced: it only has to show that it
    # is not slowed, not fill the broker's disk)
    slow, fast = _Producing(gw.bootstrap, slow_id, topic), _Producing(gw.bootstrap, fast_id, topic, pace=10 * quota)
    labels = {"quota": "produce", "entity": "client-id"}
    started = time.monotonic()
    for p in (slow, fast):
        p.thread.start()
    try:
        # the workload runs (these sleeps are its duration, not a synchronisation): the first
        # window (11 samples of 1 s) lets a client burst, as on Kafka; then two whole windows are
        # measured, so that what leaves the window and what enters it balance
        time.sleep(11)
        mark, counted = time.monotonic(), _scrape(gw, "kgw_quota_recorded_total", labels)
        time.sleep(22)
        end, counted_end = time.monotonic(), _scrape(gw, "kgw_quota_recorded_total", labels)
    finally:
        for p in (slow, fast):
            p.stop.set()
        for p in (slow, fast):
            p.thread.join(30)
    measured = (counted_end - counted) / (end - mark)  # request bytes kgw counted for the client id
    assert measured == pytest.approx(quota, rel=0.10), (measured, quota)
    # its records' bytes, by acknowledgement time (acks come in bursts at the throttles' ends)
    assert slow.rate(mark, end) <= quota * 1.15
    assert slow.throttles and max(slow.throttles) > 0  # told by throttle_time_ms
    assert not fast.throttles and fast.rate(mark, end) > 0.9 * 10 * quota  # not slowed
    assert _scrape(gw, "kgw_quota_throttled_responses_total", labels) > 0
    print(f"\nquota {quota} B/s: counted {measured:.0f} B/s, records {slow.rate(mark, end):.0f} B/s; "
          f"beside it {fast.rate(mark, end):.0f} B/s; {len(slow.throttles)} throttled responses; "
          f"{time.monotonic() - started:.0f} s")
