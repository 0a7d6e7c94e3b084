"""The real API app (every module of ``ROUTE_MODULES``) on a real database, driven over HTTP.

Shared by the tests of :mod:`api.http`, which check what a client sees, not how handlers call the
plumbing. Tests build it from the ``aiohttp_client``, ``engine`` and ``box`` fixtures.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient
from sqlalchemy.ext.asyncio import AsyncEngine

from api.app import ROUTE_MODULES, create_app
from api.context import ServerSettings
from store import apikeys
from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import session_factory
from store.teams import ensure_team

PROBLEM_JSON = "application/problem+json"


@dataclass
class Api:
    client: TestClient[Any, Any]
    admin: dict[str, str]
    member: dict[str, str]

    async def call(
        self, method: str, path: str, *, headers: dict[str, str] | None = None, **kw: Any
    ) -> tuple[int, str, Any]:
        """``(status, content type, JSON body or None)``; admin credentials unless ``headers`` given."""
        resp = await self.client.request(
            method, path, headers=self.admin if headers is None else headers, **kw
        )
        body = None if resp.status == 204 else await resp.json(content_type=None)
        return resp.status, resp.content_type, body

    async def problem(self, method: str, path: str, status: int, **kw: Any) -> dict[str, Any]:
        """Call, and check the answer is a problem+json with this status; returns the problem."""
        got, content_type, body = await self.call(method, path, **kw)
        assert (got, content_type) == (status, PROBLEM_JSON), body
        assert body["status"] == status and body["error_code"] == "invalid_request"
        result: dict[str, Any] = body
        return result


async def start_api(aiohttp_client: Any, engine: AsyncEngine, box: SecretBox, data_dir: Path) -> Api:
    sessions = session_factory(engine)
    keys = {}
    async with sessions() as s, s.begin():
        team = await ensure_team(s)
        for role in ("admin", "member"):
            _row, keys[role] = await apikeys.create_key(s, SystemClock(), team.id, f"{role} key", role, None)
    app = create_app(ServerSettings(data_dir=data_dir), engine, box, route_modules=ROUTE_MODULES)
    client: TestClient[Any, Any] = await aiohttp_client(app)
    return Api(
        client,
        admin={"Authorization": f"Bearer {keys['admin']}"},
        member={"Authorization": f"Bearer {keys['member']}"},
    )
