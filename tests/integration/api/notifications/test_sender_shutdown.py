"""The sender stops between database calls (api/notifications/service.py): a turn in progress at shutdown
finishes instead of being cancelled inside a query, which would cut its pooled connection off in the
rollback (a traceback in the log of every restart under load); an idle sender stops at once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.context import BOX, CLOCK, SESSIONS
from api.notifications.policy import NotificationSettings
from api.notifications.service import NOTIFICATION_SETTINGS, notification_sender

from .conftest import Team


class HeldSessions:
    """The store's sessions, except that each query waits for ``release`` once it has run: a database call
    in progress (inside a transaction, its connection checked out) for as long as the test wants."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self.sessions = sessions
        self.inside, self.release = asyncio.Event(), asyncio.Event()
        self.completed = 0

    @contextlib.asynccontextmanager
    async def __call__(self) -> AsyncIterator[AsyncSession]:
        async with self.sessions() as session:
            execute = session.execute

            async def held(*args: Any, **kwargs: Any) -> Any:
                result = await execute(*args, **kwargs)
                self.inside.set()
                await self.release.wait()
                return result

            session.execute = held  # type: ignore[method-assign]
            yield session
            self.completed += 1


def _app(team: Team, sessions: object) -> web.Application:
    app = web.Application()
    app[SESSIONS] = sessions  # type: ignore[misc]
    app[CLOCK], app[BOX] = team.clock, team.box
    app[NOTIFICATION_SETTINGS] = NotificationSettings(poll_seconds=3600.0)
    return app


async def _stop(lifecycle: AsyncIterator[None]) -> None:
    with pytest.raises(StopAsyncIteration):
        await anext(lifecycle)


async def test_a_turn_in_progress_at_shutdown_finishes_its_database_call(team: Team) -> None:
    held = HeldSessions(team.sessions)
    lifecycle = notification_sender()(_app(team, held))
    await anext(lifecycle)
    async with asyncio.timeout(10):
        await held.inside.wait()
    stopping = asyncio.create_task(_stop(lifecycle))
    await asyncio.sleep(0.05)
    assert not stopping.done(), "shutdown did not wait for the turn in progress"
    held.release.set()
    async with asyncio.timeout(10):
        await stopping
    assert held.completed >= 1  # the session in progress ended normally, not by cancellation


async def test_an_idle_sender_stops_at_once(team: Team) -> None:
    lifecycle = notification_sender()(_app(team, team.sessions))
    await anext(lifecycle)
    await asyncio.sleep(0.1)  # its first turn found nothing and it waits (an hour's poll interval)
    async with asyncio.timeout(2):  # the grace period is 5 s: only a stop that wakes the wait is this fast
        await _stop(lifecycle)
