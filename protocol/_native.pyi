from typing import Any, Callable

def bind(topic_span: type, produce_shape: type, uuid: type, check_batch: Callable[..., Any]) -> None: ...
def walk_produce(frame: memoryview | bytes, offset: int, flexible: bool, version: int) -> Any:
    """A ProduceShape of protocol.apis.produce, or None: the module cannot name it here."""
