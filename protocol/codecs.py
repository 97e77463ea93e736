"""Body codecs over kio: the only module that touches ``kio.index``.

Theory of operation
-------------------
kio generates one frozen dataclass per (API, version, direction) from Kafka's
JSON schemas.  These helpers look the class up (memoised), decode a body
from a buffer at an offset, and encode an entity back to bytes.  Record batches
stay opaque: kio reads a ``records`` field as bytes, and the hot-path modules
(Produce requests, Fetch responses) never come through here at all.
"""

from __future__ import annotations

import io
import types
import typing
from typing import Any
from functools import lru_cache

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import SerialError

from protocol.bounds import LengthError, check_lengths
from protocol.unknown_tags import without_unknown_tags

__all__ = [
    "CodecError",
    "UnknownTagError",
    "decode_request",
    "decode_response",
    "encode",
    "request_class",
    "response_class",
]


class CodecError(Exception):
    """A body that does not decode as its schema says."""


class UnknownTagError(CodecError):
    """A body with a tagged field its schema does not declare (a newer peer's)."""


request_class = lru_cache(maxsize=None)(load_request_schema)
response_class = lru_cache(maxsize=None)(load_response_schema)


@lru_cache(maxsize=None)
def _reader(cls: Any) -> Any:
    return entity_reader(cls)


@lru_cache(maxsize=None)
def _writer(cls: Any) -> Any:
    return entity_writer(cls)


def _decode(cls: Any, buf: memoryview | bytes, offset: int) -> Any:
    try:
        value, _size = _reader(cls)(buf, offset)
    except (SerialError, ValueError, IndexError, UnicodeDecodeError, OverflowError) as e:
        raise CodecError(f"cannot decode {cls.__name__} v{cls.__version__}: {e}") from e
    except KeyError as e:
        if "tagged field" in str(e):  # kio's reader: "Unknown tagged field tag: N"
            raise UnknownTagError(f"cannot decode {cls.__name__} v{cls.__version__}: {e.args[0]}") from e
        raise CodecError(f"cannot decode {cls.__name__} v{cls.__version__}: {e!r}") from e
    except Exception as e:  # the native reader raises a few other types on garbage
        raise CodecError(f"cannot decode {cls.__name__} v{cls.__version__}: {e!r}") from e
    return value


def decode_request(api_key: int, version: int, buf: memoryview | bytes, offset: int) -> Any:
    """Decode a request body.  Bytes after the body are ignored, as a Kafka broker
    ignores them (librdkafka sends some), and the original frame is forwarded.

    Every length and count is first checked against the bytes that are there
    (:mod:`protocol.bounds`): kio's native reader would otherwise size an array from
    a client's count and abort the process when the allocation fails."""
    return _decode_checked(request_class(api_key, version), buf, offset)


def decode_response(api_key: int, version: int, buf: memoryview | bytes, offset: int) -> Any:
    """Decode a response body from the upstream, its lengths and counts checked first as a
    request's are: the upstream is trusted to speak Kafka, but a malformed body must cost one
    connection an error, not the process an abort in kio's native reader.  A tagged field kio
    does not know (a newer broker's) is left out (:mod:`protocol.unknown_tags`)."""
    cls = response_class(api_key, version)
    try:
        return _decode_checked(cls, buf, offset)
    except UnknownTagError:  # a newer broker's tagged field: left out, as Kafka's parsers skip it
        try:
            body = without_unknown_tags(cls, buf, offset)
        except LengthError as e:
            raise CodecError(f"cannot decode {cls.__name__} v{cls.__version__}: {e}") from None
        return _decode_checked(cls, body, 0)


def _decode_checked(cls: Any, buf: memoryview | bytes, offset: int) -> Any:
    try:
        check_lengths(cls, buf, offset)
    except LengthError as e:
        raise CodecError(f"cannot decode {cls.__name__} v{cls.__version__}: {e}") from None
    return _decode(cls, buf, offset)


def encode(entity: Any) -> bytes:
    out = io.BytesIO()
    _writer(entity.__class__)(out, entity)
    return out.getvalue()


def nested(cls: Any, field_name: str) -> Any:
    """The entity class of a (tuple-of-, optional) entity field: ``nested(ProduceResponse, "responses")``."""
    return _nested(cls, field_name)  # (a plain signature for the type checker; the cache is below)


@lru_cache(maxsize=None)  # (typing.get_type_hints costs ~80 us a call: error answers built per request use it)
def _nested(cls: Any, field_name: str) -> Any:
    tp = typing.get_type_hints(cls)[field_name]
    while True:
        origin = typing.get_origin(tp)
        if origin in (typing.Union, types.UnionType):
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
        elif origin is tuple:
            tp = typing.get_args(tp)[0]
        else:
            return tp



def make(cls: Any, **values: Any) -> Any:
    """Build ``cls`` from the fields it has among ``values`` (versions differ in fields)."""
    names = cls.__dataclass_fields__
    return cls(**{k: v for k, v in values.items() if k in names})
