"""Which metadata store a gateway (or an offline command) opens: ``metadata.backend`` in YAML.

``directory`` is the embedded default (one gateway, a local log).  ``kafka`` is the log
several gateways share, on a topic of the upstream cluster (``metadata.kafka_topic``); it
reaches the cluster as kgw's own upstream identity, so the librdkafka settings below are
built from the ``upstream:`` section (bootstrap servers, security protocol, SASL, TLS).
"""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from gateway.upstream.oauth_token import token_endpoint
from metadata.directory import DirectoryLogReader, DirectoryMetadataStore
from metadata.directory_shared import SharedDirectoryStore
from metadata.image import MetadataImage
from metadata.store import MetadataStore

__all__ = ["librdkafka_settings", "metadata_location", "open_metadata_store", "offline_image"]


def librdkafka_settings(upstream: Any) -> dict[str, Any]:
    """librdkafka's configuration for kgw's own connections to the upstream cluster."""
    conf: dict[str, Any] = {
        "bootstrap.servers": ",".join(str(a) for a in upstream.bootstrap_servers),
        "security.protocol": str(upstream.security_protocol),
        "socket.connection.setup.timeout.ms": upstream.connect_timeout_ms,
        "socket.timeout.ms": upstream.request_timeout_ms,
        "topic.metadata.refresh.interval.ms": upstream.metadata_max_age_ms,
        "reconnect.backoff.max.ms": 1000,
    }
    sasl = upstream.sasl
    if sasl is not None and sasl.oauthbearer is not None:
        # librdkafka's own client-credentials login (KIP-768), refreshed and re-authenticated by it
        oauth = sasl.oauthbearer
        conf.update({"sasl.mechanism": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
                     "sasl.oauthbearer.client.id": oauth.client_id,
                     "sasl.oauthbearer.client.secret": oauth.client_secret,
                     "sasl.oauthbearer.token.endpoint.url": token_endpoint(oauth)})
        if oauth.scope:
            conf["sasl.oauthbearer.scope"] = oauth.scope
    elif sasl is not None:
        conf.update({"sasl.mechanism": str(sasl.mechanism), "sasl.username": sasl.username,
                     "sasl.password": sasl.password})
    tls = upstream.tls
    if tls is not None:
        if tls.ca_file is not None:
            conf["ssl.ca.location"] = str(tls.ca_file)
        if tls.cert_file is not None:
            conf["ssl.certificate.location"] = str(tls.cert_file)
        if tls.key_file is not None:
            conf["ssl.key.location"] = str(tls.key_file)
        conf["ssl.endpoint.identification.algorithm"] = "https" if tls.check_hostname else "none"
    return conf


def open_metadata_store(config: Any, *, role: str = "gateway", worker_index: int | None = None) -> MetadataStore:
    """The store ``config.metadata`` names (not loaded yet).  ``role`` names the instance in
    the Kafka backend's message keys and client ids; a worker of ``kgw run --workers N``
    (``worker_index``) shares a directory log with its siblings (metadata/directory_shared.py)."""
    md = config.metadata
    if md.backend == "directory":
        if worker_index is not None:
            return SharedDirectoryStore(md.path)
        return DirectoryMetadataStore(md.path)
    if worker_index is not None:
        role = f"worker{worker_index}"
    from metadata.kafka_topic import KafkaMetadataStore, KafkaTopicSettings

    instance = f"{config.cluster_id}-{role}-{socket.gethostname()}-{os.getpid()}"
    return KafkaMetadataStore(KafkaTopicSettings(
        client=librdkafka_settings(config.upstream), topic=md.topic, replication_factor=md.replication_factor,
        min_insync_replicas=md.min_insync_replicas, write_timeout_s=md.write_timeout_ms / 1000,
        load_timeout_s=max(30.0, config.upstream.request_timeout_ms / 1000), instance=instance))


def metadata_location(config_path: str | None, data_dir: str | None) -> tuple[Any | None, Path | None]:
    """Where an offline command finds the log: ``(gateway config, None)`` for the Kafka
    backend, ``(None, directory)`` for a directory log (``--data-dir``, or the config's path)."""
    if data_dir:
        return None, Path(data_dir)
    from configs.yaml_reader import load_config

    config = load_config(config_path)
    return (config, None) if config.metadata.backend != "directory" else (None, Path(config.metadata.path))


@asynccontextmanager
async def offline_image(config: Any | None, data_dir: Path | None = None, authorizer: Any = None,
                        *, read_only: bool = False) -> AsyncIterator[MetadataImage]:
    """The metadata image loaded and, for a shared log, followed - for the offline commands
    (``kgw acls``, ``kgw metadata``).  A directory log must not be in use by a gateway (its
    lock says so) unless ``read_only`` (what is durable now, read without the lock); the Kafka
    log may be, its writes are ordered with the gateways' ones."""
    if data_dir is not None:
        store: MetadataStore = DirectoryLogReader(data_dir) if read_only else DirectoryMetadataStore(data_dir)
    else:
        store = open_metadata_store(config, role="cli")
    try:
        image = MetadataImage(store, authorizer, snapshot_every=10**12)
        if authorizer is not None:
            authorizer.acl_writer = image.write_acls
        await image.load()
        async with trio.open_nursery() as nursery:
            await nursery.start(image.follow)
            yield image
            nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            await store.aclose()
