"""One TLS port for a 3-node Apache Kafka cluster: kgw routes by the TLS server name (SNI).

Real clients (confluent-kafka, librdkafka) resolve ``bootstrap.kgw.test`` and
``broker-<N>.kgw.test`` to 127.0.0.1 through an /etc/hosts of their own: they run in a mount
namespace made for them (``unshare --mount``, Debian's util-linux, root in CI) where a hosts file
of the test is bind-mounted over /etc/hosts.  They produce and consume with hostname
verification against a wildcard certificate, before and after a leader change, and every broker
address they were given is a name on kgw's one port."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from gateway.cli.dev_certs import issue, make_ca, name
from tests.integration.test_kafka_cluster import COMMON, T, _leader, move_leader
from tests.support.cluster import gateway_env
from tests.support.ports import HOST, free_port

pytestmark = pytest.mark.kafka_cluster

DOMAIN = "kgw.test"

CLIENT = textwrap.dedent('''
    import json, sys
    from confluent_kafka import Consumer, Producer
    bootstrap, ca, topic, first, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    tls = {"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": ca,
           "ssl.endpoint.identification.algorithm": "https", "broker.address.family": "v4"}
    errors = []
    producer = Producer({**tls, "acks": "all", "message.timeout.ms": 30000})
    for i in range(first, first + count):
        producer.produce(topic, str(i).encode(), on_delivery=lambda err, _m: errors.append(str(err)) if err else None)
    producer.flush(60)
    brokers = sorted(f"{b.host}:{b.port}" for b in producer.list_topics(timeout=20).brokers.values())
    consumer = Consumer({**tls, "group.id": f"sni-{topic}-{first}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got = []
    for _ in range(120):
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            got.append(int(message.value()))
        if len(got) >= first + count:
            break
    consumer.close()
    print(json.dumps({"errors": errors, "brokers": brokers, "consumed": sorted(got)}))
''')


def _in_namespace(hosts, argv: list[str]) -> dict:
    unshare = shutil.which("unshare")
    assert unshare, "unshare (util-linux) is needed to give the clients their own /etc/hosts"
    script = " ".join(f"'{a}'" for a in argv)
    done = subprocess.run([unshare, "--mount", "sh", "-c", f"mount --bind '{hosts}' /etc/hosts && exec {script}"],
                          capture_output=True, text=True, timeout=180, env=gateway_env())
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_one_port_serves_every_broker_by_name_across_a_leader_change(kafka_cluster, kafka_gateway, topic_name,
                                                                     tmp_path):
    pki = tmp_path / "pki"
    pki.mkdir()
    ca = make_ca(pki, "ca", "kgw SNI test CA")
    cert = issue(pki, "wildcard", ca, name(CN=f"*.{DOMAIN}"), server=True, hosts=(f"*.{DOMAIN}",))
    port = free_port()
    gw = kafka_gateway({"listeners": [{
        "name": "SNI", "security_protocol": "SSL", "host": HOST, "port": port, "advertised_port": port,
        "tls": {"cert_file": str(cert.cert_file), "key_file": str(cert.key_file)},
        "sni": {"bootstrap_host": f"bootstrap.{DOMAIN}", "broker_host_pattern": f"broker-{{node_id}}.{DOMAIN}"}}]},
        upstream=kafka_cluster)
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n127.0.0.1 " + " ".join(
        [f"bootstrap.{DOMAIN}"] + [f"broker-{n}.{DOMAIN}" for n in kafka_cluster.node_ids]) + "\n")
    direct = AdminClient({"bootstrap.servers": kafka_cluster.bootstrap, **COMMON})
    direct.create_topics([NewTopic(topic_name, 1, 3)], operation_timeout=15)[topic_name].result(timeout=T)
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    client = [sys.executable, str(script), f"bootstrap.{DOMAIN}:{port}", str(ca.cert_file), topic_name]

    before = _in_namespace(hosts, [*client, "0", "20"])
    assert before["errors"] == [] and before["consumed"] == list(range(20)), before
    assert before["brokers"] == sorted(f"broker-{n}.{DOMAIN}:{port}" for n in kafka_cluster.node_ids)

    old = _leader(direct, topic_name)[0]
    new = move_leader(kafka_cluster, direct, topic_name, tmp_path)
    assert new != old
    after = _in_namespace(hosts, [*client, "20", "20"])
    assert after["errors"] == [] and after["consumed"] == list(range(40)), after
    log = gw.stderr_path.read_text()
    assert "is not served on this listener" not in log, log[-3000:]
