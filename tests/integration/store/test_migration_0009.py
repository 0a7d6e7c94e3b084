"""Migration 0009 (lease tokens, log counters): existing runs get their log counters from their stored
lines, so run log retention finds them, and a downgrade and upgrade keep every log line (a batch rebuild
of ``runs`` on SQLite would cascade-delete them)."""

from __future__ import annotations

import builders
from alembic import command
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from api.claims import run_logs
from store.clock import SystemClock
from store.db import _alembic_config, session_factory
from store.models import Run, RunLog


async def test_counters_are_backfilled_and_no_line_is_lost(engine: AsyncEngine) -> None:
    sessions = session_factory(engine)
    async with sessions() as s, s.begin():
        team = await builders.team(s)
        run = await builders.run(s, SystemClock(), team.id, prompt="x")
        await run_logs.append_logs(s, SystemClock(), run.run_id, [("stdout", "héllo"), ("stderr", "abc")])
    async with engine.begin() as conn:
        await conn.run_sync(lambda c: command.downgrade(_alembic_config(c), "0008"))
    async with engine.begin() as conn:
        await conn.run_sync(lambda c: command.upgrade(_alembic_config(c), "head"))
    async with sessions() as s:
        counters = (
            await s.execute(select(Run.log_lines, Run.log_bytes).where(Run.run_id == run.run_id))
        ).one()
        lines = await s.scalar(select(func.count()).select_from(RunLog).where(RunLog.run_id == run.run_id))
    assert (tuple(counters), lines) == ((2, 9), 2)  # "héllo" is 6 bytes in UTF-8
