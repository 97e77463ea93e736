"""`kgw check` and `kgw run`'s start-up checks, met as an operator meets them: each mistake is
one line naming its key path, exit status 2, and `kgw run` refuses before it prints `ready`."""

from __future__ import annotations

import socket

import pytest
import yaml

from gateway.cli.main import main
from tests.unit.gateway.certs import make_pki


def _write(tmp_path, **overrides) -> str:
    doc = {
        "listeners": [{"name": "PLAIN", "host": "127.0.0.1", "port": 0, "broker_port_base": 21000}],
        "upstream": {"bootstrap_servers": ["127.0.0.1:1"]},
        "admin": None,
        "metadata": {"path": str(tmp_path / "meta")},
    }
    doc.update(overrides)
    path = tmp_path / "kgw.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _errors(capsys, argv) -> tuple[int, list[str]]:
    rc = main(argv)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert not lines or lines[0] == "kgw: invalid configuration:", err
    return rc, lines[1:]


def _hold():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


@pytest.fixture
def held_port():
    """A port some other process listens on."""
    with _hold() as sock:
        yield sock.getsockname()[1]


def test_a_good_configuration_is_ok(tmp_path, capsys):
    path = _write(tmp_path)
    assert main(["check", "--config", path]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: OK: PLAIN (PLAINTEXT) on 127.0.0.1:0")
    assert not (tmp_path / "meta").exists(), "checking must not create the metadata directory"


@pytest.mark.parametrize("command", ["check", "run"])
def test_super_users_without_a_principal_type_is_a_configuration_error(tmp_path, capsys, command):
    path = _write(tmp_path, authorizer={"class_name": "authz.standard_authorizer:StandardAuthorizer",
                                        "config": {"super.users": "admin"}})
    rc, errors = _errors(capsys, [command, "--config", path])
    assert rc == 2
    assert errors == [f"{path}: authorizer.config: super.users: Could not parse principal from `admin` "
                      "(no colon is present separating the principal type from the principal name)"]


@pytest.mark.parametrize("command", ["check", "run"])
def test_a_plug_in_that_does_not_import_is_named(tmp_path, capsys, command):
    path = _write(tmp_path, authorizer={"class_name": "nosuch_module_kgw:Thing"},
                  alter_configs_policy={"class_name": "nosuch_policy_kgw:Policy"},
                  listeners=[{"name": "PLAIN", "host": "127.0.0.1", "port": 0, "broker_port_base": 21000,
                              "principal_builder": "nosuch_builder_kgw:Builder"}])
    rc, errors = _errors(capsys, [command, "--config", path])
    assert rc == 2
    assert [e.split(": ")[1] for e in errors] == [
        "authorizer.class_name", "listeners[0].principal_builder", "alter_configs_policy"]
    assert all("nosuch_" in e for e in errors), errors


@pytest.mark.parametrize("command", ["check", "run"])
def test_missing_and_mismatched_certificates_are_named_per_listener(tmp_path, capsys, command):
    pki = make_pki(tmp_path)
    listeners = [
        {"name": "GONE", "security_protocol": "SSL", "host": "127.0.0.1", "port": 0, "broker_port_base": 21000,
         "tls": {"cert_file": str(tmp_path / "absent.pem"), "key_file": str(pki.server.key_file)}},
        {"name": "WRONGKEY", "security_protocol": "SSL", "host": "127.0.0.1", "port": 0, "broker_port_base": 22000,
         "tls": {"cert_file": str(pki.server.cert_file), "key_file": str(pki.client.key_file)}},
        {"name": "FINE", "security_protocol": "SSL", "host": "127.0.0.1", "port": 0, "broker_port_base": 23000,
         "tls": {"cert_file": str(pki.server.cert_file), "key_file": str(pki.server.key_file)}},
    ]
    path = _write(tmp_path, listeners=listeners)
    rc, errors = _errors(capsys, [command, "--config", path])
    assert rc == 2
    assert len(errors) == 2, errors
    assert errors[0] == f"{path}: listeners[0].tls.cert_file: no such file: {tmp_path / 'absent.pem'}"
    assert errors[1].startswith(f"{path}: listeners[1].tls: cannot load certificate {pki.server.cert_file} "
                                f"with key {pki.client.key_file}")
    assert "does the key match the certificate?" in errors[1]


@pytest.mark.parametrize("command", ["check", "run"])
def test_ports_in_use_name_the_address(tmp_path, capsys, held_port, command):
    with _hold() as other:
        admin_port = other.getsockname()[1]
        path = _write(tmp_path, listeners=[{"name": "PLAIN", "host": "127.0.0.1", "port": held_port,
                                            "broker_port_base": 21000}],
                      admin={"host": "127.0.0.1", "port": admin_port})
        rc, errors = _errors(capsys, [command, "--config", path])
    assert rc == 2
    assert errors == [
        f"{path}: listeners[0].port: listener PLAIN cannot bind 127.0.0.1:{held_port}: Address already in use",
        f"{path}: admin.port: the admin endpoint cannot bind 127.0.0.1:{admin_port}: Address already in use"]


def test_no_ports_skips_the_port_check(tmp_path, capsys, held_port):
    path = _write(tmp_path, admin={"host": "127.0.0.1", "port": held_port})
    assert main(["check", "--no-ports", "--config", path]) == 0


def test_a_metadata_path_that_is_a_file_is_named(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    path = _write(tmp_path, metadata={"path": str(tmp_path / "afile")})
    rc, errors = _errors(capsys, ["check", "--config", path])
    assert rc == 2
    assert errors == [f"{path}: metadata.path: {tmp_path / 'afile'} exists and is not a directory"]


def test_a_typo_is_one_error_not_follow_on_errors_about_defaults(tmp_path, capsys):
    """`bootstrap_server` must not also say bootstrap_servers is missing; `security_protocl: SSL`
    must not also say tls is not allowed with the default PLAINTEXT."""
    path = _write(tmp_path, upstream={"bootstrap_server": ["127.0.0.1:1"]},
                  listeners=[{"name": "X", "security_protocl": "SSL", "port": 0, "broker_port_base": 21000,
                              "tls": {"cert_file": "a.pem", "key_file": "b.pem"}}])
    rc, errors = _errors(capsys, ["check", "--config", path])
    assert rc == 2
    assert [e.split(": ")[1] for e in errors] == ["listeners[0].security_protocl", "upstream.bootstrap_server"]
    assert 'did you mean "security_protocol"?' in errors[0] and 'did you mean "bootstrap_servers"?' in errors[1]


@pytest.mark.parametrize("command", ["check", "run"])
def test_a_mistyped_authorizer_key_is_named_with_a_suggestion(tmp_path, capsys, command):
    """The finding: `super.user:` (typo) passed `kgw check`, leaving no administrator."""
    path = _write(tmp_path, authorizer={"class_name": "authz.standard_authorizer:StandardAuthorizer",
                                        "config": {"super.user": "User:admin"}})
    rc, errors = _errors(capsys, [command, "--config", path])
    assert rc == 2
    assert len(errors) == 1 and errors[0].startswith(f'{path}: authorizer.config.super.user: not a key StandardAuthorizer '
                                                     'reads (did you mean "super.users"?)'), errors


@pytest.mark.parametrize("command", ["check", "run"])
def test_a_boolean_that_is_not_one_is_refused(tmp_path, capsys, command):
    path = _write(tmp_path, authorizer={"class_name": "authz.standard_authorizer:StandardAuthorizer",
                                        "config": {"allow.everyone.if.no.acl.found": "nope"}})
    rc, errors = _errors(capsys, [command, "--config", path])
    assert rc == 2
    assert errors == [f"{path}: authorizer.config: allow.everyone.if.no.acl.found: 'nope' is not true or false"]


@pytest.mark.parametrize("command", ["check", "run"])
def test_quota_window_settings_are_checked(tmp_path, capsys, command):
    path = _write(tmp_path, quotas={"window_num": 1, "window_size_seconds": "1s", "max_trackd": 5})
    rc, errors = _errors(capsys, [command, "--config", path])
    assert rc == 2
    assert errors == [
        f"{path}: quotas.max_trackd: unknown key (did you mean \"max_tracked\"?); valid keys: window_num, "
        "window_size_seconds, max_tracked",
        f"{path}: quotas.window_num: must be a number of samples from 2 to 1000, got 1",
        f'{path}: quotas.window_size_seconds: must be seconds from 1 to 3600, got "1s"']


def test_the_authorizer_keys_kgw_documents_pass(tmp_path, capsys):
    path = _write(tmp_path, authorizer={"class_name": "authz.standard_authorizer:StandardAuthorizer",
                                        "config": {"super.users": "User:admin;User:ops",
                                                   "allow.everyone.if.no.acl.found": "TRUE"}})
    assert main(["check", "--no-ports", "--config", path]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("declares_none", [True, False])
def test_an_authorizer_that_declares_no_keys_takes_any(tmp_path, capsys, monkeypatch, declares_none):
    """A custom authorizer without config_keys() of its own (none at all, or only the class it
    extends) keeps receiving whatever it is given: only a class's own declaration binds it."""
    import authz.standard_authorizer as sa

    class Lenient(sa.StandardAuthorizer):
        if declares_none:
            config_keys = None

    monkeypatch.setattr(sa, "LenientForTest", Lenient, raising=False)
    path = _write(tmp_path, authorizer={"class_name": "authz.standard_authorizer:LenientForTest",
                                        "config": {"my.plugin.setting": "1"}})
    assert main(["check", "--no-ports", "--config", path]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("command", ["check", "run"])
def test_port_and_admin_port_override_the_file(tmp_path, capsys, held_port, command):
    """`--port` / `--admin-port` are what is checked and bound, not the file's ports (which are free)."""
    with _hold() as other:
        admin_port = other.getsockname()[1]
        path = _write(tmp_path, admin={"host": "127.0.0.1", "port": 0})
        rc, errors = _errors(capsys, [command, "--config", path, "--port", str(held_port),
                                      "--admin-port", str(admin_port)])
    assert rc == 2
    assert errors == [
        f"{path}: listeners[0].port: listener PLAIN cannot bind 127.0.0.1:{held_port}: Address already in use",
        f"{path}: admin.port: the admin endpoint cannot bind 127.0.0.1:{admin_port}: Address already in use"]


def test_overrides_reach_the_configuration_start_up_uses(tmp_path):
    from gateway.cli.main import _checked_config, _overrides, build_parser

    path = _write(tmp_path)
    args = build_parser().parse_args(["run", "--config", path, "--upstream", "10.1.1.1:9092", "--upstream",
                                      "10.1.1.2:9092", "--port", "19092", "--set", "limits.max_in_flight_per_connection=7",
                                      "--set", "listeners[0].host=0.0.0.0"])
    config, errors = _checked_config(path, ports=False, overrides=_overrides(args))
    assert errors == []
    assert [str(a) for a in config.upstream.bootstrap_servers] == ["10.1.1.1:9092", "10.1.1.2:9092"]
    listener = config.listeners[0]
    assert (listener.host, listener.port, listener.broker_port_base) == ("0.0.0.0", 19092, 19093)
    assert config.limits.max_in_flight_per_connection == 7


@pytest.mark.parametrize("override, message", [
    ("limits.max_in_flight_per_conection=7", 'limits.max_in_flight_per_conection: unknown key (did you mean'),
    ("listeners[4].port=1", "--set listeners[4].port=1: no item [4] there"),
    ("upstream.bootstrap_servers.x=1", "--set upstream.bootstrap_servers.x=1: 'x' is inside something that is not a section"),
    ("admin.port", "--set admin.port: expected KEY.PATH=VALUE"),
    ("admin.port=[", "--set admin.port=["),
])
def test_a_bad_override_is_named_like_a_bad_key(tmp_path, capsys, override, message):
    path = _write(tmp_path)
    rc, errors = _errors(capsys, ["check", "--no-ports", "--config", path, "--set", override])
    assert rc == 2 and len(errors) == 1 and errors[0].startswith(f"{path}: ") and message in errors[0], errors


def test_workers_are_given_the_same_overrides():
    from gateway.process.workers import Supervisor

    argv = Supervisor("/etc/kgw.yaml", None, 2, ["admin.port=0", "listeners[0].port=19092"])._argv(1)
    assert argv[argv.index("--config"):] == ["--config", "/etc/kgw.yaml", "--set", "admin.port=0", "--set",
                                             "listeners[0].port=19092", "--worker-index", "1"]


@pytest.mark.parametrize("command", ["check", "run"])
def test_data_plane_cpus_must_be_cpus_this_process_may_use(tmp_path, capsys, command):
    import os

    allowed = sorted(os.sched_getaffinity(0))
    absent = max(allowed) + 1000
    path = _write(tmp_path, io={"data_plane_cpus": [allowed[0], absent]})
    rc, errors = _errors(capsys, [command, "--config", path])
    assert rc == 2
    assert errors == [f"{path}: io.data_plane_cpus: CPU {absent} not available to this process "
                      f"(it may run on {', '.join(map(str, allowed))})"]
    path = _write(tmp_path, io={"data_plane_cpus": [-1, "one", allowed[0], allowed[0]]})
    rc, errors = _errors(capsys, [command, "--config", path])
    assert rc == 2
    assert errors == [f"{path}: io.data_plane_cpus[0]: must be a CPU number (0 or more), got -1",
                      f'{path}: io.data_plane_cpus[1]: must be a CPU number (0 or more), got "one"',
                      f"{path}: io.data_plane_cpus[3]: duplicate {allowed[0]}"]
    path = _write(tmp_path, io={"data_plane_cpus": [allowed[-1]]})
    assert main(["check", "--config", path]) == 0
