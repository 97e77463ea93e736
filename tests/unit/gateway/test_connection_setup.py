"""What a connection's set-up and end ask of Trio: an upstream named by its IP address is
connected to directly (``trio.open_tcp_stream``'s happy eyeballs cost a nursery, a task and events
on every client connection), and a plain TCP stream is closed at once, without
``trio.aclose_forcefully``'s cancelled checkpoint.  Behaviour is unchanged: TCP_NODELAY on the
upstream stream, the same refusal message, host names still resolved, TLS streams closed
forcefully."""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing

from gateway.connection.fast_io import FastStream, close_stream
from gateway.upstream.cluster import UpstreamUnavailable, open_upstream


def _listening() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


def _no_happy_eyeballs(monkeypatch) -> None:
    async def refuse(*_args, **_kwargs):
        raise AssertionError("trio.open_tcp_stream used for an IP address")

    monkeypatch.setattr(trio, "open_tcp_stream", refuse)


async def test_an_upstream_ip_address_is_connected_to_directly_with_nodelay(monkeypatch):
    _no_happy_eyeballs(monkeypatch)
    with _listening() as server:
        stream = await open_upstream("127.0.0.1", server.getsockname()[1], 5)
        peer, _ = server.accept()
        with peer:
            assert stream.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            await stream.send_all(b"kgw")
            assert peer.recv(3) == b"kgw"
        await stream.aclose()


async def test_an_ipv6_upstream_address_is_connected_to_directly(monkeypatch):
    if not socket.has_ipv6:
        pytest.fail("this machine has no IPv6 loopback; the test needs one")
    _no_happy_eyeballs(monkeypatch)
    with socket.socket(socket.AF_INET6) as server:
        server.bind(("::1", 0))
        server.listen()
        stream = await open_upstream("::1", server.getsockname()[1], 5)
        assert stream.socket.family == socket.AF_INET6
        await stream.aclose()


@pytest.fixture
def made(monkeypatch) -> list[trio.socket.SocketType]:
    """Every Trio socket made from now on."""
    sockets: list[trio.socket.SocketType] = []
    real = trio.socket.socket

    def kept(*args, **kwargs):
        sockets.append(real(*args, **kwargs))
        return sockets[-1]

    monkeypatch.setattr(trio.socket, "socket", kept)
    return sockets


async def test_a_refused_connection_names_the_address_and_the_reason_once(made):
    with _listening() as server:
        port = server.getsockname()[1]
    with pytest.raises(UpstreamUnavailable) as refused:
        await open_upstream("127.0.0.1", port, 5)
    assert str(refused.value) == f"cannot connect to 127.0.0.1:{port}: Connection refused"
    assert len(made) == 1 and made[0].fileno() == -1  # its socket closed


async def test_an_upstream_host_name_is_still_resolved():
    with _listening() as server:
        stream = await open_upstream("localhost", server.getsockname()[1], 5)
        assert stream.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        await stream.aclose()


async def test_a_connect_that_times_out_leaves_no_socket_open(made):
    """A broker whose accept queue is full drops the SYN: the connect timeout fires, and the
    socket it was made on is closed."""
    with _listening() as server:
        server.listen(0)
        port = server.getsockname()[1]
        queued = []
        try:
            for _ in range(4):  # fill the accept queue: later SYNs go unanswered
                c = socket.socket()
                c.setblocking(False)
                queued.append(c)
                try:
                    c.connect(("127.0.0.1", port))
                except BlockingIOError:
                    pass
            with pytest.raises(UpstreamUnavailable, match="timed out after 0.3s"):
                await open_upstream("127.0.0.1", port, 0.3)
        finally:
            for c in queued:
                c.close()
    assert len(made) == 1 and made[0].fileno() == -1


async def test_a_plain_stream_closes_at_once_without_a_checkpoint():
    a, b = trio.socket.socketpair()
    with b:
        stream = trio.SocketStream(a)
        with trio.testing.assert_no_checkpoints():
            await close_stream(FastStream(stream))
        assert stream.socket.fileno() == -1
        assert await b.recv(1) == b""  # the peer sees the end


async def test_any_other_stream_is_closed_forcefully():
    closed: list[str] = []

    class Wrapped(trio.abc.Stream):  # e.g. trio.SSLStream: its aclose would try to say goodbye
        async def aclose(self) -> None:
            await trio.lowlevel.checkpoint()  # cancelled by aclose_forcefully's scope
            closed.append("closed")

        async def send_all(self, data) -> None: ...
        async def wait_send_all_might_not_block(self) -> None: ...
        async def receive_some(self, max_bytes=None) -> bytes: return b""

    with trio.testing.assert_checkpoints():
        await close_stream(Wrapped())
    assert closed == []  # cancelled before it could finish, as aclose_forcefully does


class _Resolver:
    """trio.socket.getaddrinfo counted, answering ``names`` (name -> addresses) itself."""

    def __init__(self, monkeypatch, names: dict[str, list[str]]) -> None:
        self.calls: list[str] = []
        self.names = names

        async def getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
            self.calls.append(host)
            return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
                    for a in self.names[host]]

        monkeypatch.setattr(trio.socket, "getaddrinfo", getaddrinfo)


@pytest.fixture
def addresses(monkeypatch):
    """A fresh cache of host names, on a clock the test moves."""
    from gateway.upstream import cluster

    now = [1000.0]
    fresh = cluster.HostAddresses(limit=2, clock=lambda: now[0])
    monkeypatch.setattr(cluster, "ADDRESSES", fresh)
    return fresh, now


async def test_an_upstream_host_name_is_resolved_once_per_ttl_and_connected_to_directly(monkeypatch, addresses):
    from gateway.upstream.cluster import ADDRESS_TTL_S

    _cache, now = addresses
    resolver = _Resolver(monkeypatch, {"broker-0.kafka": ["127.0.0.1"]})
    _no_happy_eyeballs(monkeypatch)
    with _listening() as server:
        port = server.getsockname()[1]
        for _ in range(3):
            stream = await open_upstream("broker-0.kafka", port, 5)
            assert stream.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            await stream.aclose()
        assert resolver.calls == ["broker-0.kafka"]
        now[0] += ADDRESS_TTL_S
        await (await open_upstream("broker-0.kafka", port, 5)).aclose()
        assert resolver.calls == ["broker-0.kafka"] * 2  # expired: resolved again


async def test_a_failed_connect_forgets_the_names_addresses(monkeypatch, addresses):
    resolver = _Resolver(monkeypatch, {"broker-0.kafka": ["127.0.0.1"]})
    with _listening() as server:
        port = server.getsockname()[1]
    with pytest.raises(UpstreamUnavailable, match="Connection refused"):
        await open_upstream("broker-0.kafka", port, 5)
    with pytest.raises(UpstreamUnavailable, match="Connection refused"):
        await open_upstream("broker-0.kafka", port, 5)
    assert resolver.calls == ["broker-0.kafka"] * 2  # (the broker may have moved: asked again)


async def test_a_name_with_several_addresses_is_left_to_happy_eyeballs(monkeypatch, addresses):
    _Resolver(monkeypatch, {"dual.kafka": ["::1", "127.0.0.1"]})
    tried: list[str] = []

    async def happy_eyeballs(host, port, **_kwargs):
        tried.append(host)
        raise OSError("all attempts failed")

    monkeypatch.setattr(trio, "open_tcp_stream", happy_eyeballs)
    with pytest.raises(UpstreamUnavailable, match="all attempts failed"):
        await open_upstream("dual.kafka", 9092, 5)
    assert tried == ["dual.kafka"]


async def test_the_cache_holds_at_most_its_limit_of_names(monkeypatch, addresses):
    cache, _now = addresses  # limit 2
    resolver = _Resolver(monkeypatch, {"a": ["127.0.0.1"], "b": ["127.0.0.2"], "c": ["127.0.0.3"]})
    for name in ("a", "b", "c", "c", "b", "a"):
        await cache.of(name, 9092)
    assert resolver.calls == ["a", "b", "c", "a"]  # "a", the oldest, made room for "c"
