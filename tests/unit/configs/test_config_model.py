"""The config-resource model (configs/config_model.py) and the alter-configs policies (configs/policies.py)."""

from __future__ import annotations

import pytest

from configs.broker_configs import NOT_EXPOSED, BrokerConfigModel, gateway_config_defs, leaf_paths
from configs.config_model import AlterConfigOp, ConfigDef, ConfigResource, ConfigResourceType, ConfigSource, ConfigType, InvalidConfig
from configs.gateway_config import GatewayConfig
from configs.yaml_reader import parse_config
from configs.policies import (
    DeclarativePolicy,
    PolicyLoadError,
    PolicyViolation,
    RequestMetadata,
    load_policies,
    load_policy_class,
    parse_rules,
    run_policies,
)

SECRET = "zz-planted-secret-zz"


def config(**extra):
    raw = {
        "listeners": [{"name": "Ext", "host": "127.0.0.1", "port": 9000, "broker_port_base": 20000,
                       "max_connections": 50}],
        "upstream": {"bootstrap_servers": ["b:9092"], "security_protocol": "SASL_PLAINTEXT",
                     "sasl": {"mechanism": "PLAIN", "username": "gw", "password": SECRET}},
    }
    raw.update(extra)
    return parse_config(raw)


def test_wire_codes():
    assert [int(t) for t in ConfigResourceType] == [0, 2, 4, 8, 16, 32]
    assert ConfigResourceType.of(3) is ConfigResourceType.UNKNOWN
    assert (ConfigSource.DYNAMIC_BROKER_CONFIG, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
            ConfigSource.STATIC_BROKER_CONFIG, ConfigSource.DEFAULT_CONFIG) == (2, 3, 4, 5)
    assert (ConfigType.BOOLEAN, ConfigType.LIST, ConfigType.PASSWORD) == (1, 7, 9)
    assert [int(o) for o in AlterConfigOp] == [0, 1, 2, 3]


def test_every_yaml_leaf_has_a_key():
    """A new GatewayConfig field must get a Kafka-style key (or a NOT_EXPOSED entry)."""
    cfg = config(authorizer={"class_name": "authz.standard_authorizer:StandardAuthorizer", "config": {"a": "1"}},
                 listeners=[{"name": "S", "security_protocol": "SASL_SSL", "port": 9000, "broker_port_base": 20000,
                             "tls": {"cert_file": "/c", "key_file": "/k"}, "sasl": {"mechanisms": ["PLAIN"]}}])
    defs, _ = gateway_config_defs(cfg)
    covered: set[str] = set()
    for d in defs:
        covered |= set(d.source_path.split(","))
    missing = []
    for path in leaf_paths(GatewayConfig):
        if path in NOT_EXPOSED or path in covered or any(path.startswith(c + ".") for c in covered):
            continue
        missing.append(path)
    assert missing == []


def test_names_types_flags_and_static_values():
    model = BrokerConfigModel(config(authorizer={"class_name": "authz.standard_authorizer:StandardAuthorizer",
                                                 "config": {"super.users": ["User:a", "User:b"],
                                                            "ldap.bind.password": SECRET}}),
                              {"super.users", "allow.everyone.if.no.acl.found"})
    d = model.defs
    assert d["listeners"].read_only and d["listeners"].type is ConfigType.LIST
    assert model.static["listeners"] == "EXT://127.0.0.1:9000"
    assert d["listener.name.ext.max.connections"].read_only is False
    assert model.static["listener.name.ext.max.connections"] == "50"
    assert d["socket.request.max.bytes"].type is ConfigType.INT
    assert d["upstream.sasl.password"].sensitive and d["upstream.sasl.password"].type is ConfigType.PASSWORD
    assert d["ldap.bind.password"].sensitive and d["ldap.bind.password"].read_only
    assert model.static["super.users"] == "User:a;User:b"
    assert set(model.dynamic_keys()) == {"listener.name.ext.max.connections", "super.users",
                                         "allow.everyone.if.no.acl.found", "audit.log.level", "log.level"}


def test_describe_sources_precedence_and_sensitive_values():
    model = BrokerConfigModel(config(), {"super.users"})
    instance = {"log.level": "DEBUG"}
    default = {"log.level": "ERROR", "audit.log.level": "OFF"}
    entries = {e.name: e for e in model.describe(instance, default, scope_is_default=False, include_synonyms=True)}
    assert (entries["log.level"].value, entries["log.level"].source) == ("DEBUG", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [(s.value, s.source) for s in entries["log.level"].synonyms] == [
        ("DEBUG", ConfigSource.DYNAMIC_BROKER_CONFIG), ("ERROR", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("INFO", ConfigSource.DEFAULT_CONFIG)]
    assert entries["audit.log.level"].source is ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert entries["listener.name.ext.max.connections"].source is ConfigSource.STATIC_BROKER_CONFIG
    password = entries["upstream.sasl.password"]
    assert password.value is None and password.sensitive and password.synonyms[0].value is None
    assert SECRET not in repr(list(entries.values()))
    only_defaults = model.describe(instance, default, scope_is_default=True)
    assert {e.name: e.source for e in only_defaults} == {
        "log.level": ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
        "audit.log.level": ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG}
    assert model.effective(instance, default)["upstream.sasl.password"] == SECRET  # internal use only


@pytest.mark.parametrize(("type_", "text", "canonical"), [
    (ConfigType.BOOLEAN, " TRUE ", "true"),
    (ConfigType.INT, "+42", "42"),
    (ConfigType.LONG, str(2**40), str(2**40)),
    (ConfigType.DOUBLE, "1.5", "1.5"),
    (ConfigType.LIST, " a , b,,c ", "a,b,c"),
    (ConfigType.STRING, " x ", " x "),
    (ConfigType.CLASS, "pkg.mod:Cls", "pkg.mod:Cls"),
])
def test_value_parsing(type_, text, canonical):
    assert ConfigDef("k", type_, "doc").canonical(text) == canonical


@pytest.mark.parametrize(("type_", "text", "reason"), [
    (ConfigType.BOOLEAN, "yes", "true or false"),
    (ConfigType.INT, "1.0", "type INT"),
    (ConfigType.INT, str(2**31), "type INT"),
    (ConfigType.DOUBLE, "nan", "finite"),
    (ConfigType.CLASS, "not a class", "import path"),
])
def test_value_errors(type_, text, reason):
    with pytest.raises(InvalidConfig, match=reason):
        ConfigDef("k", type_, "doc").parse(text)


def test_sensitive_value_never_in_error_message():
    with pytest.raises(InvalidConfig) as e:
        ConfigDef("p", ConfigType.INT, "doc", sensitive=True).parse(SECRET)
    assert SECRET not in str(e.value) and "[hidden]" in str(e.value)


def test_validators_and_alterability():
    model = BrokerConfigModel(config(), {"super.users"})
    assert model.defs["audit.log.level"].canonical("debug") == "DEBUG"
    with pytest.raises(InvalidConfig, match="one of"):
        model.defs["audit.log.level"].parse("LOUD")
    with pytest.raises(InvalidConfig, match="at least 1"):
        model.defs["listener.name.ext.max.connections"].parse("0")
    assert model.defs["super.users"].canonical("User:a; User:b;") == "User:a;User:b"
    with pytest.raises(InvalidConfig):
        model.defs["super.users"].parse("nocolon")
    with pytest.raises(InvalidConfig, match="read-only"):
        model.check_alterable("listeners")
    with pytest.raises(InvalidConfig, match="Unknown config key"):
        model.check_alterable("nope")


# -------------------------------------------------------------------------- policies


def meta(configs, rtype=ConfigResourceType.TOPIC, name="t", sensitive=frozenset()):
    return RequestMetadata(ConfigResource(rtype, name), configs, sensitive_keys=sensitive)


def test_declarative_policy():
    policy = DeclarativePolicy.from_mapping({
        "topic": {"allowed_keys": ["retention.ms", "cleanup.policy", "x.password"],
                  "bounds": {"retention.ms": {"min": 1000, "max": 5000}},
                  "patterns": {"cleanup.policy": "delete|compact", "x.password": "[a-z]+"}},
        "BROKER": {"denied_keys": ["log.level"]},
    })
    policy.validate(meta({"retention.ms": "2000", "cleanup.policy": "compact"}))
    policy.validate(meta({"retention.ms": None}))  # deletion: bounds do not apply
    policy.validate(meta({"anything": "1"}, ConfigResourceType.GROUP))  # no rules for groups
    for configs, message in (({"retention.ms": "999"}, r"\[1000, 5000\]"),
                             ({"retention.ms": "abc"}, "must be a number"),
                             ({"cleanup.policy": "delete,compact"}, "pattern"),
                             ({"segment.bytes": "1"}, "not allowed")):
        with pytest.raises(PolicyViolation, match=message):
            policy.validate(meta(configs))
    with pytest.raises(PolicyViolation) as e:
        policy.validate(meta({"x.password": SECRET.upper()}))
    assert SECRET.upper() not in str(e.value)
    with pytest.raises(PolicyViolation, match="log.level"):
        policy.validate(meta({"log.level": "INFO"}, ConfigResourceType.BROKER, ""))


def test_rules_errors_are_all_reported():
    with pytest.raises(PolicyLoadError) as e:
        parse_rules({"topik": {}, "topic": {"bounds": {"a": {"min": 5, "max": 1}, "b": 3},
                                            "patterns": {"c": "("}, "extra": 1, "allowed_keys": "x"}})
    text = str(e.value)
    for fragment in ("topik", "min 5 is greater", "bounds.b", "patterns.c", "extra", "allowed_keys"):
        assert fragment in text


class Plugin:
    def __init__(self):
        self.configs = None

    def configure(self, configs):
        self.configs = configs

    def validate(self, request_metadata):
        if request_metadata.configs.get("k") == "bad":
            raise PolicyViolation("k must not be bad")


class Broken:
    def validate(self, request_metadata):
        raise RuntimeError(f"boom {request_metadata.configs}")


def test_plugin_loading_and_running():
    policies = load_policies({"class_name": f"{__name__}:Plugin", "config": {"a": 1},
                              "rules": {"topic": {"denied_keys": ["d"]}}})
    assert isinstance(policies[0], DeclarativePolicy) and policies[1].configs == {"a": 1}
    assert run_policies(policies, meta({"k": "ok"})) is None
    assert run_policies(policies, meta({"k": "bad"})) == "k must not be bad"
    assert "not allowed" in run_policies(policies, meta({"d": "1"}))
    failed = run_policies([Broken()], meta({"k": SECRET}))
    assert failed is not None and SECRET not in failed
    assert load_policies(None) == []
    assert load_policy_class(f"{__name__}.Plugin") is Plugin
    for path in ("nope", "no.such.module:X", f"{__name__}:Missing", f"{__name__}:SECRET"):
        with pytest.raises(PolicyLoadError):
            load_policy_class(path)
