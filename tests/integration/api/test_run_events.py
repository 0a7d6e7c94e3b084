"""``GET /agent/runs/{id}/events`` (docs/events.md) against the real app, on SQLite and PostgreSQL:
replay then live through the real worker-protocol routes, resume, errors, the transaction rule, the
cap, two replicas, the per-key stream cap and shutdown."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sse_support import collect, frames

from api.app import ROUTE_MODULES, create_app
from api.claims import queue, run_logs
from api.context import ServerSettings
from api.runs.event_hub import EVENT_HUB
from store.clock import ManualClock, SystemClock
from store.crypto import SecretBox
from store.models import RunEvent

RUNS = "/api/v1/agent/runs"
WORKERS = "/api/v1/workers"


def h(key: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **extra}


async def new_run(client: TestClient[Any, Any], key: str) -> str:
    resp = await client.post(
        "/api/v1/agent/run", json={"prompt": "go", "config": {"worker_host": "host-a"}}, headers=h(key)
    )
    assert resp.status == 200, await resp.text()
    run_id: str = (await resp.json())["run_id"]
    return run_id


TOKENS: dict[str, str] = {}  # run id -> the lease token of its claim, presented by every later call


async def worker(client: TestClient[Any, Any], key: str, path: str, body: dict[str, Any]) -> None:
    run_id = path.split("/")[2] if path.startswith("/runs/") else None
    token = {"lease_token": TOKENS[run_id]} if run_id in TOKENS else {}
    resp = await client.post(f"{WORKERS}{path}", json={"worker_id": "wk-1", **token, **body}, headers=h(key))
    assert resp.status in (200, 204), await resp.text()
    if path == "/claim" and resp.status == 200:
        answer = await resp.json()
        TOKENS[answer["run"]["run_id"]] = answer["lease_token"]


async def start(client: TestClient[Any, Any], key: str, run_id: str) -> None:
    await worker(client, key, "/claim", {"worker_host": "host-a", "wait_seconds": 0})
    await worker(client, key, f"/runs/{run_id}/heartbeat", {"state": "INPROGRESS"})


async def test_replay_then_live_until_the_terminal_state(
    client: Any, member_key: str, worker_key: str
) -> None:
    run_id = await new_run(client, member_key)
    await start(client, worker_key, run_id)
    resp = await client.get(f"{RUNS}/{run_id}/events", headers=h(member_key))
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    assert resp.headers["Cache-Control"] == "no-cache" and resp.headers["X-Accel-Buffering"] == "no"
    reader = asyncio.create_task(collect(resp))
    await worker(
        client, worker_key, f"/runs/{run_id}/logs", {"lines": [{"stream": "stdout", "text": "hello\nworld"}]}
    )
    await worker(
        client,
        worker_key,
        f"/runs/{run_id}/state",
        {"state": "SUCCEEDED", "status_message": {"message": "done", "error_code": "x_ok"}},
    )
    got = await asyncio.wait_for(reader, 10)  # the stream ends by itself after SUCCEEDED
    kinds = [(e["kind"], e["data"].get("state") or e["data"].get("text")) for e in got]
    assert kinds == [
        ("state", "QUEUED"),
        ("state", "CLAIMED"),
        ("state", "INPROGRESS"),
        ("log", "hello\nworld"),
        ("state", "SUCCEEDED"),
    ]
    ids = [e["id"] for e in got]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert got[-1]["data"]["status_message"] == {"message": "done", "error_code": "x_ok"}
    assert got[-1]["data"]["error_code"] == "x_ok" and got[-1]["data"]["previous_state"] == "INPROGRESS"
    assert all(e["run_id"] == run_id and e["created_at"].endswith("Z") for e in got)


async def test_last_event_id_resumes_without_loss_or_duplication(
    client: Any, member_key: str, worker_key: str
) -> None:
    run_id = await new_run(client, member_key)
    await start(client, worker_key, run_id)
    lines = [{"stream": "stdout", "text": f"line {i}"} for i in range(5)]
    await worker(client, worker_key, f"/runs/{run_id}/logs", {"lines": lines})
    await worker(client, worker_key, f"/runs/{run_id}/state", {"state": "FAILED"})
    everything = await collect(await client.get(f"{RUNS}/{run_id}/events", headers=h(member_key)))
    cut = everything[4]["id"]  # after "line 0"
    resumed = await collect(
        await client.get(f"{RUNS}/{run_id}/events", headers=h(member_key, **{"Last-Event-ID": str(cut)}))
    )
    assert [e["id"] for e in resumed] == [e["id"] for e in everything[5:]]
    by_query = await collect(await client.get(f"{RUNS}/{run_id}/events?after={cut}", headers=h(member_key)))
    assert by_query == resumed


async def test_errors_are_problems(client: Any, member_key: str, other_team_key: str) -> None:
    run_id = await new_run(client, member_key)
    for value in ("abc", "-1", "1" * 30):
        resp = await client.get(f"{RUNS}/{run_id}/events", headers=h(member_key, **{"Last-Event-ID": value}))
        assert resp.status == 400 and resp.content_type == "application/problem+json"
    resp = await client.get(f"{RUNS}/{run_id}/events?after=x", headers=h(member_key))
    assert resp.status == 400
    for key, path in ((member_key, "run_nope"), (other_team_key, run_id)):
        resp = await client.get(f"{RUNS}/{path}/events", headers=h(key))
        assert resp.status == 404 and resp.content_type == "application/problem+json"
    assert (await client.get(f"{RUNS}/{run_id}/events")).status == 401


async def test_a_refused_transition_writes_no_event(
    client: Any, member_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    run_id = await new_run(client, member_key)
    assert (await client.post(f"{RUNS}/{run_id}/cancel", headers=h(member_key))).status == 200
    resp = await client.post(f"{RUNS}/{run_id}/cancel", headers=h(member_key))
    assert resp.status == 400  # cancel of a terminal run: refused, rolled back
    resp = await client.post(f"{RUNS}/{run_id}/followups", json={"message": "more"}, headers=h(member_key))
    assert resp.status == 409
    async with sessions() as s:
        rows = (
            await s.scalars(select(RunEvent).where(RunEvent.run_id == run_id).order_by(RunEvent.id))
        ).all()
    assert [(r.kind, r.data["state"]) for r in rows] == [("state", "QUEUED"), ("state", "CANCELLED")]
    got = await collect(await client.get(f"{RUNS}/{run_id}/events", headers=h(member_key)))
    assert [e["data"]["state"] for e in got] == ["QUEUED", "CANCELLED"]  # terminal: replays and ends


async def test_followups_and_cancel_requests_are_events(
    client: Any, member_key: str, worker_key: str
) -> None:
    run_id = await new_run(client, member_key)
    await start(client, worker_key, run_id)
    resp = await client.post(f"{RUNS}/{run_id}/followups", json={"message": "also x"}, headers=h(member_key))
    assert resp.status == 200
    assert (await client.post(f"{RUNS}/{run_id}/cancel", headers=h(member_key))).status == 200
    await worker(client, worker_key, f"/runs/{run_id}/state", {"state": "CANCELLED"})
    got = await collect(await client.get(f"{RUNS}/{run_id}/events", headers=h(member_key)))
    assert [e["kind"] for e in got][3:] == ["followup", "state", "state"]
    assert got[3]["data"]["message"] == "also x" and got[3]["data"]["outcome"] == "delivered"
    assert got[4]["data"]["cancel_requested"] is True and got[5]["data"]["state"] == "CANCELLED"


async def test_the_lease_reaper_records_its_state_events(
    client: Any, member_key: str, worker_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    run_id = await new_run(client, member_key)
    await start(client, worker_key, run_id)
    later = ManualClock(dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    async with sessions() as s, s.begin():
        assert await queue.reap_expired_leases(s, later) == 1
    got = await collect(await client.get(f"{RUNS}/{run_id}/events", headers=h(member_key)))
    assert got[-1]["data"]["state"] == "ERROR" and got[-1]["data"]["previous_state"] == "INPROGRESS"
    assert got[-1]["data"]["error_code"] == "resource_unavailable"


async def test_log_events_are_capped_with_one_truncated_marker(
    client: Any, member_key: str, worker_key: str, sessions: async_sessionmaker[AsyncSession]
) -> None:
    run_id = await new_run(client, member_key)
    await start(client, worker_key, run_id)  # 3 state events
    for batch in (["a", "b"], ["c", "d"], ["e"]):
        async with sessions() as s, s.begin():
            await run_logs.append_logs(
                s, SystemClock(), run_id, [("stdout", t) for t in batch], owner=None, event_cap=6
            )
    await worker(client, worker_key, f"/runs/{run_id}/state", {"state": "SUCCEEDED"})
    got = await collect(await client.get(f"{RUNS}/{run_id}/events", headers=h(member_key)))
    assert [e["kind"] for e in got] == ["state"] * 3 + ["log"] * 3 + ["truncated", "state"]
    assert got[-2]["data"] == {"limit": 6} and got[-1]["data"]["state"] == "SUCCEEDED"


async def test_heartbeats_and_the_per_key_stream_cap(
    client: Any, api_app: web.Application, member_key: str, make_key: Any
) -> None:
    hub = api_app[EVENT_HUB]
    hub.settings.heartbeat_seconds, hub.settings.max_streams_per_key = 0.2, 2
    run_id = await new_run(client, member_key)
    open_streams = [await client.get(f"{RUNS}/{run_id}/events", headers=h(member_key)) for _ in range(2)]
    assert all(r.status == 200 for r in open_streams)
    resp = await client.get(f"{RUNS}/{run_id}/events", headers=h(member_key))
    assert resp.status == 429 and resp.content_type == "application/problem+json"
    other = await client.get(f"{RUNS}/{run_id}/events", headers=h(await make_key("member")))
    assert other.status == 200  # the cap is per key
    seen = []
    async for frame in frames(open_streams[0]):
        seen.append(frame)
        if frame.get("comment") == "heartbeat":
            break
    assert seen[0] == {"retry": "2000"}
    for r in (*open_streams, other):
        r.close()
    deadline = time.monotonic() + 5
    while hub.open_by_key and time.monotonic() < deadline:  # closed connections release their slots
        await asyncio.sleep(0.05)
        await client.get("/healthz")
    assert not hub.open_by_key and not hub.tasks


async def test_shutdown_ends_open_streams_and_leaves_no_tasks(
    engine: AsyncEngine, box: SecretBox, tmp_path: Path, make_key: Any
) -> None:
    app = create_app(ServerSettings(data_dir=tmp_path), engine, box, route_modules=ROUTE_MODULES)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    key = await make_key("member")
    run_id = await new_run(client, key)
    resp = await client.get(f"{RUNS}/{run_id}/events", headers=h(key))
    reader = asyncio.create_task(collect(resp))
    hub = app[EVENT_HUB]
    deadline = time.monotonic() + 5
    while not hub.tasks and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)
    handlers = set(hub.tasks)
    assert len(handlers) == 1
    started = time.monotonic()
    await client.server.close()  # on_shutdown closes the streams; cleanup cancels the probe
    assert time.monotonic() - started < 5
    got = await asyncio.wait_for(reader, 5)
    await client.close()
    assert [e["data"]["state"] for e in got] == ["QUEUED"]
    assert all(t.done() for t in handlers) and not hub.tasks
    names = {t.get_name() for t in asyncio.all_tasks()}
    assert "run-events-probe" not in names


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
async def test_an_event_written_on_one_replica_reaches_a_stream_on_another(
    replicas: tuple[TestClient[Any, Any], TestClient[Any, Any]], make_key: Any
) -> None:
    a, b = replicas
    key = await make_key("member")
    run_id = await new_run(a, key)
    resp = await b.get(f"{RUNS}/{run_id}/events", headers=h(key))
    first = await anext(aiter(frames(resp)))  # the retry hint: the stream is open
    assert "retry" in first
    reader = asyncio.create_task(collect(resp, until="CANCELLED"))
    assert (await a.post(f"{RUNS}/{run_id}/cancel", headers=h(key))).status == 200
    got = await asyncio.wait_for(reader, 5)  # via B's probe; bench/events.py measures how fast
    assert [e["data"]["state"] for e in got] == ["QUEUED", "CANCELLED"]
