"""No console page issues a query per row (N+1), on SQLite and PostgreSQL: every page is rendered with 3 rows
of everything it lists and again with 30, and must execute the same number of SQL statements both times.

Statements are counted with a ``before_cursor_execute`` listener on the app's engine, one request at a
time; ``bench/console.py`` counts them the same way at scale (docs/benchmarks.md, "Console pages at scale").
"""

from __future__ import annotations

import json
from typing import Any

import builders
from aiohttp.test_utils import TestClient
from sql_support import statements
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.runs.new_run import NewAttachment
from store import ids
from store.clock import SystemClock
from store.crypto import SecretBox
from store.models import ApplyRecord, FactoryObject

from .support import sign_in

FEW, MANY = 3, 30
KINDS = {"agent": ids.AGENT, "skill": ids.SKILL, "runner": ids.RUNNER, "scorer": ids.SCORER,
         "benchmark": ids.BENCHMARK}  # fmt: skip


class Scene:
    """One factory with ``n`` of everything its pages list; :meth:`grow` adds rows up to a new ``n``."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], box: SecretBox, team_id: str) -> None:
        self.sessions, self.box, self.team_id, self.n = sessions, box, team_id, 0
        self.factory = self.hook = self.automation = self.run = ""

    async def start(self) -> None:
        clock = SystemClock()
        async with self.sessions() as s, s.begin():
            self.factory = (await builders.factory(s, clock, self.team_id, "shop")).uid
            self.hook = (await builders.webhook(s, clock, self.team_id, self.factory, "github")).uid
            trigger = builders.webhook_trigger([self.hook], {"action": "opened"})
            self.automation = (
                await builders.automation(s, clock, self.team_id, self.factory, "triage", [trigger])
            ).uid
            self.run = (await builders.run(s, clock, self.team_id, factory_uid=self.factory)).run_id

    async def grow(self, n: int) -> None:
        clock = SystemClock()
        async with self.sessions() as s, s.begin():
            for i in range(self.n, n):
                other = await builders.factory(s, clock, self.team_id, f"factory-{i}")
                await builders.secret(s, self.box, clock, self.team_id, f"SECRET_{i}")
                hook = await builders.webhook(
                    s, clock, self.team_id, self.factory, f"hook-{i}", secret_name=f"SECRET_{i}"
                )
                trigger = builders.webhook_trigger([self.hook, hook.uid], {"n": {"in": [i, i + 1]}})
                await builders.automation(s, clock, self.team_id, self.factory, f"auto-{i}", [trigger])
                await builders.environment(s, clock, self.team_id, f"env-{i}", {}, factory_uid=self.factory)
                await builders.schedule(
                    s, clock, self.team_id, f"sched-{i}", "0 3 * * *", factory_uid=self.factory,
                    automation=f"auto-{i}",
                )  # fmt: skip
                await builders.notification(s, clock, self.team_id, self.factory, f"endpoint-{i}")
                for kind, prefix in KINDS.items():  # the factory page's definition sections
                    s.add(
                        FactoryObject(
                            uid=ids.new_id(prefix), team_id=self.team_id, factory_uid=self.factory, kind=kind,
                            name=f"{kind}-{i}", spec={"description": f"{kind} {i}", "agent": "agent-0"},
                            created_at=clock.now(), updated_at=clock.now(),
                        )
                    )  # fmt: skip
                await builders.api_key(s, clock, self.team_id, "member", name=f"key-{i}")
                s.add(
                    ApplyRecord(
                        team_id=self.team_id, factory_uid=self.factory, factory_name="shop", revision=f"r{i}",
                        outcome="failed", started_at=clock.now(), duration_ms=5, summary={"created": i},
                        errors=[{"file": "webhooks/x.yaml", "line": 1, "message": "bad"}],
                    )
                )  # fmt: skip
                payload = json.dumps({"action": "opened", "n": i}).encode()
                await builders.delivery(
                    s, self.team_id, self.hook, f"d-{i}", received_at=clock.now(), payload=payload
                )
                for automation in (self.automation, None):  # each delivery started two runs
                    await builders.run(
                        s, clock, self.team_id, factory_uid=other.uid, webhook_uid=self.hook,
                        delivery_id=f"d-{i}", automation_id=automation, state="SUCCEEDED",
                        attachments=[NewAttachment("a.txt", "text/plain", b"a")],
                    )  # fmt: skip
                await builders.run(s, clock, self.team_id, factory_uid=other.uid, source="CLI")
        self.n = n

    def pages(self) -> dict[str, str]:
        base = f"/console/factories/{self.factory}"
        return {
            "factories": "/console/factories",
            "factory": base,
            "webhook": f"{base}/webhooks/{self.hook}",
            "automation": f"{base}/automations/{self.automation}",
            "automation, Test filter": f"{base}/automations/{self.automation}?delivery={self.hook}+d-0",
            "runs": "/console/runs",
            "runs ?state": "/console/runs?state=SUCCEEDED",
            "runs ?factory": f"/console/runs?factory_uid={self.factory}",
            "run": f"/console/runs/{self.run}",
            "secrets": "/console/secrets",
            "keys": "/console/keys",
        }


async def statements_per_page(
    client: TestClient[Any, Any], engine: AsyncEngine, scene: Scene
) -> dict[str, int]:
    out = {}
    for name, path in scene.pages().items():
        with statements(engine) as seen:
            resp = await client.get(path, allow_redirects=False)
            body = await resp.text()
        assert resp.status == 200, (path, body[:500])
        # queries only: a page that reads one snapshot opens its transaction with a BEGIN on SQLite
        out[name] = sum(not s.lstrip().upper().startswith("BEGIN") for s in seen)
    return out


async def test_no_page_runs_a_query_per_row(
    client: TestClient[Any, Any],
    engine: AsyncEngine,
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
    admin_key: str,
    team_id: str,
) -> None:
    assert (await sign_in(client, admin_key)).status == 303
    scene = Scene(sessions, box, team_id)
    await scene.start()
    await scene.grow(FEW)
    few = await statements_per_page(client, engine, scene)
    await scene.grow(MANY)
    many = await statements_per_page(client, engine, scene)
    runs_page = await (await client.get("/console/runs")).text()
    assert runs_page.count('href="/console/runs/run_') == 25  # a full page: the run count did grow
    webhook_page = await (await client.get(scene.pages()["webhook"])).text()
    assert webhook_page.count("d-29") and webhook_page.count('href="/console/runs/run_') == 2 * MANY
    assert many == few, f"statements grew with the rows: {few} with {FEW} rows, {many} with {MANY}"
    assert all(0 < count <= 12 for count in many.values()), many


async def test_the_counter_sees_a_query_per_row(
    engine: AsyncEngine, sessions: async_sessionmaker[AsyncSession]
) -> None:
    """The listener counts every statement, so an N+1 would show: one statement per loop turn here."""
    with statements(engine) as seen:
        for _ in range(3):
            async with sessions() as s:
                await s.get(ApplyRecord, 1)
    assert len(seen) == 3
