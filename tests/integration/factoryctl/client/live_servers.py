"""Real aiohttp servers for client tests on real sockets, each on its own thread and loop.

The blocking client cannot share an event loop with the server it calls, so servers run in a
background thread (:class:`ThreadedApp`); sync tests are plain functions, async tests use the
pytest loop, and both talk to the server over TCP exactly as users do.

``live`` is the real application (every route module, definition validation wired in) on the
``db_url`` database (SQLite, and PostgreSQL when configured), with API keys per role and
``live.run(coro)`` to prepare store rows (automations) on the server's loop.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, Self, TypeVar

import builders
import httpx
from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.app import ROUTE_MODULES, create_app
from api.context import ServerSettings
from api.management.validate import VALIDATOR
from factoryctl.serve.validation import make_validator
from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import create_engine, session_factory

T = TypeVar("T")


def unique(prefix: str) -> str:
    """A name no other test uses (tests share one server per module)."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def definition_schedule(live: LiveServer, name: str, **fields: Any) -> str:
    """A schedule as an apply of ``schedules/<name>.yaml`` leaves it, in a factory of its own; ``fields``
    go to ``builders.schedule`` (``timezone``, ``prompt``, ``enabled``...). Returns its ID."""

    async def go() -> str:
        async with live.sessions() as s, s.begin():
            team = await builders.team(s)
            factory = await builders.factory(s, SystemClock(), team.id, unique("sched-factory"))
            row = await builders.schedule(
                s, SystemClock(), team.id, name, "0 6 * * *", factory_uid=factory.uid, **fields
            )
        return row.uid

    return live.run(go())


class ThreadedApp:
    """An aiohttp app served on 127.0.0.1 by a background thread with its own event loop."""

    def __init__(self, build: Callable[[int], Awaitable[web.Application]]) -> None:
        self._build = build
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.loop = asyncio.new_event_loop()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port: int = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._main, name=f"app-{self.port}", daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._start())
        except BaseException as exc:  # reported to the test thread
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self.loop.run_forever()
        if self._runner is not None:
            self.loop.run_until_complete(self._runner.cleanup())
        self.loop.run_until_complete(self.cleanup())
        self.loop.close()

    async def cleanup(self) -> None:
        """Runs on the server loop after the app stopped."""

    async def _start(self) -> None:
        app = await self._build(self.port)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        await web.SockSite(self._runner, self.sock).start()

    def start(self) -> Self:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise self._error
        return self

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the server's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def stop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(30)


class LiveServer(ThreadedApp):
    """The real factoryctl app with keys of each role (``admin_key``, ``member_key``, ``worker_key``)."""

    def __init__(self, db_url: str, data_dir: Path, box: SecretBox) -> None:
        self.db_url, self.data_dir, self.box = db_url, data_dir, box
        self.engine: AsyncEngine | None = None
        self.keys: dict[str, str] = {}
        super().__init__(self._app)

    async def _app(self, port: int) -> web.Application:
        self.engine = create_engine(self.db_url)
        async with self.sessions() as s, s.begin():
            keys = await builders.role_keys(s, SystemClock(), names={"other_admin": "other"})
        self.keys = {
            "admin": keys.admin,
            "member": keys.member,
            "worker": keys.worker,
            "other": keys.other_admin,
        }
        settings = ServerSettings(data_dir=self.data_dir, port=port, lease_seconds=30.0)
        app = create_app(settings, self.engine, self.box, route_modules=ROUTE_MODULES)
        app[VALIDATOR] = make_validator(self.box)
        return app

    def sessions(self) -> AsyncSession:
        assert self.engine is not None
        maker: async_sessionmaker[AsyncSession] = session_factory(self.engine)
        return maker()

    @property
    def admin_key(self) -> str:
        return self.keys["admin"]

    @property
    def member_key(self) -> str:
        return self.keys["member"]

    @property
    def worker_key(self) -> str:
        return self.keys["worker"]

    def add_automation(
        self, factory_uid: str, webhook_uid: str, payload_filter: dict[str, Any] | None, name: str = "triage"
    ) -> str:
        """An automation with one webhook trigger and its routing row, as an apply leaves them."""

        async def go() -> str:
            async with self.sessions() as s, s.begin():
                team = await builders.team(s)
                row = await builders.automation(
                    s,
                    SystemClock(),
                    team.id,
                    factory_uid,
                    name,
                    [builders.webhook_trigger([webhook_uid], payload_filter)],
                    definition_path=f"automations/{name}/automation.md",
                )
            return row.uid

        return self.run(go())

    async def cleanup(self) -> None:
        if self.engine is not None:
            await self.engine.dispose()

    def deliver(
        self, webhook: Any, payload: Any, *, secret: str, delivery_id: str | None = None
    ) -> httpx.Response:
        """POST a delivery to a token webhook's ingress URL, as a sender would."""
        headers = {"Authorization": f"Bearer {secret}"}
        if delivery_id is not None:
            headers["X-Factory-Delivery-Id"] = delivery_id
        return httpx.post(webhook.ingress_url, content=json.dumps(payload), headers=headers, timeout=10)
