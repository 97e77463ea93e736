from typing import Any, Callable

def bind_header(request_header: type, is_flexible: Callable[[int, int], bool | None]) -> None: ...
def request_header(body: memoryview | bytes) -> Any:
    """A RequestHeader of protocol.headers, or None: the reference parses it."""
def bind(topic_span: type, produce_shape: type, uuid: type, check_batch: Callable[..., Any]) -> None: ...
def walk_produce(frame: memoryview | bytes, offset: int, flexible: bool, version: int) -> Any:
    """A ProduceShape of protocol.apis.produce, or None: the module cannot name it here."""
def uuids_kept() -> int: ...
def produce_response_tags(frame: memoryview | bytes, offset: int, version: int) -> bool | None:
    """Whether a flexible Produce response ends with tagged fields; None: the usual shape it is not."""
def walk_fetch(frame: memoryview | bytes, offset: int, version: int) -> tuple[int, int, int, int, list[Any], list[Any]] | None:
    """What walk_fetch_request_python reads of a usual Fetch request; None: the reference reads it."""
def fetch_response_tags(frame: memoryview | bytes, offset: int, version: int) -> int | None:
    """Where a v13+ Fetch response's top-level tags start; None: the reference walks it."""
def metadata_partitions_end(buf: memoryview | bytes, offset: int, version: int, count: int) -> int | None:
    """Where a Metadata response topic's partitions end; None: the reference walks them."""
def check_lengths(plan: tuple[bool, tuple[Any, ...]], buf: memoryview | bytes, offset: int) -> int | None:
    """Where an entity encoded at offset ends, its lengths checked; None: the reference walks it."""
def bind_framing(need_data: object) -> None: ...
def frame_buffer(parts: list[bytes | memoryview], size: int) -> bytearray:
    """size bytes starting with the parts; the rest not written (framing receives into it)."""

class FrameCursor:
    """protocol.framing's cursor in C (the reference: framing._FrameCursorPython)."""
    _chunk: memoryview
    _pos: int
    _fill: int
    limit: int
    deferred: bool
    @property
    def buffered(self) -> int: ...
    def next_frame(self) -> Any: ...
    def receive_data(self, data: bytes) -> None: ...
