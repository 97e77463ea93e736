"""``kgw run --workers N``: N gateway processes on one host, sharing each listener's ports.

One Python process uses one core for its event loop (plus its data-plane thread), so a host
with more cores runs several.  This supervisor starts N workers, each a whole gateway
(``kgw run --config FILE --worker-index I``: its own event loop, data-plane thread, upstream
connections and metadata follower), and the kernel spreads accepted connections over them:
every worker binds each listener port with ``SO_REUSEPORT``.

* **One state.** Every worker follows the same metadata log in the same order: the shared
  ``metadata.backend: kafka``, or the directory log, which the workers then write and follow
  together (metadata/directory_shared.py: its file is the order, an append lock makes one
  writer at a time) while the supervisor holds the directory's lock against any other
  process.
* **Restarts.** A worker that exits is started again (1 s back-off, doubling to 30 s while it
  keeps dying within a minute of its start).  The other workers go on serving.
* **Admin endpoint.** Workers bind their own on 127.0.0.1, an ephemeral port; the
  supervisor serves the configured one: ``/metrics`` is every worker's series labelled
  ``worker="I"`` (sum them without ``worker``) plus ``kgw_worker_up`` and
  ``kgw_worker_restarts_total``; ``/readyz`` is 200 when every worker is ready, one line per
  worker otherwise; ``/healthz`` is the supervisor's liveness.
* **Stopping.** SIGTERM/SIGINT are passed to every worker (each drains, see ``kgw run``);
  the supervisor exits once they have.  A second signal kills them.  Workers run in their own
  sessions and drain by themselves when their supervisor is gone (killed).
* **Certificates.** SIGHUP is passed to every ready worker, which reloads its TLS listeners'
  certificates (gateway/auth/tls_reload.py); a worker started later reads the files anyway.

Start-up prints what ``kgw run`` prints (``listening:``, ``admin:``, ``ready``) once every
worker is ready; a worker that exits before that stops the start with its status.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import trio

from gateway.process.admin_http import announce_ready, http_get, readiness_body, response, serve_http

__all__ = ["run_workers"]

log = logging.getLogger("kgw.workers")

_BACKOFF_FIRST_S = 1.0
_BACKOFF_MAX_S = 30.0
_STABLE_S = 60.0
_ADMIN = re.compile(r"^admin: http://(\S+):(\d+)\s*$")


@dataclass
class _Worker:
    index: int
    process: trio.Process | None = None
    admin: tuple[str, int] | None = None
    ready: bool = False
    listening: list[str] = field(default_factory=list)
    restarts: int = 0
    first_ready: trio.Event = field(default_factory=trio.Event)
    exit_status: int | None = None


class Supervisor:
    def __init__(self, config_path: str, config, count: int, overrides: list[str] | None = None) -> None:
        self.config_path = config_path
        #: the supervisor's --set lines (and their shorthands), given to every worker
        self.overrides = list(overrides or ())
        self.config = config
        self.workers = [_Worker(i) for i in range(count)]
        self.stopping = False

    def _argv(self, index: int) -> list[str]:
        sets = [arg for line in self.overrides for arg in ("--set", line)]
        return [sys.executable, "-m", "gateway.cli", "run", "--config", self.config_path, *sets,
                "--worker-index", str(index)]

    async def _run_one(self, worker: _Worker, failed_start: trio.Event) -> None:
        backoff = _BACKOFF_FIRST_S
        while not self.stopping:
            started = time.monotonic()
            worker.admin, worker.ready, worker.listening = None, False, []
            # its own session: a signal to the supervisor's group reaches the workers only as the
            # supervisor passes it on, so none exits before the supervisor knows it is stopping.
            # (Not PR_SET_PDEATHSIG: it fires when the *thread* that forked exits.)  A worker
            # whose supervisor is gone stops by itself (gateway.cli.main, _watch_supervisor).
            process = await trio.lowlevel.open_process(self._argv(worker.index), stdout=subprocess.PIPE,
                                                       start_new_session=True)
            worker.process = process
            log.info("worker %d started (pid %d)", worker.index, process.pid)
            buffer = b""
            assert process.stdout is not None
            async for chunk in process.stdout:
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for raw in lines:
                    line = raw.decode(errors="replace").rstrip()
                    if line.startswith("listening: "):
                        worker.listening.append(line)
                    elif m := _ADMIN.match(line):
                        worker.admin = (m.group(1), int(m.group(2)))
                    elif line == "ready" or line.startswith("started, waiting for "):
                        worker.ready = True  # accepting, its signal handlers installed
                        worker.first_ready.set()
            status = await process.wait()
            worker.ready = False
            worker.exit_status = status
            if self.stopping:
                return
            if not worker.first_ready.is_set():
                log.error("worker %d exited with status %d before it was ready", worker.index, status)
                failed_start.set()
                return
            if time.monotonic() - started > _STABLE_S:
                backoff = _BACKOFF_FIRST_S
            worker.restarts += 1
            log.warning("worker %d (pid %d) exited with status %d; starting it again in %.0fs",
                        worker.index, process.pid, status, backoff)
            await trio.sleep(backoff)
            backoff = min(backoff * 2, _BACKOFF_MAX_S)

    def signal_all(self, signum: int, *, ready_only: bool = False) -> None:
        """Pass ``signum`` to the running workers (``ready_only``: those that are ready; one
        still starting has not installed its handlers yet)."""
        for w in self.workers:
            if w.process is not None and w.process.returncode is None and (w.ready or not ready_only):
                try:
                    w.process.send_signal(signum)
                except ProcessLookupError:
                    pass

    # -- the admin endpoint ---------------------------------------------------------------------

    async def _respond(self, path: str) -> bytes:
        path = path.split("?", 1)[0]
        if path == "/healthz":
            return response("200 OK", b"ok\n")
        if path == "/readyz":
            states: dict[str, bool | str] = {}
            for w in self.workers:
                if not w.ready or w.admin is None:
                    states[f"worker {w.index}"] = "starting" if w.process is not None else False
                    continue
                status, body = await http_get(*w.admin, "/readyz")
                reasons = [line for line in body.decode(errors="replace").splitlines() if "not ready" in line]
                states[f"worker {w.index}"] = True if status == 200 else "; ".join(reasons) or f"HTTP {status}"
            return readiness_body(states)
        if path == "/metrics":
            return response("200 OK", await self._metrics(), "text/plain; version=0.0.4; charset=utf-8")
        return response("404 Not Found", b"not found: try /metrics, /healthz or /readyz\n")

    async def _metrics(self) -> bytes:
        families: dict[str, list[str]] = {}  # family -> HELP/TYPE lines (from the first worker)
        samples: dict[str, list[str]] = {}
        for w in self.workers:
            if w.admin is None:
                continue
            status, body = await http_get(*w.admin, "/metrics")
            if status != 200:
                continue
            _merge_exposition(body.decode(errors="replace"), f'worker="{w.index}"', families, samples)
        out: list[str] = []
        for name in families:
            out += families[name]
            out += samples.get(name, [])
        out += ["# HELP kgw_worker_up 1 while the worker process runs and has been ready",
                "# TYPE kgw_worker_up gauge"]
        out += [f'kgw_worker_up{{worker="{w.index}"}} {1 if w.ready else 0}' for w in self.workers]
        out += ["# HELP kgw_worker_restarts_total Times the worker was started again after it exited",
                "# TYPE kgw_worker_restarts_total counter"]
        out += [f'kgw_worker_restarts_total{{worker="{w.index}"}} {w.restarts}' for w in self.workers]
        return ("\n".join(out) + "\n").encode()


def _merge_exposition(text: str, label: str, families: dict[str, list[str]], samples: dict[str, list[str]]) -> None:
    """Add one worker's Prometheus text exposition, every sample labelled with ``label``,
    keeping each family's samples together (the format requires it)."""
    family = ""
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                family = parts[2]
                headers = families.setdefault(family, [])
                if len(headers) < 2 and line not in headers:
                    headers.append(line)
            continue
        cut = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=-1)
        if cut < 0:
            continue
        if line[cut] == "{":
            rest = line[cut + 1 :]
            labelled = f"{line[:cut]}{{{label}{'' if rest.startswith('}') else ','}{rest}"
        else:
            labelled = f"{line[:cut]}{{{label}}}{line[cut:]}"
        families.setdefault(family, [])
        samples.setdefault(family, []).append(labelled)


async def run_workers(config_path: str, config, count: int, say, overrides: list[str] | None = None) -> None:
    """Supervise ``count`` workers until a signal (see the module docstring); each worker reads
    ``config_path`` with the same ``overrides`` (``key.path=value``)."""
    supervisor = Supervisor(config_path, config, count, overrides)
    failed_start = trio.Event()
    directory_lock = -1
    if config.metadata.backend == "directory":
        # the workers share the log (metadata/directory_shared.py); the supervisor keeps every
        # other writer out: another gateway, `kgw acls add` with the gateway running
        from metadata.directory_shared import hold_directory

        directory_lock = hold_directory(config.metadata.path)
    try:
        await _supervise(supervisor, failed_start, config, count, say)
    finally:
        if directory_lock >= 0:
            os.close(directory_lock)


async def _supervise(supervisor: Supervisor, failed_start: trio.Event, config, count: int, say) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:
            for w in supervisor.workers:
                nursery.start_soon(supervisor._run_one, w, failed_start)

            async def all_ready() -> None:
                for w in supervisor.workers:
                    await w.first_ready.wait()

            with trio.CancelScope() as waiting:
                async def fail_fast() -> None:
                    await failed_start.wait()
                    waiting.cancel()

                nursery.start_soon(fail_fast)
                await all_ready()
            if failed_start.is_set():
                supervisor.stopping = True
                supervisor.signal_all(signal.SIGTERM)
                status = next(w.exit_status for w in supervisor.workers if w.exit_status is not None)
                raise RuntimeError(f"a worker could not start (exit status {status}); see its lines above")
            admin = config.admin
            if admin is not None:
                port = await nursery.start(serve_http, admin.host, admin.port, supervisor._respond)
            for line in supervisor.workers[0].listening:
                say(line)
            if admin is not None:
                say(f"admin: http://{admin.host}:{port}")
            say(f"workers: {' '.join(str(w.process.pid) for w in supervisor.workers if w.process)}")

            async def unready() -> list[str]:
                body = (await supervisor._respond("/readyz")).decode(errors="replace")
                return [line.split(" not ready", 1)[0] for line in body.splitlines() if " not ready" in line]

            nursery.start_soon(announce_ready, say, unready)
            log.info("%d workers ready", count)
            signalled = False
            async for signum in signals:
                name = signal.Signals(signum).name
                if signum == signal.SIGHUP:
                    log.info("received SIGHUP: the workers reload their TLS certificates")
                    supervisor.signal_all(signal.SIGHUP, ready_only=True)  # a starting one reads the files anyway
                    continue
                if signalled:
                    log.info("received %s again: stopping the workers at once", name)
                    supervisor.signal_all(signal.SIGKILL)
                    continue
                signalled = True
                log.info("received %s: draining the %d workers", name, count)
                supervisor.stopping = True
                supervisor.signal_all(signal.SIGTERM)

                async def stop_when_done() -> None:
                    for w in supervisor.workers:
                        if w.process is not None:
                            await w.process.wait()
                    nursery.cancel_scope.cancel()

                nursery.start_soon(stop_when_done)
