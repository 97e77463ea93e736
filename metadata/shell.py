"""A read-only view of the metadata state in the KIP-801 metadata-shell form.

Theory of operation
===================

Kafka's metadata shell (``kafka-metadata-shell.sh``, KIP-801) replays the metadata
log into a tree of paths and lets an operator ``ls``/``cat`` it.  kgw offers the same
view for its own store, for debugging and support bundles:

* ``/acl/id/<uuid>`` -> the ACL as a JSON object, with the field names Kafka's
  generated ``AccessControlEntryRecordJsonConverter`` uses (``id``, ``resourceType``,
  ``resourceName``, ``patternType``, ``principal``, ``host``, ``operation``,
  ``permissionType``; the codes stay numeric as in the record).
* ``/configs/<type>/<name>/<key>`` -> the config value.  ``<type>`` is ``topic`` /
  ``broker`` as in the shell, other ``ConfigResource.Type`` codes use the lower-case
  enum name (``broker_logger``, ``client_metrics``, ``group``); an empty resource
  name (the cluster default) appears as ``<default>``.
* ``/client-quotas/<type>/<name>[/<type>/<name>]/<key>`` -> a client quota's value, the
  entity's (type, name) pairs sorted by type as Kafka's shell sorts them (``client-id``
  before ``user``), a default entity name as ``<default>``.

The state is produced by replaying :class:`~metadata.store.LoadedState` in
order: snapshot records, then log records.  An ``AccessControlEntryRecord`` adds
``/acl/id/<uuid>``, a ``RemoveAccessControlEntryRecord`` removes it, a
``ConfigRecord`` with a value sets the key and one with ``value=None`` deletes it.
SCRAM credential records and unknown records are not shown (the shell has no
documented path for them and credentials must not be dumped).

UUIDs are printed the way Kafka prints them (``Uuid.toString()``: URL-safe base64,
no padding, 22 characters) so paths match what Kafka's tools show; pass
``uuid_format="canonical"`` for the familiar hex-and-dashes form.

Everything here is pure: no I/O, no dependency on other authz modules.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

from authz.acl import AclOperation, AclPermissionType, PatternType, ResourceType
from metadata.store import LoadedState
from metadata.records import AccessControlEntryRecord, ClientQuotaRecord, ConfigRecord, MetadataRecord, RemoveAccessControlEntryRecord

__all__ = ["NoSuchNode", "ShellSession", "acl_json", "config_type_name", "dump_records", "dump_state", "kafka_uuid_str",
           "list_children", "render", "value_at"]

UuidFormat = Literal["kafka", "canonical"]

#: ``ConfigResource.Type`` codes -> shell directory names.
_CONFIG_TYPE_NAMES: Final = {
    2: "topic",
    4: "broker",
    8: "broker_logger",
    16: "client_metrics",
    32: "group",
    100: "audit_chain",  # kgw's audit chain checkpoints (authz/audit_chain.py)
}
_DEFAULT_RESOURCE: Final = "<default>"


def kafka_uuid_str(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString()``: URL-safe base64 without padding.

    >>> kafka_uuid_str(uuid.UUID(int=0))
    'AAAAAAAAAAAAAAAAAAAAAA'
    """
    return base64.urlsafe_b64encode(value.bytes).rstrip(b"=").decode("ascii")


def config_type_name(resource_type: int) -> str:
    """The ``/configs/<type>`` directory for a ``ConfigResource.Type`` code."""
    return _CONFIG_TYPE_NAMES.get(resource_type, f"type_{resource_type}")


def _uuid_text(value: uuid.UUID, uuid_format: UuidFormat) -> str:
    return kafka_uuid_str(value) if uuid_format == "kafka" else str(value)


def _name(enum_cls: Any, code: int) -> str | int:
    """An enum code by its Kafka name (``READ``), or the number when no name is known."""
    try:
        return str(enum_cls(code).name)
    except ValueError:
        return code


def acl_json(record: AccessControlEntryRecord, uuid_format: UuidFormat) -> dict[str, Any]:
    return {
        "id": _uuid_text(record.id, uuid_format),
        "resourceType": _name(ResourceType, record.resource_type),
        "resourceName": record.resource_name,
        "patternType": _name(PatternType, record.pattern_type),
        "principal": record.principal,
        "host": record.host,
        "operation": _name(AclOperation, record.operation),
        "permissionType": _name(AclPermissionType, record.permission_type),
    }


def _config_path(record: ConfigRecord) -> str:
    name = record.resource_name or _DEFAULT_RESOURCE
    return f"/configs/{config_type_name(record.resource_type)}/{name}/{record.name}"


def _quota_path(record: ClientQuotaRecord) -> str:
    parts = [f"{etype}/{name if name is not None else _DEFAULT_RESOURCE}" for etype, name in sorted(record.entity, key=lambda e: e[0])]
    return "/client-quotas/" + "/".join(parts) + f"/{record.key}"


def dump_records(
    records: Iterable[MetadataRecord], *, uuid_format: UuidFormat = "kafka"
) -> dict[str, Any]:
    """Replay ``records`` in order into ``{path: value}``, sorted by path."""
    tree: dict[str, Any] = {}
    for record in records:
        if isinstance(record, AccessControlEntryRecord):
            tree[f"/acl/id/{_uuid_text(record.id, uuid_format)}"] = acl_json(record, uuid_format)
        elif isinstance(record, RemoveAccessControlEntryRecord):
            tree.pop(f"/acl/id/{_uuid_text(record.id, uuid_format)}", None)
        elif isinstance(record, ConfigRecord):
            if record.value is None:
                tree.pop(_config_path(record), None)
            else:
                tree[_config_path(record)] = record.value
        elif isinstance(record, ClientQuotaRecord):
            if record.remove:
                tree.pop(_quota_path(record), None)
            else:
                tree[_quota_path(record)] = repr(record.value)
    return dict(sorted(tree.items()))


def dump_state(loaded_state: LoadedState, *, uuid_format: UuidFormat = "kafka") -> dict[str, Any]:
    """The metadata-shell view of a loaded store: snapshot, then log, replayed."""
    return dump_records(loaded_state.records(), uuid_format=uuid_format)


def render(dump: Mapping[str, Any] | LoadedState) -> str:
    """One ``path: value`` line per node; ACLs as compact JSON, configs verbatim."""
    if isinstance(dump, LoadedState):
        dump = dump_state(dump)
    lines = []
    for path, value in dump.items():
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        lines.append(f"{path}: {text}")
    return "\n".join(lines) + ("\n" if lines else "")


class NoSuchNode(LookupError):
    """A path that names nothing in the view (or a directory where a value is wanted)."""


def _normal(path: str) -> str:
    path = "/" + path.strip().strip("/")
    return path if path != "/" else "/"


def list_children(dump: Mapping[str, Any], path: str = "/") -> list[str]:
    """``ls PATH`` of the metadata shell: the names directly under ``path`` (sorted); a path that
    names a value lists its own name, as a shell lists a file."""
    path = _normal(path)
    if path in dump:
        return [path.rsplit("/", 1)[1]]
    prefix = path if path.endswith("/") else path + "/"
    children = sorted({key[len(prefix):].split("/", 1)[0] for key in dump if key.startswith(prefix)})
    if not children and path != "/":
        raise NoSuchNode(f"{path}: no such node")
    return children


def value_at(dump: Mapping[str, Any], path: str) -> str:
    """``cat PATH``: the value there, an ACL as indented JSON."""
    path = _normal(path)
    if path not in dump:
        if list_children(dump, path):
            raise NoSuchNode(f"{path}: is a directory (ls it)")
        raise NoSuchNode(f"{path}: no such node")
    value = dump[path]
    return value if isinstance(value, str) else json.dumps(value, indent=2)


def resolve(cwd: str, path: str) -> str:
    """``path`` relative to ``cwd`` (absolute when it starts with ``/``), ``.`` and ``..`` resolved."""
    parts = [] if path.startswith("/") else [p for p in cwd.split("/") if p]
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if parts:
                parts.pop()
        else:
            parts.append(part)
    return "/" + "/".join(parts)


class ShellSession:
    """The interactive metadata shell (``kgw metadata shell``): Kafka's ``kafka-metadata-shell.sh``
    commands over one view of the state, taken when the session began.

    Pure: :meth:`run` takes one command line and returns what to print, so the same session runs
    behind a terminal, a pipe (one command per line) or a test."""

    COMMANDS: Final = {
        "cat": "cat PATH...: print the value at each path",
        "cd": "cd [PATH]: change the working directory (/ without a path)",
        "exit": "exit: leave the shell",
        "find": "find [PATH]: every node at or under the path",
        "help": "help: these lines",
        "ls": "ls [PATH...]: the names under each path (the working directory without one)",
        "pwd": "pwd: print the working directory",
        "tree": "tree [PATH]: the nodes under the path, indented, with their values",
    }

    def __init__(self, dump: Mapping[str, Any]) -> None:
        self.dump = dump
        self.cwd = "/"
        self.done = False

    def _dir_exists(self, path: str) -> bool:
        if path == "/":
            return True
        try:
            list_children(self.dump, path)
        except NoSuchNode:
            return False
        return path not in self.dump

    def run(self, line: str) -> tuple[str, str]:
        """Run one command line; returns (output, error), each empty or ending in a newline."""
        words = line.split()
        if not words:
            return "", ""
        command, args = words[0], words[1:]
        handler = getattr(self, f"_cmd_{command}", None)
        if handler is None:
            return "", f"{command}: unknown command (help lists them)\n"
        out: list[str] = []
        err: list[str] = []
        handler(args, out, err)
        return "".join(f"{o}\n" for o in out), "".join(f"{e}\n" for e in err)

    def _cmd_help(self, args: list[str], out: list[str], err: list[str]) -> None:
        out.extend(self.COMMANDS.values())

    def _cmd_exit(self, args: list[str], out: list[str], err: list[str]) -> None:
        self.done = True

    def _cmd_pwd(self, args: list[str], out: list[str], err: list[str]) -> None:
        out.append(self.cwd)

    def _cmd_cd(self, args: list[str], out: list[str], err: list[str]) -> None:
        if len(args) > 1:
            err.append("cd: one path at most")
            return
        target = resolve(self.cwd, args[0]) if args else "/"
        if target in self.dump:
            err.append(f"cd: {target}: not a directory")
        elif not self._dir_exists(target):
            err.append(f"cd: {target}: no such node")
        else:
            self.cwd = target

    def _cmd_ls(self, args: list[str], out: list[str], err: list[str]) -> None:
        paths = args or ["."]
        for i, arg in enumerate(paths):
            path = resolve(self.cwd, arg)
            try:
                children = list_children(self.dump, path)
            except NoSuchNode as e:
                err.append(f"ls: {e}")
                continue
            if len(paths) > 1 and path not in self.dump:
                if i:
                    out.append("")
                out.append(f"{path}:")
            out.extend(children)

    def _cmd_cat(self, args: list[str], out: list[str], err: list[str]) -> None:
        if not args:
            err.append("cat: a path is needed")
        for arg in args:
            try:
                out.append(value_at(self.dump, resolve(self.cwd, arg)))
            except NoSuchNode as e:
                err.append(f"cat: {e}")

    def _nodes_under(self, path: str) -> list[str] | None:
        """Every node path at or under ``path`` (directories included), sorted; None if none."""
        if path in self.dump:
            return [path]
        prefix = "/" if path == "/" else path + "/"
        nodes: set[str] = set()
        for key in self.dump:
            if key.startswith(prefix):
                parts = key[len(prefix):].split("/")
                for depth in range(1, len(parts) + 1):
                    nodes.add(prefix + "/".join(parts[:depth]))
        if not nodes and path != "/":
            return None
        return sorted(nodes | {path})

    def _cmd_find(self, args: list[str], out: list[str], err: list[str]) -> None:
        for arg in args or ["."]:
            nodes = self._nodes_under(resolve(self.cwd, arg))
            if nodes is None:
                err.append(f"find: {resolve(self.cwd, arg)}: no such node")
            else:
                out.extend(nodes)

    def _cmd_tree(self, args: list[str], out: list[str], err: list[str]) -> None:
        if len(args) > 1:
            err.append("tree: one path at most")
            return
        root = resolve(self.cwd, args[0] if args else ".")
        nodes = self._nodes_under(root)
        if nodes is None:
            err.append(f"tree: {root}: no such node")
            return
        base = root.count("/") if root != "/" else 0
        for node in nodes:
            depth = (node.count("/") if node != "/" else 0) - base
            name = node if node == root else node.rsplit("/", 1)[1]
            value = self.dump.get(node)
            if value is None:
                out.append(f"{'  ' * depth}{name}/" if node != "/" else "/")
            else:
                text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
                out.append(f"{'  ' * depth}{name}: {text}")

