"""Run log retention (issue 23, item 10): the lines of runs finished more than N days ago are deleted
and their counters reset; live and recent runs keep theirs; 0 keeps every log (docs/operations.md)."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import func, select, update

from api.claims import run_logs
from api.runs.log_retention import prune_run_logs
from store.clock import ManualClock
from store.models import Run, RunLog


async def logged_run(sessions, new_run, clock, lines: int, finished: dt.datetime | None) -> str:
    run_id = await new_run(clock=clock)
    async with sessions() as s, s.begin():
        await run_logs.append_logs(s, clock, run_id, [("stdout", f"line {i}") for i in range(lines)])
        if finished is not None:
            await s.execute(
                update(Run).where(Run.run_id == run_id).values(state="SUCCEEDED", finished_at=finished)
            )
    return run_id


async def line_count(sessions, run_id: str) -> int:
    async with sessions() as s:
        return int(await s.scalar(select(func.count()).select_from(RunLog).where(RunLog.run_id == run_id)))


async def test_logs_of_long_finished_runs_are_pruned(sessions, new_run, get_run) -> None:
    clock = ManualClock()
    now = clock.now()
    old = [await logged_run(sessions, new_run, clock, 3, now - dt.timedelta(days=40)) for _ in range(5)]
    recent = await logged_run(sessions, new_run, clock, 2, now - dt.timedelta(days=5))
    live = await logged_run(sessions, new_run, clock, 4, None)

    assert await prune_run_logs(sessions, now=now, keep_days=0) == 0  # 0 keeps logs forever
    assert await prune_run_logs(sessions, now=now, keep_days=30, batch=2) == 5  # in batches of 2
    for run_id in old:
        assert await line_count(sessions, run_id) == 0
        run = await get_run(run_id)
        assert (run.state, run.log_lines, run.log_bytes) == ("SUCCEEDED", 0, 0)  # the run itself stays
    assert await line_count(sessions, recent) == 2 and await line_count(sessions, live) == 4
    assert await prune_run_logs(sessions, now=now, keep_days=30) == 0  # nothing left to do
