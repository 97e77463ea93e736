"""Authentication through kgw, over the wire: TLS, mutual TLS, SASL PLAIN / SCRAM, principals, bad input.

One gateway (module scope) serves five listeners in front of tansu::

    EXTERNAL  PLAINTEXT                      (test set-up: topic creation)
    SSL       SSL, client_auth none           principal User:ANONYMOUS
    MTLS      SSL, client_auth required       principal from the certificate, mapping rule with /U
    SASL      SASL_PLAINTEXT  PLAIN, SCRAM-SHA-256, SCRAM-SHA-512
    SASLSSL   SASL_SSL        the same mechanisms over TLS

The certificates (CA, server with DNS:localhost and IP:127.0.0.1, clients, a
rogue client from another CA) are generated at run time with ``cryptography``.
The authorizer is :class:`tests.support.recording_authorizer.RecordingAuthorizer`
(allow everyone, no ACLs): every test finds the lines of its own client id in
the recording and asserts the principal the authorizer saw, with the listener
name and security protocol of the client's listener.

Clients: confluent-kafka and kafka-python for the whole matrix (produce one
record, read it back by assign), the Java client for SSL, mTLS, PLAIN and
SCRAM-SHA-256/512.  A second gateway shows a custom principal builder and a
custom authorizer from YAML deciding on a field only the custom principal
carries.  Bad input (wrong password, unknown user, unknown mechanism, a
certificate from another CA, no certificate, a PLAINTEXT client on a TLS port,
a request before authentication) is checked for what the client sees, the
gateway's log line, and another client on the same listener still being served.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import re
import socket
import struct
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition

from authz.credentials import PlainCredential, SaslMechanism, ScramCredential
from gateway.upstream.cluster import encode_request
from protocol.codecs import decode_response, request_class
from tests.support.kafka_data import authentication_error as _authentication_error
from tests.support.kafka_data import confluent_errors
from tests.support.cluster import TANSU_NODE_ID, base_gateway_config, launch_gateway
from tests.support.java import compile_java, java_tools, kafka_classpath
from tests.support.ports import HOST, free_port, free_port_base
from tests.support.processes import run_tool
from tests.support.recording_authorizer import read_records
from tests.unit.gateway.certs import Issued, make_ca

pytestmark = pytest.mark.integration

T = 20  # seconds for one client operation
JAVA_DIR = Path(__file__).parent / "java"
#: a lower-casing rule for OU=ops, an upper-casing one for any other OU, DEFAULT for the rest
MAPPING_RULES = "RULE:^CN=([^,]*),OU=(ops),.*$/$1.$2/L,RULE:^CN=([^,]*),OU=([^,]*),.*$/$1@$2/U,DEFAULT"
MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
PASSWORDS = {"paul": "paul-pw", "sam": "sam-pw"}  # paul: PLAIN; sam: SCRAM-SHA-256 and -512
USER_OF = {"PLAIN": "paul", "SCRAM-SHA-256": "sam", "SCRAM-SHA-512": "sam"}


# --------------------------------------------------------------------------- PKI


@dataclass(frozen=True)
class Certs:
    dir: Path
    ca: Issued
    other_ca: Issued
    server: Issued
    alice: Issued        # CN=alice,OU=apps,O=Example,C=US from ca
    paula: Issued        # CN=paula,OU=payments,O=Example,C=US from ca
    olga: Issued         # CN=Olga,OU=ops,O=Example,C=US from ca (the /L rule)
    nobody: Issued       # CN=Nobody,O=Example,C=US from ca (no OU: DEFAULT)
    rogue: Issued        # CN=alice,OU=apps,... from other_ca

    def java_keystore(self, who: Issued) -> Path:
        """A PEM 'keystore' for the Java client: private key then certificate."""
        path = self.dir / f"{who.cert_file.stem}-keystore.pem"
        if not path.exists():
            path.write_bytes(who.key_file.read_bytes() + who.cert_file.read_bytes())
        return path


def _subject(cn: str, ou: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
                      x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example"),
                      x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _issue(directory: Path, stem: str, ca: Issued, subject: x509.Name, *, server: bool) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(ca.cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=7))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(
            [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False)
    )
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(HOST))]), critical=False)
    cert = builder.sign(ca.key, hashes.SHA256())
    cert_file, key_file = directory / f"{stem}.pem", directory / f"{stem}-key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return Issued(key, cert, cert_file, key_file)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    d = tmp_path_factory.mktemp("auth-pki")
    ca = make_ca(d, "ca", "kgw auth test CA")
    other = make_ca(d, "other-ca", "someone else's CA")
    return Certs(
        dir=d, ca=ca, other_ca=other,
        server=_issue(d, "server", ca, x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]), server=True),
        alice=_issue(d, "alice", ca, _subject("alice", "apps"), server=False),
        paula=_issue(d, "paula", ca, _subject("paula", "payments"), server=False),
        olga=_issue(d, "olga", ca, _subject("Olga", "ops"), server=False),
        nobody=_issue(d, "nobody", ca, x509.Name([x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
                                                  x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example"),
                                                  x509.NameAttribute(NameOID.COMMON_NAME, "Nobody")]), server=False),
        rogue=_issue(d, "rogue", other, _subject("alice", "apps"), server=False),
    )


# --------------------------------------------------------------------------- gateway


def _listener(name: str, protocol: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "security_protocol": protocol, "host": HOST, "port": free_port(),
            "advertised_host": HOST, "broker_port_base": free_port_base((TANSU_NODE_ID,)), **extra}


def _tls(certs: Certs, client_auth: str = "none") -> dict[str, Any]:
    out = {"cert_file": str(certs.server.cert_file), "key_file": str(certs.server.key_file),
           "client_auth": client_auth}
    if client_auth != "none":
        out.update(ca_file=str(certs.ca.cert_file), principal_mapping_rules=MAPPING_RULES)
    return out


def _b64(b: bytes) -> str:
    import base64

    return base64.b64encode(b).decode()


def _users_yaml() -> dict[str, Any]:
    scram = []
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        c = ScramCredential.from_password("sam", PASSWORDS["sam"], SaslMechanism(mechanism))
        scram.append({"name": c.name, "mechanism": mechanism, "salt": _b64(c.salt), "iterations": c.iterations,
                      "stored_key": _b64(c.stored_key), "server_key": _b64(c.server_key)})
    plain = [{"name": "paul", "password_hash": PlainCredential.hash_password(PASSWORDS["paul"], iterations=20_000)}]
    return {"scram": scram, "plain": plain}


@dataclass
class AuthGateway:
    gw: Any
    recording: Path

    def addr(self, listener: str) -> str:
        return self.gw.listeners[listener]

    def log_mark(self) -> int:
        return self.gw.stderr_path.stat().st_size

    def wait_for_log(self, pattern: str, mark: int, timeout: float = 10.0) -> str:
        """The first stderr line after ``mark`` matching ``pattern`` (regex)."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            with open(self.gw.stderr_path, "rb") as f:
                f.seek(mark)
                text = f.read().decode("utf-8", "replace")
            for line in text.splitlines():
                if rx.search(line):
                    return line
            if time.monotonic() > deadline:
                raise AssertionError(f"no gateway log line matching {pattern!r}; log since mark:\n{text[-4000:]}")
            time.sleep(0.1)


@pytest.fixture(scope="module")
def auth_gw(_tansu_session, certs, tmp_path_factory) -> AuthGateway:
    work = tmp_path_factory.mktemp("kgw-auth")
    recording = work / "authz.jsonl"
    config = base_gateway_config(_tansu_session.bootstrap, work / "metadata")
    external = config["listeners"][0]
    sasl = {"mechanisms": MECHANISMS}
    config["listeners"] = [
        external,
        _listener("SSL", "SSL", tls=_tls(certs)),
        _listener("MTLS", "SSL", tls=_tls(certs, "required")),
        _listener("SASL", "SASL_PLAINTEXT", sasl=sasl),
        _listener("SASLSSL", "SASL_SSL", sasl=sasl, tls=_tls(certs)),
    ]
    config["users"] = _users_yaml()
    config["authorizer"] = {"class_name": "tests.support.recording_authorizer:RecordingAuthorizer",
                            "config": {"recording.file": str(recording), "allow.everyone.if.no.acl.found": True}}
    gw = launch_gateway("kgw-auth", config, work)
    try:
        yield AuthGateway(gw, recording)
    finally:
        gw.stop()


@pytest.fixture
def topic(auth_gw: AuthGateway, topic_name: str) -> str:
    admin = AdminClient({"bootstrap.servers": auth_gw.addr("EXTERNAL"), "broker.address.family": "v4"})
    admin.create_topics([NewTopic(topic_name, 1, 1)], operation_timeout=10, request_timeout=T)[topic_name].result(T)
    return topic_name


# --------------------------------------------------------------------------- client settings


@dataclass(frozen=True)
class Case:
    listener: str
    protocol: str
    mechanism: str | None = None
    user: str | None = None
    password: str | None = None
    cert: str | None = None  # "alice", "paula", "rogue"

    @property
    def id(self) -> str:
        return f"{self.listener}-{self.mechanism}" if self.mechanism else self.listener


def _case(listener: str, mechanism: str | None = None, **kw: Any) -> Case:
    protocol = {"SSL": "SSL", "MTLS": "SSL", "SASL": "SASL_PLAINTEXT", "SASLSSL": "SASL_SSL",
                "EXTERNAL": "PLAINTEXT"}[listener]
    if mechanism is not None:
        kw.setdefault("user", USER_OF[mechanism])
        kw.setdefault("password", PASSWORDS.get(kw["user"], "no-password"))
    if listener == "MTLS":
        kw.setdefault("cert", "alice")
    return Case(listener, protocol, mechanism, **kw)


MATRIX = [_case("SSL"), _case("MTLS")] + [_case(lst, m) for lst in ("SASL", "SASLSSL") for m in MECHANISMS]


def expected_principal(case: Case) -> str:
    if case.mechanism:
        return f"User:{case.user}"
    if case.cert == "alice":
        return "User:ALICE@APPS"  # the mapping rule, upper-cased by /U
    return "User:ANONYMOUS"


def confluent_conf(auth_gw: AuthGateway, certs: Certs, case: Case, client_id: str, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap.servers": auth_gw.addr(case.listener), "client.id": client_id,
                            "security.protocol": case.protocol, "broker.address.family": "v4",
                            "socket.timeout.ms": 10000, "reconnect.backoff.max.ms": 500}
    if case.protocol.endswith("SSL"):
        conf["ssl.ca.location"] = str(certs.ca.cert_file)
    if case.cert:
        issued = getattr(certs, case.cert)
        conf.update({"ssl.certificate.location": str(issued.cert_file), "ssl.key.location": str(issued.key_file)})
    if case.mechanism:
        conf.update({"sasl.mechanisms": case.mechanism, "sasl.username": case.user, "sasl.password": case.password})
    conf.update(extra)
    return conf


def kafka_python_conf(auth_gw: AuthGateway, certs: Certs, case: Case, client_id: str) -> dict[str, Any]:
    conf: dict[str, Any] = {"bootstrap_servers": auth_gw.addr(case.listener), "client_id": client_id,
                            "security_protocol": case.protocol, "request_timeout_ms": 15000,
                            "reconnect_backoff_max_ms": 500, "retry_backoff_ms": 100}
    if case.protocol.endswith("SSL"):
        conf["ssl_cafile"] = str(certs.ca.cert_file)
    if case.cert:
        issued = getattr(certs, case.cert)
        conf.update(ssl_certfile=str(issued.cert_file), ssl_keyfile=str(issued.key_file))
    if case.mechanism:
        conf.update(sasl_mechanism=case.mechanism, sasl_plain_username=case.user, sasl_plain_password=case.password)
    return conf


def java_properties(auth_gw: AuthGateway, certs: Certs, case: Case, path: Path) -> Path:
    props = {"bootstrap.servers": auth_gw.addr(case.listener), "security.protocol": case.protocol}
    if case.protocol.endswith("SSL"):
        props.update({"ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca.cert_file)})
    if case.cert:
        props.update({"ssl.keystore.type": "PEM",
                      "ssl.keystore.location": str(certs.java_keystore(getattr(certs, case.cert)))})
    if case.mechanism:
        module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if case.mechanism == "PLAIN"
                  else "org.apache.kafka.common.security.scram.ScramLoginModule")
        props.update({"sasl.mechanism": case.mechanism,
                      "sasl.jaas.config": f'{module} required username="{case.user}" password="{case.password}";'})
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()).replace("\\", "\\\\"))
    return path


# --------------------------------------------------------------------------- clients


def confluent_roundtrip(conf: dict[str, Any], topic: str) -> bytes:
    value = f"confluent {conf['client.id']}".encode()
    producer = Producer({**conf, "linger.ms": 0, "acks": "all"})
    reports: list = []
    producer.produce(topic, key=b"k", value=value, partition=0, on_delivery=lambda e, m: reports.append((e, m)))
    assert producer.flush(T) == 0, "producer did not deliver in time"
    [(err, msg)] = reports
    assert err is None, err
    consumer = Consumer({**conf, "group.id": f"unused-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, msg.offset())])
        deadline = time.monotonic() + T
        while time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None and m.error() is None:
                assert m.value() == value
                return value
            if m is not None and m.error().code() != KafkaError._PARTITION_EOF:
                raise AssertionError(m.error())
        raise AssertionError("record not read back in time")
    finally:
        consumer.close()


def kafka_python_roundtrip(conf: dict[str, Any], topic: str) -> bytes:
    value = f"kafka-python {conf['client_id']}".encode()
    producer = KafkaProducer(acks="all", linger_ms=0, **conf)
    try:
        md = producer.send(topic, key=b"k", value=value, partition=0).get(timeout=T)
    finally:
        producer.close(timeout=5)
    consumer = KafkaConsumer(enable_auto_commit=False, group_id=None, **conf)
    try:
        tp = KpTopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, md.offset)
        deadline = time.monotonic() + T
        while time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                for r in records:
                    assert r.value == value
                    return value
        raise AssertionError("record not read back in time")
    finally:
        consumer.close()


def assert_principal_seen(auth_gw: AuthGateway, client_id: str, case: Case, principal: str | None = None,
                          principal_class: str = "authz.principal.KafkaPrincipal") -> list[dict]:
    """The authorizer saw ``client_id``'s Produce and Fetch with the right principal and listener."""
    principal = principal or expected_principal(case)
    lines = read_records(auth_gw.recording, client_id=client_id)
    assert lines, f"the authorizer recorded nothing for client id {client_id}"
    assert {line["request_type"] for line in lines} >= {0, 1}, "expected Produce (0) and Fetch (1) to be authorized"
    seen = {(line["principal"], line["principal_class"], line["listener_name"], line["security_protocol"],
             line["client_address"]) for line in lines}
    assert seen == {(principal, principal_class, case.listener, case.protocol, HOST)}, seen
    return lines


# --------------------------------------------------------------------------- the matrix


@pytest.mark.parametrize("case", MATRIX, ids=lambda c: c.id)
def test_confluent_kafka(auth_gw, certs, topic, case):
    client_id = f"ck-{case.id}-{uuid.uuid4().hex[:6]}"
    confluent_roundtrip(confluent_conf(auth_gw, certs, case, client_id), topic)
    assert_principal_seen(auth_gw, client_id, case)


@pytest.mark.parametrize("case", MATRIX, ids=lambda c: c.id)
def test_kafka_python(auth_gw, certs, topic, case):
    client_id = f"kp-{case.id}-{uuid.uuid4().hex[:6]}"
    kafka_python_roundtrip(kafka_python_conf(auth_gw, certs, case, client_id), topic)
    assert_principal_seen(auth_gw, client_id, case)


@pytest.mark.parametrize("cert, principal", [
    ("paula", "User:PAULA@PAYMENTS"),             # the second rule, /U
    ("olga", "User:olga.ops"),                    # the first rule, /L (the CN is "Olga")
    ("nobody", "User:CN=Nobody,O=Example,C=US"),  # no rule matches: DEFAULT, the whole DN
])
def test_mtls_principal_with_l_and_u_rules_and_no_match(auth_gw, certs, topic, cert, principal):
    case = _case("MTLS", cert=cert)
    client_id = f"ck-{cert}-{uuid.uuid4().hex[:6]}"
    confluent_roundtrip(confluent_conf(auth_gw, certs, case, client_id), topic)
    assert_principal_seen(auth_gw, client_id, case, principal=principal)


# --------------------------------------------------------------------------- Java


@pytest.fixture(scope="module")
def java_auth(tmp_path_factory) -> list[str]:
    if java_tools() is None:
        pytest.skip("javac/java not on PATH")
    cp = kafka_classpath()
    out = compile_java([JAVA_DIR / "KgwAuthCheck.java"], tmp_path_factory.mktemp("java-auth"), cp)
    _javac, java = java_tools()  # type: ignore[misc]
    return [java, "-Xss1m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-cp", os.pathsep.join([str(out), *map(str, cp)]), "KgwAuthCheck"]


def run_java(java_auth: list[str], *args: str) -> list[dict]:
    cp = run_tool([*java_auth, *args], timeout=120, check=False)
    stdout = cp.stdout.decode("utf-8", "replace")
    stderr = cp.stderr.decode("utf-8", "replace")
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    context = f"\n--- java stdout ---\n{stdout[-4000:]}\n--- java stderr ---\n{stderr[-4000:]}"
    assert cp.returncode == 0 and events and events[-1]["event"] == "done", f"java failed{context}"
    return events


JAVA_MATRIX = [_case("SSL"), _case("MTLS"), _case("SASL", "PLAIN"), _case("SASL", "SCRAM-SHA-256"),
               _case("SASLSSL", "SCRAM-SHA-512"), _case("SASLSSL", "SCRAM-SHA-256")]


@pytest.mark.java
@pytest.mark.parametrize("case", JAVA_MATRIX, ids=lambda c: c.id)
def test_java_client(auth_gw, certs, topic, case, java_auth, tmp_path):
    client_id = f"java-{case.id}-{uuid.uuid4().hex[:6]}"
    props = java_properties(auth_gw, certs, case, tmp_path / "client.properties")
    events = run_java(java_auth, str(props), "roundtrip", topic, client_id)
    assert [e["event"] for e in events] == ["produced", "consumed", "done"]
    assert events[1]["value"] == f"hello from java {client_id}"
    assert_principal_seen(auth_gw, client_id, case)


@pytest.mark.java
def test_java_alter_scram_then_login_at_once(auth_gw, certs, topic, java_auth, tmp_path):
    """A SCRAM user created over the wire (Java Admin) logs in on the very next connection."""
    admin_case = _case("SASLSSL", "SCRAM-SHA-512")
    props = java_properties(auth_gw, certs, admin_case, tmp_path / "admin.properties")
    user, password = f"wire-{uuid.uuid4().hex[:6]}", "wire-pw"
    events = run_java(java_auth, str(props), "alter-scram", user, password, "SCRAM-SHA-256")
    assert {"event": "described", "user": user, "mechanism": "SCRAM-SHA-256", "iterations": 4096} in events
    case = _case("SASL", "SCRAM-SHA-256", user=user, password=password)
    client_id = f"ck-wire-{uuid.uuid4().hex[:6]}"
    confluent_roundtrip(confluent_conf(auth_gw, certs, case, client_id), topic)
    assert_principal_seen(auth_gw, client_id, case)


# --------------------------------------------------------------------------- raw wire helpers


class Raw:
    """A blocking Kafka connection for byte-exact checks of the gateway's answers."""

    def __init__(self, address: str) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.correlation_id = 0

    def request(self, api_key: int, version: int, body: Any) -> Any | None:
        """Send one request; the decoded response, or None when the gateway closed the connection."""
        self.correlation_id += 1
        self.sock.sendall(encode_request(api_key, version, self.correlation_id, body))
        frame = self._frame()
        if frame is None:
            return None
        flexible = request_class(api_key, version).__flexible__ and api_key != 18
        return decode_response(api_key, version, frame, 9 if flexible else 8)

    def closed(self) -> bool:
        """True if the gateway closed the connection (EOF or reset) within the socket timeout."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def _frame(self) -> bytes | None:
        head = self._exactly(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        body = self._exactly(size)
        return None if body is None else head + body

    def _exactly(self, n: int) -> bytes | None:
        buf = b""
        while len(buf) < n:
            try:
                chunk = self.sock.recv(n - len(buf))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()


def sasl_plain(raw: Raw, user: str, password: str):
    handshake = raw.request(17, 1, request_class(17, 1)(mechanism="PLAIN"))
    assert handshake is not None and handshake.error_code == 0
    token = b"\x00" + user.encode() + b"\x00" + password.encode()
    return raw.request(36, 2, request_class(36, 2)(auth_bytes=token))


def good_client_still_served(auth_gw: AuthGateway, certs: Certs, listener: str, topic: str) -> None:
    """Another client on the same listener produces and reads back a record."""
    case = {"SASL": _case("SASL", "SCRAM-SHA-256"), "SASLSSL": _case("SASLSSL", "PLAIN"),
            "MTLS": _case("MTLS"), "SSL": _case("SSL")}[listener]
    client_id = f"ck-good-{uuid.uuid4().hex[:6]}"
    confluent_roundtrip(confluent_conf(auth_gw, certs, case, client_id), topic)
    assert_principal_seen(auth_gw, client_id, case)


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_wrong_password(auth_gw, certs, topic, mechanism):
    mark = auth_gw.log_mark()
    case = _case("SASL", mechanism, password="not-the-password")
    errors = confluent_errors(confluent_conf(auth_gw, certs, case, f"ck-badpw-{uuid.uuid4().hex[:6]}"),
                              _authentication_error)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    text = " ".join(e.str() for e in errors)
    if mechanism == "PLAIN":
        assert "Invalid username or password" in text, text
    else:
        assert f"invalid credentials with SASL mechanism {mechanism}" in text, text
    assert "not-the-password" not in text
    user = USER_OF[mechanism]
    reason = f"wrong password '{user}'" if mechanism == "PLAIN" else f"invalid proof for user '{user}'"
    line = auth_gw.wait_for_log(rf"SASL authentication failed: {reason}", mark)
    assert " listener=SASL " in f"{line} "  # the connection's own fields, not just the message
    assert "not-the-password" not in auth_gw.gw.stderr_path.read_text()
    good_client_still_served(auth_gw, certs, "SASL", topic)


def test_wrong_password_wire_error_then_close(auth_gw, certs, topic):
    """SaslAuthenticate answers SASL_AUTHENTICATION_FAILED (58) with a message, then the connection closes."""
    mark = auth_gw.log_mark()
    raw = Raw(auth_gw.addr("SASL"))
    try:
        response = sasl_plain(raw, "paul", "wrong")
        assert (int(response.error_code), response.error_message) == (
            58, "Authentication failed: Invalid username or password")
        assert raw.closed()
    finally:
        raw.close()
    auth_gw.wait_for_log(r"closing client connection: SASL authentication failed: wrong password 'paul'", mark)
    good_client_still_served(auth_gw, certs, "SASL", topic)


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_unknown_user_looks_like_a_wrong_password(auth_gw, certs, topic, mechanism):
    mark = auth_gw.log_mark()
    case = _case("SASLSSL", mechanism, user="nobody", password="whatever")
    errors = confluent_errors(confluent_conf(auth_gw, certs, case, f"ck-nouser-{uuid.uuid4().hex[:6]}"),
                              _authentication_error)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    text = " ".join(e.str() for e in errors)
    assert "nobody" not in text.replace("username", "")  # the message does not say whether the user exists
    reason = "unknown user 'nobody'" if mechanism == "PLAIN" else "unknown user 'nobody'|user 'nobody'"
    auth_gw.wait_for_log(rf"SASL authentication failed: ({reason})", mark)
    good_client_still_served(auth_gw, certs, "SASLSSL", topic)


def test_unknown_mechanism(auth_gw, certs, topic):
    mark = auth_gw.log_mark()
    raw = Raw(auth_gw.addr("SASL"))
    try:
        versions = raw.request(18, 0, request_class(18, 0)())  # allowed before authentication
        assert versions is not None and versions.error_code == 0
        response = raw.request(17, 1, request_class(17, 1)(mechanism="GSSAPI"))
        assert response is not None
        assert int(response.error_code) == 33  # UNSUPPORTED_SASL_MECHANISM
        assert list(response.mechanisms) == MECHANISMS
        assert raw.closed()
    finally:
        raw.close()
    auth_gw.wait_for_log(r"SASL authentication failed: unsupported SASL mechanism 'GSSAPI'", mark)
    # and a real client configured with a mechanism the listener lacks is told so
    errors = confluent_errors(confluent_conf(auth_gw, certs, _case("SASL"), "ck-oauth", **{
        "sasl.mechanisms": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=mallory"}), lambda errs: "OAUTHBEARER" in " ".join(e.str() for e in errs))
    text = " ".join(e.str() for e in errors)
    assert "OAUTHBEARER" in text and "PLAIN" in text, errors
    good_client_still_served(auth_gw, certs, "SASL", topic)


def test_request_before_authentication_closes(auth_gw, certs, topic):
    mark = auth_gw.log_mark()
    for listener in ("SASL",):
        raw = Raw(auth_gw.addr(listener))
        try:
            md = request_class(3, 1)(topics=None)
            assert raw.request(3, 1, md) is None, "Metadata before SASL must not be answered"
        finally:
            raw.close()
    line = auth_gw.wait_for_log(r"request before SASL authentication completed", mark)
    assert "API key 3" in line
    # after ApiVersions + SaslHandshake, still nothing else is accepted
    raw = Raw(auth_gw.addr("SASL"))
    try:
        assert raw.request(17, 1, request_class(17, 1)(mechanism="PLAIN")).error_code == 0
        assert raw.request(3, 1, request_class(3, 1)(topics=None)) is None
    finally:
        raw.close()
    good_client_still_served(auth_gw, certs, "SASL", topic)


def test_client_certificate_from_another_ca(auth_gw, certs, topic):
    mark = auth_gw.log_mark()
    case = _case("MTLS", cert="rogue")
    errors = confluent_errors(confluent_conf(auth_gw, certs, case, "ck-rogue"))
    assert errors and all(e.code() in (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
                          for e in errors), errors
    line = auth_gw.wait_for_log(r"authentication failed on listener MTLS from 127\.0\.0\.1: client certificate "
                                r"refused", mark)
    assert "ca_file" in line
    good_client_still_served(auth_gw, certs, "MTLS", topic)


def test_no_client_certificate_on_a_required_listener(auth_gw, certs, topic):
    mark = auth_gw.log_mark()
    case = Case("MTLS", "SSL")  # no certificate
    errors = confluent_errors(confluent_conf(auth_gw, certs, case, "ck-nocert"))
    assert errors, "the client must be told"
    auth_gw.wait_for_log(r"authentication failed on listener MTLS .*(did not present a certificate|certificate)",
                         mark)
    good_client_still_served(auth_gw, certs, "MTLS", topic)


@pytest.mark.parametrize("listener", ["SSL", "SASLSSL"])
def test_plaintext_client_on_a_tls_port(auth_gw, certs, topic, listener):
    mark = auth_gw.log_mark()
    conf = confluent_conf(auth_gw, certs, Case("EXTERNAL", "PLAINTEXT"), "ck-plain-on-tls")
    conf["bootstrap.servers"] = auth_gw.addr(listener)
    errors = confluent_errors(conf)
    assert errors, "the client must be told"
    line = auth_gw.wait_for_log(rf"authentication failed on listener {listener} .*non-TLS bytes", mark)
    assert "looks like a Kafka PLAINTEXT client" in line
    good_client_still_served(auth_gw, certs, listener, topic)


def test_sasl_requests_on_a_non_sasl_listener(auth_gw):
    raw = Raw(auth_gw.addr("EXTERNAL"))
    try:
        response = raw.request(17, 1, request_class(17, 1)(mechanism="PLAIN"))
        assert int(response.error_code) == 34  # ILLEGAL_SASL_STATE, connection kept
        assert raw.request(18, 0, request_class(18, 0)()).error_code == 0
    finally:
        raw.close()


def test_repeated_failures_warn_and_count(auth_gw, certs):
    metrics_before = _auth_failures(auth_gw, "SASL", "PLAIN")
    raw = Raw(auth_gw.addr("SASL"))
    try:  # a success first: the per-host count restarts from zero
        assert sasl_plain(raw, "paul", PASSWORDS["paul"]).error_code == 0
    finally:
        raw.close()
    mark = auth_gw.log_mark()
    for _ in range(5):
        raw = Raw(auth_gw.addr("SASL"))
        try:
            assert int(sasl_plain(raw, "paul", "wrong").error_code) == 58
        finally:
            raw.close()
    line = auth_gw.wait_for_log(r"WARNING kgw\.auth: repeated authentication failures from 127\.0\.0\.1: 5", mark)
    assert "mechanism=PLAIN" in line and "listener=SASL" in line
    assert _auth_failures(auth_gw, "SASL", "PLAIN") >= metrics_before + 5


def _auth_failures(auth_gw: AuthGateway, listener: str, mechanism: str) -> float:
    with urllib.request.urlopen(f"{auth_gw.gw.admin_url}/metrics", timeout=10) as r:
        text = r.read().decode()
    rx = re.compile(r'^kgw_authentication_failures_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$', re.M)
    for m in rx.finditer(text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group("labels")))
        if labels.get("listener") == listener and labels.get("mechanism") == mechanism:
            return float(m.group("value"))
    return 0.0


# --------------------------------------------------------------------------- custom principal builder + authorizer


def test_custom_principal_builder_and_authorizer(start_gateway, certs, topic_name, tmp_path, monkeypatch):
    """YAML plugs in a builder returning DepartmentPrincipal and an authorizer allowing department == payments.

    The authorizer gets the builder's very object (class and extra field), on mTLS (department = the
    certificate's OU) and on SASL (department from a mapping file)."""
    recording = tmp_path / "custom.jsonl"
    departments = tmp_path / "departments.json"
    departments.write_text(json.dumps({"sam": "payments", "paul": "marketing"}))
    monkeypatch.setenv("KGW_TEST_DEPARTMENTS", str(departments))
    builder = "tests.support.custom_principal:DepartmentPrincipalBuilder"
    gw = start_gateway({
        "listeners": [
            _listener("MTLS", "SSL", tls=_tls(certs, "required"), principal_builder=builder),
            _listener("SASL", "SASL_PLAINTEXT", sasl={"mechanisms": MECHANISMS}, principal_builder=builder),
        ],
        "users": _users_yaml(),
        "authorizer": {"class_name": "tests.support.custom_principal:DepartmentAuthorizer",
                       "config": {"recording.file": str(recording), "department.required": "payments"}},
    }, name="kgw-custom")
    view = AuthGateway(gw, recording)
    cls = "tests.support.custom_principal.DepartmentPrincipal"

    # paula (OU=payments) may create, write and read
    paula = _case("MTLS", cert="paula")
    conf = confluent_conf(view, certs, paula, "ck-paula-admin")
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(topic_name, 1, 1)], operation_timeout=10, request_timeout=T)[topic_name].result(T)
    confluent_roundtrip(confluent_conf(view, certs, paula, "ck-paula"), topic_name)
    lines = assert_principal_seen(view, "ck-paula", paula, principal="User:PAULA@PAYMENTS", principal_class=cls)
    assert {json.dumps(line["principal_fields"], sort_keys=True) for line in lines} == {'{"department": "payments"}'}
    assert all(line["results"] == ["ALLOWED"] * len(line["results"]) for line in lines)

    # sam (SASL, mapped to payments) too
    sam = _case("SASL", "SCRAM-SHA-512")
    confluent_roundtrip(confluent_conf(view, certs, sam, "ck-sam"), topic_name)
    lines = assert_principal_seen(view, "ck-sam", sam, principal_class=cls)
    assert {line["principal_fields"]["department"] for line in lines} == {"payments"}

    # alice (OU=apps) and paul (marketing) are authenticated but denied: the decision is on the extra field
    for case, client_id, department in ((_case("MTLS", cert="alice"), "ck-alice", "apps"),
                                        (_case("SASL", "PLAIN"), "ck-paul", "marketing")):
        producer = Producer({**confluent_conf(view, certs, case, client_id), "linger.ms": 0,
                             "message.timeout.ms": 8000})
        reports: list = []
        producer.produce(topic_name, value=b"nope", partition=0, on_delivery=lambda e, m: reports.append(e))
        producer.flush(T)
        assert reports and reports[0] is not None and reports[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, \
            reports
        lines = read_records(recording, client_id=client_id)
        assert lines and {line["principal_class"] for line in lines} == {cls}
        assert {line["principal_fields"]["department"] for line in lines} == {department}
        assert all(set(line["results"]) == {"DENIED"} for line in lines)


# --------------------------------------------------------------------------- kgw's own upstream identity


@pytest.mark.parametrize("protocol, mechanism", [("SASL_SSL", "SCRAM-SHA-512"), ("SASL_PLAINTEXT", "PLAIN"),
                                                 ("SSL", None)])
def test_gateway_connects_upstream_with_its_own_identity(auth_gw, certs, topic, start_gateway, protocol, mechanism):
    """client --PLAINTEXT--> kgw B --(B's own TLS/SASL identity)--> kgw A --> tansu.

    A's authorizer sees B's identity (sam over SASL, or ANONYMOUS over SSL) for the client's requests:
    the client's own credentials (it has none here) never travel upstream."""
    listener = {"SASL_SSL": "SASLSSL", "SASL_PLAINTEXT": "SASL", "SSL": "SSL"}[protocol]
    upstream: dict[str, Any] = {"bootstrap_servers": [auth_gw.addr(listener)], "security_protocol": protocol}
    if protocol.endswith("SSL"):
        upstream["tls"] = {"ca_file": str(certs.ca.cert_file)}
    if mechanism:
        user = USER_OF[mechanism]
        upstream["sasl"] = {"mechanism": mechanism, "username": user, "password": PASSWORDS[user]}
    b = start_gateway({"upstream": upstream}, name=f"kgw-b-{listener.lower()}")
    client_id = f"ck-via-b-{uuid.uuid4().hex[:6]}"
    conf = {"bootstrap.servers": b.bootstrap, "client.id": client_id, "broker.address.family": "v4",
            "socket.timeout.ms": 10000}
    confluent_roundtrip(conf, topic)
    seen_by_a = Case(listener, protocol, mechanism, user=USER_OF.get(mechanism or ""))
    assert_principal_seen(auth_gw, client_id, seen_by_a,
                          principal=f"User:{USER_OF[mechanism]}" if mechanism else "User:ANONYMOUS")


def test_wrong_upstream_password_is_logged_and_reported(auth_gw, certs, start_gateway):
    upstream = {"bootstrap_servers": [auth_gw.addr("SASL")], "security_protocol": "SASL_PLAINTEXT",
                "sasl": {"mechanism": "SCRAM-SHA-256", "username": "sam", "password": "wrong"}}
    b = start_gateway({"upstream": upstream}, name="kgw-b-badpw", ready_timeout=30)
    line = AuthGateway(b, Path("/dev/null")).wait_for_log(
        r"SASL SCRAM-SHA-256 authentication as 'sam' failed \(SASL_AUTHENTICATION_FAILED \(58\)\)", 0)
    assert "wrong" not in line.split("failed", 1)[1].replace("wrong password", "")


# --------------------------------------------------------------------------- old client libraries


def test_old_librdkafka_scram_is_refused_naming_the_library_and_the_fix(auth_gw, certs, topic):
    """Debian's kcat links librdkafka 2.0.2, whose SCRAM client-final repeats the client nonce
    (fixed in 2.6.1, confluentinc/librdkafka#4895).  kgw follows Kafka 4.x and refuses it; the log
    line and the metric name the client library, its version and the fix, and a current
    librdkafka logs in with the same password."""
    version = run_tool(["kcat", "-V"], timeout=10).stdout.decode()
    library = re.search(r"librdkafka (\d+)\.(\d+)\.(\d+)", version)
    assert library, version
    assert tuple(map(int, library.groups())) < (2, 6, 1), f"this test needs a librdkafka before 2.6.1: {version}"
    mark = auth_gw.log_mark()
    done = run_tool(["kcat", "-b", auth_gw.addr("SASL"), "-L", "-m", "5", "-X", "broker.address.family=v4",
                     "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=SCRAM-SHA-512",
                     "-X", "sasl.username=sam", "-X", f"sasl.password={PASSWORDS['sam']}"], timeout=30, check=False)
    assert done.returncode != 0, "old librdkafka must not log in"
    software = f"librdkafka/{'.'.join(library.groups())}"
    line = auth_gw.wait_for_log(r"SASL authentication failed: the client-final message repeats the client nonce", mark)
    assert "librdkafka before 2.6.1" in line and "upgrade the client's librdkafka to 2.6.1 or later" in line, line
    assert f" client_software={software}" in line, line
    with urllib.request.urlopen(f"{auth_gw.gw.admin_url}/metrics", timeout=10) as r:
        text = r.read().decode()
    assert (f'kgw_authentication_failures_by_client_total{{cause="scram_nonce_repeated",client_software="{software}",'
            f'listener="SASL"}}') in text, [x for x in text.splitlines() if "by_client" in x]
    good_client_still_served(auth_gw, certs, "SASL", topic)  # librdkafka >= 2.6.1, same mechanism family
