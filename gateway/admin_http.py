"""The admin HTTP endpoint: ``/metrics`` (Prometheus), ``/healthz`` and ``/readyz``.

A deliberately tiny HTTP/1.0 server on Trio: one request per connection, GET
only, request head capped at 8 KiB and read with a 5 s deadline, so a slow or
malicious scraper cannot tie it up.
"""

from __future__ import annotations

import logging
from typing import Callable

import trio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["serve_admin"]

log = logging.getLogger("kgw.admin")
_MAX_HEAD = 8192


def _response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8") -> bytes:
    head = f"HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return head.encode() + body


def route(path: str, registry: CollectorRegistry, readiness: Callable[[], dict[str, bool]]) -> bytes:
    path = path.split("?", 1)[0]
    if path == "/metrics":
        return _response("200 OK", generate_latest(registry), CONTENT_TYPE_LATEST)
    if path == "/healthz":
        return _response("200 OK", b"ok\n")
    if path == "/readyz":
        states = readiness()
        # a state is True (ready), False (not ready) or a string: not ready, for that reason
        body = "".join(f"{name} {'ready' if ok is True else 'not ready' if ok is False else f'not ready ({ok})'}\n"
                       for name, ok in states.items()).encode()
        return _response("200 OK" if states and all(ok is True for ok in states.values())
                         else "503 Service Unavailable", body)
    return _response("404 Not Found", b"not found: try /metrics, /healthz or /readyz\n")


async def _handle(stream: trio.SocketStream, registry, readiness) -> None:
    try:
        head = b""
        with trio.move_on_after(5):
            while b"\r\n\r\n" not in head and b"\n\n" not in head and len(head) < _MAX_HEAD:
                data = await stream.receive_some(4096)
                if not data:
                    break
                head += data
        line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(line) < 2:
            await stream.send_all(_response("400 Bad Request", b"bad request\n"))
        elif line[0] not in ("GET", "HEAD"):
            await stream.send_all(_response("405 Method Not Allowed", b"GET only\n"))
        else:
            await stream.send_all(route(line[1], registry, readiness))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    except Exception:
        log.exception("admin request failed")
    finally:
        await trio.aclose_forcefully(stream)


async def serve_admin(host: str, port: int, registry: CollectorRegistry, readiness, task_status=trio.TASK_STATUS_IGNORED):
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        task_status.started(bound)
        for listener in listeners:
            nursery.start_soon(trio.serve_listeners, lambda s: _handle(s, registry, readiness), [listener])
