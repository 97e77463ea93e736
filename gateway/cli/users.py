"""``kgw users``: SCRAM users in the metadata log, without writing Python or a client.

``add`` derives the salted keys (never stores the password) and writes a
UserScramCredentialRecord, as AlterUserScramCredentials does over the wire; ``remove``
writes RemoveUserScramCredentialRecords; ``list`` shows the users of the log and those of
the YAML ``users:`` section.  The store is opened like ``kgw acls``: a directory log only
while no gateway uses it, the shared Kafka log at any time (every gateway applies the
change).  The password comes from a prompt, or the first line of standard input when it is
not a terminal - never from the command line.
"""

from __future__ import annotations

import getpass
import sys

import trio

from authz.credentials import SaslMechanism, ScramCredential
from gateway.process.metadata_backend import metadata_location, offline_image
from metadata.records import RemoveUserScramCredentialRecord, UserScramCredentialRecord
from metadata.scram_credentials import MECHANISM_CODE_OF, MECHANISM_CODES
from metadata.store import MetadataLogError
from protocol.apis.scram import MAX_ITERATIONS, MIN_ITERATIONS

__all__ = ["read_password", "register"]

_SCRAM = ["SCRAM-SHA-256", "SCRAM-SHA-512"]


def read_password(user: str) -> str | None:
    """From a prompt (asked twice) or stdin's first line; None (after saying why) if unusable."""
    if sys.stdin.isatty():
        password = getpass.getpass(f"password for {user}: ")
        if getpass.getpass("again: ") != password:
            print("kgw: the two passwords differ", file=sys.stderr)
            return None
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        print("kgw: empty password", file=sys.stderr)
        return None
    return password


async def _run(args, password: str | None) -> int:
    config, data_dir = metadata_location(args.config, args.data_dir)
    async with offline_image(config, data_dir, read_only=args.action == "list") as image:
        if args.action == "list":
            rows = [(name, str(MECHANISM_CODES.get(code, code)), r.iterations, "metadata log")
                    for (name, code), r in image.scram.items()]
            if args.config:
                from configs.yaml_reader import load_config

                users = load_config(args.config).users
                rows += [(c.name, str(c.mechanism), c.iterations, "yaml") for c in users.scram]
                rows += [(p.name, "PLAIN", "-", "yaml") for p in users.plain]
            for name, mechanism, iterations, source in sorted(rows):
                print(f"{name}\t{mechanism}\titerations {iterations}\t{source}")
            return 0
        if args.action == "add":
            c = ScramCredential.from_password(args.user, password, SaslMechanism(args.mechanism),
                                              iterations=args.iterations)
            await image.append([UserScramCredentialRecord(
                name=c.name, mechanism=MECHANISM_CODE_OF[args.mechanism], salt=c.salt, stored_key=c.stored_key,
                server_key=c.server_key, iterations=c.iterations)])
            print(f"added {args.user} ({args.mechanism}, {args.iterations} iterations)")
            return 0
        codes = [MECHANISM_CODE_OF[args.mechanism]] if args.mechanism else list(MECHANISM_CODES)
        doomed = [RemoveUserScramCredentialRecord(name=args.user, mechanism=code)
                  for code in codes if (args.user, code) in image.scram]
        if not doomed:
            print(f"kgw users remove: {args.user} has no "
                  f"{args.mechanism or 'SCRAM'} credential in the metadata log", file=sys.stderr)
            return 1
        await image.append(doomed)
        print(f"removed {args.user} ({', '.join(str(MECHANISM_CODES[r.mechanism]) for r in doomed)})")
        return 0


def cmd_users(args) -> int:
    password = None
    if args.action in ("add", "remove") and not args.user:
        raise SystemExit(f"kgw users {args.action}: --user NAME is required")
    if args.action == "add":
        if not MIN_ITERATIONS <= args.iterations <= MAX_ITERATIONS:
            print(f"kgw users add: --iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS} (Kafka's limits)",
                  file=sys.stderr)
            return 2
        password = read_password(args.user)
        if password is None:
            return 2
    try:
        return trio.run(_run, args, password)
    except MetadataLogError as e:
        print(f"kgw users: {e}", file=sys.stderr)
        return 2


def register(sub) -> None:
    p = sub.add_parser("users", help="add, list or remove SCRAM users in the metadata log",
                       description="SCRAM users without a client: 'add' reads the password from a prompt (or the "
                       "first line of standard input) and stores only salted keys; 'list' also shows the YAML "
                       "users. Example: kgw users add --config gateway.yaml --user alice --mechanism SCRAM-SHA-512")
    p.add_argument("action", choices=["add", "list", "remove"])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", help="gateway YAML (its metadata section: the directory or the Kafka topic)")
    where.add_argument("--data-dir", help="the metadata log directory")
    p.add_argument("--user", help="the user name (add, remove)")
    p.add_argument("--mechanism", choices=_SCRAM, default=None,
                   help="add: the mechanism (default SCRAM-SHA-512); remove: only this one (default: both)")
    p.add_argument("--iterations", type=int, default=8192,
                   help=f"add: SCRAM iterations, {MIN_ITERATIONS}..{MAX_ITERATIONS} (default 8192)")
    p.set_defaults(func=_with_default_mechanism)


def _with_default_mechanism(args) -> int:
    if args.action == "add" and args.mechanism is None:
        args.mechanism = "SCRAM-SHA-512"
    return cmd_users(args)
