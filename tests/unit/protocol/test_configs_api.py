"""DescribeConfigs (32), AlterConfigs (33), IncrementalAlterConfigs (44) through an in-process kgw
in front of a scripted upstream (tests/unit/protocol/config_upstream.py)."""

from __future__ import annotations

import logging

import pytest
import trio
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from authz.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from metadata.records import ConfigRecord
from configs.config_model import ConfigSource, ConfigType
from configs.yaml_reader import parse_config
from configs.policies import PolicyViolation, load_policies
from gateway.process.dynamic_config import INSTANCE_SCOPE, DynamicConfigManager
from gateway.process.server import Gateway
from protocol.codecs import nested, request_class
from tests.support.ports import free_port_base
from tests.unit.gateway.fake_broker import NODE_ID
from tests.unit.gateway.test_connection import RawClient
from tests.unit.protocol.config_upstream import ConfigBroker

TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
SECRET = "planted-s3cret-value-7731"


class RejectEverythingNamedForbidden:
    """A plug-in policy loaded by import path."""

    configured: dict = {}

    def configure(self, configs):
        type(self).configured = dict(configs)

    def validate(self, request_metadata):
        if any(k.startswith("forbidden.") for k in request_metadata.configs):
            raise PolicyViolation(f"keys named forbidden.* are refused for {request_metadata.resource.name}")


@pytest.fixture(autouse=True)
def _restore_loggers():
    names = ("kgw.authorizer", "", "kgw.connection")
    levels = {n: logging.getLogger(n).level for n in names}
    yield
    for n, level in levels.items():
        logging.getLogger(n).setLevel(level)


class Env:
    def __init__(self, nursery, tmp_path, monkeypatch):
        self.nursery = nursery
        self.tmp_path = tmp_path
        self.monkeypatch = monkeypatch
        self.broker: ConfigBroker | None = None

    async def start(self, *, authorizer: dict | None = None, policy=None, alter_configs=False, name="gw",
                    acls=()):
        if self.broker is None:
            self.broker = await self.nursery.start(ConfigBroker(alter_configs=alter_configs).serve)
        base = free_port_base((NODE_ID,))  # base + NODE_ID is free, below the ephemeral range
        raw = {
            "listeners": [{"name": "T", "host": "127.0.0.1", "port": 0, "advertised_host": "127.0.0.1",
                           "broker_port_base": base}],
            "upstream": {"bootstrap_servers": [f"127.0.0.1:{self.broker.port}"], "request_timeout_ms": 3000,
                         "connect_timeout_ms": 1000},
            "admin": None,
            "metadata": {"path": str(self.tmp_path / name)},
            "users": {"plain": [{"name": "carol", "password_sha256": "ab" * 32}]},
        }
        if authorizer is not None:
            # a plug-in's own keys (ldap.* below) need an authorizer that does not declare its keys
            raw["authorizer"] = {"class_name": "tests.support.plugin_authorizer:PluginAuthorizer",
                                 "config": authorizer}
        gw = Gateway(parse_config(raw))
        if policy is not None:  # what the YAML section alter_configs_policy gives
            gw.dynamic_configs = DynamicConfigManager(gw, policies=load_policies(policy))
        cancel = trio.CancelScope()
        stopped = trio.Event()

        async def run(task_status=trio.TASK_STATUS_IGNORED):
            try:
                with cancel:
                    await gw.run(task_status=task_status)
            finally:
                stopped.set()

        started = await self.nursery.start(run)
        gw._test_cancel = cancel
        gw._test_stopped = stopped  # set once the gateway has shut down (its metadata store closed)
        if acls:
            await gw.authorizer.create_acls(None, list(acls))
        await gw.dynamic_configs.ensure_loaded()  # a no-op once the server calls load() at start-up
        return gw, started.listeners["T"][1]


@pytest.fixture
async def env(nursery, tmp_path, monkeypatch):
    return Env(nursery, tmp_path, monkeypatch)


def acl(rtype, name, op, permission=AclPermissionType.ALLOW, principal="User:ANONYMOUS"):
    return AclBinding(ResourcePattern(rtype, name, PatternType.LITERAL),
                      AccessControlEntry(principal, "*", op, permission))


# -------------------------------------------------------------------------- request helpers


def describe_req(*resources, version=4, synonyms=False, docs=False):
    cls = request_class(32, version)
    rcls = nested(cls, "resources")
    kw = {"resources": tuple(rcls(resource_type=i8(t), resource_name=n, configuration_keys=k) for t, n, k in resources)}
    if version >= 1:
        kw["include_synonyms"] = synonyms
    if version >= 3:
        kw["include_documentation"] = docs
    return cls(**kw)


def incremental_req(*resources, validate_only=False, version=1):
    cls = request_class(44, version)
    rcls = nested(cls, "resources")
    ccls = nested(rcls, "configs")
    return cls(validate_only=validate_only, resources=tuple(
        rcls(resource_type=i8(t), resource_name=n,
             configs=tuple(ccls(name=k, config_operation=i8(op), value=v) for k, op, v in configs))
        for t, n, configs in resources))


def alter_req(*resources, validate_only=False, version=2):
    cls = request_class(33, version)
    rcls = nested(cls, "resources")
    ccls = nested(rcls, "configs")
    return cls(validate_only=validate_only, resources=tuple(
        rcls(resource_type=i8(t), resource_name=n, configs=tuple(ccls(name=k, value=v) for k, v in configs))
        for t, n, configs in resources))


async def call(port, key, version, request, corr=1):
    client = await RawClient.connect(port)
    try:
        await client.send(key, version, corr, request)
        got_corr, response = await client.receive(key, version)
        assert got_corr == corr
        return response
    finally:
        await client.stream.aclose()


def by_name(result):
    return {c.name: c for c in result.configs}


# -------------------------------------------------------------------------- DescribeConfigs


async def test_describe_broker_lists_every_key_with_sources_and_hides_secrets(env):
    gw, port = await env.start(authorizer={"super.users": "User:admin;User:ANONYMOUS",
                                           "ldap.bind.password": SECRET})
    resp = await call(port, 32, 4, describe_req((BROKER, str(NODE_ID), None), docs=True, synonyms=True))
    (result,) = resp.results
    assert result.error_code == ErrorCode.none and result.resource_name == str(NODE_ID)
    configs = by_name(result)
    assert {"listeners", "super.users", "allow.everyone.if.no.acl.found", "authorizer.class.name",
            "socket.request.max.bytes", "metadata.log.dir", "listener.name.t.max.connections",
            "audit.log.level"} <= set(configs)
    su = configs["super.users"]
    assert (su.value, su.config_source, su.read_only, su.config_type) == (
        "User:admin;User:ANONYMOUS", ConfigSource.STATIC_BROKER_CONFIG, False, ConfigType.LIST)
    assert su.documentation and "principals" in su.documentation
    assert [s.source for s in su.synonyms] == [ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG]
    everyone = configs["allow.everyone.if.no.acl.found"]
    assert (everyone.value, everyone.config_source, everyone.config_type) == (
        "false", ConfigSource.DEFAULT_CONFIG, ConfigType.BOOLEAN)
    listeners = configs["listeners"]
    assert listeners.read_only and listeners.config_source == ConfigSource.STATIC_BROKER_CONFIG
    assert configs["metadata.log.dir"].read_only
    secret = configs["ldap.bind.password"]
    assert secret.is_sensitive and secret.value is None and all(s.value is None for s in secret.synonyms)
    creds = configs["sasl.user.credentials"]
    assert creds.is_sensitive and creds.value is None
    assert SECRET not in repr(resp) and "ab" * 32 not in repr(resp)


async def test_describe_filters_keys_and_omits_documentation_unless_asked(env):
    _, port = await env.start()
    resp = await call(port, 32, 4, describe_req((BROKER, str(NODE_ID), ("audit.log.level", "nope"))))
    (entry,) = resp.results[0].configs
    assert entry.name == "audit.log.level" and entry.value == "INFO" and entry.documentation is None
    assert entry.synonyms == ()
    # v1 has no config_type/documentation fields at all
    resp = await call(port, 32, 1, describe_req((BROKER, str(NODE_ID), ("audit.log.level",)), version=1))
    assert resp.results[0].configs[0].config_source == ConfigSource.DEFAULT_CONFIG


async def test_describe_broker_names(env):
    _, port = await env.start()
    resp = await call(port, 32, 4, describe_req((BROKER, "", None), (BROKER, "999", None), (BROKER, "x", None)))
    default, unknown, bad = resp.results
    assert default.error_code == ErrorCode.none and default.configs == ()  # no dynamic defaults yet
    assert unknown.error_code == ErrorCode.invalid_request and "999" in unknown.error_message
    assert bad.error_code == ErrorCode.invalid_request and "integer" in bad.error_message


async def test_describe_unknown_resource_type_fails_every_resource(env):
    _, port = await env.start()
    resp = await call(port, 32, 4, describe_req((BROKER, str(NODE_ID), None), (99, "x", None)))
    assert [r.error_code for r in resp.results] == [ErrorCode.invalid_request] * 2
    assert all(r.configs == () for r in resp.results)


async def test_describe_topics_forwarded_and_merged_in_request_order(env):
    gw, port = await env.start()
    env.broker.reverse = True
    env.broker.fail["gone"] = (3, "This server does not host this topic-partition.")
    resp = await call(port, 32, 4, describe_req((TOPIC, "a", None), (BROKER, str(NODE_ID), ("log.level",)),
                                                (TOPIC, "gone", None)))
    assert [(r.resource_type, r.resource_name) for r in resp.results] == [(TOPIC, "a"), (BROKER, str(NODE_ID)),
                                                                          (TOPIC, "gone")]
    assert by_name(resp.results[0])["retention.ms"].value == "604800000"
    assert resp.results[1].configs[0].name == "log.level"
    assert resp.results[2].error_code == 3
    (key, version, forwarded), = env.broker.config_requests
    assert [r.resource_name for r in forwarded.resources] == ["a", "gone"]  # never the BROKER resource


async def test_describe_authorization_per_resource(env):
    gw, port = await env.start(authorizer={}, acls=[acl(ResourceType.TOPIC, "visible", AclOperation.ALTER_CONFIGS),
                                                     acl(ResourceType.TOPIC, "hidden", AclOperation.READ)])
    resp = await call(port, 32, 4, describe_req((TOPIC, "visible", None), (TOPIC, "hidden", None),
                                                (BROKER, str(NODE_ID), None)))
    visible, hidden, broker = resp.results
    assert visible.error_code == ErrorCode.none  # ALTER_CONFIGS implies DESCRIBE_CONFIGS
    assert hidden.error_code == ErrorCode.topic_authorization_failed and hidden.configs == ()
    assert hidden.error_message == "Topic authorization failed."
    assert broker.error_code == ErrorCode.cluster_authorization_failed
    assert [r.resource_name for r in env.broker.config_requests[0][2].resources] == ["visible"]


async def test_describe_broker_logger(env):
    _, port = await env.start()
    resp = await call(port, 32, 4, describe_req((BROKER_LOGGER, str(NODE_ID), ("root", "kgw.authorizer"))))
    names = by_name(resp.results[0])
    assert set(names) == {"root", "kgw.authorizer"}
    assert names["root"].config_source == ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG


# -------------------------------------------------------------------------- altering kgw itself


CLUSTER_CONFIG_ACL = acl(ResourceType.CLUSTER, "kafka-cluster", AclOperation.ALTER_CONFIGS)


async def test_incremental_alter_applies_live_persists_and_survives_restart(env):
    gw, port = await env.start(authorizer={"super.users": "User:admin"}, acls=[CLUSTER_CONFIG_ACL])
    authorizer = gw.authorizer
    assert authorizer._data.allow_everyone is False
    resp = await call(port, 44, 1, incremental_req(
        (BROKER, str(NODE_ID), [("allow.everyone.if.no.acl.found", SET, "TRUE"),
                                ("super.users", APPEND, "User:bob;User:carol"),
                                ("listener.name.t.max.connections", SET, "77"),
                                ("audit.log.level", SET, "debug")]),
        (BROKER, "", [("super.users", SET, "User:ops")])))
    assert [r.error_code for r in resp.responses] == [ErrorCode.none, ErrorCode.none]
    assert authorizer._data.allow_everyone is True
    assert authorizer._data.super_users == {"User:admin", "User:bob", "User:carol"}
    assert gw.listeners[0].max_connections == 77
    assert logging.getLogger("kgw.authorizer").level == logging.DEBUG
    assert gw.image.configs[(BROKER, INSTANCE_SCOPE)]["allow.everyone.if.no.acl.found"] == "true"
    assert gw.image.configs[(BROKER, "")]["super.users"] == "User:ops"

    described = by_name((await call(port, 32, 4, describe_req((BROKER, str(NODE_ID), None), synonyms=True)))
                        .results[0])
    su = described["super.users"]
    assert su.value == "User:admin;User:bob;User:carol" and su.config_source == ConfigSource.DYNAMIC_BROKER_CONFIG
    assert [s.source for s in su.synonyms] == [ConfigSource.DYNAMIC_BROKER_CONFIG,
                                               ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
                                               ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG]
    default = (await call(port, 32, 4, describe_req((BROKER, "", None)))).results[0]
    assert [(c.name, c.value, c.config_source) for c in default.configs] == [
        ("super.users", "User:ops", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]

    # SUBTRACT and DELETE
    resp = await call(port, 44, 1, incremental_req((BROKER, str(NODE_ID), [
        ("super.users", SUBTRACT, "User:bob"), ("listener.name.t.max.connections", DELETE, None)])))
    assert resp.responses[0].error_code == ErrorCode.none
    assert authorizer._data.super_users == {"User:admin", "User:carol"}
    assert gw.listeners[0].max_connections == 10000

    # restart on the same metadata directory: the overrides are applied again
    gw._test_cancel.cancel()
    await gw._test_stopped.wait()
    gw2, port2 = await env.start(authorizer={"super.users": "User:admin"})
    assert len(gw2.authorizer.acls(CLUSTER_CONFIG_ACL.to_filter())) == 1
    assert gw2.authorizer._data.allow_everyone is True
    assert gw2.authorizer._data.super_users == {"User:admin", "User:carol"}
    assert logging.getLogger("kgw.authorizer").level == logging.DEBUG


async def test_alter_errors_are_per_resource(env):
    gw, port = await env.start(authorizer={}, acls=[CLUSTER_CONFIG_ACL])
    resp = await call(port, 44, 1, incremental_req(
        (BROKER, str(NODE_ID), [("listeners", SET, "X://h:1")]),
        (BROKER, "", [("no.such.key", SET, "1")]),
        (BROKER, "", [("no.such.key", SET, "1")]),  # duplicate resource
        (BROKER_LOGGER, str(NODE_ID), [("kgw.connection", SET, "WARN")]),
        (BROKER, "7", [("log.level", SET, "INFO")]),
    ))
    read_only, dup1, dup2, logger, bad_name = resp.responses
    assert read_only.error_code == ErrorCode.invalid_config and "read-only" in read_only.error_message
    assert dup1.error_code == dup2.error_code == ErrorCode.invalid_request
    assert "Duplicate resource" in dup1.error_message
    assert logger.error_code == ErrorCode.none
    assert logging.getLogger("kgw.connection").level == logging.WARNING
    assert bad_name.error_code == ErrorCode.invalid_request

    resp = await call(port, 44, 1, incremental_req(
        (BROKER, str(NODE_ID), [("allow.everyone.if.no.acl.found", SET, "maybe")]),
        (BROKER, "", [("listener.name.t.max.connections", SET, "-3")]),
        (BROKER, str(NODE_ID) + "0", []),
    ))
    wrong_type, out_of_range, _ = resp.responses
    assert wrong_type.error_code == ErrorCode.invalid_config and "true or false" in wrong_type.error_message
    assert out_of_range.error_code == ErrorCode.invalid_config and "at least 1" in out_of_range.error_message

    responses = []
    for resource in ((BROKER, str(NODE_ID), [("audit.log.level", APPEND, "INFO")]),
                     (BROKER, "", [("super.users", SET, "not-a-principal")]),
                     (BROKER, "", [("log.level", SET, None)]),
                     (BROKER, str(NODE_ID), [("log.level", SET, "INFO"), ("log.level", DELETE, None)]),
                     (BROKER, "", [("log.level", 9, "INFO")])):
        responses += (await call(port, 44, 1, incremental_req(resource))).responses
    append, principal, null, dup_keys, bad_op = responses
    assert append.error_code == ErrorCode.invalid_config and "LIST" in append.error_message
    assert principal.error_code == ErrorCode.invalid_config
    assert null.error_code == ErrorCode.invalid_request and "Null value" in null.error_message
    assert dup_keys.error_code == ErrorCode.invalid_request and "duplicate config keys" in dup_keys.error_message
    assert bad_op.error_code == ErrorCode.invalid_request
    assert gw.image.configs.get((BROKER, "")) in (None, {})  # nothing of the failures was stored


async def test_a_value_a_config_record_cannot_hold_is_refused_and_the_gateway_stays_up(env):
    """super.users over 32,767 UTF-8 bytes used to pass validation and fail in the log write
    (error traceback, connection dropped); it is INVALID_CONFIG naming the key, and kgw serves on."""
    gw, port = await env.start(authorizer={}, acls=[CLUSTER_CONFIG_ACL])
    huge = ",".join(f"User:u{i:06d}" for i in range(3000))  # 38,999 bytes
    for validate_only in (True, False):
        resp = await call(port, 44, 1, incremental_req((BROKER, "", [("super.users", SET, huge)]),
                                                       validate_only=validate_only))
        (result,) = resp.responses
        assert result.error_code == ErrorCode.invalid_config
        assert "super.users is 38999 UTF-8 bytes" in result.error_message
    assert gw.image.configs.get((BROKER, "")) in (None, {})
    resp = await call(port, 44, 1, incremental_req((BROKER, "", [("log.level", SET, "INFO")])))
    assert resp.responses[0].error_code == ErrorCode.none


async def test_a_change_that_would_lock_its_caller_out_is_refused(env):
    """One IncrementalAlterConfigs used to be able to remove the caller's own super-user status
    (or switch off the allow-everyone default it relied on), reapplied at every restart."""
    gw, port = await env.start(authorizer={"super.users": "User:ANONYMOUS"})
    for value in ("User:admin", "", "User:ANONYMOUS,User:admin"):
        for validate_only in (True, False):
            resp = await call(port, 44, 1, incremental_req((BROKER, "", [("super.users", SET, value)]),
                                                           validate_only=validate_only))
            (result,) = resp.responses
            assert result.error_code == ErrorCode.invalid_config, value
    assert "unable to alter configs again" in (await call(port, 44, 1, incremental_req(
        (BROKER, "", [("super.users", SET, "User:admin")])))).responses[0].error_message
    assert gw.authorizer._data.super_users == frozenset({"User:ANONYMOUS"})
    # keeping oneself is fine
    resp = await call(port, 44, 1, incremental_req((BROKER, "", [("super.users", SET, "User:ANONYMOUS;User:admin")])))
    assert resp.responses[0].error_code == ErrorCode.none
    assert gw.authorizer._data.super_users == frozenset({"User:ANONYMOUS", "User:admin"})


async def test_switching_off_the_default_the_caller_relies_on_is_refused(env):
    gw, port = await env.start(authorizer={"allow.everyone.if.no.acl.found": "true"})  # no ACL, no super user
    resp = await call(port, 44, 1, incremental_req((BROKER, "", [("allow.everyone.if.no.acl.found", SET, "false")])))
    assert resp.responses[0].error_code == ErrorCode.invalid_config
    assert gw.authorizer._data.allow_everyone is True


async def test_malformed_super_users_are_refused_with_the_reason(env):
    gw, port = await env.start(authorizer={}, acls=[CLUSTER_CONFIG_ACL])
    for value, why in (("User:", "empty principal type or name"), (":admin", "empty principal type or name"),
                       ("User:a\x00b", "control character"), ("User:a,User:b", "separate super users with ';'")):
        resp = await call(port, 44, 1, incremental_req((BROKER, "", [("super.users", SET, value)])))
        (result,) = resp.responses
        assert result.error_code == ErrorCode.invalid_config and why in result.error_message, (value, result)


async def test_validate_only_changes_nothing(env):
    gw, port = await env.start(authorizer={}, acls=[CLUSTER_CONFIG_ACL,
                                                     acl(ResourceType.TOPIC, "t1", AclOperation.ALTER_CONFIGS)])
    offset = gw.image.offset
    resp = await call(port, 44, 1, incremental_req(
        (BROKER, str(NODE_ID), [("allow.everyone.if.no.acl.found", SET, "true")]),
        (BROKER, "", [("listeners", SET, "x")]),
        (TOPIC, "t1", [("retention.ms", SET, "1000")]),
        validate_only=True))
    assert [r.error_code for r in resp.responses] == [ErrorCode.none, ErrorCode.invalid_config, ErrorCode.none]
    assert gw.authorizer._data.allow_everyone is False and gw.image.offset == offset
    (_, _, forwarded), = env.broker.config_requests
    assert forwarded.validate_only is True and env.broker.topic_configs == {}


async def test_alter_authorization(env):
    gw, port = await env.start(authorizer={}, acls=[acl(ResourceType.TOPIC, "mine", AclOperation.ALTER_CONFIGS),
                                                     acl(ResourceType.TOPIC, "theirs", AclOperation.DESCRIBE_CONFIGS)])
    resp = await call(port, 44, 1, incremental_req(
        (TOPIC, "mine", [("retention.ms", SET, "1000")]),
        (TOPIC, "theirs", [("retention.ms", SET, "1000")]),
        (BROKER, str(NODE_ID), [("allow.everyone.if.no.acl.found", SET, "true")]),
        (BROKER, "", [("listeners", SET, "x")]),  # validation (read-only) comes after auth: 31
        (BROKER_LOGGER, str(NODE_ID), [("root", SET, None)]),  # structural validation comes before auth: 42
    ))
    assert [r.error_code for r in resp.responses] == [
        ErrorCode.none, ErrorCode.topic_authorization_failed, ErrorCode.cluster_authorization_failed,
        ErrorCode.cluster_authorization_failed, ErrorCode.invalid_request]
    assert [r.resource_name for r in env.broker.config_requests[0][2].resources] == ["mine"]
    assert gw.authorizer._data.allow_everyone is False


async def test_legacy_alter_configs_without_upstream_support(env):
    gw, port = await env.start(authorizer={"super.users": "User:ANONYMOUS"})
    await call(port, 44, 1, incremental_req((BROKER, "", [("log.level", SET, "INFO")])))
    resp = await call(port, 33, 2, alter_req(
        (TOPIC, "t1", [("retention.ms", "1000")]),
        (BROKER, "", [("audit.log.level", "WARNING")]),
        (BROKER_LOGGER, str(NODE_ID), [("root", "INFO")]),
    ))
    topic, broker, logger = resp.responses
    assert topic.error_code == ErrorCode.unsupported_version
    assert "AlterConfigs" in topic.error_message and "does not support" in topic.error_message
    assert broker.error_code == ErrorCode.none
    assert logger.error_code == ErrorCode.invalid_request
    # legacy AlterConfigs replaces the scope's whole override set: log.level is gone
    assert gw.image.configs[(BROKER, "")] == {"audit.log.level": "WARNING"}
    assert env.broker.config_requests == []


async def test_legacy_alter_configs_forwarded_when_upstream_has_it(env):
    _, port = await env.start(alter_configs=True)
    resp = await call(port, 33, 1, alter_req((TOPIC, "t1", [("retention.ms", "1000")]), version=1))
    assert resp.responses[0].error_code == ErrorCode.none
    assert env.broker.topic_configs == {"t1": {"retention.ms": "1000"}}


async def test_upstream_error_merged_per_resource(env):
    _, port = await env.start()
    env.broker.fail["bad"] = (40, "Invalid value x for configuration retention.ms")
    resp = await call(port, 44, 1, incremental_req((TOPIC, "ok", [("retention.ms", SET, "5")]),
                                                   (TOPIC, "bad", [("retention.ms", SET, "x")]),
                                                   (BROKER, "", [("log.level", SET, "INFO")])))
    assert [(r.resource_name, r.error_code) for r in resp.responses] == [
        ("ok", 0), ("bad", 40), ("", 0)]
    assert resp.throttle_time.total_seconds() == pytest.approx(0.007)


async def test_policies_declarative_and_plugin(env):
    policy = {
        "class_name": f"{__name__}:RejectEverythingNamedForbidden",
        "config": {"x": "1"},
        "rules": {
            "topic": {"allowed_keys": ["retention.ms", "cleanup.policy", "forbidden.key"],
                      "bounds": {"retention.ms": {"min": 60000}},
                      "patterns": {"cleanup.policy": "delete|compact"}},
            "broker": {"denied_keys": ["log.level"]},
        },
    }
    gw, port = await env.start(policy=policy)
    assert RejectEverythingNamedForbidden.configured == {"x": "1"}
    resp = await call(port, 44, 1, incremental_req(
        (TOPIC, "short", [("retention.ms", SET, "1000")]),
        (TOPIC, "weird", [("cleanup.policy", SET, "delete,compact,other")]),
        (TOPIC, "other", [("segment.bytes", SET, "1")]),
        (TOPIC, "plug", [("forbidden.key", SET, "1")]),
        (TOPIC, "fine", [("retention.ms", SET, "600000"), ("cleanup.policy", SET, "compact")]),
        (BROKER, "", [("log.level", SET, "INFO")]),
        (BROKER, "", [("audit.log.level", SET, "INFO")]),
    ))
    codes = [(r.resource_name, r.error_code) for r in resp.responses]
    assert codes[:5] == [("short", 44), ("weird", 44), ("other", 44), ("plug", 44), ("fine", 0)]
    assert codes[5] == ("", 42)  # duplicate BROKER "" resource
    msgs = [r.error_message for r in resp.responses]
    assert "[60000, inf]" in msgs[0] and "pattern" in msgs[1] and "not allowed" in msgs[2]
    assert "forbidden" in msgs[3]
    assert [r.resource_name for r in env.broker.config_requests[0][2].resources] == ["fine"]
    resp = await call(port, 44, 1, incremental_req((BROKER, "", [("log.level", SET, "INFO")])))
    assert resp.responses[0].error_code == ErrorCode.policy_violation


async def test_secrets_never_logged(env, caplog):
    caplog.set_level(logging.DEBUG)
    gw, port = await env.start(authorizer={"ldap.bind.password": SECRET, "super.users": "User:ANONYMOUS"})
    await call(port, 32, 4, describe_req((BROKER, str(NODE_ID), None), synonyms=True, docs=True))
    await call(port, 44, 1, incremental_req((BROKER, "", [("ldap.bind.password", SET, SECRET)]),
                                            (BROKER, "", [("allow.everyone.if.no.acl.found", SET, "true")])))
    assert SECRET not in caplog.text


async def test_stored_override_invalid_for_this_config_is_ignored(env):
    gw, port = await env.start(authorizer={})
    await gw.image.append([ConfigRecord(resource_type=BROKER, resource_name=INSTANCE_SCOPE,
                                        name="listener.name.gone.max.connections", value="5"),
                           ConfigRecord(resource_type=BROKER, resource_name="", name="log.level", value="LOUD")])
    entries = {e.name: e for e in gw.dynamic_configs.describe(str(NODE_ID))}
    assert "listener.name.gone.max.connections" not in entries
    assert entries["log.level"].value == "INFO"


# -------------------------------------------------------------------------- the change trail


async def test_changes_are_recorded_with_who_made_them_and_only_when_made(env, caplog):
    """A BROKER key kgw altered, a logger level, and a topic config the upstream altered: one
    `kgw.changes` record each (principal, listener, address, request, exact change) and one
    audit event `change`; the upstream's refusal, a validate_only request and an unchanged
    value record nothing."""
    from authz.audit_events import audit_event

    gw, port = await env.start()
    events: list[dict] = []
    gw.change_log.add_sink(events.append)
    env.broker.fail["bad"] = (40, "Invalid value x for configuration retention.ms")
    caplog.set_level(logging.INFO, logger="kgw.changes")
    resp = await call(port, 44, 1, incremental_req((TOPIC, "ok", [("retention.ms", SET, "5")]),
                                                   (TOPIC, "bad", [("retention.ms", SET, "x")]),
                                                   (BROKER, "", [("listener.name.t.max.connections", SET, "55")]),
                                                   (BROKER_LOGGER, "", [("kgw.connection", SET, "WARN")])), corr=41)
    assert [r.error_code for r in resp.responses] == [0, 40, 0, 0]
    await call(port, 44, 1, incremental_req((TOPIC, "ok", [("retention.ms", SET, "6")]), validate_only=True))
    await call(port, 44, 1, incremental_req((BROKER, "", [("listener.name.t.max.connections", SET, "55")])))
    got = {(e["kgw_resource"], e["kgw_change"]) for e in events}
    assert got == {("Topic:LITERAL:ok", "set retention.ms=5"),
                   ("Broker:LITERAL:<default>", "set listener.name.t.max.connections=55"),
                   ("BrokerLogger:LITERAL:<default>", "set kgw.connection=WARN")}, events
    for fields in events:
        event = audit_event(fields, 0.0)
        assert (event["event"], event["principal"], event["listener"], event["client_address"], event["api"],
                event["correlation_id"], event["operation"]) == (
            "change", "User:ANONYMOUS", "T", "127.0.0.1", "IncrementalAlterConfigs", 41, "ALTER_CONFIGS"), event
    lines = [r for r in caplog.records if r.name == "kgw.changes"]
    assert sorted(r.getMessage() for r in lines) == sorted(f"{change} on {resource}" for resource, change in got)
    assert all(r.kgw["principal"] == "User:ANONYMOUS" and r.kgw["client_address"] == "127.0.0.1" for r in lines)
