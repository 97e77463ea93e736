"""A gateway whose metadata disk fills, as an operator and a client see it (the finding: the
store stayed "broken" until a restart while /readyz said 200 and no metric said so): the
CreateAcls that hits the full disk is told it failed, /readyz and kgw_metadata_store_healthy
say why, and once there is room again the gateway takes writes by itself."""

from __future__ import annotations

from pathlib import Path

import trio
from kio.static.primitive import i8, i32

import gateway.process.server as server_module
from metadata.directory import DirectoryMetadataStore
from protocol.codecs import request_class
from tests.support.sim_disk import SimDisk
from tests.unit.gateway.fake_broker import FakeBroker
from tests.unit.gateway.test_connection import RawClient, _start_gateway

ROOT = Path("/sim")


def _create_acl(topic: str):
    cls = request_class(30, 3)
    creation = cls.__dataclass_fields__["creations"].type.__args__[0]
    return cls(creations=(creation(resource_type=i8(2), resource_name=topic, resource_pattern_type=i8(3),
                                   principal="User:health", host="*", operation=i8(3), permission_type=i8(3)),))


def _set_log_level(level: str):
    cls = request_class(44, 1)
    resource = cls.__dataclass_fields__["resources"].type.__args__[0]
    config = resource.__dataclass_fields__["configs"].type.__args__[0]
    return cls(resources=(resource(resource_type=i8(4), resource_name="", configs=(
        config(name="log.level", config_operation=i8(0), value=level),)),), validate_only=False)


def _scram_upsert(user: str):
    cls = request_class(51, 0)
    upsertion = cls.__dataclass_fields__["upsertions"].type.__args__[0]
    return cls(deletions=(), upsertions=(upsertion(name=user, mechanism=i8(1), iterations=i32(4096), salt=b"s" * 16,
                                                   salted_password=b"p" * 32),))


async def _create(client: RawClient, correlation_id: int, topic: str) -> tuple[int, str | None]:
    await client.send(30, 3, correlation_id, _create_acl(topic))
    _, response = await client.receive(30, 3)
    (result,) = response.results
    return int(result.error_code), result.error_message


async def test_a_full_metadata_disk_is_reported_and_writes_resume_when_room_returns(nursery, tmp_path, monkeypatch):
    disk = SimDisk(ROOT)
    monkeypatch.setattr(server_module, "open_metadata_store",
                        lambda cfg, **_kw: DirectoryMetadataStore(ROOT / "meta", files=disk))
    broker = await nursery.start(FakeBroker().serve)
    gateway, port = await _start_gateway(nursery, tmp_path, broker, True, authorizer={
        "class_name": "authz.standard_authorizer:StandardAuthorizer", "config": {"super.users": "User:ANONYMOUS"}})
    healthy = lambda: gateway.metrics.registry.get_sample_value("kgw_metadata_store_healthy")  # noqa: E731
    client = await RawClient.connect(port)
    assert await _create(client, 1, "health-0") == (0, None)
    assert healthy() == 1 and "metadata" not in gateway.readiness()

    disk.capacity = disk.used() + 10  # full
    code, message = await _create(client, 2, "health-1")
    assert code == -1 and "No space left" in message and "the change was not made" in message  # UNKNOWN_SERVER_ERROR
    state = gateway.readiness()["metadata"]
    assert isinstance(state, str) and "no writes since" in state and "No space left" in state
    assert healthy() == 0
    code, message = await _create(client, 3, "health-2")  # every change fails meanwhile, naming the cause
    assert code == -1 and "takes no writes since a write failed" in message and "No space left" in message
    # configs and SCRAM users share the path: told it failed, and the connection goes on
    await client.send(44, 1, 5, _set_log_level("DEBUG"))
    (resource,) = (await client.receive(44, 1))[1].responses
    assert int(resource.error_code) == -1 and "No space left" in resource.error_message
    await client.send(51, 0, 6, _scram_upsert("health-user"))
    (result,) = (await client.receive(51, 0))[1].results
    assert int(result.error_code) == -1 and "No space left" in result.error_message

    disk.capacity = None  # the operator made room: no restart
    with trio.fail_after(10):
        while "metadata" in gateway.readiness():
            await trio.sleep(0.05)
    assert healthy() == 1
    assert await _create(client, 4, "health-3") == (0, None)
    names = {binding.pattern.name for binding in gateway.image.acls.values()}
    assert names == {"health-0", "health-3"}  # the failed ones were not applied

