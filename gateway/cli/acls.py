"""``kgw acls``: list, add and remove ACLs offline against the metadata log, and dump it.

The store is opened directly: a directory log only while no gateway uses it (its
lock admits one writer and says so); the shared Kafka log at any time, the change
ordered with the gateways' own writes and enforced by every gateway.  Adds and removes go through a StandardAuthorizer so they
get exactly the validation CreateAcls/DeleteAcls get over the wire, and are
durable when the command returns.
"""

from __future__ import annotations

import argparse

import sys

import trio

from authz.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from gateway.process.metadata_backend import metadata_location, offline_image
from metadata.store import MetadataLogError
from metadata.shell import dump_records, render
from authz.standard_authorizer import StandardAuthorizer

__all__ = ["register"]

_RESOURCES = {
    "topic": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "cluster": ResourceType.CLUSTER,
    "transactional_id": ResourceType.TRANSACTIONAL_ID,
    "delegation_token": ResourceType.DELEGATION_TOKEN,
    "user": ResourceType.USER,
}


def _resources(args, for_filter: bool) -> list[tuple[ResourceType, str | None]]:
    """Every resource named (each flag may repeat, as with kafka-acls), in the order given."""
    chosen = [(_RESOURCES[kind], "kafka-cluster" if kind == "cluster" else name)
              for kind in _RESOURCES for name in (getattr(args, kind) or ())]
    if not chosen:
        if for_filter:
            return [(ResourceType.ANY, None)]
        raise SystemExit("kgw acls add: name a resource (--topic NAME, --group NAME, --cluster, ...)")
    return list(dict.fromkeys(chosen))


def _enum(enum_cls, text: str, *, concrete: bool = False):
    """A member by name; ``concrete``: not ANY (an ACL names one operation; ANY only filters)."""
    offered = [m for m in enum_cls if m.name != "UNKNOWN" and not (concrete and m.name == "ANY")]
    member = enum_cls.__members__.get(text.upper())
    if member not in offered:
        raise SystemExit(f"kgw acls: {'not a concrete' if member is not None else 'unknown'} "
                         f"{enum_cls.__name__} {text!r}; one of {', '.join(m.name for m in offered)}")
    return member


def _pattern_type(args, for_filter: bool, name: str | None) -> PatternType:
    """--prefixed or --resource-pattern-type (kafka-acls' flag); a filter without a name matches any."""
    if args.resource_pattern_type is not None:
        chosen = _enum(PatternType, args.resource_pattern_type)
        if args.prefixed and chosen is not PatternType.PREFIXED:
            raise SystemExit(f"kgw acls: --prefixed contradicts --resource-pattern-type {args.resource_pattern_type}")
        if not for_filter and chosen not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise SystemExit(f"kgw acls add: --resource-pattern-type {chosen.name.lower()} only filters; "
                             "an ACL is literal or prefixed")
        return chosen
    if args.prefixed:
        return PatternType.PREFIXED
    return PatternType.ANY if for_filter and name is None else PatternType.LITERAL


def _entries(args, plain: AclPermissionType,
             anyone: bool = False) -> list[tuple[str | None, str | None, AclPermissionType]]:
    """(principal, host, permission) for every principal named: --principal (``plain``),
    --allow-principal, --deny-principal; each with every --host, and --allow-host /
    --deny-host for the principals of that permission (kafka-acls' flags).  ``anyone``: when
    no principal is named, one entry for any principal (a filter)."""
    hosts = list(args.host or ())
    plain_principals = args.principal
    if anyone and not (args.principal or args.allow_principal or args.deny_principal):
        plain_principals = [None]
    named = ((plain_principals, plain, []),
             (args.allow_principal, AclPermissionType.ALLOW, args.allow_host),
             (args.deny_principal, AclPermissionType.DENY, args.deny_host))
    out = []
    for principals, permission, own_hosts in named:
        for principal in principals or ():
            for host in dict.fromkeys([*hosts, *(own_hosts or ())]) or [None]:
                out.append((principal, host, permission))
    return list(dict.fromkeys(out))


def _bindings(args) -> list[AclBinding]:
    """The cross product of what was named (principals x hosts x operations x resources), as
    kafka-acls --add creates it."""
    entries = _entries(args, AclPermissionType.DENY if args.deny else AclPermissionType.ALLOW)
    if not entries or not args.operation:
        raise SystemExit("kgw acls add: --principal (or --allow-principal/--deny-principal) and --operation "
                         "are required")
    operations = list(dict.fromkeys(_enum(AclOperation, op, concrete=True) for op in args.operation))
    out = []
    for rtype, name in _resources(args, for_filter=False):
        pattern = ResourcePattern(rtype, name, _pattern_type(args, False, name))
        for principal, host, permission in entries:
            for op in operations:
                out.append(AclBinding(pattern, AccessControlEntry(principal, host or "*", op, permission)))
    return out


def _filters(args) -> list[AclBindingFilter]:
    """One filter per combination named; an ACL matching any of them is listed (or removed).
    A plain --principal matches both permissions unless --deny."""
    entries = _entries(args, AclPermissionType.DENY if args.deny else AclPermissionType.ANY, anyone=True)
    operations = [_enum(AclOperation, op) for op in args.operation] if args.operation else [AclOperation.ANY]
    out = []
    for rtype, name in _resources(args, for_filter=True):
        pattern = ResourcePatternFilter(rtype, name, _pattern_type(args, True, name))
        for principal, host, permission in entries:
            if host == "*" and not args.exact_host:
                host = None  # '*' filters as "any host" unless --exact-host
            for op in dict.fromkeys(operations):
                out.append(AclBindingFilter(pattern, AccessControlEntryFilter(principal, host, op, permission)))
    return list(dict.fromkeys(out))


def _filtered(args) -> bool:
    """Whether list was given anything to match on."""
    return any(getattr(args, k) for k in ("principal", "allow_principal", "deny_principal", "host", "allow_host",
                                           "deny_host", "operation", "deny", "prefixed", "resource_pattern_type",
                                           *_RESOURCES))


async def _with_store(args, work):
    config, data_dir = metadata_location(args.config, args.data_dir)
    authorizer = StandardAuthorizer()
    read_only = args.action in ("list", "dump")  # these work while a gateway holds a directory log
    async with offline_image(config, data_dir, authorizer, read_only=read_only) as image:
        return await work(authorizer, image)


def _print_binding(b: AclBinding) -> None:
    p, e = b.pattern, b.entry
    print(f"{p.resource_type.name}:{p.pattern_type.name}:{p.name}\t{e.principal}\t{e.host}\t"
          f"{e.operation.name}\t{e.permission_type.name}")


def cmd_acls(args) -> int:
    # the arguments are checked before the log is opened: a mistake writes nothing, creates nothing
    bindings = _bindings(args) if args.action == "add" else None
    filters = _filters(args) if args.action in ("list", "remove") else None

    async def list_(authorizer, _image):
        shown = 0
        for b in dict.fromkeys(b for f in filters for b in authorizer.acls(f)):
            _print_binding(b)
            shown += 1
        if not shown:
            print("kgw acls list: no ACL matches" if _filtered(args) else "kgw acls list: no ACLs", file=sys.stderr)
        return 0

    async def add(authorizer, _image):
        results = await authorizer.create_acls(None, bindings)
        refused = [(b, r) for b, r in zip(bindings, results) if r.error_code]
        for b, r in refused:
            print(f"kgw acls add: refused ({r.error_code}): {r.message}", file=sys.stderr)
        added = len(bindings) - len(refused)
        if len(bindings) == 1:
            if not refused:
                print("added")
        else:
            print(f"added {added} of {len(bindings)}")
        return 1 if refused else 0

    async def remove(authorizer, _image):
        results = await authorizer.delete_acls(None, filters)
        removed = 0
        failed = False
        for result in results:
            if result.error_code:
                print(f"kgw acls remove: refused ({result.error_code}): {result.message}", file=sys.stderr)
                failed = True
                continue
            for d in result.deleted:
                _print_binding(d.binding)
                removed += 1
        print(f"removed {removed}")
        return 1 if failed else 0

    async def dump(_authorizer, image):
        print(render(dump_records(image.records())))
        return 0

    work = {"list": list_, "add": add, "remove": remove, "dump": dump}[args.action]
    try:
        return trio.run(_with_store, args, work)
    except MetadataLogError as e:
        print(f"kgw acls: {e}", file=sys.stderr)
        return 2


_EXAMPLE_NAMES = {"topic": "orders", "group": "billing-app", "transactional_id": "billing-tx",
                  "delegation_token": "token-1", "user": "User:alice"}

_EXAMPLES = """examples:
  kgw acls add --config kgw.yaml --principal User:alice --operation READ --topic orders
  kgw acls add --config kgw.yaml --principal User:etl --operation WRITE --topic logs- --prefixed
  kgw acls add --config kgw.yaml --principal User:* --operation DESCRIBE --topic '*'
  kgw acls add --data-dir ./kgw-data --principal User:mallory --host 10.0.0.9 --operation ALL --topic payments --deny
  kgw acls add --config kgw.yaml --principal User:admin --operation ALTER --cluster
  kgw acls add --config kgw.yaml --allow-principal User:etl --operation READ --operation DESCRIBE --group etl-
       --resource-pattern-type prefixed            (kafka-acls' flag names; flags repeat: every combination)
  kgw acls list --config kgw.yaml                                    every ACL
  kgw acls list --config kgw.yaml --principal User:alice --topic orders
  kgw acls remove --config kgw.yaml --principal User:alice --topic orders   (every operation; --operation narrows)
  kgw acls dump --data-dir ./kgw-data                                 /acl/id/<uuid> -> JSON, as Kafka's metadata shell
"""


def register(sub) -> None:
    p = sub.add_parser("acls", help="list, add or remove ACLs offline; dump the metadata log",
                       description="Operate on kgw's metadata log directly: 'list' and 'dump' at any time; with the directory "
                       "backend 'add' and 'remove' only while the gateway is stopped (its lock says so). "
                       "'dump' prints the KIP-801 metadata-shell view (/acl/id/<uuid> -> JSON).",
                       epilog=_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["list", "add", "remove", "dump"],
                   help="list (filter with the options below), add one ACL, remove the matching ones, dump all")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", metavar="FILE",
                       help="gateway YAML: its metadata section says where the log is (directory or Kafka topic); "
                       "e.g. --config /etc/kgw/kgw.yaml")
    where.add_argument("--data-dir", metavar="DIR", help="the metadata log directory, e.g. --data-dir /var/lib/kgw/metadata")
    p.add_argument("--principal", action="append", metavar="TYPE:NAME",
                   help="e.g. --principal User:alice, or User:* for every user (list/remove: exact text); "
                   "may repeat, as every flag naming a principal, host, operation or resource: add creates "
                   "every combination, list and remove match any")
    p.add_argument("--allow-principal", action="append", metavar="TYPE:NAME",
                   help="as kafka-acls: an ALLOW ACL for this principal")
    p.add_argument("--deny-principal", action="append", metavar="TYPE:NAME",
                   help="as kafka-acls: a DENY ACL for this principal")
    p.add_argument("--host", action="append", metavar="HOST",
                   help="client host the ACL applies to, e.g. --host 10.0.0.9 (default *: any host)")
    p.add_argument("--allow-host", action="append", metavar="HOST", help="as kafka-acls: host of the --allow-principal ACLs")
    p.add_argument("--deny-host", action="append", metavar="HOST", help="as kafka-acls: host of the --deny-principal ACLs")
    p.add_argument("--exact-host", action="store_true",
                   help="list/remove: match --host '*' literally instead of as 'any host'")
    p.add_argument("--operation", action="append", metavar="OP",
                   help="READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, "
                   "ALTER_CONFIGS, IDEMPOTENT_WRITE, ALL (add: required; not ANY)")
    p.add_argument("--deny", action="store_true", help="a DENY ACL (default ALLOW), e.g. --deny --operation ALL")
    p.add_argument("--prefixed", action="store_true",
                   help="PREFIXED pattern: --topic logs- --prefixed covers every topic starting with logs- "
                   "(default LITERAL; '*' is the wildcard)")
    p.add_argument("--resource-pattern-type", metavar="TYPE",
                   help="as kafka-acls: literal or prefixed (add); also any or match (list, remove)")
    for kind in _RESOURCES:
        if kind == "cluster":
            p.add_argument("--cluster", action="append_const", const="kafka-cluster",
                           help="the CLUSTER resource (e.g. ALTER for ACL and config changes)")
        else:
            flag = kind.replace("_", "-")
            p.add_argument(f"--{flag}", dest=kind, action="append", metavar="NAME",
                           help=f"the {kind.replace('_', ' ')} resource, e.g. --{flag} {_EXAMPLE_NAMES.get(kind, 'name')}")
    p.set_defaults(func=cmd_acls)
