"""The embedded demo: a local tansu broker as kgw's upstream, and a sample topic."""

from __future__ import annotations

import logging
import subprocess
from datetime import timedelta

import trio

from gateway.upstream import UpstreamCluster, roundtrip
from protocol.codecs import request_class

__all__ = ["start_tansu", "create_topic"]

log = logging.getLogger("kgw.demo")


async def start_tansu(binary: str, port: int, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """Run tansu on 127.0.0.1:port with in-memory storage; started once it reports ready."""
    argv = [binary, "broker", "--listener-url", f"tcp://127.0.0.1:{port}",
            "--advertised-listener-url", f"tcp://127.0.0.1:{port}", "--storage-engine", "memory://tansu/"]
    process = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert process.stdout is not None
    seen = b""
    with trio.fail_after(30):
        while b"ready in" not in seen:
            chunk = await process.stdout.receive_some(4096)
            if not chunk:
                raise RuntimeError(f"tansu exited before it was ready: {seen.decode(errors='replace')}")
            seen += chunk
    log.info("tansu broker running on 127.0.0.1:%d (pid %d)", port, process.pid)
    task_status.started(process)
    async for _ in process.stdout:  # keep draining its output
        pass
    await process.wait()


async def create_topic(cluster: UpstreamCluster, name: str, partitions: int = 1) -> None:
    cls = request_class(19, 5)
    topic_cls = cls.__dataclass_fields__["topics"].type.__args__[0]
    request = cls(
        topics=(topic_cls(name=name, num_partitions=partitions, replication_factor=1, assignments=(), configs=()),),
        timeout=timedelta(seconds=10), validate_only=False,
    )
    stream = await cluster.connect_bootstrap()
    async with stream:
        response = await roundtrip(stream, 19, 5, request, cluster.request_timeout_s)
    for topic in response.topics:
        if topic.error_code not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS
            raise RuntimeError(f"creating topic {name} failed with error {topic.error_code}")
