"""PLAIN logins: a known-good password costs no stretched hash, and a flood of wrong passwords
from one host cannot starve another host's login (gateway/auth/password_hashing.py)."""

from __future__ import annotations

import hashlib

import pytest
import trio

from authz.credentials import PlainCredential, VerifiedPasswords
from gateway.auth.password_hashing import PasswordHashing
from protocol.codecs import request_class
from tests.unit.gateway.fake_broker import FakeBroker
from tests.unit.gateway.test_connection import RawClient, _start_gateway

PASSWORD = "alice-secret"


def counting_pbkdf2(monkeypatch) -> list[int]:
    calls: list[int] = []
    real = hashlib.pbkdf2_hmac

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(hashlib, "pbkdf2_hmac", counted)
    return calls


def test_verified_passwords_remember_successes_only(monkeypatch):
    calls = counting_pbkdf2(monkeypatch)
    alice = PlainCredential(name="alice", password_hash=PlainCredential.hash_password(PASSWORD, iterations=1000))
    verified = VerifiedPasswords(max_entries=2)
    calls.clear()
    assert verified.verify(alice, PASSWORD) and len(calls) == 1
    assert verified.verify(alice, PASSWORD) and len(calls) == 1  # remembered: no hash
    assert not verified.verify(alice, "wrong") and not verified.verify(alice, "wrong") and len(calls) == 3
    # a changed password (a new stored hash) never matches what was remembered for the old one
    changed = PlainCredential(name="alice", password_hash=PlainCredential.hash_password(PASSWORD, iterations=1000))
    assert not verified.known(changed, PASSWORD)
    assert verified.verify(changed, PASSWORD) and len(calls) == 5  # one to build `changed`, one to verify
    for i in range(5):  # bounded
        c = PlainCredential(name=f"u{i}", password_hash=PlainCredential.hash_password("p", iterations=1000))
        verified.verify(c, "p")
    assert len(verified) == 2


def sasl_gateway_sections(tmp_path, threads=1, per_host=1):
    return dict(
        listeners=[{"name": "T", "host": "127.0.0.1", "port": 0, "advertised_host": "127.0.0.1",
                    "broker_port_base": 29000, "security_protocol": "SASL_PLAINTEXT",
                    "sasl": {"mechanisms": ["PLAIN"]}}],
        users={"plain": [{"name": "alice", "password_hash": PlainCredential.hash_password(PASSWORD, iterations=100_000)}]},
        limits={"password_hash_threads": threads, "password_hashes_per_host": per_host,
                "failed_authentication_delay_ms": 0, "authentication_timeout_ms": 60_000},
    )


async def plain_login(port: int, password: str, local: str = "127.0.0.1") -> int:
    """A SASL/PLAIN login from ``local``; the SaslAuthenticate error code."""
    stream = await trio.open_tcp_stream("127.0.0.1", port, local_address=local)
    client = RawClient(stream)
    try:
        await client.send(17, 1, 1, request_class(17, 1)(mechanism="PLAIN"))
        _, handshake = await client.receive(17, 1)
        assert handshake.error_code == 0
        token = f"\0alice\0{password}".encode()
        await client.send(36, 2, 2, request_class(36, 2)(auth_bytes=token))
        frame = await client.receive_frame()
        return int.from_bytes(frame[9:11], "big") if frame else -1
    finally:
        await stream.aclose()


async def test_a_known_good_login_runs_no_hash_and_waits_for_no_thread(nursery, tmp_path, monkeypatch):
    """The finding: every PLAIN login cost ~20 ms of CPU (Kafka's tools took 72 ms per command
    through kgw against 20 ms direct)."""
    broker = await nursery.start(FakeBroker().serve)
    gateway, port = await _start_gateway(nursery, tmp_path, broker, True, **sasl_gateway_sections(tmp_path))
    calls = counting_pbkdf2(monkeypatch)
    assert await plain_login(port, PASSWORD) == 0
    hashing: PasswordHashing = gateway.password_hashing
    assert len(calls) == 1 and hashing.runs == 1
    for _ in range(3):
        assert await plain_login(port, PASSWORD) == 0
    assert len(calls) == 1 and hashing.runs == 1  # remembered: no hash, no thread
    assert await plain_login(port, "wrong") == 58  # SASL_AUTHENTICATION_FAILED: still the full hash
    assert len(calls) == 2


async def test_a_wrong_password_flood_from_one_host_does_not_starve_another_host(nursery, tmp_path):
    """The finding: 50 connections sending wrong passwords from one host raised a legitimate
    login from ~20 ms to ~820 ms (800: past the authentication timeout).  Counted, not timed:
    while another host's login waits, the flooding host runs at most its one turn at a time."""
    broker = await nursery.start(FakeBroker().serve)
    gateway, port = await _start_gateway(nursery, tmp_path, broker, True, **sasl_gateway_sections(tmp_path))
    hashing: PasswordHashing = gateway.password_hashing
    results: list[int] = []

    async def attacker():
        results.append(await plain_login(port, "wrong", local="127.0.0.2"))

    async with trio.open_nursery() as flood:
        for _ in range(40):
            flood.start_soon(attacker)
        with trio.fail_after(30):
            while hashing.runs < 2:  # the flood is hashing and its other logins wait
                await trio.sleep(0.01)
        before = hashing.runs
        assert await plain_login(port, PASSWORD, local="127.0.0.1") == 0
        ran_meanwhile = hashing.runs - before - 1  # the flood's hashes that ended before ours did
        assert ran_meanwhile <= 2, f"the login waited behind {ran_meanwhile} of the flood's hashes"
        flood.cancel_scope.cancel()


@pytest.mark.parametrize("per_host", [1, 2])
async def test_a_host_never_has_more_hashes_running_or_queued_than_its_turns(per_host):
    hashing = PasswordHashing(threads=4, per_host=per_host)
    running = [0]
    peak = [0]
    gate = trio.Event()

    def work():
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        trio.from_thread.run(gate.wait)
        running[0] -= 1

    async with trio.open_nursery() as n:
        for _ in range(10):
            n.start_soon(hashing.run, "10.0.0.9", work)
        await trio.sleep(0.2)
        assert peak[0] == per_host
        gate.set()
    assert hashing.waiting_hosts() == 0
