"""HAProxy from Debian (``make setup`` installs the package) as the TCP load balancer in front of
kgw: one frontend per entry of ``routes``, each forwarding to a kgw port with the PROXY protocol
version it names (``send-proxy`` or ``send-proxy-v2``).  Run in the foreground (``-db``) and
stopped by its own process id."""

from __future__ import annotations

import shutil
import socket
from dataclasses import dataclass
from pathlib import Path

from .ports import HOST, free_port
from .processes import ManagedProcess, ProcessError, wait_until

__all__ = ["HAProxy", "start_haproxy"]


@dataclass
class HAProxy:
    process: ManagedProcess
    #: route name -> the frontend's port
    ports: dict[str, int]

    def stop(self) -> None:
        self.process.stop(10)


def start_haproxy(work: Path, routes: dict[str, tuple[int, str]], *, ports: dict[str, int] | None = None) -> HAProxy:
    """``routes``: name -> (target port, "send-proxy" | "send-proxy-v2" | ""); ``ports``: the
    frontends' ports where they must be known in advance (else free ones)."""
    binary = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    if binary is None:
        raise ProcessError("haproxy not found: `make setup` installs Debian's haproxy package")
    ports = {name: (ports or {}).get(name) or free_port() for name in routes}
    lines = ["global", "    maxconn 256", "defaults", "    mode tcp", "    timeout connect 5s",
             "    timeout client 60s", "    timeout server 60s"]
    for name, (target, option) in routes.items():
        lines += [f"frontend fe_{name}", f"    bind {HOST}:{ports[name]}", f"    default_backend be_{name}",
                  f"backend be_{name}", f"    server kgw {HOST}:{target} {option}".rstrip()]
    work.mkdir(parents=True, exist_ok=True)
    config = work / "haproxy.cfg"
    config.write_text("\n".join(lines) + "\n")
    check = ManagedProcess("haproxy-check", [binary, "-c", "-f", config], log_dir=work).start()
    if check.wait_exit(30) != 0:
        raise ProcessError(check.describe_failure("haproxy -c refused its configuration"))
    process = ManagedProcess("haproxy", [binary, "-db", "-f", config], log_dir=work).start()

    def listening() -> bool:
        if not process.alive():
            raise ProcessError(process.describe_failure("haproxy exited"))
        for port in ports.values():
            with socket.socket() as probe:
                if probe.connect_ex((HOST, port)) != 0:
                    return False
        return True

    try:
        wait_until(listening, 30, message="haproxy's frontends")
    except BaseException:
        process.stop(5)
        raise
    return HAProxy(process, ports)
