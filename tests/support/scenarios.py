"""Enforcement scenarios as data: load ``tests/scenarios/<api>/*.yaml`` and run them.

A scenario says: *given* these ACLs for ``User:alice``, *when* she sends this request
(api, versions, body), *then* this is forwarded (or nothing is), the client gets these
error codes, or the connection is closed.  Format::

    api: Metadata                  # Kafka's API name (ApiVersions' names)
    versions: [4, 13]              # run once per version in the range (or one int)
    outcome: allowed               # allowed | denied (what the coverage test counts)
    acls:                          # ALLOW|DENY RESOURCE_TYPE PATTERN NAME OPERATION, for alice
      - ALLOW TOPIC LITERAL orders DESCRIBE
    request: {topics: [{name: orders}]}
    upstream: {...}                # optional: fields of the upstream's response (else all defaults)
    cluster:                       # optional: what kgw's own questions to the upstream find
      topics: [orders, payments]   #   (Decision.then): the cluster's topics, delegation tokens
      tokens: [{hmac: aG1hYw==, owner: "User:alice", renewers: ["User:kgw"], expired: false}]
      streams_internal_topics: {group: [names]}  #   the topology a describe of the group finds
    expect:
      forwarded: true              # whether a request went to the upstream
      forwarded_request: {...}     # optional: fields the forwarded request must have
      errors: [29]                 # the non-zero error codes of the client's response, as a set
      response: {...}              # optional: fields the client's response must have
      closed: denied               # instead: the connection is closed, with this reason label

Request and response bodies are kio entities built from the mappings: fields not given
take Java's defaults (zero, "", empty, null); a field that exists in no version of the
API is an error, one that exists only in other versions is left out (a scenario states
the versions its shape is for, and its expectations fail if a field it relies on is
missing).  ``records: batch`` stands for one real magic-v2 record batch, ``$uuid:N``
for a fixed topic id.

:func:`run` executes a scenario against the real connection (``gateway.connection.client``:
the Trio driver over the connection core) of a real, unstarted :class:`Gateway`, with
a real :class:`StandardAuthorizer` and metadata image, and a fake upstream that
records what it is sent and answers with the scenario's response.
"""

from __future__ import annotations

import dataclasses
import functools
import enum
import struct
import time
import typing
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml
from kio.schema.index import api_key_map

from authz.acl import (AccessControlEntry, AclBinding, AclOperation, AclPermissionType, PatternType,
                       ResourcePattern, ResourceType)
from authz.principal import KafkaPrincipal
from authz.standard_authorizer import StandardAuthorizer
from configs.yaml_reader import parse_config
from gateway.connection.client import ClientConnection
from gateway.connection.core import CloseConnection
from gateway.process.server import Gateway
from gateway.upstream.cluster import encode_request
from metadata.directory import DirectoryMetadataStore
from metadata.image import MetadataImage, binding_to_record
from protocol.apis.api_versions import VersionRange
from protocol.apis.group_common import _blank
from protocol.codecs import CodecError, decode_request, decode_response, encode, request_class, response_class
from protocol.framing import FrameDecoder
from protocol.headers import parse_request_header
from tests.support.fake_services import FakeUpstream
from tests.support.kio_samples import record_batch

__all__ = ["Scenario", "load_all", "run", "SCENARIO_DIR", "API_KEYS"]

SCENARIO_DIR = Path(__file__).resolve().parents[1] / "scenarios"
#: Kafka API name -> key, from kio's index (the names ApiVersions uses)
API_KEYS: dict[str, int] = {name.replace("_", ""): key for key, name in api_key_map.items()}
_I32 = struct.Struct(">i")
#: responses whose first field is the error code (Create/Renew/Expire/DescribeDelegationToken)
_LEADING_ERROR_CODE = frozenset({38, 39, 40, 41})
ALICE = KafkaPrincipal("User", "alice")


@dataclass(frozen=True)
class Scenario:
    path: Path
    name: str
    api_key: int
    versions: tuple[int, int]
    outcome: str
    acls: tuple[str, ...]
    request: dict
    upstream: dict | None
    expect: dict
    super_user: bool = False
    #: topic name -> id the gateway has learned from upstream responses (topic-id requests)
    topics: dict = field(default_factory=dict)
    #: the listener's security protocol (the request context carries it)
    security_protocol: str = "PLAINTEXT"
    #: what kgw's own questions to the upstream find (see the module docstring)
    cluster: dict = field(default_factory=dict)

    def ids(self) -> list[tuple["Scenario", int]]:
        return [(self, v) for v in range(self.versions[0], self.versions[1] + 1)]


def _api_key(name: str) -> int:
    key = API_KEYS.get(name.replace("_", "").replace("-", "").lower())
    if key is None:
        raise ValueError(f"unknown API name {name!r}")
    return key


def load(path: Path) -> Scenario:
    raw = yaml.safe_load(path.read_text())
    unknown = set(raw) - {"api", "versions", "outcome", "acls", "request", "upstream", "expect", "super_user", "topics",
                          "security_protocol", "cluster"}
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}")
    versions = raw["versions"]
    versions = (versions, versions) if isinstance(versions, int) else tuple(versions)
    if raw.get("outcome") not in ("allowed", "denied"):
        raise ValueError(f"{path}: outcome must be allowed or denied")
    expect = raw.get("expect") or {}
    if set(expect) - {"forwarded", "forwarded_request", "errors", "response", "closed"}:
        raise ValueError(f"{path}: unknown expect keys {sorted(expect)}")
    if "closed" not in expect and "forwarded" not in expect:
        raise ValueError(f"{path}: expect needs forwarded or closed")
    return Scenario(path, f"{path.parent.name}/{path.stem}", _api_key(raw["api"]), versions, raw["outcome"],
                    tuple(raw.get("acls") or ()), raw.get("request") or {}, raw.get("upstream"), expect,
                    bool(raw.get("super_user", False)), dict(raw.get("topics") or {}),
                    raw.get("security_protocol", "PLAINTEXT"), dict(raw.get("cluster") or {}))


def load_all(directory: Path = SCENARIO_DIR) -> list[Scenario]:
    return [load(p) for p in sorted(directory.glob("*/*.yaml"))]


# --------------------------------------------------------------------------- building kio entities


def _unwrap(tp):
    optional = False
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Union or str(origin) == "<class 'types.UnionType'>":
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            optional = optional or len(args) < len(typing.get_args(tp))
            tp = args[0]
        elif origin is tuple:
            return typing.get_args(tp)[0], optional, True
        else:
            return tp, optional, False


@functools.lru_cache(maxsize=None)
def _all_field_names(api_key: int, kind: str) -> set[str]:
    """Every field name any version of the API's request/response (nested included) has."""
    names: set[str] = set()
    for version in range(0, 40):
        try:
            cls = request_class(api_key, version) if kind == "request" else response_class(api_key, version)
        except Exception:  # noqa: BLE001 - versions kio lacks
            continue
        stack = [cls]
        while stack:
            c = stack.pop()
            for f in dataclasses.fields(c):
                names.add(f.name)
                inner, _, _ = _unwrap(typing.get_type_hints(c)[f.name])
                if dataclasses.is_dataclass(inner):
                    stack.append(inner)
    return names


def _convert(tp: Any, value: Any, where: str, known: set[str]) -> Any:
    inner, optional, seq = _unwrap(tp)
    if value is None:
        if not (optional or seq):
            raise ValueError(f"{where}: null where the schema has no null")
        return None
    if seq:
        if not isinstance(value, list):
            raise ValueError(f"{where}: expected a list")
        return tuple(_convert(inner, v, f"{where}[{i}]", known) for i, v in enumerate(value))
    if dataclasses.is_dataclass(inner):
        return build(inner, value, where, known)
    if inner is uuid.UUID:
        return _uuid(value)
    if isinstance(inner, type) and issubclass(inner, enum.Enum):
        return inner(value)
    if isinstance(inner, type) and issubclass(inner, timedelta):
        return timedelta(milliseconds=value)
    if inner is bool:
        return bool(value)
    if isinstance(inner, type) and issubclass(inner, bytes):
        if value == "batch":
            return record_batch()
        if isinstance(value, str) and value.startswith("batch:"):
            kind = value.split(":", 1)[1]
            return record_batch(producer_id=7, attributes={"transactional": 0x10, "control": 0x30,
                                                           "idempotent": 0}[kind])
        return value.encode() if isinstance(value, str) else bytes(value)
    if isinstance(inner, type) and issubclass(inner, str):
        return inner(value)
    if isinstance(inner, type) and issubclass(inner, int):
        return inner(value)
    return value


def _uuid(value: Any) -> uuid.UUID:
    if isinstance(value, str) and value.startswith("$uuid:"):
        return uuid.UUID(int=int(value.split(":", 1)[1]))
    return uuid.UUID(str(value))


def build(cls: type, values: dict, where: str = "", known: set[str] | None = None):
    """A kio entity of ``cls`` from a mapping (see the module docstring)."""
    hints = typing.get_type_hints(cls)
    fields = cls.__dataclass_fields__
    converted = {}
    for key, value in (values or {}).items():
        if key not in fields:
            if known is not None and key not in known:
                raise ValueError(f"{where}.{key}: no version of this API has such a field")
            continue
        converted[key] = _convert(hints[key], value, f"{where}.{key}", known or set())
    return _blank(cls, **converted)


# --------------------------------------------------------------------------- matching


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, uuid.UUID):
        return f"$uuid:{value.int}" if value.int < 1 << 32 else str(value)
    if isinstance(value, timedelta):
        return int(value.total_seconds() * 1000)
    return value


def matches(expected: Any, actual: Any, where: str = "") -> list[str]:
    """Mismatches of ``expected`` (a subset: mappings name only the fields that matter)."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where}: expected a mapping, got {actual!r}"]
        out = []
        for k, v in expected.items():
            if k not in actual:
                out.append(f"{where}.{k}: missing")
            else:
                out.extend(matches(v, actual[k], f"{where}.{k}"))
        return out
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{where}: expected {len(expected)} entries, got {actual!r}"]
        out = []
        for i, (e, a) in enumerate(zip(expected, actual)):
            out.extend(matches(e, a, f"{where}[{i}]"))
        return out
    return [] if expected == actual else [f"{where}: expected {expected!r}, got {actual!r}"]


def error_codes(value: Any) -> set[int]:
    """Every non-zero ``*error_code`` in a plain response."""
    out: set[int] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            if k.endswith("error_code") and isinstance(v, int) and v != 0:
                out.add(v)
            else:
                out |= error_codes(v)
    elif isinstance(value, list):
        for v in value:
            out |= error_codes(v)
    return out


# --------------------------------------------------------------------------- running


def _binding(text: str) -> AclBinding:
    parts = text.split()
    if len(parts) != 5:
        raise ValueError(f"ACL {text!r}: expected PERMISSION RESOURCE_TYPE PATTERN NAME OPERATION")
    perm, rtype, pattern, name, op = parts
    return AclBinding(ResourcePattern(ResourceType[rtype], name, PatternType[pattern]),
                      AccessControlEntry(str(ALICE), "*", AclOperation[op], AclPermissionType[perm]))


class _Stream:
    """Records what is sent to it (the client's or the upstream's socket)."""

    def __init__(self) -> None:
        self.sent = bytearray()

    async def send_all(self, data) -> None:
        self.sent += bytes(data)



@dataclass
class Outcome:
    forwarded: list[Any] = field(default_factory=list)  # decoded requests sent upstream
    response: Any = None  # the client's decoded response
    closed: str | None = None  # the close reason label


def _response_offset(api_key: int, version: int) -> int:
    flexible = request_class(api_key, version).__flexible__ and api_key != 18
    return 9 if flexible else 8


async def run(scenario: Scenario, version: int, tmp_path: Path) -> Outcome:
    raw = {
        "listeners": [{"name": "S", "host": "127.0.0.1", "port": 0, "advertised_host": "gw.example",
                       "broker_port_base": 20000}],
        "upstream": {"bootstrap_servers": ["127.0.0.1:1"]},
        "admin": None,
        "metadata": {"path": str(tmp_path / "meta")},
        "io": {"data_plane_thread": False},
    }
    gw = Gateway(parse_config(raw))
    authorizer = StandardAuthorizer()
    authorizer.configure({"super.users": str(ALICE)} if scenario.super_user else {})
    gw.authorizer = authorizer
    bindings = [_binding(a) for a in scenario.acls]
    if bindings:  # the ACLs are in the metadata log, as CreateAcls or `kgw acls add` leave them
        async with DirectoryMetadataStore(tmp_path / "meta") as seed:
            await seed.load()
            await seed.append([binding_to_record(uuid.uuid4(), b) for b in bindings])
    store = DirectoryMetadataStore(tmp_path / "meta")
    image = MetadataImage(store, authorizer)
    await image.load()
    gw.image = image
    gw.cluster.versions = {key: VersionRange(0, 99) for key in api_key_map}
    await gw.advertised_versions()
    gw.listeners[0].security_protocol = scenario.security_protocol
    for name, topic_id in scenario.topics.items():
        gw.topic_ids.learn(name, _uuid(topic_id))
    gw.upstream = scenario_cluster(scenario.cluster)
    try:
        return await _exchange(gw, scenario, version)
    finally:
        await store.aclose()


async def _exchange(gw: Gateway, scenario: Scenario, version: int) -> Outcome:
    key = scenario.api_key
    listener = gw.listeners[0]
    client, upstream = _Stream(), _Stream()
    conn = ClientConnection(listener, client, ("10.0.0.1", 40000), None)
    conn.auth = SimpleNamespace(session=None, principal=ALICE)
    conn.principal = ALICE
    conn._upstream = upstream  # an open upstream connection: forwarding needs no connect
    request = build(request_class(key, version), scenario.request, scenario.name, _all_field_names(key, "request"))
    frame = memoryview(encode_request(key, version, 7, request))
    outcome = Outcome()
    to_upstream: list = []
    try:
        await conn._on_request(frame, to_upstream)
        if to_upstream:
            await conn._send_upstream(to_upstream)
        for sent in _frames(upstream.sent):
            body = memoryview(sent)[4:]
            header = parse_request_header(body)
            outcome.forwarded.append(decode_request(header.api_key, header.api_version, body, header.size))
        if conn.in_flight:
            body = build(response_class(key, version), scenario.upstream or {}, f"{scenario.name} upstream",
                         _all_field_names(key, "response"))
            head = _I32.pack(conn.in_flight[0].header.correlation_id)
            if _response_offset(key, version) == 9:
                head += b"\x00"
            payload = head + encode(body)
            decoder = FrameDecoder(1 << 30)
            decoder.receive_data(_I32.pack(len(payload)) + payload)
            conn.complete_responses(decoder)
            if conn.heavy is not None:
                await conn.complete_heavy()
            await conn._flush()
    except CloseConnection as e:
        outcome.closed = e.metric
        return outcome
    frames = _frames(client.sent)
    if frames:
        offset = _response_offset(key, version)
        try:
            outcome.response = decode_response(key, version, memoryview(frames[0]), offset)
        except CodecError:
            # kio cannot decode Kafka's -1 timestamps (the delegation-token APIs' error responses):
            # those responses start with their error code, checked alone
            if key not in _LEADING_ERROR_CODE:
                raise
            (code,) = struct.unpack_from(">h", frames[0], offset)
            outcome.response = {"error_code": code}
    return outcome


def scenario_cluster(cluster: dict) -> FakeUpstream:
    """The answers kgw's own questions get in a scenario (``cluster:``)."""
    upstream = FakeUpstream(cluster.get("topics", ()), principal="User:kgw")
    tokens = cluster.get("tokens") or []
    internal = cluster.get("streams_internal_topics") or {}

    def describe_tokens(request, node_id):
        cls = response_class(41, int(type(request).__version__))
        t_cls = typing.get_args(typing.get_type_hints(cls)["tokens"])[0]
        r_cls = typing.get_args(typing.get_type_hints(t_cls)["renewers"])[0]
        now = int(time.time() * 1000)
        rows = []
        for i, t in enumerate(tokens):
            owner_type, _, owner = t["owner"].partition(":")
            expiry = now - 1 if t.get("expired") else now + 3_600_000
            rows.append(_blank(t_cls, principal_type=owner_type, principal_name=owner, token_requester_principal_type="User",
                               token_requester_principal_name="kgw", issue_timestamp=now, expiry_timestamp=expiry,
                               max_timestamp=expiry, token_id=f"token-{i}", hmac=_convert(bytes, t["hmac"], "hmac", set()),
                               renewers=tuple(r_cls(principal_type=r.partition(":")[0], principal_name=r.partition(":")[2])
                                              for r in t.get("renewers", ()))))
        return _blank(cls, tokens=tuple(rows))

    def describe_streams_group(request, node_id):
        cls = response_class(89, int(type(request).__version__))
        g_cls = typing.get_args(typing.get_type_hints(cls)["groups"])[0]
        topology_cls = _unwrap(typing.get_type_hints(g_cls)["topology"])[0]
        sub_cls = _unwrap(typing.get_type_hints(topology_cls)["subtopologies"])[0]
        info_cls = _unwrap(typing.get_type_hints(sub_cls)["state_changelog_topics"])[0]
        groups = []
        for group in request.group_ids:
            names = internal.get(group)
            if names is None:
                groups.append(_blank(g_cls, group_id=group, error_code=69))  # GROUP_ID_NOT_FOUND
                continue
            sub = _blank(sub_cls, subtopology_id="0", state_changelog_topics=tuple(
                _blank(info_cls, name=n, partitions=1, replication_factor=1) for n in names))
            groups.append(_blank(g_cls, group_id=group, topology=_blank(topology_cls, epoch=1, subtopologies=(sub,))))
        return _blank(cls, groups=tuple(groups))

    upstream.answers[41] = describe_tokens
    upstream.answers[89] = describe_streams_group
    return upstream


def _frames(data: bytes | bytearray) -> list[bytes]:
    out, pos = [], 0
    while pos + 4 <= len(data):
        (size,) = _I32.unpack_from(data, pos)
        out.append(bytes(data[pos: pos + 4 + size]))  # with the size, as FrameDecoder gives frames
        pos += 4 + size
    return out


def check(scenario: Scenario, outcome: Outcome) -> list[str]:
    """What of the scenario's expectations the outcome misses."""
    expect = scenario.expect
    problems = []
    if "closed" in expect:
        if outcome.closed != expect["closed"]:
            problems.append(f"closed: expected {expect['closed']!r}, got {outcome.closed!r}")
        return problems
    if outcome.closed is not None:
        return [f"the connection was closed ({outcome.closed})"]
    if bool(outcome.forwarded) != bool(expect["forwarded"]):
        problems.append(f"forwarded: expected {expect['forwarded']}, got {len(outcome.forwarded)} request(s)")
    if "forwarded_request" in expect and outcome.forwarded:
        problems += matches(expect["forwarded_request"], _plain(outcome.forwarded[0]), "forwarded")
    if outcome.response is None:
        return problems + ["no response reached the client"]
    plain = _plain(outcome.response)
    if "errors" in expect and error_codes(plain) != set(expect["errors"]):
        problems.append(f"errors: expected {sorted(expect['errors'])}, got {sorted(error_codes(plain))}")
    if "response" in expect:
        problems += matches(expect["response"], plain, "response")
    return problems
