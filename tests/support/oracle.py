"""Kafka's own authorizer as the oracle for kgw.

Two sides take the same requests from the same users:

* ``kafka``: an Apache Kafka node whose own StandardAuthorizer decides (SASL/PLAIN, super user
  ``admin``), the clients connected straight to it;
* ``kgw``: kgw (SASL/PLAIN, its StandardAuthorizer, the same users) in front of another such
  node, which kgw reaches as ``admin``, a super user there, as production gateways do.

Each side's ACLs are created with its own admin client (through kgw for kgw: kgw answers the
ACL APIs itself), so the same grants hold on both.  Both brokers have delegation tokens enabled
and share groups on, so every protocol where the broker derives something from a request can
be driven on both and their answers compared.  :meth:`Side.backend` reads a side's broker
state as a super user, which is how a test learns what a request made the broker create,
assign or issue.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType)

from authz.credentials import PlainCredential
from protocol.codecs import make, nested, request_class
from tests.support.acls import change_acls
from tests.support.cluster import Gateway, base_gateway_config, launch_gateway
from tests.support.kafka import KafkaCluster, start_kafka
from tests.support.raw_kafka import RawConnection

__all__ = ["Oracle", "Side", "USERS", "start_oracle"]

USERS = {"admin": "admin-secret", "alice": "alice-secret", "bob": "bob-secret", "mallory": "mallory-secret"}
T = 20
#: what both brokers run with beyond tests/support/kafka.py's secured node
_BROKER = {
    "delegation.token.secret.key": "kgw-oracle-token-secret",
    "delegation.token.expiry.time.ms": 3_600_000,
    "group.consumer.heartbeat.interval.ms": 500,
    "group.share.heartbeat.interval.ms": 500,
    "group.streams.heartbeat.interval.ms": 500,
    "group.consumer.min.heartbeat.interval.ms": 500,
    "group.share.min.heartbeat.interval.ms": 500,
    "group.streams.min.heartbeat.interval.ms": 500,
}


def _conf(bootstrap: str, user: str) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
            "sasl.username": user, "sasl.password": USERS[user], "broker.address.family": "v4"}


@dataclass
class Side:
    name: str
    #: where clients connect: the Kafka node itself, or kgw
    bootstrap: str
    #: the Kafka node holding this side's state (read there as a super user)
    broker: str
    _conns: list = field(default_factory=list)

    def connect(self, user: str) -> RawConnection:
        """A logged-in connection as ``user``, kept until :meth:`close`."""
        conn = RawConnection(self.bootstrap).sasl_plain(user, USERS[user])
        self._conns.append(conn)
        return conn

    def admin(self) -> AdminClient:
        """The side's admin, through the side (kgw answers the ACL APIs itself)."""
        return AdminClient(_conf(self.bootstrap, "admin"))

    def backend(self) -> AdminClient:
        """A super user's view of the side's broker, bypassing kgw."""
        return AdminClient(_conf(self.broker, "admin"))

    def create_topics(self, topics: dict[str, int]) -> None:
        admin = self.backend()
        existing = admin.list_topics(timeout=T).topics
        new = [NewTopic(name, partitions, 1) for name, partitions in topics.items() if name not in existing]
        if new:
            for f in admin.create_topics(new, operation_timeout=10).values():
                f.result(timeout=T)
        deadline = time.monotonic() + T
        while not all(t in admin.list_topics(timeout=T).topics for t in topics):  # published to the broker
            assert time.monotonic() < deadline, f"{self.name}: topics {sorted(topics)} not visible"
            time.sleep(0.1)

    def topics(self) -> set[str]:
        return set(self.backend().list_topics(timeout=T).topics)

    def topic_names(self) -> dict[uuid.UUID, str]:
        """Topic id -> name, as the side's broker knows them."""
        cls = request_class(3, 12)
        with RawConnection(self.broker).sasl_plain("admin", USERS["admin"]) as conn:
            response = conn.call(3, 12, make(cls, topics=None, allow_auto_topic_creation=False,
                                             include_topic_authorized_operations=False))
        return {t.topic_id: t.name for t in response.topics}

    def grant(self, *acls: str) -> list[AclBinding]:
        """``PRINCIPAL ALLOW|DENY TYPE PATTERN NAME OPERATION`` (CLUSTER's name: kafka-cluster);
        back once this side's authorizer holds them (Kafka's applies them after CreateAcls returns)."""
        bindings = [_binding(a) for a in acls]
        change_acls(self.admin(), bindings, True, T)
        return bindings

    def revoke(self, bindings: list[AclBinding]) -> None:
        change_acls(self.admin(), bindings, False, T)

    def close(self) -> None:
        for conn in self._conns:
            conn.close()
        self._conns.clear()


def _binding(text: str) -> AclBinding:
    principal, perm, rtype, pattern, name, op = text.split()
    return AclBinding(ResourceType["BROKER" if rtype == "CLUSTER" else rtype], name, ResourcePatternType[pattern],
                      f"User:{principal}", "*", AclOperation[op], AclPermissionType[perm])


@dataclass
class Oracle:
    kafka: Side
    kgw: Side
    gateway: Gateway
    brokers: tuple[KafkaCluster, KafkaCluster]

    @property
    def sides(self) -> tuple[Side, Side]:
        return (self.kafka, self.kgw)

    def stop(self) -> None:
        for side in self.sides:
            side.close()
        self.gateway.stop()
        for broker in self.brokers:
            broker.stop()


def start_oracle(work: Path) -> Oracle:
    direct = start_kafka(work / "kafka-direct", extra=_BROKER, sasl_users=USERS)
    try:
        behind = start_kafka(work / "kafka-behind-kgw", extra=_BROKER, sasl_users=USERS)
    except BaseException:
        direct.stop()
        raise
    try:
        config = base_gateway_config(behind.bootstrap, work / "kgw-metadata", behind.node_ids)
        config["listeners"][0].update(name="SASL", security_protocol="SASL_PLAINTEXT", sasl={"mechanisms": ["PLAIN"]})
        config["upstream"].update(security_protocol="SASL_PLAINTEXT",
                                  sasl={"mechanism": "PLAIN", "username": "admin", "password": USERS["admin"]})
        config["users"] = {"plain": [{"name": u, "password_hash": PlainCredential.hash_password(p, iterations=20_000)}
                                     for u, p in USERS.items()]}
        config["authorizer"] = {"class_name": "authz.standard_authorizer:StandardAuthorizer",
                                "config": {"super.users": "User:admin"}}
        gateway = launch_gateway("kgw-oracle", config, work / "kgw", node_ids=behind.node_ids)
    except BaseException:
        direct.stop()
        behind.stop()
        raise
    return Oracle(Side("kafka", direct.bootstrap, direct.bootstrap),
                  Side("kgw", gateway.listeners["SASL"], behind.bootstrap), gateway, (direct, behind))


def request(api_key: int, version: int, **fields):
    """A kio request entity: fields not given take Java's defaults."""
    from protocol.apis.group_common import _blank
    return _blank(request_class(api_key, version), **fields)


def entity(cls, field_name: str, **fields):
    from protocol.apis.group_common import _blank
    return _blank(nested(cls, field_name), **fields)
