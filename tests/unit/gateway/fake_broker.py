"""A scripted upstream broker for gateway unit tests (never used to claim compatibility).

It speaks just enough Kafka for the gateway: ApiVersions, Metadata (itself as
node 1), Produce and ListGroups; a test can make an API hang or delay its
answer, and inspect what it received.
"""

from __future__ import annotations

import io
import struct
import time
from datetime import timedelta

import trio
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import response as md12
from kio.schema.response_header.v0.header import ResponseHeader as RH0
from kio.schema.response_header.v1.header import ResponseHeader as RH1
from kio.serial import entity_writer
from kio.static.primitive import i16, i32

from protocol.codecs import decode_request, encode, make, response_class
from protocol.framing import NEED_DATA, FrameDecoder
from protocol.headers import parse_request_header

NODE_ID = 1


class FakeBroker:
    def __init__(self) -> None:
        self.port = 0
        self.received: list[tuple[int, int, int]] = []  # (api key, version, correlation id)
        self.hang: set[int] = set()
        self.close_on: set[int] = set()  # api keys whose request makes the broker drop the connection
        self.produce_bytes: list[int] = []
        self.read_pause = 0.0
        self.extra_nodes: tuple[int, ...] = ()  # more node ids in Metadata, all at this broker's address  # seconds between socket reads: a broker slower than its clients  # size of the records of each Produce partition received
        self.delay: dict[int, float] = {}
        self.groups = 0  # groups in a ListGroups answer: a large response on demand
        self.connections = 0
        self.versions = {0: (3, 11), 3: (0, 12), 16: (0, 5), 18: (0, 3)}
        #: a server context: the broker's listener is SSL (kgw's upstream.tls)
        self.ssl_context = None
        #: SASL/PLAIN required (any credentials), sessions lasting this long (KIP-368
        #: connections.max.reauth.ms): a request after expiry closes the connection, as Kafka does
        self.sasl_lifetime_ms: int | None = None
        self.logins = 0  # successful SaslAuthenticate exchanges (first logins and re-authentications)
        self.reauthentications = 0  # of those, on a connection already authenticated
        self.expired_closes = 0  # connections closed for a request after their session expired
        #: Fetch: a function of the request version giving the response body; the response is
        #: sent in ``fetch_pieces`` parts, ``fetch_pause`` seconds apart (a broker sending slowly)
        self.fetch_body = None
        self.fetch_pieces = 1
        self.fetch_pause = 0.0
        #: close the connection after sending this many bytes of the next Fetch response
        self.fetch_cut: int | None = None

    async def serve(self, task_status=trio.TASK_STATUS_IGNORED):
        listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")  # 0 the first time
        self.port = listeners[0].socket.getsockname()[1]
        if self.ssl_context is not None:
            listeners = [trio.SSLListener(tcp, self.ssl_context, https_compatible=False) for tcp in listeners]
        task_status.started(self)
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream):
        self.connections += 1
        decoder = FrameDecoder(1 << 30)
        session_ends: float | None = None  # SASL: when this connection's session expires
        async with trio.open_nursery() as nursery:
            send_lock = trio.StrictFIFOLock()
            order: list[trio.Event] = []
            while True:
                if self.read_pause:
                    await trio.sleep(self.read_pause)
                try:
                    data = await stream.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError):  # (closed by fetch_cut)
                    break
                if not data:
                    break
                decoder.receive_data(data)
                while (frame := decoder.next_frame()) is not NEED_DATA:
                    frame = bytes(frame)
                    header = parse_request_header(memoryview(frame)[4:])
                    self.received.append((header.api_key, header.api_version, header.correlation_id))
                    if header.api_key == 0:
                        request = decode_request(0, header.api_version, memoryview(frame)[4:], header.size)
                        self.produce_bytes += [len(p.records or b"") for t in request.topic_data
                                               for p in t.partition_data]
                    if self.sasl_lifetime_ms is not None and header.api_key == 36:
                        self.logins += 1
                        self.reauthentications += session_ends is not None
                        session_ends = time.monotonic() + self.sasl_lifetime_ms / 1000
                    elif self.sasl_lifetime_ms is not None and header.api_key not in (17, 18) and (
                            session_ends is None or time.monotonic() > session_ends):
                        self.expired_closes += session_ends is not None
                        await stream.aclose()
                        nursery.cancel_scope.cancel()
                        return
                    if header.api_key in self.close_on:
                        await stream.aclose()
                        nursery.cancel_scope.cancel()
                        return
                    if header.api_key == 0 and frame[4 + header.size + 2 : 4 + header.size + 4] == b"\x00\x00":
                        continue  # acks=0 (v3-8 with null txn id): no response
                    prev = order[-1] if order else None
                    done = trio.Event()
                    order.append(done)
                    nursery.start_soon(self._answer, stream, send_lock, header, frame, prev, done)
            nursery.cancel_scope.cancel()

    async def _answer(self, stream, lock, header, frame, prev, done):
        if header.api_key in self.hang:
            await trio.sleep_forever()
        await trio.sleep(self.delay.get(header.api_key, 0))
        if prev is not None:
            await prev.wait()  # a broker answers in order
        body = self._body(header, memoryview(frame)[4:])
        out = io.BytesIO()
        if header.flexible and header.api_key != 18:
            entity_writer(RH1)(out, RH1(correlation_id=i32(header.correlation_id)))
        else:
            entity_writer(RH0)(out, RH0(correlation_id=i32(header.correlation_id)))
        out.write(body)
        payload = out.getvalue()
        frame = struct.pack(">i", len(payload)) + payload
        async with lock:
            try:
                if header.api_key == 1:
                    await self._send_fetch(stream, frame)
                else:
                    await stream.send_all(frame)
            except trio.BrokenResourceError:
                pass
        done.set()

    async def _send_fetch(self, stream, frame: bytes) -> None:
        if self.fetch_cut is not None:
            await stream.send_all(frame[: self.fetch_cut])
            await stream.aclose()
            return
        step = -(-len(frame) // self.fetch_pieces)
        for at in range(0, len(frame), step):
            if at:
                await trio.sleep(self.fetch_pause)
            await stream.send_all(frame[at : at + step])

    def _body(self, header, body) -> bytes:
        key, version = header.api_key, header.api_version
        if key == 17:
            return encode(response_class(17, version)(error_code=ErrorCode.none, mechanisms=("PLAIN",)))
        if key == 36:
            cls = response_class(36, version)
            kw = {"error_code": ErrorCode.none, "error_message": None, "auth_bytes": b""}
            if "session_lifetime" in cls.__dataclass_fields__:
                kw["session_lifetime"] = timedelta(milliseconds=self.sasl_lifetime_ms or 0)
            return encode(cls(**kw))
        if key == 18:
            cls = response_class(18, version)
            key_cls = cls.__dataclass_fields__["api_keys"].type.__args__[0]
            kw = {"error_code": ErrorCode.none,
                  "api_keys": tuple(key_cls(api_key=i16(k), min_version=i16(lo), max_version=i16(hi))
                                    for k, (lo, hi) in sorted(self.versions.items()))}
            if "throttle_time" in cls.__dataclass_fields__:
                kw["throttle_time"] = timedelta(0)
            return encode(cls(**kw))
        if key == 3:
            cls = response_class(3, version)
            broker_cls = cls.__dataclass_fields__["brokers"].type.__args__[0]
            kw = {"brokers": tuple(broker_cls(node_id=i32(n), host="127.0.0.1", port=i32(self.port), rack=None)
                                   for n in (NODE_ID, *self.extra_nodes)),
                  "topics": ()}
            if version >= 12:
                return encode(md12.MetadataResponse(throttle_time=timedelta(0), cluster_id="fake",
                                                    controller_id=i32(NODE_ID), **kw))
            fields = cls.__dataclass_fields__
            extra = {k: v for k, v in {"throttle_time": timedelta(0), "cluster_id": "fake",
                                       "controller_id": i32(NODE_ID), "cluster_authorized_operations": i32(-2147483648)}.items()
                     if k in fields}
            return encode(cls(**kw, **extra))
        if key == 16:
            cls = response_class(16, version)
            fields = cls.__dataclass_fields__
            group_cls = fields["groups"].type.__args__[0]
            kw = {"error_code": ErrorCode.none, "groups": tuple(
                make(group_cls, group_id=f"group-{i:08d}", protocol_type="consumer", group_state="Stable",
                     group_type="classic") for i in range(self.groups))}
            if "throttle_time" in fields:
                kw["throttle_time"] = timedelta(0)
            return encode(cls(**kw))
        if key == 1:
            return self.fetch_body(version)
        if key == 0:
            request = decode_request(0, version, body, header.size)
            cls = response_class(0, version)
            topic_cls = cls.__dataclass_fields__["responses"].type.__args__[0]
            part_cls = topic_cls.__dataclass_fields__["partition_responses"].type.__args__[0]
            topics = []
            for t in request.topic_data:
                parts = []
                for p in t.partition_data:
                    pf = part_cls.__dataclass_fields__
                    kw = {"index": p.index, "error_code": ErrorCode.none, "base_offset": 0}
                    if "log_append_time" in pf:
                        kw["log_append_time"] = None
                    if "log_start_offset" in pf:
                        kw["log_start_offset"] = 0
                    if "record_errors" in pf:
                        kw["record_errors"] = ()
                    if "error_message" in pf:
                        kw["error_message"] = None
                    parts.append(part_cls(**kw))
                topics.append(topic_cls(name=t.name, partition_responses=tuple(parts)))
            return encode(cls(responses=tuple(topics), throttle_time=timedelta(0)))
        raise AssertionError(f"fake broker cannot answer api {key}")
