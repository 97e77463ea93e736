"""What local answers need from the process around them, as small typed interfaces.

``protocol/`` is the sans-IO layer: it never imports ``gateway/``.  The APIs kgw
answers itself (ACLs, configs, SCRAM users) reach the authorizer, the metadata
image, kgw's own broker configs and what the upstream supports only through
:class:`LocalServices`, which the gateway (``gateway.server.Gateway``) implements
and tests implement with plain objects.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from authz.authorizer import Authorizer
from authz.credentials import ScramCredential
from configs.config_model import AlterResult, ConfigChange, ConfigEntry, ConfigResource

__all__ = ["BrokerConfigs", "LocalServices", "MetadataWriter"]


class MetadataWriter(Protocol):
    """The metadata image as the SCRAM APIs use it (``metadata.image.MetadataImage``)."""

    #: (user name, mechanism code) -> UserScramCredentialRecord
    scram: Mapping[tuple[str, int], Any]

    async def append(self, records: Sequence[Any]) -> int:
        """Append records to the metadata log; returns once they are durable and applied."""


class BrokerConfigs(Protocol):
    """kgw's own BROKER and BROKER_LOGGER config resources (KIP-133 semantics)."""

    policies: Sequence[Any]

    async def ensure_loaded(self) -> None: ...

    def broker_name_error(self, name: str) -> str | None:
        """Why ``name`` is not a BROKER resource of this gateway, or None."""

    def describe(self, name: str, keys: Iterable[str] | None = None, *, include_synonyms: bool = False,
                 include_documentation: bool = False) -> list[ConfigEntry]: ...

    async def alter(self, resource: ConfigResource, changes: Sequence[ConfigChange], validate_only: bool, *,
                    incremental: bool = True, principal: str | None = None, context: Any = None) -> AlterResult: ...

    def describe_loggers(self, keys: Iterable[str] | None = None) -> list[ConfigEntry]: ...

    def alter_loggers(self, changes: Sequence[ConfigChange], validate_only: bool) -> AlterResult: ...


class LocalServices(Protocol):
    """Everything a local answer (``ApiSpec.answer``) may use."""

    @property
    def authorizer(self) -> Authorizer | None: ...

    @property
    def image(self) -> MetadataWriter | None:
        """None until the metadata log is loaded."""

    @property
    def static_scram(self) -> Mapping[tuple[str, str], ScramCredential]:
        """SCRAM users from the YAML, by (name, mechanism name): read-only over the wire."""

    @property
    def broker_configs(self) -> BrokerConfigs: ...

    @property
    def upstream_versions(self) -> Mapping[int, Any] | None:
        """API key -> the upstream's supported range (``.min``, ``.max``), None while unknown."""
