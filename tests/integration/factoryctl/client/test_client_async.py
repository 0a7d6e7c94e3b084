"""The asyncio client against the real server: same surface, awaitables and async iterators."""

from __future__ import annotations

import asyncio

import pytest
from live_servers import LiveServer, unique

from factoryctl.client import (
    AsyncFactoryClient,
    AuthenticationError,
    ConflictError,
    NotFoundError,
    Run,
    UnprocessableEntityError,
)


async def test_runs_pages_and_errors(live: LiveServer) -> None:
    label = unique("async-batch")
    async with AsyncFactoryClient(live.url, live.member_key) as client:
        made = await asyncio.gather(
            *(client.runs.create(f"job {i}", config={"name": label}) for i in range(5))
        )
        page = await client.runs.list(name=label, limit=3)
        assert len(page) == 3 and page.has_next_page
        seen = [r.run_id async for r in client.runs.iter(name=label, limit=2)]
        assert sorted(seen) == sorted(m.run_id for m in made)

        run = await client.runs.get(made[0].run_id)
        assert isinstance(run, Run) and run.prompt == "job 0" and run.agent_config["name"] == label
        assert await client.runs.cancel(run.run_id) == run.run_id
        with pytest.raises(ConflictError):
            await client.runs.followup(run.run_id, "too late")
        with pytest.raises(NotFoundError) as missing:
            await client.runs.get("run_nope")
        assert missing.value.problem.error_code == "resource_not_found"

    async with AsyncFactoryClient(live.url, "fk_revoked") as stranger:
        with pytest.raises(AuthenticationError):
            await stranger.factories.list()


async def test_webhooks_deliveries_and_filters(live: LiveServer) -> None:
    async with AsyncFactoryClient(live.url, live.admin_key) as client:
        factory = await client.factories.create(unique("async-shop"))
        with pytest.raises(UnprocessableEntityError):
            await client.webhooks.create(factory.uid, unique("bad"), auth_mode="signature")  # no scheme
        hook = await client.webhooks.create(factory.uid, unique("orders"))
        assert hook.secret
        assert [w.uid async for w in client.webhooks.iter(factory.uid)] == [hook.uid]
        automation = await asyncio.to_thread(live.add_automation, factory.uid, hook.uid, {"kind": "order"})

        for n, kind in enumerate(("order", "refund", "order")):
            answer = await asyncio.to_thread(
                live.deliver, hook, {"kind": kind, "n": n}, secret=hook.secret, delivery_id=f"d{n}"
            )
            assert answer.status_code == 202
        newest_first = [d.delivery_id async for d in client.deliveries.iter(factory.uid, hook.uid, limit=1)]
        assert newest_first == ["d2", "d1", "d0"]
        first = await client.deliveries.get(factory.uid, hook.uid, "d0")
        assert first.payload == {"kind": "order", "n": 0} and len(first.run_ids) == 1

        verdict = await client.automations.test_filter(factory.uid, automation, "d1")
        assert verdict.result == "Would not trigger" and verdict.payload_check.failed_path == "kind"

        rotated = await client.webhooks.rotate_secret(factory.uid, hook.uid)
        assert rotated.secret and rotated.secret != hook.secret
        disabled = await client.webhooks.disable(factory.uid, hook.uid)
        assert disabled.enabled is False
        await client.webhooks.delete(factory.uid, hook.uid)
        with pytest.raises(NotFoundError):
            await client.webhooks.get(factory.uid, hook.uid)


async def test_raw_response_and_secrets(live: LiveServer) -> None:
    name = unique("async-secret")
    async with AsyncFactoryClient(live.url, live.admin_key) as client:
        raw = await client.with_raw_response.secrets.create(name)
        assert raw.status_code == 201 and raw.headers["content-type"].startswith("application/json")
        created = raw.parse()
        assert created.name == name and created.value  # generated: shown once
        listed = await client.secrets.list()
        assert name in {s.name for s in listed} and all(s.value is None for s in listed)
        updated = await client.with_raw_response.secrets.set(name, "new-value")
        assert updated.status_code == 200 and updated.parse().version == 2
        await client.secrets.delete(name)
        with pytest.raises(NotFoundError):
            await client.secrets.delete(name)
