"""``kgw metadata export`` / ``import``: the metadata state as a JSON document (a backup,
and the way from the directory backend to the shared Kafka topic; :mod:`metadata.transfer`);
``kgw metadata ls`` / ``cat``: Kafka's metadata-shell commands over kgw's view of the log
(:mod:`metadata.shell`), and ``kgw metadata shell``, the shell itself (``ls``, ``cd``, ``cat``,
``find``, ``tree``...): interactive on a terminal, one command per line from a pipe.

Both open the store the way ``kgw acls`` does: a directory log only while no gateway uses
it, the shared Kafka log at any time (an import is then ordered with the gateways' own
writes, and every gateway applies it).  An import writes what the target lacks in batches
of :data:`IMPORT_BATCH` records, each durable before the next; it is idempotent, so an
interrupted import is finished by running it again.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path

import trio

from gateway.process.metadata_backend import metadata_location, offline_image
from metadata.directory_files import acquire_lock
from metadata.files import OS_FILES
from metadata.repair import RepairPlan, apply_repair, plan_repair
from metadata.records import AccessControlEntryRecord, ClientQuotaRecord, ConfigRecord, UserScramCredentialRecord
from metadata.shell import NoSuchNode, ShellSession, dump_records, list_children, value_at
from metadata.store import MetadataLogError
from metadata.transfer import MetadataDocumentError, export_document, parse_document, plan_import

__all__ = ["register"]

#: records per append: one Kafka message stays well under the default 1 MiB message size
IMPORT_BATCH = 2_000


async def _export(args) -> int:
    config, data_dir = metadata_location(args.config, args.data_dir)
    async with offline_image(config, data_dir, read_only=True) as image:  # a backup while the gateway runs
        doc = export_document(image.acls, image.configs, image.scram, image.offset, image.quotas)
    text = json.dumps(doc, indent=1, sort_keys=False) + "\n"
    if args.output in (None, "-"):
        sys.stdout.write(text)
    else:
        # the document carries salted SCRAM keys: readable by the owner only
        fd = os.open(args.output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(text)
    print(f"exported {len(doc['acls'])} ACLs, {len(doc['configs'])} config entries, "
          f"{len(doc['scramCredentials'])} SCRAM credentials, {len(doc['clientQuotas'])} client quotas as of offset "
          f"{doc['offset']}", file=sys.stderr)
    return 0


def _summary(records) -> str:
    acls = sum(isinstance(r, AccessControlEntryRecord) for r in records)
    configs = sum(isinstance(r, ConfigRecord) for r in records)
    scram = sum(isinstance(r, UserScramCredentialRecord) for r in records)
    quotas = sum(isinstance(r, ClientQuotaRecord) and not r.remove for r in records)
    removals = len(records) - acls - configs - scram - quotas
    return f"{acls} ACLs, {configs} config changes, {scram} SCRAM credentials, {quotas} client quotas, {removals} removals"


async def _import(args, records) -> int:
    config, data_dir = metadata_location(args.config, args.data_dir)
    async with offline_image(config, data_dir) as image:
        plan = plan_import(image, records, replace=args.replace)
        if args.dry_run:
            print(f"would write {len(plan)} records: {_summary(plan)}")
            return 0
        for start in range(0, len(plan), IMPORT_BATCH):
            await image.append(plan[start : start + IMPORT_BATCH])
        print(f"imported {len(plan)} records: {_summary(plan)}; the log is at offset {image.offset}")
    return 0


async def _shell(args) -> int:
    """``ls`` / ``cat``: Kafka's metadata shell commands over kgw's view (metadata/shell.py)."""
    config, data_dir = metadata_location(args.config, args.data_dir)
    async with offline_image(config, data_dir, read_only=True) as image:
        dump = dump_records(image.records())
    path = "/" if args.file == "-" else args.file
    try:
        print(value_at(dump, path) if args.action == "cat" else "\n".join(list_children(dump, path)))
    except NoSuchNode as e:
        print(f"kgw metadata {args.action}: {e}", file=sys.stderr)
        return 2
    return 0


async def _load_view(args) -> dict:
    config, data_dir = metadata_location(args.config, args.data_dir)
    async with offline_image(config, data_dir, read_only=True) as image:
        return dump_records(image.records())


def _interactive_shell(args) -> int:
    """``kgw metadata shell``: a view of the state as it is now, then commands until ``exit`` or
    the end of the input.  From a pipe: no prompt, and exit status 1 if a command failed."""
    session = ShellSession(trio.run(_load_view, args))
    interactive = sys.stdin.isatty()
    if interactive:
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401 - line editing and history for input()
        print(f"kgw metadata shell: {len(session.dump)} entries as of now (help lists the commands, exit leaves)")
    failed = False
    while not session.done:
        try:
            line = input(f"{session.cwd} >> ") if interactive else sys.stdin.readline()
        except (EOFError, KeyboardInterrupt):
            break
        if not interactive and not line:
            break
        out, err = session.run(line)
        sys.stdout.write(out)
        sys.stderr.write(err)
        sys.stdout.flush()
        failed = failed or bool(err)
    if interactive:
        print()
    return 1 if failed and not interactive else 0


def _report(plan: RepairPlan) -> str:
    lines = [f"problem:    {plan.problem}",
             "kept:       " + (f"the snapshot at offset {plan.snapshot_end} and " if plan.snapshot_end else "")
             + (f"the log up to offset {plan.keep_next - 1}" if plan.keep_next else "nothing")]
    if plan.unreadable is not None:
        first, end = plan.unreadable
        lines.append(f"lost:       offsets {first}..{end - 1} ({end - first} record{'s' * (end - first != 1)}), "
                     "unreadable")
    if plan.later:
        readable = [record for _, record in plan.later if record is not None]
        lines.append(f"set aside:  {len(plan.later)} readable records after the hole (offsets {plan.later[0][0]}.."
                     f"{plan.later[-1][0]}: {_summary(readable)}), not applied")
    if plan.truncate is not None:
        lines.append(f"cut:        {plan.truncate[0].name} at file position {plan.truncate[1]}")
    for path in plan.set_aside:
        lines.append(f"move aside: {path.name}")
    return "\n".join(lines)


def _recover(args) -> int:
    """``kgw metadata recover``: repair a directory log a gateway refuses to start on
    (:mod:`metadata.repair`), with the gateway stopped."""
    _config, data_dir = metadata_location(args.config, args.data_dir)
    if data_dir is None:
        print("kgw metadata recover: this gateway's metadata log is a Kafka topic, kept by Kafka's replication; "
              "there is no local log to recover", file=sys.stderr)
        return 2
    if not OS_FILES.exists(data_dir):
        print(f"kgw metadata recover: {data_dir} does not exist", file=sys.stderr)
        return 2
    lock_fd = acquire_lock(OS_FILES, data_dir)  # no gateway may run meanwhile
    try:
        plan = plan_repair(OS_FILES, data_dir)
        if plan.problem is None:
            print(f"{data_dir}: nothing to recover: the log is readable up to offset {plan.keep_next - 1} and "
                  "holds every acknowledged record")
            return 0
        print(f"{data_dir}:\n{_report(plan)}")
        if args.dry_run:
            print("dry run: nothing changed")
            return 0
        aside = apply_repair(OS_FILES, plan)
    finally:
        OS_FILES.close(lock_fd)
    print(f"recovered: the log now ends at offset {plan.keep_next - 1}"
          + (f"; what was set aside is in {aside} (listing: {aside / 'set-aside.txt'})" if aside else "")
          + ". Compare the state with your last export (kgw metadata export) and re-apply what is missing.")
    return 0


def cmd_metadata(args) -> int:
    try:
        if args.action == "recover":
            return _recover(args)
        if args.action == "export":
            return trio.run(_export, args)
        if args.action in ("ls", "cat"):
            return trio.run(_shell, args)
        if args.action == "shell":
            return _interactive_shell(args)
        try:
            text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
            records = parse_document(json.loads(text))
        except (OSError, json.JSONDecodeError, MetadataDocumentError) as e:
            print(f"kgw metadata import: {args.file}: {e}", file=sys.stderr)
            return 2
        return trio.run(_import, args, records)
    except MetadataLogError as e:
        print(f"kgw metadata {args.action}: {e}", file=sys.stderr)
        return 2


def register(sub) -> None:
    p = sub.add_parser("metadata", help="export or import kgw's metadata state (ACLs, configs, SCRAM users) as JSON",
                       description="export: print the state as a JSON document (a backup; sorted, so equal states "
                       "give equal files). import: make the metadata log hold what a document holds - what is "
                       "missing is added, and with --replace what the document lacks is removed. Moves state from "
                       "the directory backend to the Kafka one: export --data-dir, import --config. ls PATH / cat "
                       "PATH: Kafka's metadata shell commands over the same view as 'kgw acls dump' (/acl/id/<uuid>, "
                       "/configs/<type>/<name>/<key>, /client-quotas/<type>/<name>/.../<key>; SCRAM credentials are not shown), read-only, also while a "
                       "gateway runs. shell: the metadata shell over that view (ls, cd, pwd, cat, find, tree), "
                       "interactive on a terminal, one command per line from standard input otherwise. recover: repair a "
                       "directory log the gateway refuses to start on (damaged or missing segments): keep what is "
                       "readable up to the damage, set later records aside in recovered-<time>/ with a listing, "
                       "report what was lost (the gateway must be stopped; --dry-run reports only).")
    p.add_argument("action", choices=["export", "import", "ls", "cat", "shell", "recover"])
    p.add_argument("file", nargs="?", default="-",
                   help="import: the document ('-' for standard input); ls, cat: the path (ls: / by default)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", help="gateway YAML (its metadata section: the directory or the Kafka topic)")
    where.add_argument("--data-dir", help="the metadata log directory")
    p.add_argument("--output", "-o", help="export: write here (mode 0600) instead of standard output")
    p.add_argument("--replace", action="store_true", help="import: also remove what the document does not hold")
    p.add_argument("--dry-run", action="store_true", help="import: print what would be written, write nothing; recover: report, change nothing")
    p.set_defaults(func=cmd_metadata)
