"""`kgw acls`: offline list / add / remove against the metadata log, and the metadata-shell dump."""

from __future__ import annotations

import json

from gateway.cli import main


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
        ("User:alice", "orders-", 4), ("User:bob", "kafka-cluster", 3)}

    code, out, _ = run(capsys, "remove", "--data-dir", d, "--principal", "User:alice")
    assert code == 0 and out.splitlines()[-1] == "removed 1"
    assert run(capsys, "list", "--data-dir", d)[1].splitlines() == ["CLUSTER:LITERAL:kafka-cluster\tUser:bob\t*\tALL\tALLOW"]


def test_invalid_acl_is_refused_with_kafkas_message(tmp_path, capsys):
    code, _, err = run(capsys, "add", "--data-dir", str(tmp_path / "m"), "--principal", "alice",
                       "--operation", "READ", "--topic", "t")
    assert code == 1
    assert "Could not parse principal from `alice`" in err
