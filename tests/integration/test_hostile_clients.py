"""The hostile-client review (issue 11), finding by finding, against a running kgw in front of tansu.

Each test sends what an attacker would (raw frames built with kio, mixed forms,
announced sizes that are never sent) and then looks at the *upstream* directly,
so a request kgw let through is seen where it did its damage, not only in the
answer kgw gave.  The principal is User:ANONYMOUS on a PLAINTEXT listener unless
the test is about logging in.
"""

from __future__ import annotations

import datetime as dt
import io
import select
import socket
import struct
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.static.primitive import i8, i16, i32, i64

from authz.credentials import PlainCredential
from gateway.upstream.cluster import encode_request
from protocol.codecs import decode_response, make, nested, request_class
from tests.support.acls import seed_acls
from tests.support.ports import HOST, free_port, free_port_base
from tests.support.raw_kafka import RawConnection, call

pytestmark = pytest.mark.integration

AUTHORIZER = {"authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer"}}


# ----------------------------------------------------------------- helpers

def _create(tansu, *topics: str, partitions: int = 1) -> None:
    admin = KafkaAdminClient(bootstrap_servers=tansu.bootstrap, request_timeout_ms=15000)
    try:
        admin.create_topics([NewTopic(t, partitions, 1) for t in topics])
    finally:
        admin.close()


def _md_v12(topics, auto: bool):
    cls = request_class(3, 12)
    entry = nested(cls, "topics")
    return cls(topics=None if topics is None else tuple(entry(name=n, topic_id=i) for n, i in topics),
               allow_auto_topic_creation=auto, include_topic_authorized_operations=False)


def _upstream_topics(tansu) -> dict[str, uuid.UUID]:
    """Every topic the broker has, asked directly (not through kgw), by name with its id."""
    response = call(tansu.bootstrap, 3, 12, _md_v12(None, False))
    return {t.name: t.topic_id for t in response.topics if t.error_code == 0}


def _batch(value: bytes, *, producer_id: int = -1, epoch: int = -1, attributes: int = 0) -> bytes:
    out = io.BytesIO()
    write_new_batch(out, NewRecordBatch(
        producer_id=i64(producer_id), producer_epoch=i16(epoch), base_sequence=i32(0 if producer_id >= 0 else -1),
        attributes=i16(attributes),
        records=(Record(attributes=i8(0), timestamp=dt.datetime.now(dt.timezone.utc), offset=i64(0),
                        key=b"k", value=value, headers=()),)))
    return out.getvalue()


def _produce_v9(topic: str, partitions: dict[int, bytes]):
    cls = request_class(0, 9)
    tcls = nested(cls, "topic_data")
    pcls = nested(tcls, "partition_data")
    return cls(transactional_id=None, acks=i16(-1), timeout=timedelta(seconds=10), topic_data=(
        tcls(name=topic, partition_data=tuple(pcls(index=i32(p), records=r) for p, r in partitions.items())),))


def _upstream_values(tansu, topic: str, partition: int = 0) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=tansu.bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=3000, request_timeout_ms=15000)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        return [m.value for m in consumer]
    finally:
        consumer.close()


def _closed_by_gateway(sock: socket.socket) -> bool:
    """True once the gateway has closed ``sock`` (EOF or reset), within the socket's timeout."""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def _api_versions_round_trip(address: str) -> RawConnection:
    conn = RawConnection(address)
    response = conn.call(18, 3, make(request_class(18, 3), client_software_name="hostile",
                                     client_software_version="1"))
    assert response.error_code == 0
    return conn


def _frames_waiting(sock: socket.socket) -> int:
    """How many whole frames the peer has sent on ``sock`` that are waiting to be read (peeked)."""
    try:
        data = sock.recv(1 << 20, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except BlockingIOError:
        return 0
    count = pos = 0
    while pos + 4 <= len(data):
        (size,) = struct.unpack_from(">i", data, pos)
        if pos + 4 + size > len(data):
            break
        pos += 4 + size
        count += 1
    return count


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


# ----------------------------------------------------------------- finding 1

def test_metadata_mixing_an_id_with_names_creates_no_topic_and_reveals_no_id(start_gateway, tansu, topic_name):
    known = f"{topic_name}-known"
    _create(tansu, known)
    known_id = _upstream_topics(tansu)[known]
    gw = start_gateway(AUTHORIZER, name="mixed")  # no ACL at all: User:ANONYMOUS may do nothing
    wanted = [f"{topic_name}-new-{i}" for i in range(20)]
    request = _md_v12([(None, known_id), *((n, None) for n in wanted), (known, None)], auto=True)
    response = call(gw.bootstrap, 3, 12, request)
    # Kafka reads only the ids of such a request; the one known id is denied: 29, id, no name
    assert [(t.name, t.topic_id, t.error_code) for t in response.topics] == [(None, known_id, 29)]
    assert not set(wanted) & set(_upstream_topics(tansu))


# ----------------------------------------------------------------- finding 2

def test_a_second_batch_in_one_partition_is_refused_and_never_written(start_gateway, tmp_path, tansu, topic_name):
    _create(tansu, topic_name, partitions=2)
    seed_acls(tmp_path / "inject" / "metadata", ["--topic", topic_name, "--operation", "WRITE"])
    gw = start_gateway(AUTHORIZER, name="inject")
    injected = _batch(b"plain") + _batch(b"into someone's transaction", producer_id=4242, epoch=0, attributes=0x10)
    request = _produce_v9(topic_name, {0: injected, 1: _batch(b"legitimate")})
    response = call(gw.broker_addresses[111], 0, 9, request)
    errors = {p.index: p.error_code for t in response.responses for p in t.partition_responses}
    assert errors == {0: 87, 1: 0}  # INVALID_RECORD for the two-batch partition only
    assert _upstream_values(tansu, topic_name, 0) == []
    assert _upstream_values(tansu, topic_name, 1) == [b"legitimate"]


def test_control_batches_and_trailing_bytes_are_refused(start_gateway, tmp_path, tansu, topic_name):
    _create(tansu, topic_name, partitions=2)
    seed_acls(tmp_path / "control" / "metadata", ["--topic", topic_name, "--operation", "WRITE"])
    gw = start_gateway(AUTHORIZER, name="control")
    control = _batch(b"\x00\x00\x00\x00", producer_id=4242, epoch=0, attributes=0x30)  # transactional + control
    trailing = _batch(b"x") + b"\x00" * 10
    response = call(gw.broker_addresses[111], 0, 9, _produce_v9(topic_name, {0: trailing}))
    assert [p.error_code for t in response.responses for p in t.partition_responses] == [87]
    # a transactional first batch without a transactional id: the whole request, as Kafka (53)
    response = call(gw.broker_addresses[111], 0, 9, _produce_v9(topic_name, {1: control}))
    assert [p.error_code for t in response.responses for p in t.partition_responses] == [53]
    assert _upstream_values(tansu, topic_name, 0) == [] and _upstream_values(tansu, topic_name, 1) == []


# ----------------------------------------------------------------- finding 4

def test_describe_topic_partitions_never_returns_a_name_before_the_cursor(start_gateway, tmp_path, tansu, topic_name):
    secret, visible = f"{topic_name}-a-secret", f"{topic_name}-b-visible"
    _create(tansu, secret, visible)
    seed_acls(tmp_path / "cursor" / "metadata",
              ["--topic", visible, "--operation", "DESCRIBE"])
    gw = start_gateway(AUTHORIZER, name="cursor")
    cls = request_class(75, 0)
    tcls, ccls = nested(cls, "topics"), nested(cls, "cursor")
    request = cls(topics=(tcls(name=secret), tcls(name=visible)), response_partition_limit=i32(2000),
                  cursor=ccls(topic_name=visible, partition_index=i32(0)))
    response = call(gw.bootstrap, 75, 0, request)
    secret_id = _upstream_topics(tansu)[secret]
    assert [t.name for t in response.topics] == [visible]
    assert secret_id not in {t.topic_id for t in response.topics}


# ----------------------------------------------------------------- finding 5

def test_metadata_v1_does_not_recreate_a_topic_deleted_behind_kgw(start_gateway, tmp_path, tansu, topic_name):
    _create(tansu, topic_name)
    seed_acls(tmp_path / "recreate" / "metadata", ["--topic", topic_name, "--operation", "DESCRIBE"])
    gw = start_gateway(AUTHORIZER, name="recreate")
    seen = call(gw.bootstrap, 3, 12, _md_v12([(topic_name, None)], auto=False))
    assert [(t.name, t.error_code) for t in seen.topics] == [(topic_name, 0)]  # kgw has seen it exist
    admin = KafkaAdminClient(bootstrap_servers=tansu.bootstrap, request_timeout_ms=15000)
    try:
        admin.delete_topics([topic_name])
    finally:
        admin.close()
    assert topic_name not in _upstream_topics(tansu)
    cls = request_class(3, 1)
    response = call(gw.bootstrap, 3, 1, cls(topics=(nested(cls, "topics")(name=topic_name),)))
    assert [(t.name, t.error_code) for t in response.topics] == [(topic_name, 29)]
    assert topic_name not in _upstream_topics(tansu)  # v0-3 auto-creates: it must not have been forwarded


# ----------------------------------------------------------------- finding 6

_PAUL = {"plain": [{"name": "paul", "password_hash": PlainCredential.hash_password("paul-pw", iterations=4096)}]}


def _listener(name: str, protocol: str, **extra) -> dict:
    return {"name": name, "security_protocol": protocol, "host": HOST, "port": free_port(), "advertised_host": HOST,
            "broker_port_base": free_port_base((111,)), **extra}


def _sasl_gateway(start_gateway, name: str, limits: dict | None = None, plaintext_too: bool = False):
    listeners = [_listener("SASL", "SASL_PLAINTEXT", sasl={"mechanisms": ["PLAIN"]})]
    if plaintext_too:
        listeners.insert(0, _listener("EXTERNAL", "PLAINTEXT"))
    return start_gateway({"listeners": listeners, "users": _PAUL, "limits": limits or {}}, name=name)


def test_memory_before_login_is_capped_at_the_sasl_frame_limit(start_gateway, tansu):
    gw = _sasl_gateway(start_gateway, "prelogin")
    host, port = gw.bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", 100 * 1024 * 1024) + b"x")  # 100 MiB announced, one byte sent
        assert _closed_by_gateway(sock)
    assert "sasl_max_receive_bytes" in gw.stderr_path.read_text()
    # a frame just under the limit is read (and refused as a request, not for its size)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(struct.pack(">i", 512 * 1024 + 1))
        assert _closed_by_gateway(sock)


def test_announced_frame_lengths_cost_no_memory_until_their_bytes_arrive(gateway):
    host, port = gateway.bootstrap.rsplit(":", 1)
    before = _rss_kib(gateway.process.pid)
    socks = []
    try:
        for _ in range(10):  # 10 x 90 MiB announced (under the 100 MiB frame limit), 50 bytes sent
            sock = socket.create_connection((host, int(port)), timeout=10)
            sock.sendall(struct.pack(">i", 90 * 1024 * 1024) + b"y" * 46)
            socks.append(sock)
        _api_versions_round_trip(gateway.bootstrap).close()  # the gateway has read what was sent
        grown_mib = (_rss_kib(gateway.process.pid) - before) / 1024
        assert grown_mib < 50, f"RSS grew by {grown_mib:.0f} MiB for 500 bytes received"
    finally:
        for sock in socks:
            sock.close()


# ----------------------------------------------------------------- finding 8

def test_unauthenticated_and_idle_connections_are_closed(start_gateway, tansu):
    gw = _sasl_gateway(start_gateway, "timeouts", {"authentication_timeout_ms": 300, "connections_max_idle_ms": 600},
                       plaintext_too=True)
    sasl_host, sasl_port = gw.listeners["SASL"].rsplit(":", 1)
    with socket.create_connection((sasl_host, int(sasl_port)), timeout=10) as sock:
        assert _closed_by_gateway(sock)  # never authenticated
    # PLAINTEXT: idle on the Trio path (only ApiVersions, answered locally) ...
    conn = _api_versions_round_trip(gw.bootstrap)
    assert _closed_by_gateway(conn.sock)
    # ... and idle on the data plane, after a forwarded request
    conn = RawConnection(gw.bootstrap)
    conn.call(3, 12, _md_v12([], auto=False))
    assert _closed_by_gateway(conn.sock)
    log = gw.stderr_path.read_text()
    assert "authentication not completed within 300 ms" in log
    assert "idle for 600 ms" in log


def test_connections_per_client_host_are_capped(start_gateway, tansu):
    gw = start_gateway({"limits": {"max_connections_per_ip": 3}}, name="per-ip")
    held = [_api_versions_round_trip(gw.bootstrap) for _ in range(3)]
    try:
        host, port = gw.bootstrap.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as fourth:
            assert _closed_by_gateway(fourth)
        held.pop().close()
        # the slot is free again once the gateway saw the close
        for _ in range(50):
            try:
                held.append(_api_versions_round_trip(gw.bootstrap))
                break
            except (ConnectionError, OSError):
                continue
        assert len(held) == 3
    finally:
        for conn in held:
            conn.close()


# ----------------------------------------------------------------- finding 9

def test_a_failed_login_is_answered_only_after_the_delay(start_gateway, tansu):
    gw = _sasl_gateway(start_gateway, "delay", {"failed_authentication_delay_ms": 400})
    conn = RawConnection(gw.bootstrap)
    handshake = conn.call(17, 1, request_class(17, 1)(mechanism="PLAIN"))
    assert handshake.error_code == 0
    started = time.monotonic()
    response = conn.call(36, 2, request_class(36, 2)(auth_bytes=b"\x00paul\x00wrong"))
    waited = time.monotonic() - started
    assert response.error_code == 58  # SASL_AUTHENTICATION_FAILED
    assert waited >= 0.4  # a lower bound the gateway guarantees, not a speed claim
    assert _closed_by_gateway(conn.sock)
    # the right password is not delayed by anything
    conn = RawConnection(gw.bootstrap)
    assert conn.call(17, 1, request_class(17, 1)(mechanism="PLAIN")).error_code == 0
    assert conn.call(36, 2, request_class(36, 2)(auth_bytes=b"\x00paul\x00paul-pw")).error_code == 0
    conn.close()


def test_a_refused_login_is_readable_before_the_connection_ends(start_gateway, tansu):
    """kgw does not end the stream right behind a refused login's answer: kafka-python 3.0
    drops an answer it reads together with the end of the stream (CI saw "socket
    disconnected" instead of the SASL error).  It waits (at most a second) for the client to
    close first, answering nothing more, then closes itself."""
    gw = _sasl_gateway(start_gateway, "linger", {"failed_authentication_delay_ms": 100})

    def refused() -> RawConnection:
        conn = RawConnection(gw.bootstrap)
        assert conn.call(17, 1, request_class(17, 1)(mechanism="PLAIN")).error_code == 0
        assert conn.call(36, 2, request_class(36, 2)(auth_bytes=b"\x00paul\x00wrong")).error_code == 58
        return conn

    conn = refused()
    ended = select.poll()
    ended.register(conn.sock, select.POLLRDHUP | select.POLLHUP | select.POLLERR)
    assert ended.poll(300) == [], "kgw ended the stream right behind the refusal"
    conn.close()  # the client closes first, as kafka-python does once it has read the refusal
    # a client that stays, and even sends more: nothing is answered, and kgw closes in time
    conn = refused()
    conn.sock.sendall(encode_request(18, 0, 9, request_class(18, 0)()) * 50)
    received = b""
    while chunk := conn.sock.recv(65536):  # until kgw closes (the socket's timeout fails the test)
        received += chunk
    assert received == b""
    conn.close()
    assert "SASL authentication failed" in gw.stderr_path.read_text()


# ----------------------------------------------------------------- version ranges

def test_a_produce_version_the_upstream_does_not_serve_is_neither_advertised_nor_forwarded(gateway):
    """tansu serves Produce up to v11: kgw advertises no more, and a v13 request is refused."""
    with RawConnection(gateway.bootstrap) as conn:
        versions = conn.call(18, 3, make(request_class(18, 3), client_software_name="h", client_software_version="1"))
        produce = next(k for k in versions.api_keys if k.api_key == 0)
        assert produce.max_version <= 11
        cls = request_class(0, 13)
        tcls = nested(cls, "topic_data")
        pcls = nested(tcls, "partition_data")
        body = cls(transactional_id=None, acks=i16(-1), timeout=timedelta(seconds=5), topic_data=(
            tcls(topic_id=uuid.uuid4(), partition_data=(pcls(index=i32(0), records=_batch(b"v13")),)),))
        conn.sock.sendall(encode_request(0, 13, 7, body))
        assert _closed_by_gateway(conn.sock)


# ----------------------------------------------------------------- the next layer (confused deputy, DoS)


def test_a_client_that_streams_requests_and_never_reads_costs_a_few_mib(start_gateway, tansu):
    """An unauthenticated PLAINTEXT client sends one Metadata request (moving it to the data
    plane), then streams 14-byte ApiVersions v0 requests and never reads: kgw's RSS went from
    81 to 1,396 MiB in 6 s, still growing.  Now it stops reading the client once 1 MiB of
    answers waits for it."""
    gw = start_gateway(name="never-reads")
    _api_versions_round_trip(gw.bootstrap).close()  # warmed up: what is measured is the client
    before = _rss_kib(gw.process.pid)
    conn = RawConnection(gw.bootstrap)
    conn.call(3, 12, _md_v12([], auto=False))
    request = encode_request(18, 0, 7, request_class(18, 0)())
    chunk = request * 4096  # 56 KiB of requests, ~1.6 MiB of answers
    conn.sock.setblocking(False)
    sent, stalled, deadline = 0, 0, time.monotonic() + 20
    while time.monotonic() < deadline and stalled < 20:
        try:
            sent += conn.sock.send(chunk)
            stalled = 0
        except BlockingIOError:  # the socket buffers are full: kgw stopped reading
            stalled += 1
            select.select([], [conn.sock], [], 0.05)
        except ConnectionResetError:
            pytest.fail(f"kgw dropped the connection after {sent} bytes (RSS {_rss_kib(gw.process.pid) // 1024} MiB)")
    grown_mib = (_rss_kib(gw.process.pid) - before) / 1024
    conn.close()
    assert stalled >= 20, f"kgw kept reading ({sent} bytes in 20 s)"
    assert grown_mib < 16, f"RSS grew by {grown_mib:.0f} MiB for a client that never reads ({sent} bytes sent)"
    _api_versions_round_trip(gw.bootstrap).close()  # and the gateway serves others


def test_a_wrong_password_flood_from_one_host_leaves_another_hosts_login_quick(start_gateway, tansu):
    """50 connections sending wrong passwords from one host raised a legitimate PLAIN login from
    ~20 ms to ~820 ms (800 connections: past the authentication timeout).  Now each host has its
    turn at the hashing thread: the flood from 127.0.0.2 is still being hashed when the login
    from 127.0.0.1 has long succeeded."""
    users = {"plain": [{"name": "paul", "password_hash": PlainCredential.hash_password("paul-pw")}]}  # 100k rounds
    gw = start_gateway({"listeners": [_listener("SASL", "SASL_PLAINTEXT", sasl={"mechanisms": ["PLAIN"]})],
                        "users": users, "limits": {"failed_authentication_delay_ms": 0,
                                                   "authentication_timeout_ms": 60000}}, name="flood")
    host, port = gw.bootstrap.rsplit(":", 1)
    flood = []
    for _ in range(60):  # 60 logins of ~20 ms of hashing each, sent at once from 127.0.0.2
        sock = socket.create_connection((host, int(port)), timeout=30, source_address=("127.0.0.2", 0))
        sock.sendall(encode_request(17, 1, 1, request_class(17, 1)(mechanism="PLAIN"))
                     + encode_request(36, 2, 2, request_class(36, 2)(auth_bytes=b"\x00paul\x00wrong")))
        flood.append(sock)
    try:
        conn = RawConnection(gw.bootstrap)
        conn.sock.settimeout(30)
        conn.sasl_plain("paul", "paul-pw")  # from 127.0.0.1
        conn.close()
        # the flood has not finished: had the login waited behind it, every flood login would
        # have been answered (two frames: the handshake's and the refusal) before it
        answered = sum(1 for s in flood if _frames_waiting(s) >= 2)
        assert answered < len(flood) // 2, f"{answered} of {len(flood)} flood logins were answered first"
    finally:
        for sock in flood:
            sock.close()
