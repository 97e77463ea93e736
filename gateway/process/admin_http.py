"""The admin HTTP endpoint: ``/metrics`` (Prometheus), ``/healthz`` and ``/readyz``.

A deliberately tiny HTTP/1.0 server on Trio: one request per connection, GET
only, request head capped at 8 KiB and read with a 5 s deadline, so a slow or
malicious scraper cannot tie it up.

It keeps answering when the process runs out of file descriptors (clients holding
every one the limit allows): one descriptor is held in reserve, and when ``accept``
fails for want of one the reserve is let go, the waiting probe accepted and answered,
and the reserve taken back - so ``/healthz`` and ``/readyz`` say what is going on
instead of timing out, and the failure is one WARNING per episode, not a traceback
every 100 ms.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import socket
import time
from typing import Callable

import trio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["http_get", "readiness_body", "response", "serve_admin", "serve_http"]

log = logging.getLogger("kgw.admin")
_MAX_HEAD = 8192


def response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8") -> bytes:
    head = f"HTTP/1.0 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return head.encode() + body


def route(path: str, registry: CollectorRegistry, readiness: Callable[[], dict[str, bool]]) -> bytes:
    path = path.split("?", 1)[0]
    if path == "/metrics":
        return response("200 OK", generate_latest(registry), CONTENT_TYPE_LATEST)
    if path == "/healthz":
        return response("200 OK", b"ok\n")
    if path == "/readyz":
        return readiness_body(readiness())
    return response("404 Not Found", b"not found: try /metrics, /healthz or /readyz\n")


def readiness_body(states: dict) -> bytes:
    """200 when every state is True, else 503; a state is True (ready), False (not ready) or a
    string: not ready, for that reason."""
    body = "".join(f"{name} {'ready' if ok is True else 'not ready' if ok is False else f'not ready ({ok})'}\n"
                   for name, ok in states.items()).encode()
    return response("200 OK" if states and all(ok is True for ok in states.values())
                    else "503 Service Unavailable", body)


#: how often a started but not yet ready process looks again before it prints ``ready``
ANNOUNCE_POLL_S = 0.5


async def announce_ready(say, not_ready) -> None:
    """Print ``ready`` once nothing is left unready, and not before: ``started, waiting for ...``
    first when something is (``not_ready``: an async function giving the names, as /readyz
    lists them).  Scripts and the test harness wait for the ``ready`` line."""
    waiting = await not_ready()
    if waiting:
        say(f"started, waiting for {', '.join(waiting)} (GET /readyz says why)")
        while waiting:
            await trio.sleep(ANNOUNCE_POLL_S)
            waiting = await not_ready()
    say("ready")


async def _answer(stream: trio.SocketStream, respond) -> None:
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
            await stream.send_all(response("400 Bad Request", b"bad request\n"))
        elif line[0] not in ("GET", "HEAD"):
            await stream.send_all(response("405 Method Not Allowed", b"GET only\n"))
        else:
            await stream.send_all(await respond(line[1]))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    except Exception:
        log.exception("admin request failed")


async def _handle(stream: trio.SocketStream, respond) -> None:
    try:
        await _answer(stream, respond)
    finally:
        await trio.aclose_forcefully(stream)


_OUT_OF_DESCRIPTORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
#: one WARNING per episode of shortage; it ends after this long without a failed accept
SHORTAGE_EPISODE_S = 10.0


class _Reserve:
    """One descriptor held back (a duplicate of the listening socket) for the moment the process
    has no other.  It is let go to accept a probe and taken back *as that connection's own
    descriptor* (``dup2`` over it, which also closes the connection): no other task can take the
    freed number in between."""

    def __init__(self, listening: socket.socket) -> None:
        self._listening = listening
        self.fd = os.dup(listening.fileno())

    async def answer_one(self, respond) -> bool:
        """Accept and answer the waiting probe on the reserve; False if there was none."""
        os.close(self.fd)
        try:
            conn, _addr = self._listening.accept()
        except OSError:
            self.fd = os.dup(self._listening.fileno())  # the number just freed: nobody ran meanwhile
            return False
        sock = trio.socket.from_stdlib_socket(conn)
        try:
            await _answer(trio.SocketStream(sock), respond)
        finally:
            fd = sock.fileno()
            trio.lowlevel.notify_closing(sock)
            os.dup2(self._listening.fileno(), fd)  # closes the connection, keeps the number
            sock.detach()
            self.fd = fd
        return True

    def close(self) -> None:
        os.close(self.fd)


async def _accept_loop(listener: trio.SocketListener, respond, nursery) -> None:
    sock = listener.socket
    # the listening socket as a plain non-blocking one and the reserve, made while descriptors are there
    plain = socket.fromfd(sock.fileno(), sock.family, sock.type)
    plain.setblocking(False)
    reserve = _Reserve(plain)
    short = 0  # requests answered on the reserve in this episode
    last_short = -math.inf
    try:
        while True:
            try:
                conn, _addr = await sock.accept()
            except OSError as e:
                if e.errno not in _OUT_OF_DESCRIPTORS:
                    raise
                now = time.monotonic()
                if now - last_short >= SHORTAGE_EPISODE_S:
                    log.warning("admin endpoint: the process is out of file descriptors (%s); answering on the "
                                "reserved one until there are some again", e.strerror or e)
                last_short = now
                if await reserve.answer_one(respond):
                    short += 1
                else:
                    await trio.sleep(0.05)
                continue
            if short and time.monotonic() - last_short >= SHORTAGE_EPISODE_S:
                log.info("admin endpoint: file descriptors available again (%d request(s) were answered on the "
                         "reserved one)", short)
                short = 0
            nursery.start_soon(_handle, trio.SocketStream(conn), respond)
    finally:
        reserve.close()
        plain.close()


async def serve_http(host: str, port: int, respond, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Serve GET requests with ``await respond(path)`` (a whole HTTP response); reports the port."""
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as e:
        raise OSError(e.errno, f"admin endpoint cannot bind {host}:{port}: {e.strerror or e}") from None
    bound = listeners[0].socket.getsockname()[1]
    try:
        async with trio.open_nursery() as nursery:
            task_status.started(bound)
            for listener in listeners:
                nursery.start_soon(_accept_loop, listener, respond, nursery)
    finally:
        for listener in listeners:
            listener.socket.close()


async def serve_admin(host: str, port: int, registry: CollectorRegistry, readiness, task_status=trio.TASK_STATUS_IGNORED):
    async def respond(path: str) -> bytes:
        return route(path, registry, readiness)

    await serve_http(host, port, respond, task_status=task_status)


async def http_get(host: str, port: int, path: str, timeout_s: float = 2.0) -> tuple[int, bytes]:
    """(status, body) of one GET to an admin endpoint; (0, reason) when it does not answer."""
    with trio.move_on_after(timeout_s):
        try:
            stream = await trio.open_tcp_stream(host, port)
            async with stream:
                await stream.send_all(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
                data = bytearray()
                while chunk := await stream.receive_some(65536):
                    data += chunk
                    if len(data) > 64 << 20:
                        return 0, b"response too large"
        except OSError as e:
            return 0, str(e).encode()
        head, _, body = bytes(data).partition(b"\r\n\r\n")
        try:
            return int(head.split(b" ", 2)[1]), body
        except (IndexError, ValueError):
            return 0, b"not an HTTP response"
    return 0, b"timed out"
