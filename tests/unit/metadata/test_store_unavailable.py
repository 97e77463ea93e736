"""A shared log the cluster cannot take writes for (#14 item 3/6): CreateAcls and DeleteAcls get
REQUEST_TIMED_OUT (7, retriable) and nothing is applied; the state kept is the last one."""

from __future__ import annotations

import trio
import trio.testing

from authz.acl import AclOperation
from metadata.store import MetadataStoreUnavailableError
from tests.unit.metadata.test_shared_replay import ALL, SharedLog, SharedLogView, acl_filter, binding, open_instance


class Unavailable(SharedLogView):
    down = False

    async def append(self, records):
        if self.down:
            raise MetadataStoreUnavailableError("metadata topic t: no acknowledgement within 10s")
        return await super().append(records)


def test_writes_fail_retriably_and_change_nothing_while_the_log_is_unavailable():
    async def main():
        log = SharedLog()
        view = Unavailable(log)
        kept = binding("a", "User:x", AclOperation.READ, False)
        async with trio.open_nursery() as nursery:
            image, authorizer = await open_instance(view, nursery)

            async def deliver_soon():
                await trio.testing.wait_all_tasks_blocked()
                view.deliver()

            nursery.start_soon(deliver_soon)
            assert [r.error_code for r in await authorizer.create_acls(None, [kept])] == [0]
            view.down = True
            lost = binding("b", "User:x", AclOperation.READ, False)
            (created,) = await authorizer.create_acls(None, [lost])
            assert created.error_code == 7 and "no acknowledgement" in created.message
            (deleted,) = await authorizer.delete_acls(None, [acl_filter("a", None)])
            assert deleted.error_code == 7
            assert authorizer.acls(ALL) == [kept] and list(image.acls.values()) == [kept]
            assert len(log.batches) == 1
            nursery.cancel_scope.cancel()

    trio.run(main)
