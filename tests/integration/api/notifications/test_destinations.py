# ruff: noqa: RUF001 - the look-alike characters are the point of these tests
"""Hostile destinations on the real app (docs/notifications.md, "Where a notification may be sent").

Nothing here ever leaves loopback: each hostile URL, as the HTTP client reads it, points at a listener on
127.0.0.1 (``0.0.0.0`` reaches the local host on Linux), and the sender runs with loopback refused at
connect time (``NotificationSettings.allow_loopback=False``), so a connection the guard missed shows up
as an accepted connection on the listener. Endpoint rows are written straight into the store, as rows
written before the rule (or by a bug in a writer) would be: the send-time checks must hold on their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import builders
import pytest
from aiohttp.test_utils import TestClient
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.app import ROUTE_MODULES, create_app
from api.context import ServerSettings
from api.notifications.service import NOTIFICATION_SETTINGS, notification_sender
from api.notifications.transport import NOT_ALLOWED, DestinationRefused, GuardedTransport, guarded_connector
from api.runs import records
from store.clock import SystemClock
from store.crypto import SecretBox
from store.models import NotificationAttempt

from .conftest import SETTINGS, whsec

NO_LOOPBACK = dataclasses.replace(SETTINGS, allow_loopback=False)
BASE = "/api/v1/factory"


@dataclasses.dataclass
class Listener:
    """A TCP listener on 127.0.0.1 that counts the connections it accepts and closes each at once."""

    port: int = 0
    accepted: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


@pytest.fixture
async def listener() -> AsyncIterator[Listener]:
    out = Listener()
    server = await asyncio.start_server(out.handle, "127.0.0.1", 0)
    out.port = server.sockets[0].getsockname()[1]
    async with server:
        yield out


@pytest.fixture
async def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (taken and given back)."""
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port: int = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    return port


@dataclasses.dataclass
class App:
    client: TestClient[Any, Any]
    sessions: async_sessionmaker[AsyncSession]
    team_id: str
    factory_uid: str
    admin: dict[str, str]
    member: dict[str, str]

    async def endpoint_row(self, url: str) -> str:
        """An endpoint written straight into the store (no URL rule on this path), told of every change."""
        clock = SystemClock()
        async with self.sessions() as s, s.begin():
            row = await builders.notification(
                s, clock, self.team_id, self.factory_uid, "raw", url=url, events=["run.*"], secret_name="HOOK"
            )
            return row.uid

    async def cancel_a_run(self) -> None:
        clock = SystemClock()
        async with self.sessions() as s, s.begin():
            run = await builders.run(s, clock, self.team_id, factory_uid=self.factory_uid)
        async with self.sessions() as s, s.begin():
            await records.cancel_run(s, clock, self.team_id, run.run_id)

    async def first_attempt(self, endpoint_uid: str) -> dict[str, Any]:
        """The first attempt of the endpoint's first message, as a member reads it over the API."""
        path = f"{BASE}/{self.factory_uid}/notifications/{endpoint_uid}/messages"
        async with asyncio.timeout(20):
            while True:
                resp = await self.client.get(path, headers=self.member)
                assert resp.status == 200, await resp.text()
                items = (await resp.json())["messages"]
                if items and items[-1]["attempts"] >= 1:
                    one = await self.client.get(f"{path}/{items[-1]['id']}", headers=self.member)
                    attempt: dict[str, Any] = (await one.json())["attempt_log"][0]
                    return attempt
                await asyncio.sleep(0.05)


@pytest.fixture
async def app(
    aiohttp_client: Callable[..., Awaitable[TestClient[Any, Any]]],
    engine: AsyncEngine,
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
    tmp_path: Path,
) -> App:
    """The real app with every route module and this replica's notification sender, loopback refused."""
    clock = SystemClock()
    async with sessions() as s, s.begin():
        keys = await builders.role_keys(s, clock)
        factory = await builders.factory(s, clock, keys.team_id, "shop")
        await builders.secret(s, box, clock, keys.team_id, "HOOK", whsec())
    web_app = create_app(
        ServerSettings(data_dir=tmp_path),
        engine,
        box,
        lifecycles=[notification_sender()],
        route_modules=ROUTE_MODULES,
    )
    web_app[NOTIFICATION_SETTINGS] = NO_LOOPBACK
    client = await aiohttp_client(web_app)
    bearer = lambda key: {"Authorization": f"Bearer {key}"}  # noqa: E731
    return App(client, sessions, keys.team_id, factory.uid, bearer(keys.admin), bearer(keys.member))


HOSTILE = [
    "https://０.０.０.０:{port}/hook",  # full-width digits: 0.0.0.0, the local host
    "https://①②⑦.⓪.⓪.①:{port}/hook",  # circled digits: 127.0.0.1
    "https://１２７。０。０。１:{port}/hook",  # ideographic full stops
    "https://[::ffff:127.0.0.1]:{port}/hook",  # a literal IPv6 address: never resolved
    "https://localhost:{port}/hook",  # a name: refused on its DNS answer
    "https://a..localhost:{port}/hook",  # getaddrinfo raised UnicodeError here (issue 23, item 5)
]


@pytest.mark.parametrize("url", HOSTILE)
async def test_a_hostile_host_written_into_the_store_is_never_connected_to(
    app: App, listener: Listener, url: str
) -> None:
    uid = await app.endpoint_row(url.format(port=listener.port))
    await app.cancel_a_run()
    attempt = await app.first_attempt(uid)
    assert listener.accepted == 0
    assert attempt["outcome"] == "refused" and attempt["response_status"] is None
    assert attempt["error"].startswith(NOT_ALLOWED), attempt


@pytest.mark.parametrize(
    "url",
    [
        "https://０.０.０.０:8443/hook",
        "https://169。254。169。254/latest/meta-data/",
        "https://①⑥⑨.②⑤④.①⑥⑨.②⑤④/",
        "https://a..localhost/",
        "https://" + "a" * 64 + ".example.com/",
        "https://[64:ff9b:1::a9fe:a9fe]/",
        "https://[2002:a9fe:a9fe::1]/",
    ],
)
async def test_the_api_refuses_hostile_hosts_with_422(app: App, url: str) -> None:
    async with app.sessions() as s, s.begin():
        api_factory = await builders.factory(s, SystemClock(), app.team_id, "api-shop")
    body = {"name": "ops", "url": url, "secretName": "HOOK", "events": ["FAILED"]}
    resp = await app.client.post(f"{BASE}/{api_factory.uid}/notifications", json=body, headers=app.admin)
    problem = await resp.json()
    assert resp.status == 422, problem
    [error] = problem["errors"]
    assert error["field"] == "url" and error["message"], problem


async def test_refused_targets_look_the_same_whether_something_listens_or_not(
    listener: Listener, closed_port: int
) -> None:
    """No port-scan oracle: a refused destination is never connected to, so its outcome cannot depend on
    what answers there."""
    async with GuardedTransport(NO_LOOPBACK) as transport:
        outcomes = [
            await transport.post(f"http://127.0.0.1:{port}/hook", b"{}", {})
            for port in (listener.port, closed_port)
        ]
    assert [(o.outcome, o.status, o.excerpt, o.error) for o in outcomes] == [
        ("refused", None, None, NOT_ALLOWED)
    ] * 2
    assert listener.accepted == 0


@pytest.mark.parametrize("host", ["127.0.0.1", "[::ffff:127.0.0.1]", "localhost"])
async def test_the_connector_checks_the_address_of_every_connection(listener: Listener, host: str) -> None:
    """The guard is the connector's, below any URL check: literal addresses (which aiohttp never
    resolves) and DNS answers alike. With loopback allowed the same request connects, so the listener
    does count what reaches it."""
    url = f"http://{host}:{listener.port}/"
    async with aiohttp.ClientSession(connector=guarded_connector(NO_LOOPBACK)) as session:
        with pytest.raises(aiohttp.ClientConnectorError) as refused:
            await session.post(url)
    assert isinstance(refused.value.os_error, DestinationRefused)
    assert listener.accepted == 0
    async with aiohttp.ClientSession(connector=guarded_connector(SETTINGS)) as session:
        with contextlib.suppress(aiohttp.ClientError):
            await session.post(url)
    assert listener.accepted == 1


async def test_a_refused_attempt_recorded_before_this_rule_shows_no_detail(
    app: App, listener: Listener
) -> None:
    """An attempt refused by an earlier version said what the name resolved to; members now read only
    that the destination is not allowed."""
    uid = await app.endpoint_row(f"https://０.０.０.０:{listener.port}/hook")
    await app.cancel_a_run()
    await app.first_attempt(uid)
    old = "intranet.example resolves to a private network address: 10.0.0.5 is a private or reserved address"
    async with app.sessions() as s, s.begin():
        await s.execute(update(NotificationAttempt).values(error=old))
    assert (await app.first_attempt(uid))["error"] == NOT_ALLOWED
