"""ACL changes reach open connections at once, and the audit log has exactly Kafka's lines."""

from __future__ import annotations

import re

import pytest
import trio
from kio.static.primitive import i8

from protocol.codecs import request_class
from tests.support.acls import add_acl
from tests.unit.gateway.test_connection import RawClient

pytestmark = pytest.mark.integration

TOPIC, PRINCIPAL, ALLOW, DESCRIBE, LITERAL = 2, "User:ANONYMOUS", 3, 8, 3


def _metadata(topic: str | None):
    cls = request_class(3, 12)
    topic_cls = cls.__dataclass_fields__["topics"].type.__args__[0].__args__[0]
    topics = None if topic is None else (topic_cls(topic_id=None, name=topic),)
    return cls(topics=topics, allow_auto_topic_creation=False, include_topic_authorized_operations=False)


def _acl_fields(topic: str) -> dict:
    return dict(resource_type=i8(TOPIC), resource_name=topic, principal=PRINCIPAL, host="*",
                operation=i8(DESCRIBE), permission_type=i8(ALLOW))


async def _topic_error(client: RawClient, corr: int, topic: str) -> int:
    await client.send(3, 12, corr, _metadata(topic))
    got, response = await client.receive(3, 12)
    assert got == corr
    return response.topics[0].error_code


async def test_grant_and_revoke_apply_to_an_open_connection_and_are_audited(start_gateway, tmp_path, topic_name):
    data_dir = tmp_path / "live" / "metadata"
    add_acl(data_dir, "--cluster", "--operation", "ALTER", principal=PRINCIPAL)
    gw = start_gateway({"authorizer": {"class_name": "authz.standard_authorizer:StandardAuthorizer"}}, name="live")
    host, port = gw.bootstrap.rsplit(":", 1)
    client = RawClient(await trio.open_tcp_stream(host, int(port)))

    assert await _topic_error(client, 101, topic_name) == 29  # denied: TOPIC_AUTHORIZATION_FAILED

    create = request_class(30, 3)
    creation = create.__dataclass_fields__["creations"].type.__args__[0]
    await client.send(30, 3, 102, create(creations=(creation(resource_pattern_type=i8(LITERAL), **_acl_fields(topic_name)),)))
    _, created = await client.receive(30, 3)
    assert created.results[0].error_code == 0

    assert await _topic_error(client, 103, topic_name) != 29  # granted: same connection, no reconnect

    await client.send(3, 12, 104, _metadata(None))  # all topics: a silent filter
    await client.receive(3, 12)

    delete = request_class(31, 3)
    flt = delete.__dataclass_fields__["filters"].type.__args__[0]
    await client.send(31, 3, 105, delete(filters=(flt(resource_type_filter=i8(TOPIC), resource_name_filter=topic_name,
                                                      pattern_type_filter=i8(LITERAL), principal_filter=PRINCIPAL,
                                                      host_filter="*", operation=i8(DESCRIBE),
                                                      permission_type=i8(ALLOW)),)))
    _, deleted = await client.receive(31, 3)
    assert len(deleted.filter_results[0].matching_acls) == 1

    assert await _topic_error(client, 106, topic_name) == 29  # revoked
    await client.stream.aclose()
    gw.stop()

    audit = [line for line in gw.stderr_path.read_text().splitlines() if "kgw.authorizer" in line]
    denied = [line for line in audit if "is Denied operation = DESCRIBE" in line and f"Topic:LITERAL:{topic_name}" in line]
    assert [re.search(r"correlationId = (\d+)", line).group(1) for line in denied] == ["101", "106"]
    assert not any("correlationId = 104" in line for line in audit)  # silent all-topics filter logs no denial
