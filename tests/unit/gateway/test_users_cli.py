"""`kgw users`: SCRAM users in the metadata log from the command line (salted keys only), listed
with the YAML users, removed; bad input refused with the reason."""

from __future__ import annotations

import hashlib
import io

import trio

from authz.credentials import SaslMechanism, scram_keys
from gateway.cli.main import main
from metadata.directory import DirectoryMetadataStore
from metadata.image import MetadataImage


def run(capsys, monkeypatch, *argv: str, stdin: str = "") -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    code = main(["users", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def scram_of(directory) -> dict:
    async def go():
        store = DirectoryMetadataStore(directory)
        try:
            image = MetadataImage(store)
            await image.load()
            return dict(image.scram)
        finally:
            await store.aclose()

    return trio.run(go)


def test_add_stores_salted_keys_that_match_the_password_list_and_remove(tmp_path, capsys, monkeypatch):
    d = str(tmp_path / "md")
    code, out, _ = run(capsys, monkeypatch, "add", "--data-dir", d, "--user", "alice", stdin="s3cret\n")
    assert code == 0 and out == "added alice (SCRAM-SHA-512, 8192 iterations)\n"
    assert run(capsys, monkeypatch, "add", "--data-dir", d, "--user", "alice", "--mechanism", "SCRAM-SHA-256",
               "--iterations", "4096", stdin="other\n")[0] == 0
    (r512,) = [r for (name, code), r in scram_of(d).items() if code == 2]
    stored, server = scram_keys(SaslMechanism.SCRAM_SHA_512,
                                hashlib.pbkdf2_hmac("sha512", b"s3cret", bytes(r512.salt), 8192))
    assert (bytes(r512.stored_key), bytes(r512.server_key), r512.iterations) == (stored, server, 8192)
    assert b"s3cret" not in b"".join(p.read_bytes() for p in (tmp_path / "md").rglob("*") if p.is_file())

    code, out, _ = run(capsys, monkeypatch, "list", "--data-dir", d)
    assert out.splitlines() == ["alice\tSCRAM-SHA-256\titerations 4096\tmetadata log",
                                "alice\tSCRAM-SHA-512\titerations 8192\tmetadata log"]
    code, out, _ = run(capsys, monkeypatch, "remove", "--data-dir", d, "--user", "alice", "--mechanism", "SCRAM-SHA-256")
    assert code == 0 and out == "removed alice (SCRAM-SHA-256)\n"
    assert [k for k in scram_of(d)] == [("alice", 2)]
    code, _, err = run(capsys, monkeypatch, "remove", "--data-dir", d, "--user", "bob")
    assert code == 1 and "bob has no SCRAM credential" in err


def test_bad_input_is_refused_with_the_reason(tmp_path, capsys, monkeypatch):
    d = str(tmp_path / "md")
    code, _, err = run(capsys, monkeypatch, "add", "--data-dir", d, "--user", "a", "--iterations", "100", stdin="x\n")
    assert code == 2 and "--iterations must be 4096..16384" in err
    code, _, err = run(capsys, monkeypatch, "add", "--data-dir", d, "--user", "a", stdin="\n")
    assert code == 2 and "empty password" in err
    assert scram_of(d) == {}
