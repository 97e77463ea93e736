"""`kgw acls`: offline list / add / remove against the metadata log, and the metadata-shell dump."""

from __future__ import annotations

import json

import pytest

from gateway.cli.main import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(["acls", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_add_list_dump_remove(tmp_path, capsys):
    d = str(tmp_path / "meta")
    assert run(capsys, "add", "--data-dir", d, "--principal", "User:alice", "--operation", "READ",
               "--topic", "orders-", "--prefixed")[0] == 0
    assert run(capsys, "add", "--data-dir", d, "--principal", "User:bob", "--operation", "ALL", "--cluster")[0] == 0

    code, out, _ = run(capsys, "list", "--data-dir", d)
    assert code == 0
    assert sorted(out.splitlines()) == [
        "CLUSTER:LITERAL:kafka-cluster\tUser:bob\t*\tALL\tALLOW",
        "TOPIC:PREFIXED:orders-\tUser:alice\t*\tREAD\tALLOW",
    ]

    code, out, _ = run(capsys, "dump", "--data-dir", d)
    acls = [json.loads(line.split(": ", 1)[1]) for line in out.splitlines() if line.startswith("/acl/id/")]
    assert code == 0 and len(acls) == 2
    assert {(a["principal"], a["resourceName"], a["patternType"]) for a in acls} == {
        ("User:alice", "orders-", "PREFIXED"), ("User:bob", "kafka-cluster", "LITERAL")}

    code, out, _ = run(capsys, "remove", "--data-dir", d, "--principal", "User:alice")
    assert code == 0 and out.splitlines()[-1] == "removed 1"
    assert run(capsys, "list", "--data-dir", d)[1].splitlines() == ["CLUSTER:LITERAL:kafka-cluster\tUser:bob\t*\tALL\tALLOW"]


def test_invalid_acl_is_refused_with_kafkas_message(tmp_path, capsys):
    code, _, err = run(capsys, "add", "--data-dir", str(tmp_path / "m"), "--principal", "alice",
                       "--operation", "READ", "--topic", "t")
    assert code == 1
    assert "Could not parse principal from `alice`" in err


def test_list_dump_and_export_read_a_log_a_gateway_holds_and_writes_are_refused(tmp_path):
    """The reading commands take no lock and change nothing; add still needs the lock."""
    import trio

    from metadata.directory import DirectoryMetadataStore
    from metadata.records import AccessControlEntryRecord
    from tests.support.acls import kgw_command
    from tests.support.cluster import gateway_env

    d = tmp_path / "held"
    acl = AccessControlEntryRecord(id=__import__("uuid").uuid4(), resource_type=2, resource_name="orders",
                                   pattern_type=3, principal="User:alice", host="*", operation=3, permission_type=3)

    async def kgw(*argv):
        return await trio.run_process([*kgw_command(), *argv], capture_stdout=True, capture_stderr=True,
                                      check=False, env=gateway_env())

    async def main():
        async with DirectoryMetadataStore(d) as store:  # this process plays the running gateway
            await store.load()
            await store.append([acl])
            (segment,) = d.glob("*.log")
            with open(segment, "ab") as f:  # a batch the gateway is half-way through writing
                f.write(b"\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x01\x00torn")
            size = segment.stat().st_size
            listed = await kgw("acls", "list", "--data-dir", str(d))
            assert listed.returncode == 0, listed.stderr
            assert listed.stdout.decode().splitlines() == ["TOPIC:LITERAL:orders\tUser:alice\t*\tREAD\tALLOW"]
            dumped = await kgw("acls", "dump", "--data-dir", str(d))
            assert dumped.returncode == 0 and b"/acl/id/" in dumped.stdout
            exported = await kgw("metadata", "export", "--data-dir", str(d))
            assert exported.returncode == 0 and json.loads(exported.stdout)["acls"][0]["resourceName"] == "orders"
            added = await kgw("acls", "add", "--data-dir", str(d), "--principal", "User:bob", "--operation", "READ",
                              "--topic", "t")
            assert added.returncode == 2 and b"is locked by another kgw process" in added.stderr
            assert b"change ACLs, SCRAM users and configs through it, with Kafka's tools" in added.stderr
            assert segment.stat().st_size == size  # the readers truncated nothing

    trio.run(main)


def test_reading_a_log_that_does_not_exist_says_so_and_creates_nothing(tmp_path, capsys):
    code, _, err = run(capsys, "list", "--data-dir", str(tmp_path / "nowhere"))
    assert code == 2 and "metadata log directory" in err and "does not exist" in err
    assert not (tmp_path / "nowhere").exists()


def test_add_does_not_offer_any(tmp_path, capsys):
    import pytest

    with pytest.raises(SystemExit) as refused:
        run(capsys, "add", "--data-dir", str(tmp_path / "m"), "--principal", "User:a", "--operation", "any",
            "--topic", "t")
    assert "not a concrete AclOperation 'any'" in str(refused.value) and "ANY" not in str(refused.value).split(";")[1]
    assert not (tmp_path / "m").exists()


def test_every_example_in_the_help_runs_as_written(tmp_path, capsys):
    """`kgw acls --help` ends with examples (#15 item 4): each runs, on a log of the test's own,
    and what the add lines created is what list shows, until the remove line takes alice's."""
    import re
    import shlex

    from gateway.cli.acls import _EXAMPLES

    lines = [re.split(r"\s{3,}", line.strip())[0] for line in _EXAMPLES.splitlines() if line.startswith("  kgw acls")]
    assert len(lines) >= 8
    data_dir = str(tmp_path / "log")
    for line in lines:
        argv = shlex.split(line)[1:]
        for flag in ("--config", "--data-dir"):
            if flag in argv:
                i = argv.index(flag)
                argv[i:i + 2] = ["--data-dir", data_dir]
        assert main(argv) == 0, (line, capsys.readouterr())
    capsys.readouterr()
    assert main(["acls", "list", "--data-dir", data_dir]) == 0
    listed = capsys.readouterr().out
    for expected in ("User:etl", "logs-", "PREFIXED", "User:*", "User:mallory", "10.0.0.9", "DENY", "User:admin"):
        assert expected in listed, (expected, listed)
    assert "User:alice" not in listed  # the remove example took it out


def test_repeated_flags_are_all_kept_as_kafka_acls_does(tmp_path, capsys):
    """The finding: `--operation READ --operation DESCRIBE` printed "added" and stored only
    DESCRIBE.  Every repeat counts: add creates every combination, list and remove match any."""
    d = str(tmp_path / "meta")
    code, out, err = run(capsys, "add", "--data-dir", d, "--principal", "User:ann", "--principal", "User:bea",
                         "--operation", "READ", "--operation", "DESCRIBE", "--topic", "t1", "--topic", "t2")
    assert code == 0 and out.strip() == "added 8 of 8", (out, err)
    listed = sorted(run(capsys, "list", "--data-dir", d)[1].splitlines())
    assert listed == sorted(f"TOPIC:LITERAL:{t}\t{p}\t*\t{op}\tALLOW" for t in ("t1", "t2")
                            for p in ("User:ann", "User:bea") for op in ("READ", "DESCRIBE"))
    code, out, _ = run(capsys, "list", "--data-dir", d, "--principal", "User:bea", "--operation", "READ")
    assert sorted(out.splitlines()) == ["TOPIC:LITERAL:t1\tUser:bea\t*\tREAD\tALLOW",
                                        "TOPIC:LITERAL:t2\tUser:bea\t*\tREAD\tALLOW"]
    code, out, _ = run(capsys, "remove", "--data-dir", d, "--principal", "User:ann", "--operation", "READ",
                       "--operation", "DESCRIBE", "--topic", "t1")
    assert code == 0 and out.splitlines()[-1] == "removed 2"
    assert len(run(capsys, "list", "--data-dir", d)[1].splitlines()) == 6


def test_kafka_acls_flag_names_are_understood(tmp_path, capsys):
    d = str(tmp_path / "meta")
    code, out, err = run(capsys, "add", "--data-dir", d, "--allow-principal", "User:svc", "--deny-principal",
                         "User:intern", "--deny-host", "10.0.0.9", "--operation", "WRITE", "--topic", "logs-",
                         "--resource-pattern-type", "prefixed")
    assert code == 0, err
    assert sorted(run(capsys, "list", "--data-dir", d)[1].splitlines()) == [
        "TOPIC:PREFIXED:logs-\tUser:intern\t10.0.0.9\tWRITE\tDENY",
        "TOPIC:PREFIXED:logs-\tUser:svc\t*\tWRITE\tALLOW",
    ]
    code, out, _ = run(capsys, "list", "--data-dir", d, "--deny-principal", "User:intern")
    assert out.splitlines() == ["TOPIC:PREFIXED:logs-\tUser:intern\t10.0.0.9\tWRITE\tDENY"]
    import pytest

    with pytest.raises(SystemExit) as refused:
        run(capsys, "add", "--data-dir", d, "--principal", "User:x", "--operation", "READ", "--topic", "t",
            "--resource-pattern-type", "match")
    assert "only filters" in str(refused.value)


def test_an_empty_list_says_so(tmp_path, capsys):
    d = str(tmp_path / "meta")
    assert run(capsys, "add", "--data-dir", d, "--principal", "User:a", "--operation", "READ", "--topic", "t")[0] == 0
    code, out, err = run(capsys, "list", "--data-dir", d, "--principal", "User:nobody")
    assert code == 0 and out == "" and "no ACL matches" in err
    run(capsys, "remove", "--data-dir", d)
    code, out, err = run(capsys, "list", "--data-dir", d)
    assert code == 0 and out == "" and "no ACLs" in err


@pytest.mark.parametrize("argv", [["acls", "list"], ["users", "list"], ["metadata", "export"], ["acls", "dump"]])
def test_offline_tools_name_a_bad_config_in_one_line_and_exit_2(tmp_path, capsys, argv):
    """The finding: `kgw acls list --config nonexist.yaml` printed a Python traceback and exited 1."""
    missing = tmp_path / "nonexist.yaml"
    code = main([*argv, "--config", str(missing)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.splitlines() == ["kgw: invalid configuration:", f"{missing}: cannot read config file: No such file or directory"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("listeners: [{name: A, host: 127.0.0.1, port: 0, brokr_port_base: 1}]\nupstream: {bootstrap_servers: [h:1]}\n")
    code = main([*argv, "--config", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and "brokr_port_base" in err


def test_kgw_without_a_command_is_a_usage_error(capsys):
    assert main([]) == 2
    assert "usage: kgw" in capsys.readouterr().err
