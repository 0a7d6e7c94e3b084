"""A factory's health on its console page (docs/console.md, "Factory health"), on SQLite and PostgreSQL:
per webhook the last delivery and the accepted / rejected counts of the last 24 h (older entries and other
webhooks not counted), per automation and per schedule the last run (another factory's runs not taken),
the factory's runs of the last 24 h, and Recent applies without the no-change rows."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import builders
from aiohttp.test_utils import TestClient
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.console.factory_health import factory_health
from store.clock import SystemClock
from store.models import ApplyRecord

from .support import sign_in


def section(html: str, heading: str) -> str:
    """The part of the page from ``<h2>heading</h2>`` to the next heading."""
    start = html.index(f"<h2>{heading}</h2>")
    end = html.find("<h2>", start + 5)
    return html[start : end if end > 0 else None]


def text(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


async def test_factory_page_shows_health_and_changes_only(
    client: TestClient[Any, Any], sessions: async_sessionmaker[AsyncSession], team_id: str, member_key: str
) -> None:
    clock = SystemClock()
    now = clock.now()
    async with sessions() as s, s.begin():
        shop = await builders.factory(s, clock, team_id, "shop")
        other = await builders.factory(s, clock, team_id, "other")
        hook = await builders.webhook(s, clock, team_id, shop.uid, "alerts")
        quiet = await builders.webhook(s, clock, team_id, shop.uid, "quiet")
        elsewhere = await builders.webhook(s, clock, team_id, other.uid, "alerts")
        for i, (status, age) in enumerate(
            [
                ("Accepted", dt.timedelta(hours=30)),  # older than 24 h: not counted
                ("Accepted", dt.timedelta(hours=3)),
                ("Rejected (auth)", dt.timedelta(hours=2)),
                ("Duplicate", dt.timedelta(hours=1, minutes=30)),
                ("Accepted", dt.timedelta(minutes=5)),
            ]
        ):
            await builders.delivery(s, team_id, hook.uid, f"d-{i}", received_at=now - age, status=status)
        await builders.delivery(s, team_id, elsewhere.uid, "x", received_at=now, status="Rejected (auth)")
        trigger = builders.webhook_trigger([hook.uid])
        triage = await builders.automation(s, clock, team_id, shop.uid, "triage", [trigger])
        idle = await builders.automation(s, clock, team_id, shop.uid, "idle", [trigger])
        nightly = await builders.schedule(
            s, clock, team_id, "nightly", "0 3 * * *", factory_uid=shop.uid, prompt="p"
        )
        older = await builders.run(
            s, clock, team_id, factory_uid=shop.uid, automation_id=triage.uid, state="FAILED",
            created_at=now - dt.timedelta(hours=2),
        )  # fmt: skip
        newest = await builders.run(
            s, clock, team_id, factory_uid=shop.uid, automation_id=triage.uid, state="SUCCEEDED",
            created_at=now - dt.timedelta(minutes=1),
        )  # fmt: skip
        scheduled = await builders.run(
            s, clock, team_id, factory_uid=shop.uid, schedule_id=nightly.uid, state="INPROGRESS",
            created_at=now - dt.timedelta(minutes=2),
        )  # fmt: skip
        await builders.run(
            s, clock, team_id, factory_uid=other.uid, automation_id=idle.uid, state="SUCCEEDED"
        )  # another factory's run is not this factory's automation's
        for i, outcome in enumerate(["succeeded", "noop", "failed", "noop", "noop"]):
            s.add(
                ApplyRecord(
                    team_id=team_id, factory_uid=shop.uid, factory_name="shop", revision=f"rev-{i}",
                    outcome=outcome, started_at=now - dt.timedelta(minutes=10 - i), duration_ms=3,
                    summary={}, errors=[],
                )
            )  # fmt: skip

    async with sessions() as s:
        health = await factory_health(s, team_id, shop.uid, [hook.uid, quiet.uid], now)
    assert (health.webhooks[hook.uid].accepted, health.webhooks[hook.uid].rejected) == (2, 1)
    last = health.webhooks[hook.uid].last_delivery
    assert last is not None and abs((now - dt.timedelta(minutes=5)) - last) < dt.timedelta(seconds=1)
    assert health.webhooks[quiet.uid].last_delivery is None and health.webhooks[quiet.uid].accepted == 0
    assert health.automations[triage.uid].run_id == newest.run_id and idle.uid not in health.automations
    assert health.schedules[nightly.uid].run_id == scheduled.run_id
    assert health.runs_24h == {"succeeded": 1, "failed": 1, "active": 1, "other": 0}
    assert older.run_id not in {r.run_id for r in health.automations.values()}

    assert (await sign_in(client, member_key)).status == 303
    page = await (await client.get(f"/console/factories/{shop.uid}")).text()
    hooks = text(section(page, "Webhooks"))
    assert "alerts" in hooks and "2 accepted 1 rejected" in hooks and "5 min ago" in hooks
    assert "quiet" in hooks and "never" in hooks
    autos = section(page, "Automations")
    assert f'href="/console/runs/{newest.run_id}"' in autos and "SUCCEEDED" in autos
    assert "never" in text(autos)  # idle
    assert f'href="/console/runs/{scheduled.run_id}"' in section(page, "Schedules")
    day = text(page[page.index('id="health"') :])
    assert "1 succeeded 1 failed 1 active" in day and "2 accepted · 1 rejected" in day
    applies = section(page, "Recent applies")
    assert "rev-0" in applies and "rev-2" in applies  # the changes
    assert not any(f"rev-{i}" in applies.split('id="last-noop"')[1] for i in (1, 3))  # no noop rows
    assert 'id="last-noop"' in applies and "rev-4" in applies  # the newest apply, a noop, as one line
    assert applies.count("<tr>") == 3  # header and the two changes
