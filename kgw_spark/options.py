"""The ``kgw`` data source's options: the built-in Kafka source's names (``subscribe``,
``startingOffsets``, ``kafka.*`` client settings, SASL/JAAS mapped to kafka-python),
validated with the option named in every error.
"""

from __future__ import annotations

import logging
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("kgw.spark")

class KgwSourceError(RuntimeError):
    """A query-failing problem (authorization, data loss, bad options)."""


def _opts(options: Mapping[str, str]) -> dict[str, str]:
    """Option names lower-cased (Spark's options are case-insensitive)."""
    return {str(k).lower(): str(v) for k, v in dict(options).items()}


def _bool(value: str | None, default: bool) -> bool:
    if value is None:
        return default
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise KgwSourceError(f"expected true or false, got {value!r}")
    return v == "true"


# Kafka (Java) client settings whose kafka-python name is not simply the
# dotted name with underscores, or which Spark's source refuses.
_REFUSED = {
    "group.id": "the source does not use consumer groups (Spark ignores/overrides kafka.group.id)",
    "auto.offset.reset": "set startingOffsets instead",
    "key.deserializer": "keys are always returned as bytes; cast or deserialize in the query",
    "value.deserializer": "values are always returned as bytes; cast or deserialize in the query",
    "enable.auto.commit": "the source does not commit offsets to Kafka",
    "interceptor.classes": "consumer interceptors are not supported",
}


_JAAS_PAIR = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def _known_python_keys() -> set[str]:
    from kafka import KafkaConsumer

    return set(KafkaConsumer.DEFAULT_CONFIG)


def client_config(options: Mapping[str, str]) -> dict[str, Any]:
    """kafka-python keyword arguments from the ``kafka.``-prefixed options.

    * ``kafka.bootstrap.servers`` (required), and any setting whose
      kafka-python name is the Java name with ``_`` for ``.``
      (``kafka.security.protocol``, ``kafka.sasl.mechanism``,
      ``kafka.client.id``, ``kafka.request.timeout.ms``, ``kafka.isolation.level``,
      ``kafka.ssl.cafile`` …).
    * ``kafka.sasl.jaas.config``: ``username="…" password="…"`` of a
      PlainLoginModule / ScramLoginModule line.
    * TLS as the Java client spells it, with PEM files:
      ``kafka.ssl.truststore.location`` (CA bundle), ``kafka.ssl.keystore.location``
      (client certificate chain + key, or ``kafka.ssl.keystore.key`` file),
      ``kafka.ssl.key.password``, ``kafka.ssl.endpoint.identification.algorithm=""``
      (no host name check).  JKS/PKCS12 stores are refused with a message.
    * Other Java-only settings are ignored (logged), as unknown settings are by
      the Java client.
    """
    opts = _opts(options)
    known = _known_python_keys()
    conf: dict[str, Any] = {}
    from kafka import KafkaConsumer

    defaults = KafkaConsumer.DEFAULT_CONFIG
    kafka_opts = {k[len("kafka."):]: v for k, v in opts.items() if k.startswith("kafka.")}
    if not kafka_opts.get("bootstrap.servers"):
        raise KgwSourceError("option 'kafka.bootstrap.servers' must be specified")
    for key, value in kafka_opts.items():
        if key in _REFUSED:
            raise KgwSourceError(f"Kafka option 'kafka.{key}' is not supported: {_REFUSED[key]}")
        if key == "bootstrap.servers":
            conf["bootstrap_servers"] = [s.strip() for s in value.split(",") if s.strip()]
        elif key == "sasl.jaas.config":
            pairs = dict(_JAAS_PAIR.findall(value))
            if "username" in pairs:
                conf["sasl_plain_username"] = pairs["username"]
            if "password" in pairs:
                conf["sasl_plain_password"] = pairs["password"]
        elif key == "ssl.truststore.location":
            conf["ssl_cafile"] = value
        elif key == "ssl.keystore.location":
            conf["ssl_certfile"] = value
        elif key == "ssl.keystore.key":
            conf["ssl_keyfile"] = value
        elif key in ("ssl.key.password", "ssl.keystore.password"):
            conf["ssl_password"] = value
        elif key == "ssl.endpoint.identification.algorithm":
            conf["ssl_check_hostname"] = bool(value.strip())
        elif key in ("ssl.truststore.type", "ssl.keystore.type"):
            if value.strip().upper() != "PEM":
                raise KgwSourceError(f"kafka.{key}={value}: only PEM files are supported by the kgw source")
        elif key.replace(".", "_") in known:
            name = key.replace(".", "_")
            default = defaults.get(name)
            if isinstance(default, bool):
                conf[name] = _bool(value, default)
            elif isinstance(default, int):
                conf[name] = int(value)
            else:
                conf[name] = value
        else:
            log.info("kgw source: ignoring Kafka option kafka.%s (no Python client equivalent)", key)
    if "ssl_cafile" in conf or "ssl_certfile" in conf:
        conf.setdefault("ssl_check_hostname", True)
    return conf


@dataclass(frozen=True)
class SourceOptions:
    strategy: str                       # subscribe | subscribepattern | assign
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assigned: tuple[tuple[str, int], ...] = ()
    starting: Any = "earliest"          # "earliest" | "latest" | {topic: {p: off}}
    ending: Any = "latest"
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_s: float = 120.0
    client: Mapping[str, Any] = None    # type: ignore[assignment]


def _offsets_option(value: str | None, default: str, name: str, allowed: tuple[str, ...]) -> Any:
    if value is None:
        return default
    v = value.strip()
    if v.lower() in allowed:
        return v.lower()
    if v.lower() in ("earliest", "latest"):
        raise KgwSourceError(f"option '{name}' cannot be {v.lower()!r} here")
    try:
        parsed = json.loads(v)
    except ValueError:
        raise KgwSourceError(f"option '{name}': expected {' or '.join(allowed)} or JSON "
                             f'like {{"topic":{{"0":23,"1":-2}}}}, got {value!r}') from None
    if not isinstance(parsed, dict) or not all(isinstance(p, dict) for p in parsed.values()):
        raise KgwSourceError(f"option '{name}': JSON must map topic -> {{partition: offset}}")
    return {t: {int(p): int(o) for p, o in parts.items()} for t, parts in parsed.items()}


def parse_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    opts = _opts(options)
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k, "").strip()]
    if len(given) != 1:
        raise KgwSourceError("exactly one of the options 'subscribe', 'subscribePattern' or 'assign' "
                             f"must be specified (got {given or 'none'})")
    strategy = given[0]
    kw: dict[str, Any] = {"strategy": strategy}
    if strategy == "subscribe":
        kw["topics"] = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
    elif strategy == "subscribepattern":
        kw["pattern"] = opts["subscribepattern"].strip()
    else:
        try:
            assigned = json.loads(opts["assign"])
            kw["assigned"] = tuple((t, int(p)) for t, parts in assigned.items() for p in parts)
        except (ValueError, AttributeError, TypeError):
            raise KgwSourceError(f"option 'assign': expected JSON like {{\"topicA\":[0,1]}}, "
                                 f"got {opts['assign']!r}") from None
    kw["starting"] = _offsets_option(opts.get("startingoffsets"), "latest" if streaming else "earliest",
                                     "startingOffsets", ("earliest", "latest") if streaming else ("earliest",))
    if streaming:
        if "endingoffsets" in opts:
            raise KgwSourceError("option 'endingOffsets' is for batch queries only")
    else:
        kw["ending"] = _offsets_option(opts.get("endingoffsets"), "latest", "endingOffsets", ("latest",))
    if "maxoffsetspertrigger" in opts:
        n = int(opts["maxoffsetspertrigger"])
        if n <= 0:
            raise KgwSourceError("option 'maxOffsetsPerTrigger' must be positive")
        kw["max_offsets_per_trigger"] = n
    kw["fail_on_data_loss"] = _bool(opts.get("failondataloss"), True)
    kw["include_headers"] = _bool(opts.get("includeheaders"), False)
    if "kafkaconsumer.polltimeoutms" in opts:
        kw["poll_timeout_s"] = int(opts["kafkaconsumer.polltimeoutms"]) / 1000
    kw["client"] = client_config(options)
    return SourceOptions(**kw)
