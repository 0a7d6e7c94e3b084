"""The webhook page's delivery rows and their run-states poll against the real app (docs/console.md,
"Webhook page"), on SQLite and PostgreSQL: "Started nothing" with the reasons (escaped), runs with their
state, and a poll that answers only for the runs of that webhook in the session's team."""

from __future__ import annotations

from typing import Any

import builders
from aiohttp.test_utils import TestClient
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store.clock import SystemClock
from store.models import Run

from .support import sign_in
from .test_factory_pages import api_factory, create_hook, deliver


async def test_rows_say_started_nothing_with_reasons_and_show_run_states(
    client: TestClient[Any, Any], admin_key: str, sessions: async_sessionmaker[AsyncSession], team_id: str
) -> None:
    assert (await sign_in(client, admin_key)).status == 303
    uid = await api_factory(sessions, team_id)
    wid, secret = await create_hook(client, uid)
    other, other_secret = await create_hook(client, uid, "elsewhere")
    async with sessions() as s, s.begin():
        clock = SystemClock()
        trigger = builders.webhook_trigger([wid], {"kind": "<b>deploy</b>"})
        await builders.automation(s, clock, team_id, uid, "deploys", [trigger])
        await builders.automation(
            s, clock, team_id, uid, "off", [builders.webhook_trigger([wid])], enabled=False
        )
        await builders.automation(s, clock, team_id, uid, "other", [builders.webhook_trigger([other])])
    assert await deliver(client, wid, secret, {"kind": "<i>build</i>"}, "d-miss") == 202
    assert await deliver(client, wid, secret, {"kind": "<b>deploy</b>"}, "d-hit") == 202
    assert await deliver(client, other, other_secret, {}, "d-other") == 202

    page = await (await client.get(f"/console/factories/{uid}/webhooks/{wid}")).text()
    miss = page[page.index("d-miss") :]
    assert miss.index('data-outcome="no_runs">Started nothing') < miss.index("</tr>")
    reason = "value &#34;&lt;i&gt;build&lt;/i&gt;&#34; is not equal to &#34;&lt;b&gt;deploy&lt;/b&gt;&#34;"
    assert reason in miss[: miss.index("</tr>")] and "<i>build</i>" not in page  # escaped text, no markup
    assert '<strong>off</strong> <span class="pill">Disabled</span>' in miss[: miss.index("</tr>")]
    hit = page[page.index("d-hit") :]
    hit = hit[: hit.index("</tr>")]
    assert "Started nothing" not in hit and 'data-live="true">QUEUED</span>' in hit

    only = await (await client.get(f"/console/factories/{uid}/webhooks/{wid}?outcome=no_runs")).text()
    assert "d-miss" in only and "d-hit" not in only and '<strong aria-current="page">Started nothing' in only
    started = await (await client.get(f"/console/factories/{uid}/webhooks/{wid}?outcome=runs")).text()
    assert "d-hit" in started and "d-miss" not in started

    async with sessions() as s:
        runs = {r.delivery_id: r.run_id for r in (await s.execute(Run.__table__.select())).all()}
    async with sessions() as s, s.begin():
        await s.execute(update(Run).where(Run.run_id == runs["d-hit"]).values(state="SUCCEEDED"))
    poll = f"/console/factories/{uid}/webhooks/{wid}/run-states"
    resp = await client.get(poll, params=[("run_id", runs["d-hit"]), ("run_id", runs["d-other"])])
    body = await resp.json()
    assert resp.status == 200 and body["states"] == {runs["d-hit"]: "SUCCEEDED"}  # not the other webhook's
    assert "SUCCEEDED" in body["terminal"] and "QUEUED" not in body["terminal"]
    client.session.cookie_jar.clear()
    signed_out = await client.get(poll, params={"run_id": runs["d-hit"]}, allow_redirects=False)
    assert signed_out.status in (302, 303) and "states" not in await signed_out.text()
