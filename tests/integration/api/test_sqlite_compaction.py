"""SQLite stays small (issue 29, part 3): a WAL grown past its bound by a large write is emptied by the
maintenance job, and pages freed by a prune go back to the file system (docs/operations.md, "SQLite file
and WAL size")."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path

from sqlalchemy import insert, text

from api.app import create_app
from api.context import ServerSettings
from api.runs.maintenance import compact, maintenance_job
from api.runs.retention import RetentionSettings
from store.db import WAL_SIZE_LIMIT, create_engine, wal_bytes
from store.models import Delivery

NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)


async def grow(engine, megabytes: int) -> None:
    """One transaction of ``megabytes`` of delivery payloads: the WAL holds all of it until a checkpoint."""
    rows = [
        {
            "team_id": "t",
            "webhook_uid": "wh",
            "delivery_id": f"d{i}",
            "status": "Accepted",
            "size": 65536,
            "received_at": NOW,
            "payload": bytes([i % 251]) * 65536,
        }
        for i in range(megabytes * 16)
    ]
    async with engine.begin() as conn:
        await conn.execute(insert(Delivery), rows)


def file_bytes(engine) -> int:
    return Path(engine.url.database or "").stat().st_size


async def wait_for(condition, what: str) -> None:
    for _ in range(400):
        if await condition():
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"timed out waiting for {what}")


async def test_the_job_empties_a_wal_grown_past_its_bound(sqlite_url, box, tmp_path, aiohttp_client) -> None:
    engine = create_engine(sqlite_url)
    try:
        await grow(engine, WAL_SIZE_LIMIT // (1 << 20) + 8)
        assert (wal_bytes(engine) or 0) > WAL_SIZE_LIMIT
        nothing_to_prune = RetentionSettings(0, 0, 0, 0, 0)
        app = create_app(
            ServerSettings(data_dir=tmp_path),
            engine,
            box,
            route_modules=("api.ops",),
            lifecycles=[maintenance_job(nothing_to_prune, 0.05, first_delay_seconds=0)],
        )
        await aiohttp_client(app)

        async def emptied() -> bool:
            return wal_bytes(engine) == 0

        await wait_for(emptied, "the WAL to be truncated")
    finally:
        await engine.dispose()


async def test_a_prune_gives_its_pages_back(sqlite_url) -> None:
    engine = create_engine(sqlite_url)
    try:
        await grow(engine, 8)
        await compact(engine, pruned=False)
        grown = file_bytes(engine)
        async with engine.begin() as conn:
            await conn.execute(text("DELETE FROM deliveries"))
        await compact(engine, pruned=True)
        assert wal_bytes(engine) == 0
        assert file_bytes(engine) < grown - 6 * (1 << 20)
    finally:
        await engine.dispose()
