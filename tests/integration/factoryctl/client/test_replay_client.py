"""``deliveries.replay`` of the typed client, sync and async, against the real server (docs/management.md,
"Replaying a delivery")."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Iterator

import pytest
from live_servers import LiveServer, unique

from factoryctl.client import (
    AsyncFactoryClient,
    ConflictError,
    DeliveryReplay,
    FactoryClient,
    NotFoundError,
    PermissionDeniedError,
    UnprocessableEntityError,
)


@pytest.fixture
def admin(live: LiveServer) -> Iterator[FactoryClient]:
    with FactoryClient(live.url, live.admin_key) as client:
        yield client


def test_replay_returns_the_new_entry_and_its_runs(live: LiveServer, admin: FactoryClient) -> None:
    factory = admin.factories.create(unique("shop"))
    hook = admin.webhooks.create(factory.uid, unique("orders"))
    assert hook.secret
    live.deliver(hook, {"n": 1}, secret=hook.secret, delivery_id="order/1")
    automation = live.add_automation(factory.uid, hook.uid, None)  # added after the delivery

    done = admin.deliveries.replay(factory.uid, hook.uid, "order/1")  # a '/' survives the path
    assert isinstance(done, DeliveryReplay)
    assert done.replay_of == "order/1" and done.delivery_id.startswith("order/1/replay/")
    assert done.status == "Replayed" and done.webhook_uid == hook.uid and done.automation_id is None
    assert isinstance(done.received_at, dt.datetime) and done.received_at.tzinfo is not None
    assert [r.automation_id for r in done.runs] == [automation] and done.detail
    run = admin.runs.get(done.run_ids[0])
    assert run.state == "QUEUED" and run.automation_id == automation and run.webhook_uid == hook.uid
    entry = admin.deliveries.get(factory.uid, hook.uid, done.delivery_id)
    assert entry.status == "Replayed" and entry.run_ids == done.run_ids and entry.payload == {"n": 1}

    narrowed = admin.deliveries.replay(factory.uid, hook.uid, "order/1", automation_id=automation)
    assert narrowed.automation_id == automation and len(narrowed.runs) == 1
    assert narrowed.delivery_id != done.delivery_id

    with pytest.raises(NotFoundError):
        admin.deliveries.replay(factory.uid, hook.uid, "never-sent")
    with pytest.raises(ConflictError):
        admin.deliveries.replay(factory.uid, hook.uid, done.delivery_id)  # a replay is not replayed
    with pytest.raises(UnprocessableEntityError) as err:
        admin.deliveries.replay(factory.uid, hook.uid, "order/1", automation_id="au_nope")
    assert err.value.errors[0].field == "automation_id"
    with FactoryClient(live.url, live.member_key) as member, pytest.raises(PermissionDeniedError):
        member.deliveries.replay(factory.uid, hook.uid, "order/1")


async def test_async_replay(live: LiveServer) -> None:
    async with AsyncFactoryClient(live.url, live.admin_key) as client:
        factory = await client.factories.create(unique("async-shop"))
        hook = await client.webhooks.create(factory.uid, unique("orders"))
        assert hook.secret
        await asyncio.to_thread(live.deliver, hook, {"kind": "refund"}, secret=hook.secret, delivery_id="d1")
        await asyncio.to_thread(live.add_automation, factory.uid, hook.uid, {"kind": "order"})

        done = await client.deliveries.replay(factory.uid, hook.uid, "d1")
        assert done.replay_of == "d1" and done.runs == [] and done.run_ids == []
        replays = [
            d.delivery_id async for d in client.deliveries.iter(factory.uid, hook.uid, status="Replayed")
        ]
        assert replays == [done.delivery_id]
