"""Delivery log retention: at least the newest 50 entries and 7 days per webhook are kept."""

from __future__ import annotations

import asyncio
import datetime as dt

from sqlalchemy import insert, select

from api.app import create_app
from api.context import ServerSettings
from api.ingress.retention import prune_deliveries, retention_job
from store.clock import ManualClock
from store.models import Delivery

NOW = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)


async def _add(engine, webhook_uid: str, ages_days: list[float]) -> None:
    """Entries in arrival order (oldest first), each ``age`` days before NOW."""
    rows = [
        {
            "team_id": "t",
            "webhook_uid": webhook_uid,
            "delivery_id": f"{webhook_uid}-{i}",
            "status": "Accepted",
            "size": 2,
            "received_at": NOW - dt.timedelta(days=age),
            "payload": b"{}",
        }
        for i, age in enumerate(ages_days)
    ]
    async with engine.begin() as conn:
        await conn.execute(insert(Delivery), rows)


async def _ids(engine, webhook_uid: str) -> list[str]:
    async with engine.connect() as conn:
        stmt = select(Delivery.delivery_id).where(Delivery.webhook_uid == webhook_uid).order_by(Delivery.seq)
        return list((await conn.execute(stmt)).scalars())


async def test_old_entries_beyond_the_newest_fifty_are_pruned(engine) -> None:
    await _add(engine, "wh_a", [10.0] * 80)
    removed = await prune_deliveries(engine, now=NOW, keep_days=7, keep_count=50)
    assert removed == 30
    assert await _ids(engine, "wh_a") == [f"wh_a-{i}" for i in range(30, 80)]


async def test_a_large_backlog_goes_in_bounded_batches(engine) -> None:
    await _add(engine, "wh_big", [10.0] * 23)
    removed = await prune_deliveries(engine, now=NOW, keep_days=7, keep_count=3, batch=5)
    assert removed == 20
    assert await _ids(engine, "wh_big") == [f"wh_big-{i}" for i in range(20, 23)]


async def test_recent_entries_are_kept_even_beyond_fifty(engine) -> None:
    await _add(engine, "wh_b", [9.0] * 10 + [6.9] * 60)
    await prune_deliveries(engine, now=NOW, keep_days=7, keep_count=50)
    assert await _ids(engine, "wh_b") == [f"wh_b-{i}" for i in range(10, 70)]


async def test_newest_fifty_are_kept_even_when_old_and_per_webhook(engine) -> None:
    await _add(engine, "wh_c", [30.0] * 20 + [8.0] * 20 + [1.0] * 20)
    await _add(engine, "wh_d", [100.0] * 5)
    await prune_deliveries(engine, now=NOW, keep_days=7, keep_count=50)
    assert await _ids(engine, "wh_c") == [f"wh_c-{i}" for i in range(10, 60)]
    assert await _ids(engine, "wh_d") == [f"wh_d-{i}" for i in range(5)]


async def test_retention_job_runs_with_the_app(engine, box, tmp_path, aiohttp_client) -> None:
    await _add(engine, "wh_e", [8.0] * 6)
    settings = ServerSettings(data_dir=tmp_path, delivery_retention_days=7, delivery_retention_count=2)
    app = create_app(
        settings,
        engine,
        box,
        clock=ManualClock(NOW),
        route_modules=("api.ops",),
        lifecycles=[retention_job(0.05)],
    )
    await aiohttp_client(app)
    for _ in range(100):
        if len(await _ids(engine, "wh_e")) == 2:
            break
        await asyncio.sleep(0.05)
    assert await _ids(engine, "wh_e") == ["wh_e-4", "wh_e-5"]
