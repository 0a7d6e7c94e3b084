"""Fixtures for ingress tests: the real app over real HTTP, with factories, webhooks, automations and
team secrets written straight into the store with :mod:`builders` (the reconciler is not needed to
exercise ingress).

``make_ingress(**settings)`` builds the app (ManualClock by default, so signatures and rate windows
are deterministic) and returns an :class:`Ingress` harness: ``webhook(...)`` and ``automation(...)``
create rows, ``post(hook, body, ...)`` sends a delivery the way a real sender would (credentials
added per auth mode unless told otherwise), and ``deliveries``/``runs``/``attachments`` read back
what was committed.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import builders
import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.app import create_app
from api.context import ServerSettings
from api.ingress.signatures import generate_standard_webhooks_secret, sign
from store import ids
from store import secrets as secret_store
from store.clock import ManualClock
from store.crypto import SecretBox
from store.models import Automation, Delivery, Run, RunAttachment, Webhook
from store.rules.vocabulary import canonical_scheme

NOW = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)
INGRESS_MODULES = ("api.ops", "api.ingress.routes")


@dataclass
class Hook:
    uid: str
    name: str
    auth_mode: str
    secret: str | None
    scheme: str | None = None

    @property
    def path(self) -> str:
        return f"/webhooks/w/{self.uid}"


class Ingress:
    """One app + client + seeded factory; helpers write rows with :mod:`builders` and read results back."""

    def __init__(
        self,
        client: TestClient[Any, Any],
        sessions: async_sessionmaker[AsyncSession],
        box: SecretBox,
        clock: ManualClock,
        team_id: str,
        factory_uid: str,
    ) -> None:
        self.client = client
        self.sessions = sessions
        self.box = box
        self.clock = clock
        self.team_id = team_id
        self.factory_uid = factory_uid
        self._n = 0

    # --- rows -------------------------------------------------------------------------------------

    async def webhook(
        self,
        name: str | None = None,
        *,
        auth_mode: str = "token",
        scheme: str | None = None,
        secret: str | None = "",
        delivery_id_header: str | None = None,
        enabled: bool = True,
        uid: str | None = None,
        sessions: async_sessionmaker[AsyncSession] | None = None,
    ) -> Hook:
        """A webhook with its team secret; ``secret=""`` generates one, ``None`` leaves it unsupplied.
        ``sessions`` writes it through another engine (another replica, the CLI's process)."""
        self._n += 1
        name = name or f"hook-{self._n}"
        if secret == "":
            secret = (
                generate_standard_webhooks_secret()
                if scheme and canonical_scheme(scheme) == "standard_webhooks"
                else f"s3cr3t-{self._n}-x"
            )
        async with (sessions or self.sessions)() as s, s.begin():
            version = None
            if secret is not None:
                info = await builders.secret(s, self.box, self.clock, self.team_id, f"{name}-secret", secret)
                version = info.version
            row = await builders.webhook(
                s,
                self.clock,
                self.team_id,
                self.factory_uid,
                name,
                auth_mode=auth_mode,
                signature_scheme=scheme,
                secret_name=f"{name}-secret",
                secret_version=version,
                delivery_id_header=delivery_id_header,
                enabled=enabled,
                uid=uid,
            )
        return Hook(row.uid, name, auth_mode, secret, scheme)

    async def automation(
        self,
        name: str,
        hooks: list[Hook],
        *,
        payload_filter: dict[str, Any] | None = None,
        enabled: bool = True,
        prompt: str = "Triage the event.",
        title: str | None = None,
        config: dict[str, Any] | None = None,
        agent: str = "foreman",
    ) -> str:
        async with self.sessions() as s, s.begin():
            row = await builders.automation(
                s,
                self.clock,
                self.team_id,
                self.factory_uid,
                name,
                [builders.webhook_trigger([h.uid for h in hooks], payload_filter)],
                enabled=enabled,
                agent=agent,
                prompt=prompt,
                title=title,
                config=config,
            )
        return row.uid

    async def update_webhook(self, hook: Hook, **values: Any) -> None:
        async with self.sessions() as s, s.begin():
            await s.execute(update(Webhook).where(Webhook.uid == hook.uid).values(**values))

    async def update_automation(self, uid: str, **values: Any) -> None:
        async with self.sessions() as s, s.begin():
            await s.execute(update(Automation).where(Automation.uid == uid).values(**values))

    async def rotate(self, hook: Hook, new_secret: str) -> None:
        """API-managed rotation: a new secret version, captured by the webhook at once."""
        async with self.sessions() as s, s.begin():
            info = await secret_store.set_value(
                s, self.box, self.clock, self.team_id, f"{hook.name}-secret", new_secret
            )
            await s.execute(
                update(Webhook).where(Webhook.uid == hook.uid).values(secret_version=info.version)
            )
        hook.secret = new_secret

    # --- requests ---------------------------------------------------------------------------------

    async def post(
        self,
        hook: Hook,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        auth: bool = True,
        delivery_id: str | None = None,
        path: str | None = None,
    ) -> ClientResponse:
        """POST a delivery; ``body`` is JSON-encoded unless ``raw`` bytes are given."""
        data = raw if raw is not None else json.dumps({} if body is None else body).encode()
        sent: dict[str, str] = {"Content-Type": "application/json"}
        url = path or hook.path
        if auth and hook.secret is not None:
            if hook.auth_mode == "token":
                sent["Authorization"] = f"Bearer {hook.secret}"
            elif hook.auth_mode == "url_token":
                url = path or f"{hook.path}/{hook.secret}"
            elif hook.auth_mode == "signature" and hook.scheme:
                sent.update(sign(hook.scheme, hook.secret, data, self.clock.now(), delivery_id))
        if delivery_id is not None and hook.auth_mode != "signature":
            sent["X-Factory-Delivery-Id"] = delivery_id
        sent.update(headers or {})
        return await self.client.post(url, data=data, headers=sent)

    # --- reads ------------------------------------------------------------------------------------

    async def deliveries(self, hook: Hook) -> list[Delivery]:
        async with self.sessions() as s:
            stmt = select(Delivery).where(Delivery.webhook_uid == hook.uid).order_by(Delivery.seq)
            return list((await s.execute(stmt)).scalars())

    async def statuses(self, hook: Hook) -> list[str]:
        return [d.status for d in await self.deliveries(hook)]

    async def runs(self, hook: Hook | None = None) -> list[Run]:
        async with self.sessions() as s:
            stmt = select(Run).order_by(Run.created_at, Run.run_id)
            if hook is not None:
                stmt = stmt.where(Run.webhook_uid == hook.uid)
            return list((await s.execute(stmt)).scalars())

    async def attachments(self, run_id: str) -> list[RunAttachment]:
        async with self.sessions() as s:
            stmt = select(RunAttachment).where(RunAttachment.run_id == run_id)
            return list((await s.execute(stmt)).scalars())


MakeIngress = Callable[..., Awaitable[Ingress]]


@pytest.fixture
def make_ingress(
    aiohttp_client: Any,
    engine: AsyncEngine,
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
    tmp_path: Path,
) -> MakeIngress:
    """``await make_ingress(clock=None, worker_host=None, agents=None, **ServerSettings fields)``."""

    async def make(
        *,
        clock: ManualClock | None = None,
        worker_host: str | None = None,
        agents: dict[str, Any] | None = None,
        **settings: Any,
    ) -> Ingress:
        clock = clock or ManualClock(NOW)
        async with sessions() as s, s.begin():
            team = await builders.team(s, clock=clock)
            factory = await builders.factory(
                s,
                clock,
                team.id,
                f"factory-{ids.new_id('x')[-6:]}",
                worker_host=worker_host,
                agents=agents or None,
            )
            team_id, factory_uid = team.id, factory.uid
        app = create_app(
            ServerSettings(data_dir=tmp_path, **settings),
            engine,
            box,
            clock=clock,
            route_modules=INGRESS_MODULES,
        )
        client = await aiohttp_client(app)
        return Ingress(client, sessions, box, clock, team_id, factory_uid)

    return make


@pytest.fixture
async def ingress(make_ingress: MakeIngress) -> Ingress:
    return await make_ingress()
