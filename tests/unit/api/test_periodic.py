"""Periodic jobs stop cleanly (api/periodic.py): a tick in progress at shutdown finishes, a sleeping job
stops at once, a tick that overstays the grace is cancelled."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from aiohttp import web

from api import periodic as periodic_module
from api.periodic import periodic

log = logging.getLogger("test.periodic")


async def _stop(lifecycle: object) -> None:
    """Run the rest of a started ``cleanup_ctx`` generator: the app's shutdown."""
    with pytest.raises(StopAsyncIteration):
        await anext(lifecycle)  # type: ignore[call-overload]


async def test_a_tick_in_progress_finishes_before_the_job_stops() -> None:
    started, release, finished = asyncio.Event(), asyncio.Event(), []

    async def tick(_app: web.Application) -> None:
        started.set()
        await release.wait()  # a database call in progress
        finished.append(True)

    lifecycle = periodic("job", 60, tick, log=log)(web.Application())
    await anext(lifecycle)
    await started.wait()
    stopping = asyncio.create_task(_stop(lifecycle))
    await asyncio.sleep(0)  # shutdown has begun while the tick runs
    assert not stopping.done()
    release.set()
    async with asyncio.timeout(2):
        await stopping
    assert finished == [True]  # not cancelled mid-call


async def test_a_sleeping_job_stops_without_waiting_for_its_interval() -> None:
    ticks: list[int] = []
    ticked = asyncio.Event()

    async def tick(_app: web.Application) -> None:
        ticks.append(1)
        ticked.set()

    lifecycle = periodic("job", 3600, tick, log=log)(web.Application())
    await anext(lifecycle)
    async with asyncio.timeout(2):
        await ticked.wait()
        await _stop(lifecycle)  # an hour's interval: only a stop that wakes the sleep ends in time
    assert ticks == [1]


async def test_a_tick_that_overstays_the_grace_is_cancelled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(periodic_module, "STOP_GRACE_SECONDS", 0.05)
    started, cancelled = asyncio.Event(), []

    async def tick(_app: web.Application) -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    lifecycle = periodic("job", 60, tick, log=log)(web.Application())
    await anext(lifecycle)
    await started.wait()
    async with asyncio.timeout(2):
        await _stop(lifecycle)
    assert cancelled == [True]


async def test_a_first_delay_is_cut_short_by_the_stop() -> None:
    ticks: list[int] = []

    async def tick(_app: web.Application) -> None:
        ticks.append(1)

    lifecycle = periodic("job", 60, tick, log=log, first_delay_seconds=3600)(web.Application())
    await anext(lifecycle)
    async with asyncio.timeout(2):
        await _stop(lifecycle)
    assert ticks == []


async def test_a_bulk_job_rests_as_long_as_its_batch_held_the_writer() -> None:
    """rest_after: a batch that took 0.3 s is followed by at least 0.3 s of rest (half the write lock for
    everyone else); a quick batch still gets the minimum pause."""
    start = time.monotonic()
    await periodic_module.rest_after(start - 0.3, 0.01)
    assert time.monotonic() - start >= 0.29
    start = time.monotonic()
    await periodic_module.rest_after(start, 0.05)
    assert time.monotonic() - start >= 0.049
