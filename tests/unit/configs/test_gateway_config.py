"""Tests for configs.gateway_config: defaults, examples, and one row per kind of bad input."""

import base64
import dataclasses
import hashlib
import hmac
from pathlib import Path

import pytest

from configs.gateway_config import Address, AdminConfig, ClientAuth, ConfigError, GatewayConfig, SecurityProtocol
from authz.credentials import PlainCredential, SaslMechanism, ScramCredential
from configs.yaml_reader import load_config, parse_config

EXAMPLES = Path(__file__).parents[3] / "configs" / "examples"
TLS = {"cert_file": "gw.pem", "key_file": "gw-key.pem"}


def listener(**overrides):
    return {"name": "ext", "port": 9192, "broker_port_base": 9200, **overrides}


def config(*listeners, **top):
    upstream = {"bootstrap_servers": ["localhost:9092"]}
    return {"listeners": list(listeners) or [listener()], "upstream": upstream, **top}


def upstream(**overrides):
    return {"bootstrap_servers": "localhost:9092", **overrides}


def errors_of(raw, source="gw.yaml"):
    with pytest.raises(ConfigError) as info:
        parse_config(raw, source)
    return info.value


# --------------------------------------------------------------------------- good input


def test_defaults():
    cfg = parse_config({"listeners": [{"name": "ext", "broker_port_base": 9200}],
                        "upstream": {"bootstrap_servers": ["localhost:9092"]}})
    (lst,) = cfg.listeners
    assert (lst.name, lst.security_protocol, lst.host, lst.port) == ("EXT", SecurityProtocol.PLAINTEXT, "0.0.0.0", 9192)
    assert (lst.advertised_host, lst.advertised_port, lst.advertised_broker_port_base) == ("localhost", 9192, 9200)
    assert (lst.max_connections, lst.tls, lst.sasl, lst.principal_builder) == (10000, None, None, None)
    up = cfg.upstream
    assert up.bootstrap_servers == (Address("localhost", 9092),)
    assert (up.security_protocol, up.tls, up.sasl) == (SecurityProtocol.PLAINTEXT, None, None)
    assert (up.connect_timeout_ms, up.request_timeout_ms, up.metadata_max_age_ms) == (10000, 30000, 300000)
    assert cfg.cluster_id == "kgw"
    assert (cfg.limits.max_frame_bytes, cfg.limits.max_in_flight_per_connection) == (104857600, 1000)
    assert cfg.admin == AdminConfig(host="127.0.0.1", port=9190)
    assert (cfg.authorizer.class_name, dict(cfg.authorizer.config)) == (None, {})
    assert (cfg.metadata.path, cfg.metadata.snapshot_every_records) == (Path("kgw-data"), 10000)
    assert (cfg.users.scram, cfg.users.plain) == ((), ())
    assert (cfg.audit.log_level, cfg.logging.level, cfg.logging.format) == ("INFO", "INFO", "text")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.cluster_id = "other"


def test_advertised_defaults_follow_host_and_explicit_values():
    cfg = parse_config(config(
        listener(name="a", host="10.0.0.5", port=0, broker_port_base=9300),
        listener(name="b", host="::", port=9193, broker_port_base=9400, advertised_host="gw.example",
                 advertised_port=19193, advertised_broker_port_base=19400),
    ))
    a, b = cfg.listeners
    assert (a.advertised_host, a.advertised_port, a.advertised_broker_port_base) == ("10.0.0.5", 0, 9300)
    assert (b.advertised_host, b.advertised_port, b.advertised_broker_port_base) == ("gw.example", 19193, 19400)


def test_node_ports():
    (lst,) = parse_config(config(listener(broker_port_base=65530, advertised_host="gw", advertised_broker_port_base=100))).listeners
    assert lst.node_bind_port(0) == 65530
    assert lst.node_bind_port(5) == 65535
    assert lst.node_bind_port(6) is None
    assert lst.node_bind_port(-1) is None
    assert lst.node_advertised_address(3) == ("gw", 103)
    assert lst.node_advertised_address(65436) is None


def test_lenient_forms():
    """Comma-separated bootstrap string, IPv6, case-insensitive enums, YAML 1.2 scalars."""
    cfg = parse_config(config(
        listener(security_protocol="sasl_ssl", tls={**TLS, "ca_file": "ca.pem", "client_auth": "Required"},
                 sasl={"mechanisms": ["scram-sha-512"]}),
        upstream=upstream(bootstrap_servers="a:9092, [::1]:9093,b.example:9094"),
        audit={"log_level": "off"},
    ))
    assert [str(a) for a in cfg.upstream.bootstrap_servers] == ["a:9092", "[::1]:9093", "b.example:9094"]
    (lst,) = cfg.listeners
    assert lst.security_protocol is SecurityProtocol.SASL_SSL
    assert lst.tls.client_auth is ClientAuth.REQUIRED
    assert lst.sasl.mechanisms == (SaslMechanism.SCRAM_SHA_512,)
    assert cfg.audit.log_level == "OFF"


def test_yaml_off_is_a_string_not_false(tmp_path):
    path = tmp_path / "gw.yaml"
    path.write_text("listeners: [{name: ext, broker_port_base: 9200, max_connections: 10_000}]\n"
                    "upstream: {bootstrap_servers: localhost:9092}\naudit: {log_level: OFF}\nadmin: null\n")
    cfg = load_config(path)
    assert cfg.audit.log_level == "OFF"
    assert cfg.admin is None
    assert cfg.listeners[0].max_connections == 10000


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_loads(path):
    assert isinstance(load_config(path), GatewayConfig)


def test_example_contents():
    assert {p.name for p in EXAMPLES.glob("*.yaml")} >= {
        "single-listener.yaml", "tls-and-sasl.yaml", "standard-authorizer.yaml"}

    single = load_config(EXAMPLES / "single-listener.yaml")
    assert [(lst.name, lst.security_protocol) for lst in single.listeners] == [("PLAINTEXT", "PLAINTEXT")]
    assert single.upstream.bootstrap_servers == (("localhost", 9092),)

    secure = load_config(EXAMPLES / "tls-and-sasl.yaml")
    mtls, sasl = secure.listeners
    assert (mtls.security_protocol, mtls.tls.client_auth) == (SecurityProtocol.SSL, ClientAuth.REQUIRED)
    assert mtls.tls.cert_file == EXAMPLES / "certs" / "gateway.pem"  # relative to the file, not checked to exist
    assert sasl.security_protocol is SecurityProtocol.SASL_SSL
    assert SaslMechanism.SCRAM_SHA_256 in sasl.sasl.mechanisms
    # The example's documented demo credentials really are what the file says.
    for cred in secure.users.scram:
        expected = ScramCredential.from_password("alice", "alice-secret", cred.mechanism, salt=cred.salt)
        assert cred == expected
    assert secure.users.plain[0].verify("bob-secret")

    acl = load_config(EXAMPLES / "standard-authorizer.yaml")
    assert acl.authorizer.class_name == "authz.standard_authorizer:StandardAuthorizer"
    assert acl.authorizer.config["super.users"] == "User:admin"
    # `~` expanded, and outside the source tree (running an example leaves the checkout clean)
    assert acl.metadata.path == Path.home() / ".local/state/kgw/standard-authorizer"
    for example in EXAMPLES.glob("*.yaml"):
        md = load_config(example).metadata
        assert md.backend == "kafka" or not md.path.is_relative_to(EXAMPLES.parent.parent), example
    assert [u.verify(f"{u.name}-secret") for u in acl.users.plain] == [True, True]


def test_relative_paths_resolve_against_config_directory(tmp_path):
    (tmp_path / "conf").mkdir()
    path = tmp_path / "conf" / "gw.yaml"
    path.write_text(
        "listeners:\n  - {name: s, security_protocol: SSL, broker_port_base: 9200,\n"
        "     tls: {cert_file: certs/a.pem, key_file: /abs/k.pem}}\n"
        "upstream: {bootstrap_servers: [h:1]}\n"
    )
    cfg = load_config(path)
    assert cfg.listeners[0].tls.cert_file == tmp_path / "conf" / "certs" / "a.pem"
    assert cfg.listeners[0].tls.key_file == Path("/abs/k.pem")
    assert cfg.metadata.path == tmp_path / "conf" / "kgw-data"  # the default is relative too


def test_to_dict_round_trips_and_hides_secrets():
    cfg = parse_config(config(
        listener(security_protocol="SASL_PLAINTEXT", sasl={"mechanisms": ["PLAIN"]}),
        upstream=upstream(security_protocol="SASL_SSL", tls={"ca_file": "/ca.pem"},
                          sasl={"mechanism": "PLAIN", "username": "kgw", "password": "s3cret"}),
        authorizer={"class_name": "authz.x:Y", "config": {"super.users": "User:a", "list": ["a", 1]}},
        users={"plain": [{"name": "u", "password_sha256": "ab" * 32}]},
    ))
    out = cfg.to_dict()
    assert out["upstream"]["sasl"] == {"mechanism": "PLAIN", "username": "kgw", "password": "[hidden]",
                                       "oauthbearer": None}
    assert out["users"]["plain"] == [{"name": "u", "password_sha256": "[hidden]", "password_hash": None}]
    assert out["upstream"]["bootstrap_servers"] == ["localhost:9092"]
    assert out["authorizer"]["config"] == {"super.users": "User:a", "list": ["a", 1]}
    assert "s3cret" not in repr(cfg) and "ab" * 32 not in repr(cfg)
    plain = parse_config(config(authorizer={"class_name": "a:B", "config": {"k": "v"}}))
    assert parse_config(plain.to_dict()) == plain


def test_scram_credential_matches_rfc7677():
    """RFC 7677 section 3: user/pencil; the server signature proves StoredKey/ServerKey are right."""
    cred = ScramCredential.from_password("user", "pencil", SaslMechanism.SCRAM_SHA_256,
                                         salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ=="))
    nonce = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
    auth = f"n=user,r=rOprNGfwEbeRWgbNEkqO,r={nonce},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096,c=biws,r={nonce}".encode()
    signature = hmac.digest(cred.server_key, auth, "sha256")
    assert base64.b64encode(signature) == b"6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    proof = bytes(a ^ b for a, b in zip(base64.b64decode("dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="),
                                        hmac.digest(cred.stored_key, auth, "sha256")))
    assert hashlib.sha256(proof).digest() == cred.stored_key  # ClientKey recovered from the proof


def test_plain_credential_verify():
    hashed = PlainCredential(name="u", password_hash=PlainCredential.hash_password("pw", iterations=1000))
    sha = PlainCredential(name="u", password_sha256=hashlib.sha256(b"pw").hexdigest())
    assert hashed.verify("pw") and sha.verify("pw")
    assert not hashed.verify("PW") and not sha.verify("")


# --------------------------------------------------------------------------- bad input

S256_KEY = base64.b64encode(bytes(32)).decode()
S512_KEY = base64.b64encode(bytes(64)).decode()
SCRAM_USER = {"name": "u", "mechanism": "SCRAM-SHA-256", "salt": "c2FsdA==", "iterations": 4096,
              "stored_key": S256_KEY, "server_key": S256_KEY}

BAD = [
    # (id, raw config, key path, message fragment); each must produce exactly that one error.
    ("port-out-of-range", config(listener(port=70000)), "listeners[0].port", "must be an integer 1-65535"),
    ("port-bool-for-int", config(listener(port=True)), "listeners[0].port", "must be an integer 1-65535 (or 0 for an ephemeral port), got boolean true"),
    ("port-string", config(listener(port="9192")), "listeners[0].port", 'got "9192"'),
    ("port-null", config(listener(port=None)), "listeners[0].port", "got null"),
    ("second-listener-port", config(listener(), listener(name="b", port=-1, broker_port_base=9300)), "listeners[1].port", "must be an integer 1-65535"),
    ("broker-port-base-too-big", config(listener(broker_port_base=65536)), "listeners[0].broker_port_base", "must be an integer 1-65535, got 65536"),
    ("broker-port-base-missing", config({"name": "ext"}), "listeners[0].broker_port_base", "required key is missing"),
    ("broker-port-base-is-port", config(listener(broker_port_base=9192)), "listeners[0].broker_port_base", "9192 on 0.0.0.0 collides with the bootstrap port of listeners[0] (EXT)"),
    ("bad-protocol", config(listener(security_protocol="TLS")), "listeners[0].security_protocol", 'must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL, got "TLS"'),
    ("bad-listener-name", config(listener(name="ext-1")), "listeners[0].name", 'a listener name of letters, digits and _, got "ext-1"'),
    ("duplicate-listener-name", config(listener(name="ext"), listener(name="EXT", port=9193, broker_port_base=9300)), "listeners[1].name", 'duplicate listener name "EXT" (see listeners[0])'),
    ("duplicate-bind-address", config(listener(), listener(name="b", host="127.0.0.1", broker_port_base=9300)), "listeners[1].port", "9192 on 127.0.0.1 collides with the bootstrap port of listeners[0] (EXT)"),
    ("admin-port-collision", config(admin={"port": 9200}), "admin.port", "collides with the node 0 port of listeners[0] (EXT)"),
    ("unknown-key-suggestion", config(listener(prot=1)), "listeners[0].prot", 'unknown key (did you mean "port"?); valid keys: name, security_protocol, host, port,'),
    ("unknown-top-level-key", {**config(), "listner": []}, "listner", 'unknown key (did you mean "listeners"?); valid keys: cluster_id, listeners, upstream,'),
    ("unknown-key-no-suggestion", config(limits={"zzz": 1}), "limits.zzz", "unknown key; valid keys: max_frame_bytes, max_in_flight_per_connection"),
    ("tls-missing-for-ssl", config(listener(security_protocol="SSL")), "listeners[0].tls", "required when security_protocol is SSL"),
    ("tls-on-plaintext", config(listener(tls=TLS)), "listeners[0].tls", "not allowed when security_protocol is PLAINTEXT"),
    ("tls-key-missing", config(listener(security_protocol="SSL", tls={"cert_file": "a.pem"})), "listeners[0].tls.key_file", "required key is missing"),
    ("client-auth-needs-ca", config(listener(security_protocol="SSL", tls={**TLS, "client_auth": "requested"})), "listeners[0].tls.ca_file", 'required when client_auth is "requested"'),
    ("sasl-on-plaintext", config(listener(sasl={"mechanisms": ["PLAIN"]})), "listeners[0].sasl", "not allowed when security_protocol is PLAINTEXT (only with SASL_PLAINTEXT or SASL_SSL)"),
    ("sasl-missing", config(listener(security_protocol="SASL_PLAINTEXT")), "listeners[0].sasl", "required when security_protocol is SASL_PLAINTEXT"),
    ("sasl-mechanisms-empty", config(listener(security_protocol="SASL_PLAINTEXT", sasl={"mechanisms": []})), "listeners[0].sasl.mechanisms", "must not be empty"),
    ("sasl-bad-mechanism", config(listener(security_protocol="SASL_PLAINTEXT", sasl={"mechanisms": ["PLAIN", "GSSAPI"]})), "listeners[0].sasl.mechanisms[1]", 'must be one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, got "GSSAPI"'),
    ("oauthbearer-missing", config(listener(security_protocol="SASL_PLAINTEXT", sasl={"mechanisms": ["OAUTHBEARER"]})), "listeners[0].sasl.oauthbearer", "required when OAUTHBEARER is among the mechanisms"),
    ("oauthbearer-unused", config(listener(security_protocol="SASL_PLAINTEXT", sasl={"mechanisms": ["PLAIN"], "oauthbearer": {"jwks_file": "/x.json"}})), "listeners[0].sasl.oauthbearer", "not allowed unless OAUTHBEARER is among the mechanisms"),
    ("oauthbearer-url", config(listener(security_protocol="SASL_PLAINTEXT", sasl={"mechanisms": ["OAUTHBEARER"], "oauthbearer": {"jwks_endpoint_url": "ftp://idp/jwks"}})), "listeners[0].sasl.oauthbearer.jwks_endpoint_url", "expected an http:// or https:// URL"),
    ("upstream-oauthbearer", config() | {"upstream": {"bootstrap_servers": ["b:9092"], "security_protocol": "SASL_PLAINTEXT", "sasl": {"mechanism": "OAUTHBEARER", "oauthbearer": {"client_id": "kgw", "client_secret": "x"}}}}, "upstream.sasl.oauthbearer.token_endpoint_url", "exactly one of token_endpoint_url and issuer_url is required"),
    ("principal-builder-path", config(listener(principal_builder="not a path")), "listeners[0].principal_builder", 'expected an import path "package.module:Class"'),
    ("listeners-empty", config() | {"listeners": []}, "listeners", "must not be empty"),
    ("listeners-mapping", config() | {"listeners": {"name": "x"}}, "listeners", "expected a list, got a mapping"),
    ("bad-bootstrap", config(upstream=upstream(bootstrap_servers=["foo"])), "upstream.bootstrap_servers[0]", 'expected "host:port", got "foo"'),
    ("bad-bootstrap-csv", config(upstream=upstream(bootstrap_servers="a:1,b")), "upstream.bootstrap_servers[1]", 'expected "host:port", got "b"'),
    ("bootstrap-port-zero", config(upstream=upstream(bootstrap_servers=["a:0"])), "upstream.bootstrap_servers[0]", 'with a port 1-65535, got "a:0"'),
    ("upstream-missing", {"listeners": [listener()]}, "upstream", "required key is missing"),
    ("upstream-sasl-missing", config(upstream=upstream(security_protocol="SASL_SSL")), "upstream.sasl", "required when security_protocol is SASL_SSL"),
    ("upstream-sasl-password-int", config(upstream=upstream(security_protocol="SASL_PLAINTEXT", sasl={"mechanism": "PLAIN", "username": "u", "password": 1234})), "upstream.sasl.password", "must be a non-empty string, got an integer"),
    ("upstream-tls-on-plaintext", config(upstream=upstream(tls={"ca_file": "ca.pem"})), "upstream.tls", "not allowed when security_protocol is PLAINTEXT"),
    ("upstream-check-hostname", config(upstream=upstream(security_protocol="SSL", tls={"check_hostname": "yes"})), "upstream.tls.check_hostname", 'must be true or false, got "yes"'),
    ("timeout-zero", config(upstream=upstream(request_timeout_ms=0)), "upstream.request_timeout_ms", "must be a positive integer, got 0"),
    ("frame-float", config(limits={"max_frame_bytes": 1.5}), "limits.max_frame_bytes", "must be a positive integer, got 1.5"),
    ("section-null", config(limits=None), "limits", "expected a mapping, got null"),
    ("authorizer-config-without-class", config(authorizer={"config": {"super.users": "User:a"}}), "authorizer.config", "class_name is null"),
    ("authorizer-config-value", config(authorizer={"class_name": "a:B", "config": {"x.y": {"nested": 1}}}), 'authorizer.config["x.y"]', "must be a string, number, boolean or a list of those"),
    ("audit-level", config(audit={"log_level": "TRACE"}), "audit.log_level", "must be one of DEBUG, INFO, WARNING, ERROR, OFF"),
    ("logging-format", config(logging={"format": "xml"}), "logging.format", 'must be one of text, json, got "xml"'),
    ("scram-iterations", config(users={"scram": [SCRAM_USER | {"iterations": 1000}]}), "users.scram[0].iterations", "must be an integer >= 4096"),
    ("scram-key-size", config(users={"scram": [SCRAM_USER | {"mechanism": "SCRAM-SHA-512", "server_key": S512_KEY}]}), "users.scram[0].stored_key", "must be base64 of 64 bytes, got 32 bytes"),
    ("scram-duplicate", config(users={"scram": [SCRAM_USER, SCRAM_USER]}), "users.scram[1].name", 'duplicate user "u"'),
    ("plain-no-password", config(users={"plain": [{"name": "u"}]}), "users.plain[0]", "exactly one of password_sha256 or password_hash"),
    ("plain-bad-hash", config(users={"plain": [{"name": "u", "password_hash": "md5$1$a$b"}]}), "users.plain[0].password_hash", 'expected "pbkdf2_sha256$<iterations>$<salt base64>$<hash base64>"'),
]


@pytest.mark.parametrize(("raw", "path", "fragment"), [pytest.param(*row[1:], id=row[0]) for row in BAD])
def test_bad_input(raw, path, fragment):
    error = errors_of(raw)
    assert len(error.errors) == 1, error.errors
    assert error.errors[0].startswith(f"{path}: "), error.errors
    assert fragment in error.errors[0]
    assert str(error) == f"gw.yaml: {error.errors[0]}"


def test_every_error_is_reported_one_per_line():
    error = errors_of(config(listener(port=0.5, security_protocol="SSL", bogus=1), upstream=upstream(bootstrap_servers=["x"])))
    lines = str(error).splitlines()
    assert [line.split(": ")[1] for line in lines] == [
        "listeners[0].bogus", "listeners[0].port", "listeners[0].tls", "upstream.bootstrap_servers[0]"]
    assert all(line.startswith("gw.yaml: ") for line in lines)
    assert isinstance(error, ValueError)


def test_non_mapping_top_level():
    assert str(errors_of([1, 2])) == "gw.yaml: expected a mapping at the top level, got a list"


def test_bad_yaml_syntax_reports_line_and_column(tmp_path):
    path = tmp_path / "gw.yaml"
    path.write_text("listeners:\n  - name: ext\n    port: [9192\nupstream: {}\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    (line,) = str(info.value).splitlines()
    assert line.startswith(f"{path}: line 4, column 9: invalid YAML: ")


def test_duplicate_yaml_key_is_an_error(tmp_path):
    path = tmp_path / "gw.yaml"
    path.write_text("listeners: []\nupstream: {}\nlisteners: []\n")
    with pytest.raises(ConfigError, match=r"line 3, column 1: invalid YAML: found duplicate key 'listeners'"):
        load_config(path)


@pytest.mark.parametrize("text", ["", "# nothing here\n", "---\n"])
def test_empty_file_says_listeners_is_required(tmp_path, text):
    path = tmp_path / "gw.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert f"{path}: listeners: required key is missing" in str(info.value).splitlines()


def test_non_mapping_top_level_file(tmp_path):
    path = tmp_path / "gw.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="expected a mapping at the top level, got a list"):
        load_config(path)


def test_unsafe_yaml_tag_is_refused(tmp_path):
    path = tmp_path / "gw.yaml"
    path.write_text("listeners: !!python/object/apply:os.system [echo hi]\n")
    with pytest.raises(ConfigError, match="line 1, column 12: invalid YAML: could not determine a constructor"):
        load_config(path)


def test_missing_file_is_named(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert str(info.value) == f"{path}: cannot read config file: No such file or directory"
