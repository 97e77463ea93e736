#!/usr/bin/env python3
"""Benchmark kgw's authentication components: TLS handshakes/s and SASL authentications/s.

Run by hand (not part of the test suite)::

    .venv/bin/python bench/bench_auth.py             # ~30 s
    .venv/bin/python bench/bench_auth.py --quick     # ~10 s
    .venv/bin/python bench/bench_auth.py --json out.json

1. **TLS handshakes.**  A trio server in this process accepts TCP connections on
   127.0.0.1 and runs ``gateway.auth.tls.tls_handshake`` on each (then writes one
   byte and closes).  Clients run in a *separate process* (``--client`` mode,
   blocking ``ssl`` sockets on a few threads, no session resumption), so on a
   2-core machine the server has one core to itself.  Reported: completed
   handshakes per second of wall time, and per second of server CPU time
   (``time.process_time`` of this process): the rate one fully busy core
   would sustain.  Certificates are EC P-256, generated at start; runs with
   client_auth none (server-authenticated TLS) and required (mTLS).
2. **SASL exchanges.**  ``gateway.auth.sasl.SaslSession`` driven through
   SaslHandshake v1 + SaslAuthenticate v2 inside ``trio.run``, responses
   encoded with kio as on the wire.  The client side (an RFC 5802 client
   with its SaltedPassword cached, as real clients compute it once) runs in
   the same loop; server time is measured around the server calls only.
   Reported: server-side exchanges per second of server time, and end-to-end
   exchanges per second including the client.  PLAIN with the default
   ``password_hash`` (PBKDF2-SHA256, 100 000 iterations) is shown for
   comparison, once hashed on every login and once as the gateway runs it: a
   password this process verified recently for the same credential
   (``VerifiedPasswords``, what a client reconnecting with the right password meets).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import json
import os
import platform
import socket
import ssl
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import trio  # noqa: E402

from authz.principal_builder import DefaultKafkaPrincipalBuilder, PlaintextAuthenticationContext  # noqa: E402
from configs.gateway_config import ClientAuth, ListenerConfig, ListenerSaslConfig, ListenerTlsConfig, SecurityProtocol, UsersConfig
from authz.credentials import PlainCredential, SaslMechanism, VerifiedPasswords
from gateway.auth.failures import AuthenticationFailed  # noqa: E402
from authz.credentials import CredentialStore, scram_credential
from gateway.auth.sasl import SaslSession
from gateway.auth.tls import server_ssl_context, tls_handshake  # noqa: E402
from protocol.codecs import encode, request_class  # noqa: E402

# --------------------------------------------------------------------------- TLS


def client_main(port: int, ca: str, cert: str | None, key: str | None, seconds: float, threads: int) -> None:
    """--client mode: hammer 127.0.0.1:port with full TLS handshakes until time is up."""
    ctx = ssl.create_default_context(cafile=ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    deadline = time.monotonic() + seconds
    done = [0] * threads

    def worker(i: int) -> None:
        while time.monotonic() < deadline:
            with socket.create_connection(("127.0.0.1", port)) as raw:
                raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
                    tls.recv(1)
            done[i] += 1

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    print(sum(done))


async def tls_server(ctx: ssl.SSLContext, client_args: list[str], seconds: float, processes: int) -> dict:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    stats = {"ok": 0, "failed": 0}

    async def handle(stream: trio.SocketStream) -> None:
        try:
            ssl_stream, _ = await tls_handshake(stream, ctx, 10)
            await ssl_stream.send_all(b"k")
            stats["ok"] += 1
        except (AuthenticationFailed, trio.BrokenResourceError):
            stats["failed"] += 1
        finally:
            await trio.aclose_forcefully(stream)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, handle, listeners)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        counts: list[int] = []

        async def client_process() -> None:
            proc = await trio.run_process(
                [sys.executable, __file__, "--client", str(port), *client_args, "--seconds", str(seconds)],
                capture_stdout=True,
            )
            counts.append(int(proc.stdout.split()[-1]))

        async with trio.open_nursery() as clients:
            for _ in range(processes):
                clients.start_soon(client_process)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        nursery.cancel_scope.cancel()
    return {
        "handshakes": stats["ok"], "failed": stats["failed"], "client_count": sum(counts),
        "per_s_wall": stats["ok"] / wall, "per_s_server_cpu": stats["ok"] / cpu if cpu else float("nan"),
        "server_cpu_ms_per_handshake": 1000 * cpu / max(stats["ok"], 1),
    }


def bench_tls(pki, seconds: float, threads: int, processes: int) -> dict:
    out = {}
    for mode in ("none", "required"):
        cfg = ListenerTlsConfig(cert_file=pki.server.cert_file, key_file=pki.server.key_file,
                                ca_file=pki.ca.cert_file, client_auth=ClientAuth(mode))
        args = ["--ca", str(pki.ca.cert_file), "--threads", str(threads)]
        if mode == "required":
            args += ["--cert", str(pki.client.cert_file), "--key", str(pki.client.key_file)]
        out["mtls" if mode == "required" else "tls"] = trio.run(tls_server, server_ssl_context(cfg), args, seconds, processes)
    return out


# --------------------------------------------------------------------------- SASL


class CachedScramClient:
    """RFC 5802 client with SaltedPassword cached per (salt, iterations)."""

    def __init__(self, mechanism: str, user: str, password: str) -> None:
        self.hash = SaslMechanism(mechanism).hash_name
        self.user, self.password = user, password
        self._salted: dict[tuple[bytes, int], bytes] = {}

    def first(self) -> tuple[bytes, str]:
        bare = f"n={self.user},r={base64.b64encode(os.urandom(18)).decode()}"
        return ("n,," + bare).encode(), bare

    def final(self, bare: str, server_first: bytes) -> bytes:
        text = server_first.decode()
        attrs = dict(item.split("=", 1) for item in text.split(","))
        salt, iterations = base64.b64decode(attrs["s"]), int(attrs["i"])
        salted = self._salted.get((salt, iterations))
        if salted is None:
            salted = self._salted[(salt, iterations)] = hashlib.pbkdf2_hmac(
                self.hash, self.password.encode(), salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", self.hash)
        without_proof = f"c=biws,r={attrs['r']}"
        sig = hmac.digest(hashlib.new(self.hash, client_key).digest(),
                          f"{bare},{text},{without_proof}".encode(), self.hash)
        proof = bytes(a ^ b for a, b in zip(client_key, sig))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()


async def sasl_loop(mechanism: str, count: int, store: CredentialStore,
                    verified: VerifiedPasswords | None = None) -> dict:
    listener = ListenerConfig(
        name="SASL", security_protocol=SecurityProtocol.SASL_PLAINTEXT, broker_port_base=9400,
        advertised_broker_port_base=9400, sasl=ListenerSaslConfig(mechanisms=(SaslMechanism(mechanism),)))
    builder = DefaultKafkaPrincipalBuilder()
    base = PlaintextAuthenticationContext(client_address="127.0.0.1", listener_name="SASL",
                                          security_protocol="SASL_PLAINTEXT")
    hs_req, auth_req = request_class(17, 1), request_class(36, 2)
    client = CachedScramClient(mechanism, "alice", "alice-secret") if mechanism != "PLAIN" else None
    server_s = 0.0
    wall0 = time.perf_counter()
    for _ in range(count):
        t = time.perf_counter()
        session = SaslSession(listener, store, builder, base, verified=verified)
        session.gate(18)
        response, _ = session.handle(17, 1, hs_req(mechanism=mechanism))
        encode(response)
        server_s += time.perf_counter() - t
        if client is None:
            token = b"\x00bob\x00bob-secret"
        else:
            token, bare = client.first()
        t = time.perf_counter()
        response, close = session.handle(36, 2, auth_req(auth_bytes=token))
        encode(response)
        server_s += time.perf_counter() - t
        if client is not None:
            final = client.final(bare, response.auth_bytes)
            t = time.perf_counter()
            response, close = session.handle(36, 2, auth_req(auth_bytes=final))
            encode(response)
            server_s += time.perf_counter() - t
        assert session.authenticated and not close, session.failure_reason
        await trio.lowlevel.checkpoint()
    wall = time.perf_counter() - wall0
    return {"exchanges": count, "per_s_server": count / server_s, "per_s_end_to_end": count / wall,
            "server_us_per_exchange": 1e6 * server_s / count}


def bench_sasl(count: int) -> dict:
    users = UsersConfig(
        scram=(scram_credential("alice", "alice-secret", "SCRAM-SHA-256"),
               scram_credential("alice", "alice-secret", "SCRAM-SHA-512")),
        plain=(PlainCredential(name="bob", password_hash=PlainCredential.hash_password("bob-secret")),),
    )
    store = CredentialStore.of(users)
    out = {}
    for mechanism, n in (("SCRAM-SHA-256", count), ("SCRAM-SHA-512", count), ("PLAIN", max(count // 50, 20))):
        trio.run(sasl_loop, mechanism, min(n, 50), store)  # warm-up
        out[mechanism] = trio.run(sasl_loop, mechanism, n, store)
    verified = VerifiedPasswords()
    trio.run(sasl_loop, "PLAIN", 1, store, verified)  # the first login hashes and remembers
    out["PLAIN (verified recently)"] = trio.run(sasl_loop, "PLAIN", count, store, verified)
    return out


# --------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--seconds", type=float, default=None, help="TLS run length per mode")
    parser.add_argument("--threads", type=int, default=2, help="threads per client process (TLS)")
    parser.add_argument("--procs", type=int, default=2, help="client processes (TLS)")
    parser.add_argument("--exchanges", type=int, default=None, help="SASL exchanges per mechanism")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--client", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ca", help=argparse.SUPPRESS)
    parser.add_argument("--cert", help=argparse.SUPPRESS)
    parser.add_argument("--key", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client_main(args.client, args.ca, args.cert, args.key, args.seconds, args.threads)
        return
    seconds = args.seconds or (3.0 if args.quick else 10.0)
    exchanges = args.exchanges or (2000 if args.quick else 10000)
    from tests.unit.gateway.certs import make_pki

    with tempfile.TemporaryDirectory() as tmp:
        pki = make_pki(Path(tmp))
        results = {"tls": bench_tls(pki, seconds, args.threads, args.procs)}
    results["sasl"] = bench_sasl(exchanges)
    results["env"] = {"python": platform.python_version(), "openssl": ssl.OPENSSL_VERSION,
                      "trio": trio.__version__, "cpus": os.cpu_count(), "machine": platform.machine()}
    for name, r in results["tls"].items():
        print(f"{name:>14}: {r['per_s_wall']:8.0f} handshakes/s wall, {r['per_s_server_cpu']:8.0f}/s per server "
              f"core ({r['server_cpu_ms_per_handshake']:.2f} ms CPU each; {r['handshakes']} ok, {r['failed']} failed)")
    for name, r in results["sasl"].items():
        print(f"{name:>14}: {r['per_s_server']:8.0f} exchanges/s server-side, {r['per_s_end_to_end']:8.0f}/s "
              f"end to end ({r['server_us_per_exchange']:.0f} us server time each; n={r['exchanges']})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
