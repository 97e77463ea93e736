"""kgw's dynamic configuration: BROKER config overrides kept in the metadata log and applied live.

Theory of operation
-------------------
The YAML file is kgw's *static* configuration.  A few keys are *dynamic*
(:meth:`BrokerConfigModel.dynamic_keys`: ``super.users``,
``allow.everyone.if.no.acl.found`` and whatever else the authorizer's
``Reconfigurable.reconfigurable_configs()`` names, ``audit.log.level``,
``log.level``, ``listener.name.<n>.max.connections``): AlterConfigs and
IncrementalAlterConfigs on a BROKER resource change them while kgw runs.

Two scopes, as in Kafka:

* the resource ``""`` holds cluster-wide defaults (DYNAMIC_DEFAULT_BROKER_CONFIG);
* a resource named by an advertised node id holds overrides of *this gateway*
  (DYNAMIC_BROKER_CONFIG).  All node ids a gateway advertises are the same
  kgw process, so they share one scope, stored under the resource name
  :data:`INSTANCE_SCOPE`.

Overrides are ``ConfigRecord(resource_type=4, resource_name=scope, name, value)``
records in the metadata log (``value=None`` deletes), so they survive a
restart: :meth:`DynamicConfigManager.load` reads them from the image at
start-up and applies them before the listeners open.

One alteration of one resource (:meth:`DynamicConfigManager.alter`) is, under
a lock:

1. validated: every key known and dynamic, every value of the right type
   (INVALID_CONFIG with a message), APPEND/SUBTRACT only on LIST keys;
2. checked by the alter-configs policies (POLICY_VIOLATION);
3. checked by ``authorizer.validate_reconfiguration`` with the authorizer's
   proposed configs (INVALID_CONFIG);
4. with ``validate_only``, nothing more happens;
5. persisted: ``await image.append(records)`` returns once they are durable and
   in the image;
6. applied by :meth:`DynamicConfigManager.refresh` (``authorizer.reconfigure``,
   the audit logger's level, the root logger's level,
   ``listener.max_connections``), which the image also calls for every BROKER
   ConfigRecord it applies - so a change made through another gateway sharing the
   metadata log takes effect here too, in log order.

Nothing of a sensitive key's value is logged: changes are logged as names,
with ``[hidden]`` for sensitive values.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import trio

from metadata.records import ConfigRecord
from configs.broker_configs import AUDIT_LEVEL_CONFIG, LOG_LEVEL_CONFIG, BrokerConfigModel, listener_max_connections_key
from configs.config_model import AlterConfigOp, ConfigEntry, ConfigResource, ConfigResourceType, ConfigSource, ConfigType, InvalidConfig
from configs.policies import RequestMetadata, load_policies, run_policies
from authz.acl import MAX_RECORD_STRING_BYTES, AclOperation, PatternType, ResourcePattern, ResourceType
from authz.authorizer import Action, AuthorizationResult, Authorizer, PreviewsConfigs, Reconfigurable, StoreUnavailableError
from metadata.store import MetadataLogError
from protocol.errors import INVALID_CONFIG, INVALID_REQUEST, POLICY_VIOLATION, REQUEST_TIMED_OUT, UNKNOWN_SERVER_ERROR
from configs.config_model import AlterResult, ConfigChange

if TYPE_CHECKING:
    from configs.gateway_config import GatewayConfig
    from metadata.image import MetadataImage

__all__ = ["DynamicConfigManager", "INSTANCE_SCOPE"]

log = logging.getLogger("kgw.dynamic_config")
AUDIT_LOGGER = "kgw.authorizer"
#: resource name under which overrides of this gateway (any advertised node id) are stored
INSTANCE_SCOPE = "kgw"
_BROKER = int(ConfigResourceType.BROKER)
_OFF = logging.CRITICAL + 10
_TRACE = 5
#: Kafka (log4j) level names <-> Python levels
_LOG4J_TO_PY = {"OFF": _OFF, "FATAL": logging.CRITICAL, "ERROR": logging.ERROR, "WARN": logging.WARNING,
                "INFO": logging.INFO, "DEBUG": logging.DEBUG, "TRACE": _TRACE, "ALL": 1}


OK = AlterResult()


def _py_level(name: str) -> int:
    return _OFF if name == "OFF" else logging.getLevelName(name)


def _log4j_name(level: int) -> str:
    if level >= _OFF:
        return "OFF"
    for name, value in (("FATAL", logging.CRITICAL), ("ERROR", logging.ERROR), ("WARN", logging.WARNING),
                        ("INFO", logging.INFO), ("DEBUG", logging.DEBUG), ("TRACE", _TRACE)):
        if level >= value:
            return name
    return "ALL"


class ListenerLimit(Protocol):
    """A listener, as its dynamic ``listener.name.<name>.max.connections`` config changes it."""

    @property
    def name(self) -> str: ...

    max_connections: int


class ConfigOwner(Protocol):
    """What the dynamic configs read and change of the gateway that owns them
    (``gateway.process.server.Gateway``; tests give plain objects)."""

    @property
    def config(self) -> GatewayConfig: ...

    @property
    def authorizer(self) -> Authorizer | None: ...

    @property
    def image(self) -> MetadataImage | None:
        """None until the metadata log is loaded."""

    @property
    def listeners(self) -> Sequence[ListenerLimit]: ...

    def advertised_node_ids(self) -> Collection[int]:
        """The node ids this gateway advertises (each names its BROKER config resource)."""


class DynamicConfigManager:
    def __init__(self, owner: ConfigOwner, *, policies: Sequence[Any] | None = None) -> None:
        self.gw = owner
        authorizer = owner.authorizer
        self._reconfigurable = authorizer if isinstance(authorizer, Reconfigurable) else None
        self._preview = authorizer if isinstance(authorizer, PreviewsConfigs) else None
        self.authorizer_keys: frozenset[str] = (frozenset(self._reconfigurable.reconfigurable_configs())
                                                if self._reconfigurable is not None else frozenset())
        self.model = BrokerConfigModel(owner.config, self.authorizer_keys)
        self.policies = list(policies) if policies is not None else load_policies(owner.config.alter_configs_policy)
        self._lock = trio.Lock()
        self._loaded = False
        #: the effective configs last applied (refresh() applies what differs)
        self._applied: dict[str, str | None] = {}

    # ------------------------------------------------------------------ overrides

    def overrides(self, scope: str) -> dict[str, str]:
        image = self.gw.image
        if image is None:
            return {}
        return {k: v for k, v in image.configs.get((_BROKER, scope), {}).items() if self._usable(k, v)}

    def _usable(self, name: str, value: str) -> bool:
        d = self.model.defs.get(name)
        if d is None or d.read_only:
            return False
        try:
            d.parse(value)
        except InvalidConfig:
            return False
        return True

    def effective(self) -> dict[str, str | None]:
        return self.model.effective(self.overrides(INSTANCE_SCOPE), self.overrides(""))

    # ------------------------------------------------------------------ start-up

    async def load(self) -> None:
        """Apply the overrides stored in the metadata image (call after ``image.load()``,
        before the listeners open).  Invalid or unknown stored entries are skipped with a warning."""
        image = self.gw.image
        if image is not None:
            for scope in ("", INSTANCE_SCOPE):
                for name, value in image.configs.get((_BROKER, scope), {}).items():
                    if not self._usable(name, value):
                        log.warning("ignoring stored dynamic config %r of BROKER scope %r: unknown, read-only "
                                    "or invalid in this configuration", name, scope)
        keys = set(self.overrides(INSTANCE_SCOPE)) | set(self.overrides(""))
        if self.model.static.get(AUDIT_LEVEL_CONFIG) not in (None, self.model.defs[AUDIT_LEVEL_CONFIG].default):
            keys.add(AUDIT_LEVEL_CONFIG)
        effective = self.effective()
        if keys & self.authorizer_keys:
            try:
                self._validate_authorizer(effective)
            except InvalidConfig as e:
                log.error("stored dynamic authorizer configs are refused by the authorizer, not applied: %s", e)
                keys -= self.authorizer_keys
        self._apply(effective, keys)
        self._applied = effective
        self._loaded = True
        if image is not None:
            image.config_listeners.append(self._on_config_records)
        if keys:
            log.info("dynamic configs applied at start-up: %s", ", ".join(sorted(keys)))

    def _on_config_records(self, resources: set[tuple[int, str]]) -> None:
        if any(rtype == _BROKER for rtype, _name in resources):
            self.refresh()

    def refresh(self) -> None:
        """Apply what the stored overrides now say, where it differs from what was applied.
        A stored authorizer config the authorizer refuses is not applied (logged)."""
        after = self.effective()
        changed = {k for k in after if after[k] != self._applied.get(k)}
        if not changed:
            return
        if changed & self.authorizer_keys:
            try:
                self._validate_authorizer(after)
            except InvalidConfig as e:
                log.error("stored dynamic authorizer configs are refused by the authorizer, not applied: %s", e)
                changed -= self.authorizer_keys
        self._apply(after, changed)
        self._applied = {**after, **{k: self._applied.get(k) for k in set(after) - changed}}

    async def ensure_loaded(self) -> None:
        if not self._loaded:
            await self.load()

    # ------------------------------------------------------------------ BROKER resources

    def broker_name_error(self, name: str) -> str | None:
        """None if ``name`` names this gateway ("" or an advertised node id), else the message."""
        if name == "":
            return None
        nodes = sorted(self.gw.advertised_node_ids())
        try:
            node_id = int(name)
        except ValueError:
            return f"Broker id must be an integer, but it is: {name}"
        if node_id in nodes:
            return None
        return (f"Unexpected broker id, expected one of the node ids kgw advertises "
                f"({', '.join(map(str, nodes)) or 'none yet'}) or empty string, but received {name}")

    def describe(self, name: str, keys: Iterable[str] | None = None, *, include_synonyms: bool = False,
                 include_documentation: bool = False) -> list[ConfigEntry]:
        return self.model.describe(
            self.overrides(INSTANCE_SCOPE), self.overrides(""), scope_is_default=(name == ""), keys=keys,
            include_synonyms=include_synonyms, include_documentation=include_documentation,
        )

    async def alter(self, resource: ConfigResource, changes: Sequence[ConfigChange], validate_only: bool, *,
                    incremental: bool = True, principal: str | None = None, context: Any = None) -> AlterResult:
        """Alter one BROKER resource (the caller checked its name and the caller's authorization)."""
        scope = "" if resource.name == "" else INSTANCE_SCOPE
        async with self._lock:
            try:
                new, metadata_configs, ops = self._proposed(scope, changes, incremental)
            except InvalidConfig as e:
                return AlterResult(INVALID_CONFIG, str(e))
            for key, value in new.items():
                size = len(value.encode("utf-8", "surrogatepass")) if value is not None else 0
                if size > MAX_RECORD_STRING_BYTES:  # a ConfigRecord could not hold it
                    return AlterResult(INVALID_CONFIG, f"The value of {key} is {size} UTF-8 bytes; at most "
                                                       f"{MAX_RECORD_STRING_BYTES} can be stored")
            sensitive = frozenset(k for k in metadata_configs if self.model.defs[k].sensitive)
            violation = run_policies(self.policies, RequestMetadata(
                resource, metadata_configs, ops, principal, validate_only, sensitive))
            if violation is not None:
                return AlterResult(POLICY_VIOLATION, violation)
            old = self.overrides(scope)
            instance = new if scope == INSTANCE_SCOPE else self.overrides(INSTANCE_SCOPE)
            default = new if scope == "" else self.overrides("")
            before = self.effective()
            after = self.model.effective(instance, default)
            changed = {k for k in after if after[k] != before[k]}
            if changed & self.authorizer_keys:
                try:
                    self._validate_authorizer(after)
                    self._refuse_self_lockout(after, context)
                except InvalidConfig as e:
                    return AlterResult(INVALID_CONFIG, str(e))
            if validate_only:
                return OK
            records = [ConfigRecord(resource_type=_BROKER, resource_name=scope, name=k, value=new.get(k))
                       for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
            if records:
                image = self.gw.image
                if image is None:
                    return AlterResult(REQUEST_TIMED_OUT, "The change was not stored: the metadata log is not loaded yet")
                try:
                    await image.append(records)
                except StoreUnavailableError as e:
                    return AlterResult(REQUEST_TIMED_OUT, f"The change was not stored: {e}")
                except MetadataLogError as e:  # a failed write (a full disk): said, never a dropped connection
                    return AlterResult(UNKNOWN_SERVER_ERROR, f"The change was not stored: {e}")
            self.refresh()
            if not records:
                return OK
            # logged and audited by the caller with who made it (authz.audit.ChangeLog)
            return AlterResult(applied=", ".join(
                f"{r.name}={'[hidden]' if self.model.defs[r.name].sensitive else r.value}"
                if r.value is not None else f"{r.name} deleted" for r in records))

    def _proposed(self, scope: str, changes: Sequence[ConfigChange], incremental: bool
                  ) -> tuple[dict[str, str], dict[str, str | None], dict[str, AlterConfigOp]]:
        """The scope's new overrides, the policy's view of the change, and the op per key."""
        current = self.overrides(scope)
        new = dict(current) if incremental else {}
        configs: dict[str, str | None] = {}
        ops: dict[str, AlterConfigOp] = {}
        effective = self.effective()
        for change in changes:
            d = self.model.check_alterable(change.name)
            op = change.op
            ops[change.name] = op
            if op is AlterConfigOp.SET:
                if change.value is None:
                    raise InvalidConfig(f"Null value not supported for : {change.name}")
                value = d.canonical(change.value)
                assert value is not None
                new[change.name] = configs[change.name] = value
            elif op is AlterConfigOp.DELETE:
                new.pop(change.name, None)
                configs[change.name] = None
            else:
                if d.type is not ConfigType.LIST:
                    raise InvalidConfig(f"Config value {op.name.lower()} is not allowed for config key: "
                                        f"{change.name} (only LIST configs support APPEND and SUBTRACT)")
                base = d.parse(new.get(change.name, effective.get(change.name))) or []
                items = d.parse(change.value) or []
                if op is AlterConfigOp.APPEND:
                    merged = base + [i for i in items if i not in base]
                else:
                    merged = [i for i in base if i not in items]
                value = d.format(merged)
                assert value is not None
                new[change.name] = value
                configs[change.name] = change.value
        if not incremental:
            for name in current:
                if name not in new:
                    configs[name] = None
                    ops[name] = AlterConfigOp.DELETE
        return new, configs, ops

    # ------------------------------------------------------------------ applying

    def _authorizer_configs(self, effective: Mapping[str, str | None]) -> dict[str, Any]:
        out = {}
        for key in self.authorizer_keys:
            d = self.model.defs.get(key)
            value = effective.get(key)
            out[key] = value if value is not None else (d.default if d is not None else None)
        return out

    def _validate_authorizer(self, effective: Mapping[str, str | None]) -> None:
        if self._reconfigurable is None:
            return
        configs = self._authorizer_configs(effective)
        try:
            self._reconfigurable.validate_reconfiguration(configs)
        except Exception as e:  # noqa: BLE001 - ConfigError, ValueError ... all refuse the change
            if any(self.model.defs[k].sensitive for k in configs if k in self.model.defs):
                raise InvalidConfig("The authorizer refused the new configuration") from None
            raise InvalidConfig(f"The authorizer refused the new configuration: {e}") from None

    def _refuse_self_lockout(self, effective: Mapping[str, str | None], context: Any) -> None:
        """A change to super.users or allow.everyone.if.no.acl.found that would leave its own
        caller unable to alter configs again (CLUSTER ALTER_CONFIGS) is refused: the value would
        be reapplied at every restart and nobody could undo it over the wire."""
        if context is None or self._preview is None:
            return
        action = Action(ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL),
                        AclOperation.ALTER_CONFIGS, 1, False, False)
        (result,) = self._preview.authorize_with_configs(self._authorizer_configs(effective), context, [action])
        if result is not AuthorizationResult.ALLOWED:
            principal = context.principal
            raise InvalidConfig(
                f"This change would leave {principal.principal_type}:{principal.name} unable to alter configs "
                "again (CLUSTER ALTER_CONFIGS would be denied); add an ACL or keep a super user that can. "
                "Offline recovery: docs/operations.md")

    def _apply(self, effective: Mapping[str, str | None], keys: Iterable[str]) -> None:
        keys = set(keys)
        if keys & self.authorizer_keys and self._reconfigurable is not None:
            self._reconfigurable.reconfigure(self._authorizer_configs(effective))
        if AUDIT_LEVEL_CONFIG in keys:
            level = effective.get(AUDIT_LEVEL_CONFIG) or "INFO"
            logging.getLogger(AUDIT_LOGGER).setLevel(_py_level(level))
        if LOG_LEVEL_CONFIG in keys:
            logging.getLogger().setLevel(effective.get(LOG_LEVEL_CONFIG) or "INFO")
        for listener in self.gw.listeners:
            key = listener_max_connections_key(listener.name)
            value = effective.get(key)
            if key in keys and value is not None:
                listener.max_connections = int(value)

    # ------------------------------------------------------------------ BROKER_LOGGER resources

    @staticmethod
    def _logger_names() -> list[str]:
        manager = logging.Logger.manager
        names = sorted(n for n, obj in manager.loggerDict.items() if isinstance(obj, logging.Logger))
        return ["root", *names]

    def describe_loggers(self, keys: Iterable[str] | None = None) -> list[ConfigEntry]:
        wanted = None if keys is None else set(keys)
        out = []
        for name in self._logger_names():
            if wanted is not None and name not in wanted:
                continue
            logger = logging.getLogger() if name == "root" else logging.getLogger(name)
            out.append(ConfigEntry(name, _log4j_name(logger.getEffectiveLevel()),
                                   ConfigSource.DYNAMIC_BROKER_LOGGER_CONFIG, False, False, ConfigType.STRING))
        return out

    def alter_loggers(self, changes: Sequence[ConfigChange], validate_only: bool) -> AlterResult:
        """IncrementalAlterConfigs on BROKER_LOGGER: SET a level, DELETE (inherit the parent's).
        Not persisted, as in Kafka."""
        existing = set(self._logger_names())
        plan: list[tuple[logging.Logger, int]] = []
        for c in changes:
            if c.op in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
                return AlterResult(INVALID_REQUEST,
                                   f"{c.op.name} operation is not allowed for the BROKER_LOGGER resource")
            if c.name not in existing:
                return AlterResult(INVALID_CONFIG, f"Logger {c.name} does not exist!")
            logger = logging.getLogger() if c.name == "root" else logging.getLogger(c.name)
            if c.op is AlterConfigOp.DELETE:
                if c.name == "root":
                    return AlterResult(INVALID_REQUEST, "Removing the log level of the root logger is not allowed")
                plan.append((logger, logging.NOTSET))
                continue
            level = (c.value or "").strip().upper()
            if level not in _LOG4J_TO_PY:
                return AlterResult(INVALID_CONFIG, f"Cannot set the log level of {c.name} to {c.value} as it is not "
                                                   f"a supported log level. Valid levels are {', '.join(_LOG4J_TO_PY)}")
            plan.append((logger, _LOG4J_TO_PY[level]))
        if not validate_only:
            for logger, level in plan:
                logger.setLevel(level)
            if plan:
                return AlterResult(applied=", ".join(
                    f"{lg.name}={_log4j_name(lv) if lv else 'inherit'}" for lg, lv in plan))
        return OK
