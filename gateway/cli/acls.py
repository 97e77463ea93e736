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


def _resource(args, for_filter: bool):
    chosen = [(k, getattr(args, k)) for k in _RESOURCES if getattr(args, k) is not None]
    if len(chosen) > 1:
        raise SystemExit("kgw acls: give at most one of --topic/--group/--cluster/--transactional-id/...")
    if not chosen:
        if for_filter:
            return ResourceType.ANY, None
        raise SystemExit("kgw acls add: name a resource (--topic NAME, --group NAME, --cluster, ...)")
    kind, name = chosen[0]
    return _RESOURCES[kind], ("kafka-cluster" if kind == "cluster" else name)


def _enum(enum_cls, text: str, *, concrete: bool = False):
    """A member by name; ``concrete``: not ANY (an ACL names one operation; ANY only filters)."""
    offered = [m for m in enum_cls if m.name != "UNKNOWN" and not (concrete and m.name == "ANY")]
    member = enum_cls.__members__.get(text.upper())
    if member not in offered:
        raise SystemExit(f"kgw acls: {'not a concrete' if member is not None else 'unknown'} "
                         f"{enum_cls.__name__} {text!r}; one of {', '.join(m.name for m in offered)}")
    return member


def _binding(args) -> AclBinding:
    rtype, name = _resource(args, for_filter=False)
    pattern = PatternType.PREFIXED if args.prefixed else PatternType.LITERAL
    return AclBinding(
        ResourcePattern(rtype, name, pattern),
        AccessControlEntry(args.principal, args.host, _enum(AclOperation, args.operation, concrete=True),
                           AclPermissionType.DENY if args.deny else AclPermissionType.ALLOW),
    )


def _filter(args) -> AclBindingFilter:
    rtype, name = _resource(args, for_filter=True)
    pattern = PatternType.PREFIXED if args.prefixed else (PatternType.ANY if name is None else PatternType.LITERAL)
    permission = AclPermissionType.ANY
    if args.deny:
        permission = AclPermissionType.DENY
    return AclBindingFilter(
        ResourcePatternFilter(rtype, name, pattern),
        AccessControlEntryFilter(args.principal, None if args.host == "*" and not args.exact_host else args.host,
                                 _enum(AclOperation, args.operation) if args.operation else AclOperation.ANY,
                                 permission),
    )


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
    if args.action == "add" and not (args.principal and args.operation):
        raise SystemExit("kgw acls add: --principal and --operation are required")
    # the arguments are checked before the log is opened: a mistake writes nothing, creates nothing
    binding = _binding(args) if args.action == "add" else None
    binding_filter = _filter(args) if args.action in ("list", "remove") else None

    async def list_(authorizer, _image):
        for b in authorizer.acls(binding_filter):
            _print_binding(b)
        return 0

    async def add(authorizer, _image):
        (result,) = await authorizer.create_acls(None, [binding])
        if result.error_code:
            print(f"kgw acls add: refused ({result.error_code}): {result.message}", file=sys.stderr)
            return 1
        print("added")
        return 0

    async def remove(authorizer, _image):
        (result,) = await authorizer.delete_acls(None, [binding_filter])
        if result.error_code:
            print(f"kgw acls remove: refused ({result.error_code}): {result.message}", file=sys.stderr)
            return 1
        for d in result.deleted:
            _print_binding(d.binding)
        print(f"removed {len(result.deleted)}")
        return 0

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
    p.add_argument("--principal", metavar="TYPE:NAME",
                   help="e.g. --principal User:alice, or User:* for every user (list/remove: exact text)")
    p.add_argument("--host", default="*", metavar="HOST",
                   help="client host the ACL applies to, e.g. --host 10.0.0.9 (default *: any host)")
    p.add_argument("--exact-host", action="store_true",
                   help="list/remove: match --host '*' literally instead of as 'any host'")
    p.add_argument("--operation", metavar="OP",
                   help="READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, CLUSTER_ACTION, DESCRIBE_CONFIGS, "
                   "ALTER_CONFIGS, IDEMPOTENT_WRITE, ALL (add: required; not ANY)")
    p.add_argument("--deny", action="store_true", help="a DENY ACL (default ALLOW), e.g. --deny --operation ALL")
    p.add_argument("--prefixed", action="store_true",
                   help="PREFIXED pattern: --topic logs- --prefixed covers every topic starting with logs- "
                   "(default LITERAL; '*' is the wildcard)")
    for kind in _RESOURCES:
        if kind == "cluster":
            p.add_argument("--cluster", action="store_const", const="kafka-cluster",
                           help="the CLUSTER resource (e.g. ALTER for ACL and config changes)")
        else:
            flag = kind.replace("_", "-")
            p.add_argument(f"--{flag}", dest=kind, metavar="NAME",
                           help=f"the {kind.replace('_', ' ')} resource, e.g. --{flag} {_EXAMPLE_NAMES.get(kind, 'name')}")
    p.set_defaults(func=cmd_acls)
