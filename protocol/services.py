"""What local answers need from the process around them, as small typed interfaces.

``protocol/`` is the sans-IO layer: it never imports ``gateway/``.  The APIs kgw
answers itself (ACLs, configs, SCRAM users) reach the authorizer, the metadata
image, kgw's own broker configs and what the upstream supports only through
:class:`LocalServices`, which the gateway (``gateway.process.server.Gateway``) implements
and tests implement with plain objects.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from authz.authorizer import Authorizer, StoreUnavailableError
from authz.credentials import ScramCredential
from metadata.store import MetadataLogError
from configs.config_model import AlterResult, ConfigChange, ConfigEntry, ConfigResource

__all__ = ["BrokerConfigs", "LocalServices", "MetadataWriter", "TopicListing", "UpstreamQueries", "store_records"]


class MetadataWriter(Protocol):
    """The metadata image as the SCRAM and client-quota APIs use it (``metadata.image.MetadataImage``)."""

    #: (user name, mechanism code) -> UserScramCredentialRecord
    scram: Mapping[tuple[str, int], Any]
    #: client-quota entity ((type, name or None), ... sorted by type) -> {quota key: value}
    quotas: Mapping[tuple[tuple[str, str | None], ...], Mapping[str, float]]

    async def append(self, records: Sequence[Any]) -> int:
        """Append records to the metadata log; returns once they are durable and applied."""


async def store_records(image: MetadataWriter | None, records: Sequence[Any]) -> tuple[ErrorCode, str] | None:
    """Append a local answer's records (durable and applied when it returns); None when stored,
    else the error code and message every change of the batch gets (it is applied whole or not
    at all): REQUEST_TIMED_OUT (retriable) while the store is unavailable, UNKNOWN_SERVER_ERROR
    for a failed write (a full disk) or a log not loaded yet -- said, never a dropped connection."""
    if image is None:
        return ErrorCode.unknown_server_error, "the metadata log is not loaded yet"
    try:
        await image.append(records)
    except StoreUnavailableError as e:
        return ErrorCode.request_timed_out, f"The change was not stored: {e}"
    except MetadataLogError as e:
        return ErrorCode.unknown_server_error, f"The change was not stored: {e}"
    return None


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


@dataclass(frozen=True, slots=True)
class TopicListing:
    """Every topic name of the upstream cluster, as kgw's own account sees it."""

    names: frozenset[str]
    #: increases with every listing fetched from the upstream (a listing is compared, not re-read)
    version: int
    #: time.monotonic() when the upstream answered
    fetched_at: float


class UpstreamQueries(Protocol):
    """What an enforcement may ask the upstream cluster before deciding (``Decision.then``).

    Every call is made with kgw's own identity, has the upstream request timeout and raises
    ``UpstreamUnavailable`` (of ``gateway.upstream.cluster``) when it cannot be answered; its answer is
    used to decide for the client, never forwarded to it as is."""

    @property
    def principal(self) -> str | None:
        """kgw's own principal as the brokers see it ("Type:Name"), None when kgw cannot tell."""

    async def topic_names(self, max_age_s: float) -> TopicListing:
        """Every topic of the cluster, from a listing at most ``max_age_s`` old (0: asked now)."""

    async def existing_topics(self, names: Collection[str]) -> frozenset[str]:
        """Which of ``names`` exist, asked now (a Metadata request that creates nothing)."""

    def version(self, api_key: int) -> int | None:
        """The highest version of ``api_key`` both kgw's codecs and the upstream speak, or None."""

    async def coordinator(self, group_id: str) -> int:
        """The node id of the group's coordinator."""

    async def call(self, api_key: int, request: Any, *, node_id: int | None = None) -> Any:
        """Send ``request`` (a kio request entity; its class gives the version) to a bootstrap
        broker, or to broker ``node_id``, and return the decoded response."""


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

    @property
    def upstream(self) -> UpstreamQueries:
        """Questions kgw asks the upstream cluster on its own behalf (``Decision.then``)."""

    @property
    def scram_changes(self) -> AbstractAsyncContextManager[Any]:
        """Held while an AlterUserScramCredentials reads the credentials and writes its change,
        so two such requests never decide from the same state (the owner of the credentials
        serialises them; a test may give ``contextlib.nullcontext()``)."""

    @property
    def quota_changes(self) -> AbstractAsyncContextManager[Any]:
        """Held while an AlterClientQuotas reads the quotas and writes its change."""
