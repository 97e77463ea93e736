"""`kgw metadata export` / `import`: state moves between logs intact, imports are idempotent,
--replace removes what the document lacks, bad documents are refused naming the problem."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import stat
import subprocess
import sys
import time
from pathlib import Path

import trio

from gateway.cli.main import main
from metadata.directory import DirectoryMetadataStore
from metadata.image import MetadataImage
from metadata.records import ClientQuotaRecord, ConfigRecord, UserScramCredentialRecord


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _write(directory, records) -> None:
    async def go():
        store = DirectoryMetadataStore(directory)
        try:
            image = MetadataImage(store)
            await image.load()
            await image.append(records)
        finally:
            await store.aclose()

    trio.run(go)


def _seed(capsys, d: str) -> None:
    assert run(capsys, "acls", "add", "--data-dir", d, "--principal", "User:alice", "--operation", "READ",
               "--topic", "orders-", "--prefixed")[0] == 0
    assert run(capsys, "acls", "add", "--data-dir", d, "--principal", "User:bob", "--operation", "WRITE",
               "--topic", "audit", "--deny")[0] == 0
    _write(d, [ConfigRecord(resource_type=4, resource_name="", name="listener.name.sasl.max.connections", value="50"),
               UserScramCredentialRecord(name="carol", mechanism=2, salt=b"s" * 16, stored_key=b"k" * 64,
                                         server_key=b"v" * 64, iterations=8192),
               ClientQuotaRecord(entity=(("client-id", None), ("user", "alice")), key="producer_byte_rate",
                                 value=1048576.0, remove=False)])


def _export(capsys, d: str) -> dict:
    code, out, err = run(capsys, "metadata", "export", "--data-dir", d)
    assert code == 0, err
    return json.loads(out)


def test_export_import_moves_the_whole_state_and_is_idempotent(tmp_path, capsys):
    src, dst = str(tmp_path / "a"), str(tmp_path / "b")
    _seed(capsys, src)
    doc = _export(capsys, src)
    assert [(a["principal"], a["permissionType"]) for a in doc["acls"]] == [("User:bob", "DENY"), ("User:alice", "ALLOW")]
    assert doc["configs"] == [{"resourceType": 4, "resourceName": "", "name": "listener.name.sasl.max.connections",
                               "value": "50"}]
    assert doc["scramCredentials"][0]["mechanism"] == "SCRAM-SHA-512"
    assert doc["clientQuotas"] == [{"entity": [{"entityType": "client-id", "entityName": None},
                                               {"entityType": "user", "entityName": "alice"}],
                                    "key": "producer_byte_rate", "value": 1048576.0}]
    # the same ACL reads the same in `acls dump` (Kafka's metadata-shell view): id and field names
    code, out, err = run(capsys, "acls", "dump", "--data-dir", src)
    assert code == 0, err
    dumped = [json.loads(line.split(": ", 1)[1]) for line in out.splitlines() if line.startswith("/acl/id/")]
    assert sorted(doc["acls"], key=lambda a: a["id"]) == sorted(dumped, key=lambda a: a["id"])

    out_file = tmp_path / "backup.json"
    assert run(capsys, "metadata", "export", "--data-dir", src, "-o", str(out_file))[0] == 0
    assert stat.S_IMODE(os.stat(out_file).st_mode) == 0o600  # salted SCRAM keys inside

    code, out, _ = run(capsys, "metadata", "import", str(out_file), "--data-dir", dst)
    assert code == 0 and out.startswith("imported 5 records: 2 ACLs, 1 config changes, 1 SCRAM credentials, "
                                        "1 client quotas, 0 removals")
    copy = _export(capsys, dst)
    assert {k: v for k, v in copy.items() if k != "offset"} == {k: v for k, v in doc.items() if k != "offset"}

    code, out, _ = run(capsys, "metadata", "import", str(out_file), "--data-dir", dst)
    assert code == 0 and out.startswith("imported 0 records")


def test_import_replace_removes_what_the_document_lacks(tmp_path, capsys):
    src, dst = str(tmp_path / "a"), str(tmp_path / "b")
    _seed(capsys, src)
    assert run(capsys, "acls", "add", "--data-dir", dst, "--principal", "User:mallory", "--operation", "ALL",
               "--cluster")[0] == 0
    _write(dst, [ConfigRecord(resource_type=4, resource_name="", name="connections.max.idle.ms", value="1000"),
                 ClientQuotaRecord(entity=(("client-id", "etl"),), key="consumer_byte_rate", value=5.0, remove=False)])
    backup = tmp_path / "doc.json"
    backup.write_text(json.dumps(_export(capsys, src)))

    code, out, _ = run(capsys, "metadata", "import", str(backup), "--data-dir", dst, "--dry-run")
    assert code == 0 and out.startswith("would write 5 records")
    assert run(capsys, "metadata", "import", str(backup), "--data-dir", dst)[0] == 0
    assert [a["principal"] for a in _export(capsys, dst)["acls"]] == ["User:mallory", "User:bob", "User:alice"]

    code, out, _ = run(capsys, "metadata", "import", str(backup), "--data-dir", dst, "--replace")
    assert code == 0 and out.startswith("imported 3 records")
    after = _export(capsys, dst)
    assert [q["entity"][0]["entityName"] for q in after["clientQuotas"]] == [None]  # etl's is gone
    assert [a["principal"] for a in after["acls"]] == ["User:bob", "User:alice"]
    assert [c["name"] for c in after["configs"]] == ["listener.name.sasl.max.connections"]


def test_bad_documents_are_refused_naming_the_problem(tmp_path, capsys):
    d = str(tmp_path / "m")
    cases = {
        "{": "Expecting property name",
        json.dumps({"format": "other"}): "not a kgw metadata export",
        json.dumps({"format": "kgw-metadata", "version": 9}): "export version 9",
        json.dumps({"format": "kgw-metadata", "version": 1, "acls": [{"id": "x"}]}): "acls[0]: 'id' 'x' is not a Kafka Uuid",
        json.dumps({"format": "kgw-metadata", "version": 1, "acls": [
            {"id": "00000000-0000-0000-0000-000000000001", "resource_type": "ANY", "resource_name": "t",
             "pattern_type": "LITERAL", "principal": "User:a", "host": "*", "operation": "READ",
             "permission_type": "ALLOW"}]}): "acls[0]: resource_type 'ANY' is not a concrete ResourceType",
        json.dumps({"format": "kgw-metadata", "version": 1, "scram_credentials": [
            {"name": "u", "mechanism": "MD5", "iterations": 1, "salt": "", "stored_key": "", "server_key": ""}]}):
            "scram_credentials[0]: mechanism 'MD5'",
    }
    for i, (text, message) in enumerate(cases.items()):
        f = tmp_path / f"bad{i}.json"
        f.write_text(text)
        code, out, err = run(capsys, "metadata", "import", str(f), "--data-dir", d)
        assert code == 2 and message in err, (text, err)
    assert not (tmp_path / "m").exists()  # nothing was written, not even a directory


def test_ls_and_cat_walk_the_metadata_shell_view(tmp_path, capsys):
    """#13: Kafka's metadata-shell commands over kgw's log (read-only; SCRAM keys never shown)."""
    d = str(tmp_path / "md")
    _seed(capsys, d)
    assert run(capsys, "metadata", "ls", "--data-dir", d) == (0, "acl\nclient-quotas\nconfigs\n", "")
    # a client quota as Kafka's metadata shell shows it: entity types sorted, the default as <default>
    assert run(capsys, "metadata", "cat", "/client-quotas/client-id/<default>/user/alice/producer_byte_rate",
               "--data-dir", d)[:2] == (0, "1048576.0\n")
    code, out, _ = run(capsys, "metadata", "ls", "/acl/id", "--data-dir", d)
    ids = out.split()
    assert code == 0 and len(ids) == 2 and all(len(i) == 22 for i in ids)  # Kafka's Uuid.toString()
    acls = [json.loads(run(capsys, "metadata", "cat", f"/acl/id/{i}", "--data-dir", d)[1]) for i in ids]
    assert sorted((a["principal"], a["resourceName"], a["permissionType"]) for a in acls) == \
        [("User:alice", "orders-", "ALLOW"), ("User:bob", "audit", "DENY")]
    assert run(capsys, "metadata", "ls", "/configs/broker", "--data-dir", d)[1] == "<default>\n"
    assert run(capsys, "metadata", "cat", "/configs/broker/<default>/listener.name.sasl.max.connections",
               "--data-dir", d)[:2] == (0, "50\n")
    code, out, err = run(capsys, "metadata", "cat", "/configs", "--data-dir", d)
    assert (code, out) == (2, "") and "/configs: is a directory" in err
    code, out, err = run(capsys, "metadata", "ls", "/scram", "--data-dir", d)
    assert (code, out) == (2, "") and "/scram: no such node" in err


def test_the_shell_walks_the_view_with_relative_paths_from_a_pipe(tmp_path, capsys, monkeypatch):
    """`kgw metadata shell` with commands on standard input: cd/pwd/ls/cat/find/tree as Kafka's
    metadata shell has them, relative paths and `..`, errors named, exit status 1 after one."""
    d = str(tmp_path / "md")
    _seed(capsys, d)
    script = ["ls", "cd acl/id", "pwd", "ls", "cd ../../configs/broker/<default>", "pwd",
              "cat listener.name.sasl.max.connections", "find /configs", "tree /configs", "cd /scram", "exit",
              "ls /never-run"]
    monkeypatch.setattr("sys.stdin", io.StringIO("\n".join(script) + "\n"))
    code, out, err = run(capsys, "metadata", "shell", "--data-dir", d)
    lines = out.splitlines()
    assert lines[:4] == ["acl", "client-quotas", "configs", "/acl/id"]
    ids = lines[4:6]
    assert all(len(i) == 22 for i in ids)  # Kafka's Uuid.toString(), as in ls /acl/id
    assert lines[6:8] == ["/configs/broker/<default>", "50"]
    assert lines[8:12] == ["/configs", "/configs/broker", "/configs/broker/<default>",
                           "/configs/broker/<default>/listener.name.sasl.max.connections"]
    assert lines[12:] == ["/configs/", "  broker/", "    <default>/", "      listener.name.sasl.max.connections: 50"]
    assert err == "cd: /scram: no such node\n"  # and nothing after exit ran
    assert code == 1

    monkeypatch.setattr("sys.stdin", io.StringIO("cd /acl\nls id\n"))
    code, out, err = run(capsys, "metadata", "shell", "--data-dir", d)
    assert (code, err, sorted(out.split())) == (0, "", sorted(ids))


def test_the_shell_on_a_terminal_prompts_with_the_working_directory(tmp_path, capsys):
    """The interactive form: a real `kgw metadata shell` process on a pseudo-terminal."""
    d = str(tmp_path / "md")
    _seed(capsys, d)
    kgw = Path(sys.executable).parent / "kgw"
    argv = [str(kgw)] if kgw.exists() else [sys.executable, "-m", "gateway.cli"]
    leader, follower = pty.openpty()
    proc = subprocess.Popen([*argv, "metadata", "shell", "--data-dir", d], stdin=follower, stdout=follower,
                            stderr=follower, close_fds=True)
    os.close(follower)
    seen = b""

    def read_until(marker: bytes) -> None:
        nonlocal seen
        deadline = time.monotonic() + 30
        while marker not in seen:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no {marker!r} in {seen!r}"
            ready, _, _ = select.select([leader], [], [], remaining)
            if ready:
                try:
                    chunk = os.read(leader, 4096)
                except OSError:  # the terminal closed: the process ended
                    chunk = b""
                assert chunk, f"the shell ended before {marker!r}: {seen!r}"
                seen += chunk

    try:
        read_until(b"/ >> ")
        assert b"4 entries as of now" in seen  # 2 ACLs, 1 config, 1 quota; the SCRAM credential is not shown
        os.write(leader, b"cd /configs/broker\n")
        read_until(b"/configs/broker >> ")
        os.write(leader, b"ls\n")
        read_until(b"<default>")
        os.write(leader, b"exit\n")
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        os.close(leader)
