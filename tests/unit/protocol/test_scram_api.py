"""DescribeUserScramCredentials (50) / AlterUserScramCredentials (51) answered by kgw.

The handlers run against a real metadata log (DirectoryMetadataStore in a
temporary directory) and a real SaslSession, so the tests show the whole
path: Alter → durable UserScramCredentialRecord → the very next SCRAM login.

Every test runs the production :class:`~metadata.image.MetadataImage`, whose SCRAM
table the records are applied to.
"""

from __future__ import annotations

import hashlib
import ipaddress
from types import SimpleNamespace

import pytest
import trio
from kio.schema.errors import ErrorCode

from authz.authorizer import AuthorizableRequestContext, AuthorizationResult
from metadata.image import MetadataImage
from metadata.directory import DirectoryMetadataStore
from metadata.records import RemoveUserScramCredentialRecord, UserScramCredentialRecord
from authz.principal import KafkaPrincipal
from authz.principal_builder import DefaultKafkaPrincipalBuilder, PlaintextAuthenticationContext
from authz.credentials import SaslMechanism, ScramCredential
from configs.gateway_config import UsersConfig
from gateway.auth.sasl import SaslSession
from gateway.upstream.security import ScramClient
from metadata.scram_credentials import MetadataCredentialStore
from protocol.apis import scram
from protocol.apis.base import RequestInfo
from protocol.auth_helper import AuthHelper
from protocol.codecs import decode_response, encode, request_class
from protocol.headers import RequestHeader
from authz.credentials import CredentialStore

SHA256, SHA512 = SaslMechanism.SCRAM_SHA_256, SaslMechanism.SCRAM_SHA_512
YAML_USERS = UsersConfig(scram=(ScramCredential.from_password("admin", "admin-secret", SHA256, iterations=8192),))


class _Authorizer:
    """Allows everything to User:admin, nothing to anyone else; remembers the calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def authorize(self, context, actions):
        out = []
        for a in actions:
            self.calls.append((context.principal.key, a.resource_pattern.resource_type.name, a.operation.name))
            out.append(AuthorizationResult.ALLOWED if context.principal.name == "admin" else AuthorizationResult.DENIED)
        return out


def _auth(user: str | None, authorizer: _Authorizer | None = None) -> AuthHelper:
    if user is None:
        return AuthHelper(None, None)
    context = AuthorizableRequestContext("SASL", "SASL_PLAINTEXT", KafkaPrincipal("User", user),
                                         ipaddress.ip_address("127.0.0.1"), 51, 0, "test", 7)
    return AuthHelper(authorizer or _Authorizer(), context)


@pytest.fixture
async def gw(tmp_path):
    store = DirectoryMetadataStore(tmp_path / "meta")
    image = MetadataImage(store, None)
    await image.load()
    yield SimpleNamespace(config=SimpleNamespace(users=YAML_USERS), image=image, authorizer=None, path=tmp_path / "meta",
                          static_scram=CredentialStore.of(YAML_USERS).scram, scram_changes=trio.Lock())
    await store.aclose()


async def call(gw, api_key: int, auth: AuthHelper, **fields):
    cls = request_class(api_key, 0)
    request = cls(**fields)
    body = encode(request)
    header = RequestHeader(api_key=api_key, api_version=0, correlation_id=7, client_id="test", size=0, flexible=True)
    spec = {s.api_key: s for s in scram.SPECS}[api_key]
    # what the connection does: inspect (decode), then answer; re-decode our own encoding of the answer
    info = spec.inspect(header, memoryview(body))
    assert isinstance(info, RequestInfo)
    answer = await spec.answer(gw, auth, header, info)
    return decode_response(api_key, 0, answer, 0)


def upsertion(name: str, password: str, mechanism: int = 1, iterations: int = 4096, salt: bytes = b"salt-0123456789"):
    cls = request_class(51, 0).__dataclass_fields__["upsertions"].type.__args__[0]
    digest = {1: "sha256", 2: "sha512"}.get(mechanism, "sha256")
    salted = hashlib.pbkdf2_hmac(digest, password.encode(), salt, max(iterations, 1))
    return cls(name=name, mechanism=mechanism, iterations=iterations, salt=salt, salted_password=salted)


def deletion(name: str, mechanism: int = 1):
    cls = request_class(51, 0).__dataclass_fields__["deletions"].type.__args__[0]
    return cls(name=name, mechanism=mechanism)


def users(*names: str):
    from kio.schema.describe_user_scram_credentials.v0.request import UserName

    return tuple(UserName(name=n) for n in names)


def results(response) -> list[tuple[str, int, str | None]]:
    return [(r.user, int(r.error_code), r.error_message) for r in response.results]


async def alter(gw, auth=None, deletions=(), upsertions=()):
    return await call(gw, 51, auth or _auth("admin"), deletions=tuple(deletions), upsertions=tuple(upsertions))


async def describe(gw, names, auth=None):
    return await call(gw, 50, auth or _auth("admin"), users=names)


def login(gw, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> KafkaPrincipal | None:
    """A full SCRAM exchange against kgw's SaslSession over the listener's credential store."""
    store = MetadataCredentialStore(gw.config.users, lambda: gw.image)
    listener = SimpleNamespace(name="SASL", sasl=SimpleNamespace(mechanisms=("SCRAM-SHA-256", "SCRAM-SHA-512")))
    session = SaslSession(listener, store, DefaultKafkaPrincipalBuilder(), PlaintextAuthenticationContext(
        client_address="127.0.0.1", listener_name="SASL", security_protocol="SASL_PLAINTEXT"))
    session.handle(17, 1, request_class(17, 1)(mechanism=mechanism))
    client = ScramClient(mechanism, user, password)
    response, close = session.handle(36, 2, request_class(36, 2)(auth_bytes=client.client_first()))
    if close or response.error_code:
        return None
    response, close = session.handle(36, 2, request_class(36, 2)(auth_bytes=client.client_final(response.auth_bytes)))
    if close or response.error_code:
        return None
    client.verify_server_final(bytes(response.auth_bytes))
    return session.principal


# --------------------------------------------------------------------------- Alter → login


async def test_upsert_is_durable_and_usable_by_the_next_login(gw) -> None:
    assert login(gw, "carol", "carol-pw") is None
    response = await alter(gw, upsertions=[upsertion("carol", "carol-pw", 1), upsertion("dave", "d", 2, 8192)])
    assert results(response) == [("carol", 0, None), ("dave", 0, None)]
    assert str(login(gw, "carol", "carol-pw")) == "User:carol"
    assert login(gw, "carol", "wrong") is None
    assert str(login(gw, "dave", "d", "SCRAM-SHA-512")) == "User:dave"
    assert login(gw, "dave", "d", "SCRAM-SHA-256") is None  # only the mechanism that was set

    # the log holds the keys, never the salted password; they are what from_password derives
    record = gw.image.scram[("carol", 1)]
    expected = ScramCredential.from_password("carol", "carol-pw", SHA256, salt=b"salt-0123456789", iterations=4096)
    assert (record.stored_key, record.server_key, record.iterations, record.salt) == (
        expected.stored_key, expected.server_key, 4096, b"salt-0123456789")


async def test_records_survive_a_restart(gw, tmp_path) -> None:
    await alter(gw, upsertions=[upsertion("erin", "pw", 2, 4096)])
    await alter(gw, upsertions=[upsertion("frank", "pw", 1)])
    await alter(gw, deletions=[deletion("frank", 1)])
    await gw.image.store.aclose()
    store = DirectoryMetadataStore(gw.path)
    image = MetadataImage(store, None)
    await image.load()
    try:
        assert set(image.scram) == {("erin", 2)}
        reloaded = SimpleNamespace(config=gw.config, image=image, static_scram=gw.static_scram,
                                   scram_changes=trio.Lock())
        assert str(login(reloaded, "erin", "pw", "SCRAM-SHA-512")) == "User:erin"
        assert login(reloaded, "frank", "pw") is None
        from metadata.directory import read_log_state

        kinds = [type(r).__name__ for r in read_log_state(gw.path).records()]
        assert kinds == ["UserScramCredentialRecord", "UserScramCredentialRecord", "RemoveUserScramCredentialRecord"]
    finally:
        await store.aclose()
        gw.image.store = store  # the fixture closes it again (idempotent)


async def test_rotation_and_deletion_take_effect_at_once(gw) -> None:
    await alter(gw, upsertions=[upsertion("gina", "old")])
    assert login(gw, "gina", "old")
    await alter(gw, upsertions=[upsertion("gina", "new", salt=b"another-salt")])
    assert login(gw, "gina", "old") is None and login(gw, "gina", "new")
    response = await alter(gw, deletions=[deletion("gina", 1)])
    assert results(response) == [("gina", 0, None)]
    assert login(gw, "gina", "new") is None
    assert ("gina", 1) not in gw.image.scram


async def test_yaml_users_still_log_in_and_are_read_only(gw) -> None:
    assert str(login(gw, "admin", "admin-secret")) == "User:admin"
    response = await alter(gw, deletions=[deletion("admin", 1)], upsertions=[upsertion("x", "y")])
    (admin, x) = results(response)
    assert admin[:2] == ("admin", ErrorCode.invalid_request) and "users.scram" in admin[2]
    assert x == ("x", 0, None)
    response = await alter(gw, upsertions=[upsertion("admin", "takeover", 1)])
    assert results(response)[0][1] == ErrorCode.invalid_request
    assert login(gw, "admin", "takeover") is None
    # another mechanism for the same YAML user is not defined in YAML: allowed
    response = await alter(gw, upsertions=[upsertion("admin", "other", 2)])
    assert results(response) == [("admin", 0, None)]
    assert login(gw, "admin", "admin-secret")


# --------------------------------------------------------------------------- Alter validation (Kafka's)


async def test_alter_validation_errors(gw) -> None:
    response = await alter(gw, deletions=[deletion("nobody", 1), deletion("", 1), deletion("m0", 0)],
                           upsertions=[upsertion("few", "p", iterations=4095), upsertion("many", "p", iterations=16385),
                                       upsertion("m3", "p", mechanism=3), upsertion("ok", "p", iterations=16384)])
    assert results(response) == [
        ("nobody", ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"),
        ("", ErrorCode.unacceptable_credential, "Username must not be empty"),
        ("m0", ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        ("few", ErrorCode.unacceptable_credential, "Too few iterations"),
        ("many", ErrorCode.unacceptable_credential, "Too many iterations"),
        ("m3", ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        ("ok", 0, None),
    ]
    assert set(gw.image.scram) == {("ok", 1)}


async def test_a_user_altered_twice_in_one_request(gw) -> None:
    await alter(gw, upsertions=[upsertion("h", "p", 1)])
    twice = "A user credential cannot be altered twice in the same request"
    response = await alter(gw, deletions=[deletion("h", 1)],
                           upsertions=[upsertion("h", "q", 2), upsertion("i", "p"), upsertion("i", "q"),
                                       upsertion("i", "r"), upsertion("j", "p")])
    assert results(response) == [("h", ErrorCode.duplicate_resource, twice),
                                  ("i", ErrorCode.duplicate_resource, twice), ("j", 0, None)]
    assert set(gw.image.scram) == {("h", 1), ("j", 1)}  # h untouched


async def test_alter_needs_cluster_alter(gw) -> None:
    authorizer = _Authorizer()
    response = await alter(gw, _auth("mallory", authorizer), deletions=[deletion("zed", 1)],
                           upsertions=[upsertion("bob", "p"), upsertion("bob", "q")])
    denied = (ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    assert results(response) == [("bob", *denied), ("zed", *denied)]  # distinct users, sorted
    assert authorizer.calls == [("User:mallory", "CLUSTER", "ALTER")]
    assert gw.image.scram == {}


async def test_no_authorizer_allows_alter(gw) -> None:
    response = await alter(gw, _auth(None), upsertions=[upsertion("k", "p")])
    assert results(response) == [("k", 0, None)]


# --------------------------------------------------------------------------- Describe


async def test_describe_all_and_some(gw) -> None:
    await alter(gw, upsertions=[upsertion("carol", "p", 1, 4096)])
    await alter(gw, upsertions=[upsertion("carol", "p", 2, 8192), upsertion("admin", "p", 2, 5000)])
    for everyone in (None, ()):
        response = await describe(gw, everyone)
        assert response.error_code == 0 and response.error_message is None
        got = {r.user: [(int(c.mechanism), int(c.iterations)) for c in r.credential_infos] for r in response.results}
        assert got == {"admin": [(1, 8192), (2, 5000)], "carol": [(1, 4096), (2, 8192)]}
        assert all(r.error_code == 0 for r in response.results)
    response = await describe(gw, users("carol", "nobody", "admin", "carol"))
    assert [(r.user, int(r.error_code)) for r in response.results] == [
        ("carol", ErrorCode.duplicate_resource), ("nobody", ErrorCode.resource_not_found), ("admin", 0)]
    messages = {r.user: r.error_message for r in response.results}
    assert messages["nobody"] == "Attempt to describe a user credential that does not exist: nobody"
    assert messages["carol"] == "Cannot describe SCRAM credentials for the same user twice in a single request: carol"
    # salts and keys never leave kgw: the response has no field for them
    assert b"salt-0123456789" not in encode(response)


async def test_describe_needs_cluster_describe(gw) -> None:
    authorizer = _Authorizer()
    response = await describe(gw, users("a", "b", "a"), _auth("mallory", authorizer))
    assert (int(response.error_code), response.error_message) == (31, "Cluster authorization failed.")
    assert [(r.user, int(r.error_code), r.error_message) for r in response.results] == [
        ("", 31, "Cluster authorization failed.")] * 3  # one per requested entry, names left empty (as Kafka)
    assert authorizer.calls == [("User:mallory", "CLUSTER", "DESCRIBE")]
    response = await describe(gw, None, _auth("mallory", authorizer))
    assert int(response.error_code) == 31 and response.results == ()


# --------------------------------------------------------------------------- the credential store adapter


async def test_credential_store_view(gw) -> None:
    store = MetadataCredentialStore(gw.config.users, lambda: gw.image)
    assert ("admin", "SCRAM-SHA-256") in store.scram and ("carol", "SCRAM-SHA-256") not in store.scram
    await alter(gw, upsertions=[upsertion("carol", "p", 2)])
    assert set(store.scram) == {("admin", "SCRAM-SHA-256"), ("carol", "SCRAM-SHA-512")}
    assert len(store.scram) == 2
    assert store.scram[("carol", "SCRAM-SHA-512")] is store.scram[("carol", "SCRAM-SHA-512")]  # cached
    assert store.scram.get(("carol", "PLAIN")) is None
    # before the image exists (listeners are built before it): YAML only, no error
    early = MetadataCredentialStore(gw.config.users, lambda: None)
    assert list(early.scram) == [("admin", "SCRAM-SHA-256")]


def test_specs_are_local() -> None:
    assert scram.LOCAL_KEYS == {50, 51}
    assert all(s.answered_locally and s.answer is not None for s in scram.SPECS)


async def test_real_metadata_image_keeps_scram_records(tmp_path) -> None:
    store = DirectoryMetadataStore(tmp_path / "m")
    image = MetadataImage(store, None)
    await image.load()
    try:
        await image.append([UserScramCredentialRecord(name="u", mechanism=1, salt=b"s", stored_key=b"k" * 32,
                                                      server_key=b"v" * 32, iterations=4096),
                            UserScramCredentialRecord(name="w", mechanism=2, salt=b"s", stored_key=b"k" * 64,
                                                      server_key=b"v" * 64, iterations=4096),
                            RemoveUserScramCredentialRecord(name="w", mechanism=2)])
        assert set(image.scram) == {("u", 1)}
        image.snapshot_every = 1
        await image._maybe_snapshot()
    finally:
        await store.aclose()
    store = DirectoryMetadataStore(tmp_path / "m")
    again = MetadataImage(store, None)
    await again.load()
    try:
        assert set(again.scram) == {("u", 1)}
    finally:
        await store.aclose()


async def test_two_deletions_of_one_credential_at_once_are_decided_one_after_the_other(gw) -> None:
    """Each AlterUserScramCredentials decides from the state the one before it wrote: of two
    deletions of the same credential at once, one succeeds and the other finds nothing to
    delete (the services' ``scram_changes`` serialises them; protocol/ holds no lock of its own)."""
    await alter(gw, upsertions=[upsertion("hugo", "pw")])
    outcomes = []

    async def delete() -> None:
        outcomes.append(results(await alter(gw, deletions=[deletion("hugo", 1)]))[0][1])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(delete)
        nursery.start_soon(delete)
    assert sorted(outcomes) == [0, 91]  # NONE, RESOURCE_NOT_FOUND
