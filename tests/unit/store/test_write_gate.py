"""The SQLite write gate: one holder at a time, urgent waiters first, cancellation passes the lock on."""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import create_async_engine

from store.db import session_factory
from store.write_gate import WriteGate, write_gate, writing


async def test_urgent_waiters_go_before_earlier_normal_ones() -> None:
    gate, order = WriteGate(), []

    async def take(name: str, urgent: bool) -> None:
        async with gate.hold(urgent=urgent):
            order.append(name)
            await asyncio.sleep(0)

    async with gate.hold():
        tasks = [asyncio.create_task(take("batch-1", False)), asyncio.create_task(take("batch-2", False))]
        await asyncio.sleep(0)
        tasks.append(asyncio.create_task(take("heartbeat", True)))
        await asyncio.sleep(0)
        assert order == [] and gate.held
    await asyncio.gather(*tasks)
    assert order == ["heartbeat", "batch-1", "batch-2"]
    assert not gate.held


async def test_a_cancelled_waiter_neither_keeps_nor_loses_the_lock() -> None:
    gate = WriteGate()
    async with gate.hold():
        waiting = asyncio.create_task(gate.hold(urgent=True).__aenter__())
        await asyncio.sleep(0)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
    assert not gate.held  # released by the holder, not left to the cancelled waiter
    async with asyncio.timeout(1), gate.hold():
        assert gate.held


async def test_a_waiter_cancelled_as_it_is_handed_the_lock_passes_it_on() -> None:
    gate = WriteGate()
    holder = gate.hold()
    await holder.__aenter__()
    first = asyncio.create_task(gate.hold().__aenter__())
    second_in = asyncio.Event()

    async def second() -> None:
        async with gate.hold():
            second_in.set()

    later = asyncio.create_task(second())
    await asyncio.sleep(0)
    await holder.__aexit__(None, None, None)  # hands the lock to ``first``...
    first.cancel()  # ...which is cancelled before it runs
    await asyncio.gather(first, return_exceptions=True)
    async with asyncio.timeout(1):
        await later
    assert second_in.is_set() and not gate.held


async def test_sqlite_session_factories_carry_a_gate_and_postgresql_ones_none() -> None:
    sqlite = create_async_engine("sqlite+aiosqlite://")
    postgres = create_async_engine("postgresql+asyncpg://u@127.0.0.1:1/x")
    sessions = session_factory(sqlite)
    assert isinstance(write_gate(sessions), WriteGate)
    assert write_gate(sessions) is write_gate(sessions)
    assert write_gate(session_factory(postgres)) is None
    async with writing(None):  # no gate: nothing to hold
        pass
    await sqlite.dispose()
    await postgres.dispose()
