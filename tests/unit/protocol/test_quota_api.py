"""DescribeClientQuotas (48) / AlterClientQuotas (49) answered by kgw from its metadata log.

The handlers run against the production MetadataImage on a real DirectoryMetadataStore: an
alteration is a durable ClientQuotaRecord, read back by a describe and after a restart, with
Kafka's validation messages (ClientQuotaControlManager, ClientQuotasImage of Kafka 4.3)."""

from __future__ import annotations

import ipaddress
from types import SimpleNamespace

import pytest
import trio
from kio.schema.errors import ErrorCode

from authz.audit import ChangeLog
from authz.authorizer import AuthorizableRequestContext, AuthorizationResult
from authz.principal import KafkaPrincipal
from metadata.directory import DirectoryMetadataStore
from metadata.image import MetadataImage
from protocol.apis import quotas
from protocol.apis.base import RequestInfo
from protocol.auth_helper import AuthHelper
from protocol.codecs import decode_response, nested, request_class
from protocol.headers import RequestHeader


class _Authorizer:
    """Allows everything to User:admin, nothing to anyone else; remembers the operations asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def authorize(self, context, actions):
        self.asked += [f"{a.resource_pattern.resource_type.name}:{a.operation.name}" for a in actions]
        return [AuthorizationResult.ALLOWED if context.principal.name == "admin" else AuthorizationResult.DENIED
                for _ in actions]


def _auth(user: str, authorizer: _Authorizer, changes: ChangeLog | None = None) -> AuthHelper:
    context = AuthorizableRequestContext("EXT", "PLAINTEXT", KafkaPrincipal("User", user),
                                         ipaddress.ip_address("10.0.0.5"), 49, 1, "kafka-configs", 7)
    return AuthHelper(authorizer, context, changes=changes)


async def _gateway(path):
    store = DirectoryMetadataStore(path)
    image = MetadataImage(store, None)
    await image.load()
    return SimpleNamespace(image=image, quota_changes=trio.Lock()), store


async def call(gw, api_key: int, auth: AuthHelper, version: int = 1, **fields):
    request = request_class(api_key, version)(**fields)
    header = RequestHeader(api_key=api_key, api_version=version, correlation_id=7, client_id="kafka-configs", size=0,
                           flexible=version >= 1)
    spec = {s.api_key: s for s in quotas.SPECS}[api_key]
    body = await spec.answer(gw, auth, header, RequestInfo(decoded=request))
    return decode_response(api_key, version, body, 0)


def alter_request(version: int, *entries, validate_only: bool = False):
    cls = request_class(49, version)
    entry_cls = nested(cls, "entries")
    entity_cls = nested(entry_cls, "entity")
    op_cls = nested(entry_cls, "ops")
    return dict(validate_only=validate_only, entries=tuple(
        entry_cls(entity=tuple(entity_cls(entity_type=t, entity_name=n) for t, n in entity),
                  ops=tuple(op_cls(key=k, value=float(v or 0), remove=v is None) for k, v in ops))
        for entity, ops in entries))


def describe_request(version: int, *components, strict: bool = False):
    cls = request_class(48, version)
    comp = nested(cls, "components")
    return dict(strict=strict, components=tuple(comp(entity_type=t, match_type=m, match=n) for t, m, n in components))


def described(response) -> dict:
    return {tuple((e.entity_type, e.entity_name) for e in entry.entity): {v.key: v.value for v in entry.values}
            for entry in response.entries}


def results(response) -> list:
    return [(tuple((e.entity_type, e.entity_name) for e in x.entity), int(x.error_code), x.error_message)
            for x in response.entries]


@pytest.mark.parametrize("version", [0, 1])
async def test_denied_without_cluster_alter_configs_and_describe_configs(tmp_path, version):
    gw, store = await _gateway(tmp_path / "meta")
    authorizer = _Authorizer()
    try:
        bob = _auth("bob", authorizer)
        r = await call(gw, 49, bob, version, **alter_request(version, ([("user", "bob"), ("client-id", None)],
                                                                        [("producer_byte_rate", 1024)])))
        assert results(r) == [((("user", "bob"), ("client-id", None)), 31, "Cluster authorization failed.")]
        r = await call(gw, 48, bob, version, **describe_request(version))
        assert (int(r.error_code), r.error_message, r.entries) == (31, None, None)
        assert authorizer.asked == ["CLUSTER:ALTER_CONFIGS", "CLUSTER:DESCRIBE_CONFIGS"]
        assert gw.image.quotas == {}
    finally:
        await store.aclose()


async def test_alterations_are_durable_described_and_audited(tmp_path):
    gw, store = await _gateway(tmp_path / "meta")
    changes, recorded = ChangeLog(), []
    changes.add_sink(recorded.append)
    admin = _auth("admin", _Authorizer(), changes)
    try:
        r = await call(gw, 49, admin, **alter_request(
            1, ([("user", "alice")], [("producer_byte_rate", 1048576), ("request_percentage", 50.5)]),
            ([("user", None), ("client-id", None)], [("consumer_byte_rate", 2048)]),
            ([("client-id", "etl")], [("producer_byte_rate", 100)])))
        assert [code for _e, code, _m in results(r)] == [0, 0, 0]
        assert [f["kgw_resource"] for f in recorded] == [
            "ClientQuota:LITERAL:user=alice", "ClientQuota:LITERAL:client-id=<default>,user=<default>",
            "ClientQuota:LITERAL:client-id=etl"]
        assert recorded[0]["kgw_change"] == "set producer_byte_rate=1048576, set request_percentage=50.5"
        # a removal, an unchanged value (no record), validate_only (nothing written)
        before = gw.image.offset
        r = await call(gw, 49, admin, **alter_request(1, ([("user", "alice")], [("request_percentage", None),
                                                                                 ("producer_byte_rate", 1048576)])))
        assert results(r)[0][1] == 0 and gw.image.offset == before + 1
        r = await call(gw, 49, admin, **alter_request(1, ([("client-id", "etl")], [("producer_byte_rate", 5)]),
                                                      validate_only=True))
        assert results(r)[0][1] == 0 and gw.image.quotas[(("client-id", "etl"),)] == {"producer_byte_rate": 100.0}

        every = described(await call(gw, 48, admin, **describe_request(1)))
        assert every == {(("user", "alice"),): {"producer_byte_rate": 1048576.0},
                         (("client-id", None), ("user", None)): {"consumer_byte_rate": 2048.0},
                         (("client-id", "etl"),): {"producer_byte_rate": 100.0}}
        # filters: exact, default, specified (any name, the default too), strict
        assert set(described(await call(gw, 48, admin, **describe_request(1, ("user", 0, "alice"))))) == {
            (("user", "alice"),)}
        assert set(described(await call(gw, 48, admin, **describe_request(1, ("user", 1, None))))) == {
            (("client-id", None), ("user", None))}
        assert set(described(await call(gw, 48, admin, **describe_request(1, ("user", 2, None))))) == {
            (("user", "alice"),), (("client-id", None), ("user", None))}
        assert set(described(await call(gw, 48, admin, **describe_request(1, ("user", 2, None), strict=True)))) == {
            (("user", "alice"),)}
        assert set(described(await call(gw, 48, admin, **describe_request(1, ("client-id", 2, None),
                                                                         strict=True)))) == {(("client-id", "etl"),)}
    finally:
        await store.aclose()
    # a restart reads the same quotas back from the log
    gw, store = await _gateway(tmp_path / "meta")
    try:
        assert gw.image.quotas[(("user", "alice"),)] == {"producer_byte_rate": 1048576.0}
        assert len(gw.image.quotas) == 3
    finally:
        await store.aclose()


async def test_invalid_alterations_get_kafkas_errors_and_change_nothing(tmp_path):
    gw, store = await _gateway(tmp_path / "meta")
    admin = _auth("admin", _Authorizer())
    cases = [
        ([], [("producer_byte_rate", 1)], "Invalid empty client quota entity"),
        ([("group", "g")], [("producer_byte_rate", 1)], "Unhandled client quota entity type: group"),
        ([("user", "")], [("producer_byte_rate", 1)], "Empty user not supported"),
        ([("ip", "1.2.3.4"), ("user", "u")], [("connection_creation_rate", 1)],
         "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"),
        ([("ip", "not-an-ip")], [("connection_creation_rate", 1)], "not-an-ip is not a valid IP or resolvable host."),
        ([("user", "u")], [("connection_creation_rate", 1)], "Invalid configuration key connection_creation_rate"),
        ([("ip", None)], [("producer_byte_rate", 1)], "Invalid configuration key producer_byte_rate"),
        ([("user", "u")], [("producer_byte_rate", -1)], "Quota producer_byte_rate must be greater than 0"),
        ([("user", "u")], [("producer_byte_rate", 1.5)], "producer_byte_rate cannot be a fractional value."),
        ([("user", "u")], [("producer_byte_rate", 1e19)], "Proposed value for producer_byte_rate is too large for a LONG."),
        ([("ip", None)], [("connection_creation_rate", 3e9)],
         "Proposed value for connection_creation_rate is too large for an INT."),
        ([("user", "u")], [("producer_byte_rate", 1), ("producer_byte_rate", 2)],
         "Duplicate quota key producer_byte_rate not updating quota for this entity ClientQuotaEntity(entries={user=u})"),
        # the first error wins and the valid op of the same entity is not applied either
        ([("user", "v")], [("consumer_byte_rate", 10), ("bogus", 1)], "Invalid configuration key bogus"),
    ]
    try:
        for entity, ops, message in cases:
            r = await call(gw, 49, admin, **alter_request(1, (entity, ops)))
            assert results(r) == [(tuple(entity), int(ErrorCode.invalid_request), message)], (entity, ops)
        assert gw.image.quotas == {} and gw.image.offset == -1
        # an entity named twice: altered once, reported as a duplicate (Kafka's controller)
        r = await call(gw, 49, admin, **alter_request(1, ([("user", "w")], [("producer_byte_rate", 7)]),
                                                      ([("user", "w")], [("producer_byte_rate", 8)])))
        assert results(r) == [((("user", "w"),), int(ErrorCode.invalid_request),
                               "Ignoring duplicate entity ClientQuotaEntity(entries={user=w})")]
        assert gw.image.quotas == {(("user", "w"),): {"producer_byte_rate": 7.0}}
        # describe filters Kafka refuses, and a type it does not know
        for components, code, message in [
            ([("", 0, "x")], 42, "Invalid empty entity type."),
            ([("user", 0, "a"), ("user", 1, None)], 42, "Entity type user cannot appear more than once in the filter."),
            ([("group", 0, "g")], 35, "Unsupported entity type group"),
            ([("user", 0, None)], 42, "Request specified MATCH_TYPE_EXACT, but set match string to null."),
            ([("user", 1, "a")], 42, "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."),
            ([("user", 2, "a")], 42, "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."),
            ([("user", 7, None)], 42, "Unknown match type 7"),
            ([("ip", 2, None), ("user", 2, None)], 42, "Invalid entity filter component combination. IP filter "
             "component should not be used with user or clientId filter component."),
        ]:
            r = await call(gw, 48, admin, **describe_request(1, *components))
            assert (int(r.error_code), r.error_message, r.entries) == (code, message, None), components
    finally:
        await store.aclose()
