"""docs/metrics.md is what a running gateway exports: every series in the table, with its type
and labels, and nothing the table does not name.  The gateway runs with everything that adds
series (the StandardAuthorizer, a SASL listener, a TLS listener, audit publishing) and sees a
denial, a failed login, a refused frame and a certificate reload (SIGHUP), so the series that
appear on first use exist too."""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import urllib.request
import uuid
from datetime import timedelta

import pytest
from confluent_kafka.admin import AdminClient
from prometheus_client.parser import text_string_to_metric_families

from protocol.codecs import nested, request_class
from tests.support.acls import add_acl
from tests.support.kafka_data import authentication_error, confluent_errors
from tests.support.raw_kafka import RawConnection
from tests.support.metrics_doc import documented
from gateway.cli.dev_certs import write_dev_certs
from tests.support.ports import HOST, free_port, free_port_base
from tests.support.processes import wait_until

pytestmark = pytest.mark.integration

def exported(text: str) -> dict[str, tuple[str, frozenset[str]]]:
    """name as queried (counters with _total) -> (type, label names)."""
    found = {}
    for family in text_string_to_metric_families(text):
        name = family.name + "_total" if family.type == "counter" else family.name
        labels = frozenset(k for s in family.samples for k in s.labels if k != "le")
        found[name] = (family.type, labels)
    return found


def _scram_entry(name: str, password: str) -> dict:
    import base64

    from authz.credentials import SaslMechanism, ScramCredential

    c = ScramCredential.from_password(name, password, SaslMechanism.SCRAM_SHA_512, iterations=4096)
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return {"name": name, "mechanism": "SCRAM-SHA-512", "salt": b64(c.salt), "iterations": c.iterations,
            "stored_key": b64(c.stored_key), "server_key": b64(c.server_key)}


def _scrape_when(admin_url: str, needle: str) -> str | None:
    with urllib.request.urlopen(admin_url + "/metrics", timeout=10) as r:
        text = r.read().decode()
    return text if needle in text else None


def test_the_metrics_reference_is_what_a_gateway_exports(start_gateway, tmp_path):
    uid = uuid.uuid4().hex[:8]
    sasl = {"name": "SASL", "security_protocol": "SASL_PLAINTEXT", "host": HOST, "port": free_port(),
            "advertised_host": HOST, "broker_port_base": free_port_base(), "sasl": {"mechanisms": ["SCRAM-SHA-512"]}}
    external = {"name": "EXTERNAL", "security_protocol": "PLAINTEXT", "host": HOST, "port": free_port(),
                "advertised_host": HOST, "broker_port_base": free_port_base()}
    certs = write_dev_certs(tmp_path / "certs")
    tls = {"name": "SSL", "security_protocol": "SSL", "host": HOST, "port": free_port(), "advertised_host": HOST,
           "broker_port_base": free_port_base(),
           "tls": {"cert_file": str(certs["gateway.pem"]), "key_file": str(certs["gateway-key.pem"])}}
    name = f"metrics-ref-{uid}"
    # ANONYMOUS may alter client quotas (CLUSTER ALTER_CONFIGS): a quota is set below
    add_acl(tmp_path / name / "metadata", "--operation", "ALTER_CONFIGS", "--cluster")
    gw = start_gateway({
        "listeners": [external, sasl, tls],
        "authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer",
                       "config": {"allow.everyone.if.no.acl.found": False}},
        "audit": {"publish": True, "topic": f"kgw-audit-{uid}", "linger_ms": 100},
        "users": {"scram": [_scram_entry("somebody", "somebody-pw")]},
    }, name=name)
    admin = AdminClient({"bootstrap.servers": gw.bootstrap})
    admin.list_topics(f"denied-{uid}", timeout=20)  # ANONYMOUS has no ACL: denied
    errors = confluent_errors({"bootstrap.servers": gw.listeners["SASL"], "security.protocol": "SASL_PLAINTEXT",
                               "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "nobody",
                               "sasl.password": "x"}, authentication_error)
    assert authentication_error(errors)
    logged_in = AdminClient({"bootstrap.servers": gw.listeners["SASL"], "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "somebody",
                             "sasl.password": "somebody-pw"})
    logged_in.list_topics(timeout=20)  # a successful login: its counter appears
    host, port = gw.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as raw:  # API key 32000: closed, counted
        raw.sendall(struct.pack(">ihhih", 10, 32000, 0, 1, -1))
        assert raw.recv(1) == b""
    # a request quota of a millionth of a thread for every client id: the next request is throttled
    alter = request_class(49, 1)
    entry, entity, op = nested(alter, "entries"), nested(nested(alter, "entries"), "entity"), \
        nested(nested(alter, "entries"), "ops")
    with RawConnection(gw.bootstrap) as conn:
        (result,) = conn.call(49, 1, alter(validate_only=False, entries=(entry(
            entity=(entity(entity_type="client-id", entity_name=None),),
            ops=(op(key="request_percentage", value=0.0001, remove=False),)),))).entries
        assert int(result.error_code) == 0, result
        # (the first one opens the upstream connection: kgw's time on it is counted from the second)
        assert max(conn.call(16, 4, request_class(16, 4)(states_filter=())).throttle_time for _ in range(2)) \
            > timedelta(0)
    os.kill(gw.process.pid, signal.SIGHUP)  # a certificate reload: its counter appears
    text = wait_until(lambda: _scrape_when(gw.admin_url, "kgw_tls_certificate_reloads_total{"), 20,
                      message="the reload counted")
    doc = documented()
    got = exported(text)
    supervisor_only = {name for name, (_, _, meaning) in doc.items() if meaning.startswith("supervisor only")}
    assert supervisor_only == {"kgw_worker_up", "kgw_worker_restarts_total"}
    undocumented = sorted(set(got) - set(doc))
    assert not undocumented, f"exported but not in docs/metrics.md: {undocumented}"
    missing = sorted(set(doc) - set(got) - supervisor_only)
    assert not missing, f"in docs/metrics.md but not exported: {missing}"
    wrong = {name: (got[name], doc[name][:2]) for name in got if got[name] != doc[name][:2]}
    assert not wrong, f"type or labels differ from docs/metrics.md (exported, documented): {wrong}"
    assert "_created" not in text
