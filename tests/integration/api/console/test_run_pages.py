"""The console's runs, run and automation pages (docs/console.md, "Pages") against the real app, on SQLite
and PostgreSQL: filters and keyset pages, the run page and its live stream, Cancel and follow-up forms,
escaping of harness output, and the automation page's "Test filter"."""

from __future__ import annotations

import asyncio
import datetime as dt
import html
import json
import re
from typing import Any

import builders
import pytest
from aiohttp.test_utils import TestClient
from markupsafe import escape
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.console import run_list
from api.console.run_pages import PAGE_LOG_LINES
from store.clock import ManualClock, SystemClock

from .support import sign_in, token

WORKERS = "/api/v1/workers"


def h(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def pager(page: str) -> dict[str, str]:
    return {rel: html.unescape(url) for rel, url in re.findall(r'rel="(prev|next)" href="([^"]+)"', page)}


async def new_run(client: TestClient[Any, Any], key: str, prompt: str = "go") -> str:
    resp = await client.post(
        "/api/v1/agent/run",
        json={"prompt": prompt, "config": {"worker_host": "host-a", "name": "nightly"}},
        headers=h(key),
    )
    assert resp.status == 200, await resp.text()
    run_id: str = (await resp.json())["run_id"]
    return run_id


TOKENS: dict[str, str] = {}  # run id -> the lease token of its claim, presented by every later call


async def worker(client: TestClient[Any, Any], key: str, path: str, body: dict[str, Any]) -> None:
    run_id = path.split("/")[2] if path.startswith("/runs/") else ""
    token = {"lease_token": TOKENS[run_id]} if run_id in TOKENS else {}
    resp = await client.post(f"{WORKERS}{path}", json={"worker_id": "wk-1", **token, **body}, headers=h(key))
    assert resp.status in (200, 204), await resp.text()
    if path == "/claim" and resp.status == 200:
        answer = await resp.json()
        TOKENS[answer["run"]["run_id"]] = answer["lease_token"]


async def start(client: TestClient[Any, Any], key: str, run_id: str) -> None:
    await worker(client, key, "/claim", {"worker_host": "host-a", "wait_seconds": 0})
    await worker(client, key, f"/runs/{run_id}/heartbeat", {"state": "INPROGRESS"})


async def test_runs_list_filters_and_keyset_pages(
    client: TestClient[Any, Any], member_key: str, seed_run: Any
) -> None:
    clock = ManualClock(dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC))
    for i in range(30):
        clock.advance(60)
        await seed_run(clock=clock, title=f"run number {i:02d}", state="FAILED" if i == 7 else "SUCCEEDED")
    await seed_run(team="other-team", title="not ours")
    await sign_in(client, member_key)

    first = await (await client.get("/console/runs")).text()
    assert first.count("<tr>") == 26  # header + 25 rows
    assert "run number 05" in first and "run number 04" not in first and "not ours" not in first
    assert first.index("run number 29") < first.index("run number 28")  # newest first
    links = pager(first)
    assert set(links) == {"next"}
    second = await (await client.get(links["next"])).text()
    assert "run number 04" in second and "run number 00" in second and "run number 05" not in second
    back = pager(second)
    assert set(back) == {"prev"}
    again = await (await client.get(back["prev"])).text()
    assert "run number 29" in again and "run number 05" in again and "run number 04" not in again
    assert set(pager(again)) == {"next"}

    failed = await (await client.get("/console/runs?state=FAILED")).text()
    assert "run number 07" in failed and "run number 08" not in failed
    assert 'class="pill state state-FAILED"' in failed
    found = await (await client.get("/console/runs?q=number+1")).text()
    assert "run number 12" in found and "run number 22" not in found
    window = await (
        await client.get("/console/runs?created_after=2026-01-01T12:10&created_before=2026-01-01T12:13")
    ).text()
    assert re.findall(r"run number \d\d", window) == ["run number 11", "run number 10"]
    bad = await client.get("/console/runs?cursor=nonsense")
    assert bad.status == 200 and "no longer fits" in await bad.text()


async def test_a_search_examines_a_bounded_number_of_runs_per_page_and_older_continues_it(
    client: TestClient[Any, Any], member_key: str, seed_run: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_list, "SCAN_LIMIT", 4)
    clock = ManualClock(dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC))
    wanted = {2, 3, 9, 10, 11}  # oldest first; runs 12..16 and 4..8 hold no match
    for i in range(17):
        clock.advance(60)
        title = f"{'needle' if i in wanted else 'hay'} {i:02d}"
        state, source = "FAILED" if i % 2 else "SUCCEEDED", "CLI" if i % 3 else "API"
        await seed_run(clock=clock, title=title, state=state, source=source)
    await sign_in(client, member_key)

    async def follow(url: str, rel: str) -> list[tuple[list[str], bool]]:
        pages = []
        while url:
            page = await (await client.get(url)).text()
            pages.append((re.findall(r"(?:needle|hay) (\d\d)", page), 'id="scan-stopped"' in page))
            url = pager(page).get(rel, "")
            assert len(pages) < 10
        return pages

    pages = await follow("/console/runs?q=needle", "next")
    # newest first, 4 runs examined per page: 16-13 (none), 12-9, 8-5 (none), 4-1, 0 (the end)
    assert pages == [([], True), (["11", "10", "09"], True), ([], True), (["03", "02"], True), ([], False)]
    two = await follow("/console/runs?state=FAILED&source=CLI", "next")  # FAILED runs drive, 4 a page
    assert two == [(["13", "11"], True), (["07", "05", "01"], True), ([], False)]
    last = await (await client.get("/console/runs?q=needle")).text()
    for _ in range(4):
        last = await (await client.get(pager(last)["next"])).text()
    back = await follow(pager(last)["prev"], "prev")  # "Newer" walks back, 4 runs a page from run 01 on
    assert back == [(["03", "02"], True), (["09"], True), (["11", "10"], True), ([], False)]
    plain = await (await client.get("/console/runs?state=FAILED")).text()  # indexed: no bound, full pages
    assert 'id="scan-stopped"' not in plain and len(re.findall(r"(?:needle|hay) \d\d", plain)) == 8


async def test_run_page_shows_prompt_config_timeline_and_escaped_logs(
    client: TestClient[Any, Any], member_key: str, worker_key: str
) -> None:
    envelope = 'Webhook delivery:\n{"action": "opened", "title": "<b>hi</b>"}'
    run_id = await new_run(client, member_key, prompt=envelope)
    await start(client, worker_key, run_id)
    await worker(
        client,
        worker_key,
        f"/runs/{run_id}/logs",
        {"lines": [{"stream": "stdout", "text": "<script>alert(1)</script>"}]},
    )
    await sign_in(client, member_key)
    resp = await client.get(f"/console/runs/{run_id}")
    page = await resp.text()
    assert resp.status == 200
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert str(escape(envelope)) in page and "<b>hi</b>" not in page
    assert "&#34;worker_host&#34;: &#34;host-a&#34;" in page  # the resolved configuration as JSON
    timeline = page[page.index('id="timeline"') :]
    assert [s for s in re.findall(r"state-(\w+)\">", timeline)] == ["QUEUED", "CLAIMED", "INPROGRESS"]
    assert f'data-events="/console/runs/{run_id}/events?after=' in page and 'data-live="true"' in page
    assert "/console/static/run.js" in page and "<script>" not in page  # no inline script
    other = await client.get("/console/runs/run_missing")
    assert other.status == 404


async def test_a_long_log_shows_its_newest_lines_and_the_live_stream_resumes_after_the_last_event(
    client: TestClient[Any, Any], member_key: str, worker_key: str
) -> None:
    run_id = await new_run(client, member_key)
    await start(client, worker_key, run_id)
    total = PAGE_LOG_LINES + 7
    for first in range(0, total, 500):
        lines = [{"stream": "stdout", "text": f"line {n:05d}"} for n in range(first, min(first + 500, total))]
        await worker(client, worker_key, f"/runs/{run_id}/logs", {"lines": lines})
    await worker(client, worker_key, f"/runs/{run_id}/heartbeat", {"state": "INPROGRESS"})
    await sign_in(client, member_key)
    page = await (await client.get(f"/console/runs/{run_id}")).text()
    shown = re.findall(r"line (\d{5})", page)
    assert shown == [f"{n:05d}" for n in range(7, total)]  # the newest, oldest first
    assert f">{total} lines<" in page and f'data-lines="{total}"' in page
    assert f"Showing the newest {PAGE_LOG_LINES} of {total} lines" in page
    timeline = page[page.index('id="timeline"') :]
    assert [s for s in re.findall(r"state-(\w+)\">", timeline)] == ["QUEUED", "CLAIMED", "INPROGRESS"]
    after = re.findall(r"events\?after=(\d+)", page)[0]
    last = {"lines": [{"stream": "stdout", "text": "last"}]}
    await worker(client, worker_key, f"/runs/{run_id}/logs", last)
    await worker(client, worker_key, f"/runs/{run_id}/state", {"state": "SUCCEEDED"})
    resumed = await (await client.get(f"/console/runs/{run_id}/events?after={after}")).text()
    data = [json.loads(x[6:])["data"] for x in resumed.splitlines() if x.startswith("data: ")]
    assert [d.get("text") or d.get("state") for d in data] == ["last", "SUCCEEDED"]  # nothing shown twice
    short = await new_run(client, member_key)
    assert "Showing the newest" not in await (await client.get(f"/console/runs/{short}")).text()


async def test_cancel_and_follow_up_through_the_forms(
    client: TestClient[Any, Any], member_key: str, worker_key: str
) -> None:
    run_id = await new_run(client, member_key)
    await start(client, worker_key, run_id)
    await sign_in(client, member_key)
    page = await (await client.get(f"/console/runs/{run_id}")).text()
    csrf = token(page, "csrf_token")

    refused = await client.post(
        f"/console/runs/{run_id}/followups", data={"message": "x"}, allow_redirects=False
    )
    assert refused.status == 403
    refused = await client.post(f"/console/runs/{run_id}/cancel", data={}, allow_redirects=False)
    assert refused.status == 403

    sent = await client.post(
        f"/console/runs/{run_id}/followups",
        data={"csrf_token": csrf, "message": "also fix the <docs>"},
        allow_redirects=False,
    )
    assert sent.status == 303 and sent.headers["Location"] == f"/console/runs/{run_id}?done=delivered"
    page = await (await client.get(sent.headers["Location"])).text()
    assert "Follow-up sent" in page and "also fix the &lt;docs&gt;" in page

    cancelled = await client.post(
        f"/console/runs/{run_id}/cancel", data={"csrf_token": csrf}, allow_redirects=False
    )
    assert cancelled.headers["Location"] == f"/console/runs/{run_id}?done=cancel_requested"
    state = await (await client.get(f"/api/v1/agent/runs/{run_id}", headers=h(member_key))).json()
    assert state["cancel_requested"] is True

    queued = await new_run(client, member_key)
    done = await client.post(
        f"/console/runs/{queued}/cancel", data={"csrf_token": csrf}, allow_redirects=False
    )
    assert done.headers["Location"] == f"/console/runs/{queued}?done=cancelled"
    page = await (await client.get(done.headers["Location"])).text()
    assert "The run was cancelled." in page and 'id="run-state" class="pill state state-CANCELLED"' in page
    again = await client.post(
        f"/console/runs/{queued}/cancel", data={"csrf_token": csrf}, allow_redirects=False
    )
    assert again.headers["Location"].endswith("done=not_cancellable")
    late = await client.post(
        f"/console/runs/{queued}/followups", data={"csrf_token": csrf, "message": "hi"}, allow_redirects=False
    )
    assert late.headers["Location"].endswith("done=followup_refused")


async def test_console_event_stream_needs_a_session_and_streams_the_run(
    client: TestClient[Any, Any], member_key: str, worker_key: str
) -> None:
    run_id = await new_run(client, member_key)
    away = await client.get(f"/console/runs/{run_id}/events", allow_redirects=False)
    assert away.status == 303 and away.headers["Location"].startswith("/console/login?next=")
    await sign_in(client, member_key)
    await start(client, worker_key, run_id)
    resp = await client.get(f"/console/runs/{run_id}/events")
    assert resp.status == 200 and resp.headers["Content-Type"].startswith("text/event-stream")

    async def read() -> list[dict[str, Any]]:
        out = []
        while raw := await resp.content.readline():
            line = raw.decode()
            if line.startswith("data: "):
                out.append(json.loads(line[6:]))
        return out

    reader = asyncio.create_task(read())
    await worker(client, worker_key, f"/runs/{run_id}/logs", {"lines": [{"stream": "stdout", "text": "hi"}]})
    await worker(client, worker_key, f"/runs/{run_id}/state", {"state": "SUCCEEDED"})
    got = await asyncio.wait_for(reader, 10)
    assert [e["data"].get("state") or e["data"].get("text") for e in got] == [
        "QUEUED",
        "CLAIMED",
        "INPROGRESS",
        "hi",
        "SUCCEEDED",
    ]
    resumed = await client.get(f"/console/runs/{run_id}/events?after={got[3]['id']}")
    assert [
        json.loads(x[6:])["data"]["state"]
        for x in (await resumed.text()).splitlines()
        if x.startswith("data: ")
    ] == ["SUCCEEDED"]
    missing = await client.get("/console/runs/run_nope/events")
    assert missing.status == 404


async def test_automation_page_and_test_filter(
    client: TestClient[Any, Any], member_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    clock = SystemClock()
    async with sessions() as s, s.begin():
        team = await builders.team(s)
        factory = await builders.factory(s, clock, team.id, "triage")
        hook = await builders.webhook(s, clock, team.id, factory.uid, "github")
        automation = await builders.automation(
            s,
            clock,
            team.id,
            factory.uid,
            "label-bugs",
            [
                builders.webhook_trigger(
                    [hook.uid], {"action": "opened", "issue": {"labels": ["bug", "crash"]}}
                )
            ],
            prompt="Triage <this> issue",
        )
        at = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
        match = b'{"action": "opened", "issue": {"labels": ["bug"]}}'
        miss = b'{"action": "closed", "issue": {"labels": ["bug"]}}'
        await builders.delivery(s, team.id, hook.uid, "d-match", received_at=at, payload=match)
        await builders.delivery(s, team.id, hook.uid, "d-miss", received_at=at, payload=miss)
    await sign_in(client, member_key)
    url = f"/console/factories/{factory.uid}/automations/{automation.uid}"
    page = await (await client.get(url)).text()
    assert "Triage &lt;this&gt; issue" in page and "Enabled" in page
    assert f'href="/console/factories/{factory.uid}/webhooks/{hook.uid}">github</a>' in page
    assert "<code>action</code></td><td>equals &#34;opened&#34;</td>" in page
    assert "<code>issue.labels</code></td><td>is one of &#34;bug&#34;, &#34;crash&#34;</td>" in page
    assert f'value="{hook.uid} d-match"' in page and f'value="{hook.uid} d-miss"' in page

    yes = await (await client.get(url, params={"delivery": f"{hook.uid} d-match"})).text()
    assert '<div class="verdict yes" role="status">' in yes and "<strong>Would trigger</strong>" in yes
    no = await (await client.get(url, params={"delivery": f"{hook.uid} d-miss"})).text()
    assert "<strong>Would not trigger</strong>" in no and "(field <code>action</code>)" in no
    assert '<li class="pass"><span class="mark">✓</span> <strong>Webhook</strong>' in no
    assert '<li class="fail"><span class="mark">✗</span> <strong>Payload</strong>' in no

    csrf = token(page, "csrf_token")
    posted = await client.post(url, data={"csrf_token": csrf, "delivery": f"{hook.uid} d-match"})
    assert "<strong>Would trigger</strong>" in await posted.text()
    refused = await client.post(url, data={"delivery": f"{hook.uid} d-match"})
    assert refused.status == 403
    unknown = await (await client.get(url, params={"delivery": f"{hook.uid} d-none"})).text()
    assert "has delivery &#39;d-none&#39;" in unknown or "d-none" in unknown
    assert (await client.get(f"/console/factories/{factory.uid}/automations/aut_nope")).status == 404


async def test_a_follow_up_past_the_pending_bound_is_refused_with_a_notice(
    client: TestClient[Any, Any], member_key: str
) -> None:
    """The console's form goes through the same bound as the API (docs/api.md, follow-ups)."""
    run_id = await new_run(client, member_key)
    for i in range(20):  # the default bound: 20 pending follow-ups
        resp = await client.post(
            f"/api/v1/agent/runs/{run_id}/followups", json={"message": f"more {i}"}, headers=h(member_key)
        )
        assert resp.status == 200
    await sign_in(client, member_key)
    csrf = token(await (await client.get(f"/console/runs/{run_id}")).text(), "csrf_token")
    refused = await client.post(
        f"/console/runs/{run_id}/followups",
        data={"csrf_token": csrf, "message": "one more"},
        allow_redirects=False,
    )
    assert refused.status == 303 and refused.headers["Location"].endswith("done=followup_limit")
    page = await (await client.get(refused.headers["Location"])).text()
    assert "as many follow-ups waiting" in page
