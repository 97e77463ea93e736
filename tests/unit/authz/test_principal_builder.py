"""Principal builders: Kafka's default mapping (PLAINTEXT, SSL DN rules, SASL) and custom builders (KIP-111)."""

from __future__ import annotations

import textwrap

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from authz.principal import ANONYMOUS, KafkaPrincipal
from authz.principal_builder import (
    DefaultKafkaPrincipalBuilder,
    KafkaPrincipalBuilder,
    PlaintextAuthenticationContext,
    PrincipalBuildError,
    PrincipalBuilderLoadError,
    SaslAuthenticationContext,
    SslAuthenticationContext,
    load_principal_builder,
    rfc2253_name,
)
from authz.ssl_principal_mapping import NoMatchingRule, SslPrincipalMapper
from configs.gateway_config import ListenerConfig, ListenerSaslConfig, SecurityProtocol, UsersConfig
from authz.credentials import SaslMechanism
from authz.credentials import PlainCredential
from gateway.auth.sasl import SaslSession
from protocol.codecs import request_class
from tests.unit.gateway.certs import make_pki

# Kafka's documented example (docs/security.html, Kafka's ``DefaultKafkaPrincipalBuilder``) and SslPrincipalMapperTest.
KAFKA_DOC_RULES = (
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
    "DEFAULT"
)
KAFKA_TEST_RULES = ", ".join([
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L",
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L",
    "RULE:^cn=(.*?),ou=(.*?),dc=(.*?),dc=(.*?)$/$1@$2/U",
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U",
    "DEFAULT",
])


def ctx_ssl(cert=None) -> SslAuthenticationContext:
    return SslAuthenticationContext(client_address="10.1.2.3", listener_name="MTLS", security_protocol="SSL",
                                    peer_certificate=cert)


# --------------------------------------------------------------------------- mapping rules


@pytest.mark.parametrize(
    ("dn", "name"),
    [
        ("CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown", "adminuser@admin"),
        ("CN=svc-orders,OU=ServiceUsers,O=Example", "svc-orders"),
        ("OU=x,CN=Some.Host,O=y", "some.host"),
        ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
    ],
)
def test_kafka_documented_example(dn, name) -> None:
    assert SslPrincipalMapper(KAFKA_DOC_RULES).get_name(dn) == name


@pytest.mark.parametrize(
    ("dn", "name"),
    [
        ("CN=Duke,OU=ServiceUsers,O=Org,C=US", "duke"),  # /L
        ("CN=Duke,OU=SME,O=mycp,L=Fulton,ST=MD,C=US", "duke@sme"),
        ("cn=duke,ou=sme,dc=mycp,dc=com", "DUKE@SME"),  # /U
        ("cN=duke,OU=JavaSoft,O=Sun Microsystems", "DUKE"),
        ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),  # DEFAULT
    ],
)
def test_kafka_mapper_test_cases(dn, name) -> None:
    assert SslPrincipalMapper(KAFKA_TEST_RULES).get_name(dn) == name


def test_comma_inside_a_rule_and_escaped_comma_in_the_dn() -> None:
    mapper = SslPrincipalMapper("RULE:^CN=((\\\\, *|\\w)+)(,.*|$)/$1/,DEFAULT")
    assert mapper.get_name("CN=Tkac\\, Adam,OU=ITZ,DC=geodis,DC=cz") == "Tkac\\, Adam"


@pytest.mark.parametrize(
    ("rules", "expected"),
    [
        ("", "[]"),
        ("  RULE:([A-Z]*)/$1/U   ,RULE:([a-z]+)/$1/,   DEFAULT  ", "[RULE:([A-Z]*)/$1/U, RULE:([a-z]+)/$1, DEFAULT]"),
        (",,RULE://,,,DEFAULT,,", "[RULE:/, DEFAULT]"),
        ("RULE:\\**\\/+/*/L,RULE:\\/*\\**/**/", "[RULE:\\**\\/+/*/L, RULE:\\/*\\**/**]"),
        ("RULE:,RULE:,/,RULE:,\\//U,RULE:,/RULE:,/,RULE:,RULE:,/L,RULE:,/L,RULE:, DEFAULT, /DEFAULT/,DEFAULT",
         "[RULE:,RULE:,/,RULE:,\\//U, RULE:,/RULE:,, RULE:,RULE:,/L,RULE:,/L, RULE:, DEFAULT, /DEFAULT, DEFAULT]"),
        ("RULE:^CN=([^,]+),.*$/$1/L\nDEFAULT\n", "[RULE:^CN=([^,]+),.*$/$1/L, DEFAULT]"),  # newline-separated (kgw)
    ],
)
def test_rule_splitting_matches_kafka(rules, expected) -> None:
    assert repr(SslPrincipalMapper(rules)) == f"SslPrincipalMapper(rules = {expected})"


@pytest.mark.parametrize(
    "rules",
    ["default", "DEFAUL", "DEFAULT/L", "DEFAULT/U", "RULE:CN=(.*?),OU=ServiceUsers.*/$1",
     "rule:^CN=(.*?),OU=ServiceUsers.*$/$1/", "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/L/U",
     "RULE:^CN=(.*?),OU=ServiceUsers.*$/L", "RULE:^CN=(.*?),OU=ServiceUsers.*$/U",
     "RULE:^CN=(.*?),OU=ServiceUsers.*$/LU"],
)
def test_invalid_rules_from_kafka(rules) -> None:
    with pytest.raises(ValueError, match="Invalid rule: `"):
        SslPrincipalMapper(rules)


@pytest.mark.parametrize(
    ("rules", "why"),
    [("RULE:^CN=([a-z/$1/", "bad regular expression"), ("RULE:^CN=(.*)$/$x/", "illegal group reference"),
     ("RULE:^CN=.*$/$1/", "has none"), ("RULE:^CN=(.*)$/${nope}/", "no group named")],
)
def test_invalid_rules_name_the_rule(rules, why) -> None:
    with pytest.raises(ValueError, match=why) as exc:
        SslPrincipalMapper(rules)
    assert rules.split("/")[0] in str(exc.value)


def test_replacement_semantics_follow_java() -> None:
    dn = "CN=a,OU=b,O=c"
    assert SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*?),.*$/$1@$4/").get_name(dn) == "a@$4"  # literal bad ref
    assert SslPrincipalMapper("RULE:^CN=(.*?),OU=(.*?),.*$/$12/").get_name(dn) == "a2"  # $12 with 2 groups
    assert SslPrincipalMapper("RULE:^CN=(?<cn>[^,]*),.*$/${cn}\\$/U").get_name(dn) == "A$"  # named group, \$
    assert SslPrincipalMapper("RULE:(.*)/x$1/").get_name("abc") == "xabcx"  # Java replaceAll, empty match at end


def test_no_matching_rule() -> None:
    with pytest.raises(NoMatchingRule, match="No rules apply to CN=x"):
        SslPrincipalMapper("RULE:^CN=(.*),OU=Only$/$1/").get_name("CN=x,O=y")
    with pytest.raises(PrincipalBuildError, match="Failed to map name for 'CN=x,O=y'"):
        DefaultKafkaPrincipalBuilder("RULE:^CN=(.*),OU=Only$/$1/").map_dn("CN=x,O=y")


# --------------------------------------------------------------------------- DN text


def test_rfc2253_name_is_javas_format() -> None:
    name = x509.Name([
        x509.NameAttribute(NameOID.COUNTRY_NAME, "US"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Example, Inc."),
        x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "R+D;#1"),
        x509.NameAttribute(NameOID.COMMON_NAME, " spaced "),
        x509.NameAttribute(NameOID.EMAIL_ADDRESS, "a@b.c"),
    ])
    assert rfc2253_name(name) == (
        "1.2.840.113549.1.9.1=#16056140622e63,CN=\\ spaced\\ ,OU=R\\+D\\;\\#1,O=Example\\, Inc.,C=US")
    multi = x509.Name([
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "com")]),
        x509.RelativeDistinguishedName([x509.NameAttribute(NameOID.COMMON_NAME, "x"),
                                        x509.NameAttribute(NameOID.USER_ID, "u1")]),
    ])
    assert rfc2253_name(multi) in ("CN=x+UID=u1,DC=com", "UID=u1+CN=x,DC=com")


# --------------------------------------------------------------------------- default builder


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_ssl_principal_from_certificate(pki) -> None:
    assert rfc2253_name(pki.client.cert.subject) == "CN=alice,OU=apps,O=Example,C=US"
    default = DefaultKafkaPrincipalBuilder()
    assert default.build(ctx_ssl(pki.client.cert)) == KafkaPrincipal("User", "CN=alice,OU=apps,O=Example,C=US")
    mapped = DefaultKafkaPrincipalBuilder("RULE:^CN=([^,]+),.*$/$1/U,DEFAULT")
    assert mapped.build(ctx_ssl(pki.client.cert)).key == "User:ALICE"


def test_ssl_without_certificate_and_plaintext_are_anonymous() -> None:
    builder = DefaultKafkaPrincipalBuilder("RULE:^CN=(.*),OU=Only$/$1/")  # would not match anything
    assert builder.build(ctx_ssl(None)) is ANONYMOUS
    plaintext = PlaintextAuthenticationContext(client_address="::1", listener_name="P", security_protocol="PLAINTEXT")
    assert builder.build(plaintext) is ANONYMOUS
    assert str(builder.build(plaintext)) == "User:ANONYMOUS"


def test_ssl_with_no_matching_rule_fails(pki) -> None:
    with pytest.raises(PrincipalBuildError):
        DefaultKafkaPrincipalBuilder("RULE:^CN=(.*),OU=Only$/$1/").build(ctx_ssl(pki.client.cert))


def test_sasl_principal_is_the_authorization_id_even_on_sasl_ssl(pki) -> None:
    context = SaslAuthenticationContext(
        client_address="10.0.0.1", listener_name="S", security_protocol="SASL_SSL", mechanism="SCRAM-SHA-256",
        authorization_id="alice", ssl_peer_certificate=pki.client.cert)
    principal = DefaultKafkaPrincipalBuilder("RULE:^.*$/nobody/").build(context)
    assert principal == KafkaPrincipal("User", "alice") and not principal.token_authenticated


def test_default_builder_is_a_principal_builder() -> None:
    assert isinstance(DefaultKafkaPrincipalBuilder(), KafkaPrincipalBuilder)
    loaded = load_principal_builder(None, {"ssl.principal.mapping.rules": "RULE:^CN=([^,]+),.*$/$1/"})
    assert isinstance(loaded, DefaultKafkaPrincipalBuilder)
    assert loaded.map_dn("CN=x,O=y") == "x"


# --------------------------------------------------------------------------- custom builders (KIP-111)

CUSTOM_MODULE = textwrap.dedent('''
    from authz.principal import KafkaPrincipal
    from authz.principal_builder import SaslAuthenticationContext

    class TenantPrincipal(KafkaPrincipal):
        def __init__(self, name, tenant, groups):
            super().__init__("User", name)
            self.tenant = tenant
            self.groups = groups

    class TenantPrincipalBuilder:
        """Configured Kafka-style: no-arg constructor, then configure(configs)."""
        built = []

        def configure(self, configs):
            self.tenant = configs["tenant"]

        def build(self, context):
            assert isinstance(context, SaslAuthenticationContext)
            principal = TenantPrincipal(context.authorization_id, self.tenant, ("readers", "writers"))
            TenantPrincipalBuilder.built.append(principal)
            return principal

    class FromConfigs:
        def __init__(self, prefix):
            self.prefix = prefix

        @classmethod
        def from_configs(cls, configs):
            return cls(configs["prefix"])

        def build(self, context):
            return KafkaPrincipal("Service", self.prefix + context.client_address)

    class NoBuild:
        pass

    class Exploding:
        def __init__(self):
            raise RuntimeError("boom")
''')


@pytest.fixture
def custom_module(tmp_path, monkeypatch):
    (tmp_path / "kgw_custom_builders.py").write_text(CUSTOM_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "kgw_custom_builders"
    import sys
    sys.modules.pop("kgw_custom_builders", None)


def test_custom_builder_subclass_arrives_unchanged_through_sasl(custom_module) -> None:
    builder = load_principal_builder(f"{custom_module}:TenantPrincipalBuilder", {"tenant": "blue"})
    listener = ListenerConfig(
        name="SASL", security_protocol=SecurityProtocol.SASL_PLAINTEXT, broker_port_base=9400,
        advertised_broker_port_base=9400, sasl=ListenerSaslConfig(mechanisms=(SaslMechanism.PLAIN,)))
    users = UsersConfig(plain=(PlainCredential(name="bob", password_hash=PlainCredential.hash_password(
        "pw", iterations=1000)),))
    base = PlaintextAuthenticationContext(client_address="10.0.0.9", listener_name="SASL",
                                          security_protocol="SASL_PLAINTEXT")
    session = SaslSession(listener, users, builder, base)
    session.handle(17, 1, request_class(17, 1)(mechanism="PLAIN"))
    session.handle(36, 1, request_class(36, 1)(auth_bytes=b"\x00bob\x00pw"))
    (built,) = type(builder).built
    assert session.principal is built  # the very object, not a copy or a rebuilt KafkaPrincipal
    assert type(session.principal).__name__ == "TenantPrincipal"
    assert (session.principal.tenant, session.principal.groups) == ("blue", ("readers", "writers"))
    assert session.principal.key == "User:bob" and session.principal == KafkaPrincipal("User", "bob")


def test_custom_builder_with_from_configs(custom_module) -> None:
    builder = load_principal_builder(f"{custom_module}.FromConfigs", {"prefix": "host-"})  # dotted form works too
    plaintext = PlaintextAuthenticationContext(client_address="10.0.0.1", listener_name="P", security_protocol="PLAINTEXT")
    assert builder.build(plaintext).key == "Service:host-10.0.0.1"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("nocolon", "must look like 'package.module:Class'"),
        ("no_such_module_kgw:Builder", "importing module 'no_such_module_kgw' failed"),
        ("{mod}:Missing", "has no attribute 'Missing'"),
        ("{mod}:NoBuild", "has no build\\(context\\) method"),
        ("{mod}:Exploding", "creating it failed: RuntimeError\\('boom'\\)"),
    ],
)
def test_load_errors_name_the_path(custom_module, path, message) -> None:
    path = path.format(mod=custom_module)
    with pytest.raises(PrincipalBuilderLoadError, match=message) as exc:
        load_principal_builder(path, {})
    assert repr(path) in str(exc.value)
