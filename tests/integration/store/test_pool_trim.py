"""Idle pooled connections (threads, descriptors) are given back, and the engine keeps working."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
from pathlib import Path

from sqlalchemy import event, text
from sqlalchemy.ext.asyncio import AsyncEngine

from store.db import create_engine
from store.pool_trim import PoolUse, trim_when_quiet


async def _use(engine: AsyncEngine, n: int) -> None:
    async def one() -> None:
        async with engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
            await asyncio.sleep(0.05)

    await asyncio.gather(*(one() for _ in range(n)))


async def _stop(job: asyncio.Task[None], engine: AsyncEngine) -> None:
    """End the trim job and the engine (each test's cleanup)."""
    job.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await job
    await engine.dispose()


async def test_idle_connections_beyond_the_peak_use_are_closed(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'pool.db'}")
    closes: list[object] = []
    event.listen(engine.sync_engine, "close", lambda *args: closes.append(args))
    use, trimmed = PoolUse(engine), asyncio.Event()
    job = asyncio.create_task(trim_when_quiet(engine, window_seconds=0.3, use=use, on_trim=trimmed.set))
    try:
        await _use(engine, 6)
        assert engine.sync_engine.pool.checkedin() == 6 and use.peak == 6
        async with engine.connect() as held:  # one checked out: never trimmed, however long
            await asyncio.sleep(0.8)
            assert not trimmed.is_set() and not closes
            await held.execute(text("SELECT 1"))
        async with asyncio.timeout(5):
            await trimmed.wait()
        assert len(closes) == 6  # every connection the pool held is closed
        assert engine.sync_engine.pool.checkedin() == 0
        async with engine.connect() as conn:  # the fresh pool answers
            assert (await conn.execute(text("SELECT 1"))).scalar_one() == 1
        assert engine.sync_engine.pool.checkedin() == 1
    finally:
        await _stop(job, engine)


async def test_connections_within_the_peak_use_stay(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'pool.db'}")
    use = PoolUse(engine)
    await _use(engine, 5)
    use.new_window()  # the burst's window ended; in the next one, 3 at once keep 5 connections warm
    job = asyncio.create_task(trim_when_quiet(engine, window_seconds=0.3, use=use))
    try:
        for _ in range(4):
            await _use(engine, 3)
            await asyncio.sleep(0.1)
        assert engine.sync_engine.pool.checkedin() == 5
    finally:
        await _stop(job, engine)


async def test_an_in_memory_database_is_never_trimmed() -> None:
    engine = create_engine("sqlite:///:memory:")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (x INTEGER)"))
    await asyncio.wait_for(trim_when_quiet(engine, window_seconds=0.01), 1)  # returns at once
    async with engine.connect() as conn:
        await conn.execute(text("SELECT * FROM t"))  # the database is still there
    await engine.dispose()


def _open_descriptors(path: Path) -> int:
    """Descriptors of this process open on the database file ``path`` itself (not its WAL or shm)."""
    fds = Path("/proc/self/fd")
    count = 0
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):
            count += os.readlink(fd) == str(path)
    return count


async def test_sqlite_descriptors_go_when_every_connection_of_the_file_closes(tmp_path: Path) -> None:
    """SQLite parks the descriptor of a connection closed while another one of the process holds a lock on
    the file; a trim closes the side connections too, and tries again when a checkout got in its way."""
    path = tmp_path / "pool.db"
    engine = create_engine(f"sqlite:///{path}")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (x INTEGER)"))
    side = sqlite3.connect(path)  # like the ingress writer: held outside the pool, in WAL mode
    side.execute("SELECT * FROM t").fetchall()
    interfered = False

    async def close_side() -> None:
        nonlocal interfered
        if not interfered:  # a poller's checkout while the trim closes: the file stays locked throughout
            interfered = True
            async with engine.connect() as conn:
                await conn.execute(text("SELECT * FROM t"))
        side.close()

    trims: list[int] = []
    second = asyncio.Event()

    def trimmed() -> None:
        trims.append(_open_descriptors(path))
        if len(trims) == 2:
            second.set()

    job = asyncio.create_task(
        trim_when_quiet(
            engine,
            window_seconds=0.3,
            side=[close_side],
            on_trim=trimmed,
        )
    )
    try:
        await _use(engine, 6)
        assert _open_descriptors(path) == 7
        async with asyncio.timeout(5):
            await second.wait()
        # the first trim met a checkout: the parked descriptors stayed; the second closed them all
        assert trims[0] >= 6 and trims[1] == 0, trims
        await asyncio.sleep(0.7)
        assert len(trims) == 2  # settled: a quiet pool within its peak is left alone
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT count(*) FROM t"))).scalar_one() == 0
        assert _open_descriptors(path) == 1
    finally:
        await _stop(job, engine)


async def test_a_stop_waits_for_a_trim_in_progress_and_ends_a_sleeping_job(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'pool.db'}")
    closing, release, trimmed, stop = asyncio.Event(), asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def slow_side() -> None:  # a connection outside the pool, closing
        closing.set()
        await release.wait()

    use = PoolUse(engine)
    await _use(engine, 6)
    use.new_window()
    job = asyncio.create_task(
        trim_when_quiet(engine, window_seconds=0.2, use=use, side=[slow_side], on_trim=trimmed.set, stop=stop)
    )
    try:
        async with asyncio.timeout(5):
            await closing.wait()
        stop.set()
        await asyncio.sleep(0.1)
        assert not job.done()  # the trim in progress is not cut off
        release.set()
        async with asyncio.timeout(5):
            await job  # returns normally: not cancelled
        assert trimmed.is_set() and engine.sync_engine.pool.checkedin() == 0
    finally:
        await _stop(job, engine)

    engine = create_engine(f"sqlite:///{tmp_path / 'pool.db'}")
    stop = asyncio.Event()
    job = asyncio.create_task(trim_when_quiet(engine, window_seconds=3600, stop=stop))
    try:
        await asyncio.sleep(0.05)
        stop.set()
        async with asyncio.timeout(2):  # an hour's window: only a stop that wakes the wait is this fast
            await job
    finally:
        await _stop(job, engine)
