"""Fixtures for management API tests: the parent conftest's app (every route module, ingress included) on
a real database, keys per role, and an ``mgmt`` helper that drives the API the way a dashboard would. Test
modules import :class:`Mgmt` only for type checking (``conftest`` is not a unique module name).

Definitions-managed factories and automations are written with :mod:`builders`, as an apply leaves
them: the management API only reads them, and these tests must not depend on running the reconciler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import builders
import pytest
from aiohttp.test_utils import TestClient
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store.clock import SystemClock
from store.crypto import SecretBox


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@dataclass
class Mgmt(builders.TeamRows):
    """A dashboard's view of the API: a client, keys of each role, and shortcuts for common set-up (rows
    as in :class:`builders.TeamRows`)."""

    client: TestClient[Any, Any]
    admin: dict[str, str]
    member: dict[str, str]
    worker: dict[str, str]
    other_admin: dict[str, str]

    async def factory(self, name: str = "shop") -> str:
        resp = await self.client.post("/api/v1/factory", json={"name": name}, headers=self.admin)
        assert resp.status == 201, await resp.text()
        uid: str = (await resp.json())["uid"]
        return uid

    async def webhook(self, factory_uid: str, **body: Any) -> dict[str, Any]:
        body.setdefault("name", "orders")
        resp = await self.client.post(
            f"/api/v1/factory/{factory_uid}/webhooks", json=body, headers=self.admin
        )
        assert resp.status == 201, await resp.text()
        out: dict[str, Any] = await resp.json()
        return out

    async def call(
        self, method: str, path: str, headers: dict[str, str] | None = None, **kw: Any
    ) -> tuple[int, Any]:
        resp = await self.client.request(
            method, path, headers=self.admin if headers is None else headers, **kw
        )
        if resp.status == 204:
            return 204, None
        return resp.status, await resp.json(content_type=None)

    async def definitions_factory(
        self, name: str = "repo-shop", webhooks: tuple[str, ...] = ("github",)
    ) -> str:
        """A factory as an apply from files leaves it, with token webhooks using secret ``<name>-token``."""
        clock = SystemClock()
        async with self.sessions() as s, s.begin():
            row = await builders.factory(s, clock, self.team_id, name, managed_by="definitions")
            for hook in webhooks:
                info = await builders.secret(s, self.box, clock, self.team_id, f"{hook}-token")
                await builders.webhook(
                    s,
                    clock,
                    self.team_id,
                    row.uid,
                    hook,
                    secret_name=f"{hook}-token",
                    secret_version=info.version,
                    managed_by="definitions",
                )
        return row.uid

    async def automation(
        self,
        factory_uid: str,
        triggers: list[tuple[list[str], dict[str, Any] | None]],
        *,
        name: str = "triage",
        enabled: bool = True,
    ) -> str:
        """An automation with a webhook trigger per ``(webhook_ids, payload filter)``, plus routing rows."""
        async with self.sessions() as s, s.begin():
            row = await builders.automation(
                s,
                SystemClock(),
                self.team_id,
                factory_uid,
                name,
                [builders.webhook_trigger(webhook_ids, flt) for webhook_ids, flt in triggers],
                enabled=enabled,
                definition_path=f"automations/{name}/automation.md",
            )
        return row.uid


@pytest.fixture
async def mgmt(
    client: TestClient[Any, Any], sessions: async_sessionmaker[AsyncSession], box: SecretBox
) -> Mgmt:
    """Over the parent conftest's ``client`` (the app with every route module)."""
    async with sessions() as s, s.begin():
        keys = await builders.role_keys(s, SystemClock())
    return Mgmt(
        client=client,
        sessions=sessions,
        box=box,
        team_id=keys.team_id,
        admin=auth(keys.admin),
        member=auth(keys.member),
        worker=auth(keys.worker),
        other_admin=auth(keys.other_admin),
    )
