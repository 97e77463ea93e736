"""ApiVersions (18): answered by kgw from what both the upstream and kgw can handle.

Theory of operation
-------------------
A client negotiates every later request from this answer, so kgw advertises,
per API key, the intersection of three ranges: the upstream's, the versions kio
has schemas for (what kgw can decode), and the range the API's spec declares it
was written for (``ApiSpec.versions``: what kgw's inspection and enforcement
account for).  APIs kgw answers itself are advertised with the intersection of
kio's and their spec's range whatever the upstream says.  With an authorizer
configured, an API without enforcement is not advertised at all.  A request for an ApiVersions version
kgw does not know is answered, as Kafka does (KIP-511), with a v0 body carrying
UNSUPPORTED_VERSION and the supported ranges, so the client can retry lower.
"""

from __future__ import annotations

import dataclasses
import re

from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
import typing
from typing import Any, Mapping

from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.static.constants import EntityType
from kio.static.primitive import i16

from protocol.codecs import encode, response_class
from protocol.headers import HeaderError, read_uvarint

__all__ = ["KIO_VERSIONS", "ApiVersionsAnswers", "MalformedApiVersions", "VersionRange", "advertised_versions", "build_response", "client_software",
           "request_error", "API_VERSIONS"]

API_VERSIONS = 18


@dataclass(frozen=True, slots=True)
class VersionRange:
    min: int
    max: int


def _kio_versions() -> Mapping[int, VersionRange]:
    out = {}
    for key, name in api_key_map.items():
        versions = [v for v, kinds in schema_name_map[name].items() if EntityType.request in kinds]
        if versions:
            out[key] = VersionRange(min(versions), max(versions))
    return MappingProxyType(out)


#: every (API key -> version range) kio can decode
KIO_VERSIONS: Mapping[int, VersionRange] = _kio_versions()


def advertised_versions(
    upstream: Mapping[int, VersionRange], local_keys: frozenset[int], specs: Mapping[int, Any],
    authorizer: bool = False,
) -> dict[int, VersionRange]:
    """API key -> range a client may use through kgw.

    ``specs`` is the registry (API key -> :class:`~protocol.apis.base.ApiSpec`; fails closed:
    an API absent from it is never advertised, nor a version outside its spec's ``versions``);
    ``local_keys`` are answered by kgw itself.  With ``authorizer``, an API that is forwarded
    but has no ``enforce`` is left out.
    """
    out: dict[int, VersionRange] = {}
    for key, kio_range in KIO_VERSIONS.items():
        spec = specs.get(key)
        if spec is None or spec.versions is None:
            continue
        if authorizer and key not in local_keys and not spec.answered_locally and spec.enforce is None:
            continue
        lo, hi = max(kio_range.min, spec.versions[0]), min(kio_range.max, spec.versions[1])
        if lo > hi:
            continue
        ours = VersionRange(lo, hi)
        if key in local_keys:
            out[key] = ours
            continue
        theirs = upstream.get(key)
        if theirs is None:
            continue
        lo, hi = max(ours.min, theirs.min), min(ours.max, theirs.max)
        if lo <= hi:
            out[key] = VersionRange(lo, hi)
    return out


def build_response(version: int, advertised: Mapping[int, VersionRange], upstream_response: Any) -> bytes:
    """Encode the ApiVersions response body for a request of ``version``."""
    supported = KIO_VERSIONS[API_VERSIONS]
    if version > supported.max:
        version, error = 0, ErrorCode.unsupported_version
    else:
        error = ErrorCode.none
    cls = response_class(API_VERSIONS, version)
    key_cls = typing.get_args(cls.__dataclass_fields__["api_keys"].type)[0]
    keys = tuple(
        key_cls(api_key=i16(k), min_version=i16(r.min), max_version=i16(r.max)) for k, r in sorted(advertised.items())
    )
    fields = {"error_code": error, "api_keys": keys}
    names = cls.__dataclass_fields__
    if "throttle_time" in names:
        fields["throttle_time"] = timedelta(0)
    for name in ("supported_features", "finalized_features_epoch", "finalized_features", "zk_migration_ready"):
        if name in names and upstream_response is not None and hasattr(upstream_response, name):
            fields[name] = _convert(getattr(upstream_response, name), names[name].type)
    return encode(cls(**fields))


def _convert(value: Any, target_type: Any) -> Any:
    """Upstream features are decoded with the upstream's response version; rebuild for ours."""
    if isinstance(value, tuple):
        inner = target_type.__args__[0]
        return tuple(inner(**{f.name: getattr(v, f.name) for f in dataclasses.fields(inner)
                              if f.init and hasattr(v, f.name)}) for v in value)
    return value


#: KIP-511's rule for client software names and versions (Kafka answers INVALID_REQUEST otherwise)
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
_SOFTWARE_MAX = 64


class MalformedApiVersions(ValueError):
    """The request's body cannot be read (a broker closes the connection)."""


def _software_strings(body: memoryview | bytes) -> list[bytes]:
    """The two compact strings a v3+ ApiVersions body starts with (name, version)."""
    try:
        off, parts = 0, []
        for _ in range(2):
            length, off = read_uvarint(body, off)
            if length == 0:
                raise MalformedApiVersions("a null client software name or version")
            end = off + length - 1
            if end > len(body):
                raise MalformedApiVersions("a client software string runs past the request")
            parts.append(bytes(body[off:end]))
            off = end
    except (HeaderError, IndexError) as e:
        raise MalformedApiVersions(str(e)) from None
    return parts


def request_error(version: int, body: memoryview | bytes) -> bytes | None:
    """Kafka's answer to an ApiVersions request whose KIP-511 client software name or version
    breaks the rule (``ApiVersionsRequest.isValid``): the error body INVALID_REQUEST, no API keys;
    None when the request is valid (always before v3).  :class:`MalformedApiVersions` when the
    strings cannot be read at all."""
    if version < 3 or version > KIO_VERSIONS[API_VERSIONS].max:
        return None
    for text in _software_strings(body):
        try:
            valid = _SOFTWARE.fullmatch(text.decode("utf-8")) is not None
        except UnicodeDecodeError:
            valid = False
        if not valid:
            cls = response_class(API_VERSIONS, version)
            fields = {"error_code": ErrorCode.invalid_request, "api_keys": ()}
            if "throttle_time" in cls.__dataclass_fields__:
                fields["throttle_time"] = timedelta(0)
            return encode(cls(**fields))
    return None


def client_software(version: int, body: memoryview | bytes) -> tuple[str, str] | None:
    """The client library and its version an ApiVersions request names (KIP-511: v3 and later),
    from the request body (after the header); None before v3, or when they are missing, longer
    than 64 characters or break KIP-511's character rule (they end up in logs and metric labels)."""
    if version < 3:
        return None
    try:
        off, parts = 0, []
        for _ in range(2):
            length, off = read_uvarint(body, off)
            if not 1 < length <= _SOFTWARE_MAX + 1 or off + length - 1 > len(body):
                return None
            text = bytes(body[off:off + length - 1]).decode("ascii")
            if not _SOFTWARE.fullmatch(text):
                return None
            parts.append(text)
            off += length - 1
    except (HeaderError, IndexError, UnicodeDecodeError):
        return None
    return parts[0], parts[1]


class ApiVersionsAnswers:
    """The encoded ApiVersions answers of one gateway, per request version, for the advertised
    table they were built from (a new table makes them stale).  Both dispatching threads read
    it; a race builds the same bytes twice, never wrong ones."""

    def __init__(self) -> None:
        self._table: object = None
        self._bodies: dict[int, bytes] = {}

    def body(self, version: int, advertised: Mapping[int, VersionRange], upstream_response: Any) -> bytes:
        bodies = self._bodies
        if self._table is not advertised:
            bodies = {}
            self._table, self._bodies = advertised, bodies
        body = bodies.get(version)
        if body is None:
            body = bodies[version] = build_response(version, advertised, upstream_response)
        return body
