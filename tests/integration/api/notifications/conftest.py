"""A real receiver on 127.0.0.1 and a team with a factory, a signing secret and an endpoint.

The receiver is an aiohttp server whose answers a test scripts (``receiver.answers``: status codes,
``"hang"`` to hold the request open, or ``(status, headers)``); every request it gets is kept in
``receiver.got`` with its headers and body, and ``receiver.arrived`` wakes waiters.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import datetime as dt
import secrets
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import builders
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.notifications import fanout, policy
from api.notifications.sender import Sender
from api.notifications.transport import GuardedTransport
from api.runs import events
from store.clock import ManualClock
from store.crypto import SecretBox
from store.models import NotificationCursor, RunEvent

Answer = int | str | tuple[int, dict[str, str]]


@dataclasses.dataclass
class Got:
    headers: dict[str, str]
    body: bytes


class Receiver:
    def __init__(self) -> None:
        self.answers: list[Answer] = []
        self.default: Answer = 204
        self.got: list[Got] = []
        self.arrived = asyncio.Condition()
        self.release = asyncio.Event()
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        got = Got(dict(request.headers), await request.read())
        answer = self.answers.pop(0) if self.answers else self.default
        async with self.arrived:
            self.got.append(got)
            self.arrived.notify_all()
        if answer == "hang":
            await self.release.wait()
            return web.Response(status=200)
        status, headers = answer if isinstance(answer, tuple) else (int(answer), {})
        return web.Response(status=status, headers=headers, text="receiver says hi")

    async def wait_for(self, count: int) -> list[Got]:
        async with asyncio.timeout(10), self.arrived:
            await self.arrived.wait_for(lambda: len(self.got) >= count)
        return self.got


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    app = web.Application()
    app.router.add_post("/hook", r.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    r.url = str(server.make_url("/hook"))
    yield r
    r.release.set()
    await server.close()


def whsec() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


@dataclasses.dataclass
class Team:
    sessions: async_sessionmaker[AsyncSession]
    box: SecretBox
    clock: ManualClock
    team_id: str
    factory_uid: str
    secret: str
    secret_name: str = "HOOK_SECRET"

    async def endpoint(self, url: str, **options: Any) -> str:
        """An endpoint of the team's factory (``builders.notification``), told of every change unless
        ``events`` says otherwise, signed with the team's secret; its UID."""
        options = {"name": "ops", "events": ["run.*"], "secret_name": self.secret_name, **options}
        async with self.sessions() as s, s.begin():
            row = await builders.notification(
                s, self.clock, self.team_id, self.factory_uid, url=url, **options
            )
            return row.uid

    async def run(self, **columns: Any) -> str:
        async with self.sessions() as s, s.begin():
            row = await builders.run(
                s,
                self.clock,
                self.team_id,
                factory_uid=columns.pop("factory_uid", self.factory_uid),
                **columns,
            )
            return row.run_id


@pytest.fixture
async def team(sessions: async_sessionmaker[AsyncSession], box: SecretBox) -> Team:
    clock = ManualClock(dt.datetime.now(dt.UTC))
    value = whsec()
    async with sessions() as s, s.begin():
        t = await builders.team(s)
        f = await builders.factory(s, clock, t.id, "acme")
        await builders.secret(s, box, clock, t.id, "HOOK_SECRET", value)
    return Team(sessions, box, clock, t.id, f.uid, value)


SETTINGS = policy.NotificationSettings(
    retry_schedule=(1.0, 2.0), jitter=0.0, timeout_seconds=1.0, connect_timeout_seconds=1.0, failing_after=3
)

MakeSender = Callable[..., Coroutine[Any, Any, Sender]]


@pytest.fixture
async def make_sender(
    sessions: async_sessionmaker[AsyncSession], box: SecretBox, team: Team
) -> AsyncIterator[MakeSender]:
    """``await make_sender(settings=SETTINGS)``: a sender on the team's manual clock, real transport."""
    stack: list[GuardedTransport] = []

    async def make(settings: policy.NotificationSettings = SETTINGS) -> Sender:
        transport = await GuardedTransport(settings).__aenter__()
        stack.append(transport)
        return Sender(sessions, team.clock, box, transport, settings)

    yield make
    for transport in stack:
        await transport.__aexit__(None, None, None)


async def _fanned_out(sender: Sender) -> bool:
    """Whether the fan-out cursor has reached the newest event written (on PostgreSQL the fan-out reads
    only below the oldest running transaction in the cluster, which other sessions may hold back)."""
    async with sender.sessions() as s:
        newest = (
            await s.execute(
                select(RunEvent.txid, RunEvent.id).order_by(RunEvent.txid.desc(), RunEvent.id.desc()).limit(1)
            )
        ).first()
        cursor = (
            await s.execute(
                select(NotificationCursor.txid, NotificationCursor.event_id).where(
                    NotificationCursor.name == fanout.CURSOR  # not the scorers' cursor row
                )
            )
        ).first()
    return newest is None or (cursor is not None and tuple(cursor) >= tuple(newest))


async def readable(sessions: async_sessionmaker[AsyncSession]) -> None:
    """Wait until every event written is below the commit horizon (readable by the fan-out): on a shared
    PostgreSQL server other sessions' transactions hold it back for a while."""
    async with asyncio.timeout(20):
        while True:
            async with sessions() as s:
                stmt = select(RunEvent.txid, RunEvent.id).order_by(RunEvent.txid.desc(), RunEvent.id.desc())
                newest = (await s.execute(stmt.limit(1))).first()
                if newest is None or await events.latest_position(s) == tuple(newest):
                    return
            await asyncio.sleep(0.01)


async def settle(sender: Sender) -> None:
    """Turns until every event is fanned out, nothing is in flight and nothing more is due now."""
    async with asyncio.timeout(20):
        while True:
            started = await sender.step()
            running = list(sender._running)
            if running:
                await asyncio.wait(running)
                continue
            if not started and await _fanned_out(sender):
                await sender.step()  # write what just finished
                if not sender._running:
                    return
            await asyncio.sleep(0.01)
