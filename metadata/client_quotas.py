"""Client quotas as Kafka defines them: the keys, the entities and the precedence rules.

Theory of operation
-------------------
A quota is set on an *entity*: ``user``, ``client-id`` or both (KIP-55), each named or the
default (a None name), or ``ip`` alone (KIP-612).  The image keeps them as
``{entity: {key: value}}`` (``MetadataImage.quotas``, the entity's (type, name) pairs sorted
by type).

:func:`resolve` is Kafka's ``DefaultQuotaCallback``: for one quota key, the first of these
eight entities that sets it applies, most specific first::

    1  user=<user>,    client-id=<client>
    2  user=<user>,    client-id=<default>
    3  user=<user>
    4  user=<default>, client-id=<client>
    5  user=<default>, client-id=<default>
    6  user=<default>
    7  client-id=<client>
    8  client-id=<default>

and the level says who shares one rate: levels 1, 2, 4 and 5 measure each (user, client id)
pair apart; 3 and 6 all of a user's clients together; 7 and 8 every user of a client id
together.  (Kafka's sensors are tagged with the user and client id this way.)  A user is the
principal's *name* (``alice`` for ``User:alice``), as Kafka's ``Session.sanitizedUser`` is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

__all__ = ["CLIENT_KEYS", "IP_KEYS", "LEVELS", "Resolved", "entity_order", "resolve", "resolve_ip"]

USER, CLIENT_ID, IP = "user", "client-id", "ip"
ENTITY_TYPES: Final = frozenset({USER, CLIENT_ID, IP})

#: the quota keys of user / client-id entities and their Kafka config types (QuotaConfig)
CLIENT_KEYS: Final = {
    "producer_byte_rate": "LONG",
    "consumer_byte_rate": "LONG",
    "request_percentage": "DOUBLE",
    "controller_mutation_rate": "DOUBLE",
}
#: the quota keys of ip entities
IP_KEYS: Final = {"connection_creation_rate": "INT"}

Entity = tuple[tuple[str, "str | None"], ...]

#: the eight levels, most specific first: (name, entity template, shares by user, by client)
LEVELS: Final = (
    ("user,client-id", ((CLIENT_ID, "c"), (USER, "u")), True, True),
    ("user,client-id-default", ((CLIENT_ID, None), (USER, "u")), True, True),
    ("user", ((USER, "u"),), True, False),
    ("user-default,client-id", ((CLIENT_ID, "c"), (USER, None)), True, True),
    ("user-default,client-id-default", ((CLIENT_ID, None), (USER, None)), True, True),
    ("user-default", ((USER, None),), True, False),
    ("client-id", ((CLIENT_ID, "c"),), False, True),
    ("client-id-default", ((CLIENT_ID, None),), False, True),
)


@dataclass(frozen=True, slots=True)
class Resolved:
    """The quota that applies: its value, the level that set it (a :data:`LEVELS` name), and
    the (user, client id) whose traffic one rate measures ("" where shared)."""

    value: float
    level: str
    tags: tuple[str, str]


def entity_order(entity: Entity) -> list[tuple[str, bool, str]]:
    """A sort key for entities: by type, the default before names, then by name."""
    return [(t, n is not None, n or "") for t, n in entity]


def _entity(template: Iterable[tuple[str, str | None]], user: str, client_id: str) -> Entity:
    return tuple((etype, None if name is None else (user if name == "u" else client_id)) for etype, name in template)


def resolve(quotas: Mapping[Entity, Mapping[str, float]], user: str, client_id: str, key: str) -> Resolved | None:
    """The quota ``key`` for ``user``'s connection with ``client_id``, or None if none is set."""
    if not quotas:
        return None
    for level, template, by_user, by_client in LEVELS:
        values = quotas.get(_entity(template, user, client_id))
        if values is not None and key in values:
            return Resolved(values[key], level, (user if by_user else "", client_id if by_client else ""))
    return None


def resolve_ip(quotas: Mapping[Entity, Mapping[str, float]], address: str) -> Resolved | None:
    """The connection-creation quota of ``address``: its own, else the ip default."""
    for entity, level in ((((IP, address),), "ip"), (((IP, None),), "ip-default")):
        values = quotas.get(entity)
        if values is not None and "connection_creation_rate" in values:
            return Resolved(values["connection_creation_rate"], level, (address, ""))
    return None
