"""A finished run's stream with nothing left to send answers ``204 No Content`` (docs/events.md, "End"), on
SQLite and PostgreSQL: the answer that stops a browser's ``EventSource`` from reconnecting (a stream that
ends with a 200 is reconnected to for ever). Through the API and the console, by ``after`` and by
``Last-Event-ID``; a finished run with events left, and a live run, still stream.
"""

from __future__ import annotations

import asyncio
from typing import Any

from console.support import sign_in
from sse_support import collect, frames

RUNS = "/api/v1/agent/runs"


def h(key: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **extra}


async def new_run(client: Any, key: str) -> str:
    body = {"prompt": "go", "config": {"worker_host": "h"}}
    resp = await client.post("/api/v1/agent/run", json=body, headers=h(key))
    assert resp.status == 200, await resp.text()
    run_id: str = (await resp.json())["run_id"]
    return run_id


async def test_a_finished_run_with_nothing_after_the_given_id_answers_204(
    client: Any, member_key: str
) -> None:
    run_id = await new_run(client, member_key)
    assert (await client.post(f"{RUNS}/{run_id}/cancel", headers=h(member_key))).status == 200
    replayed = await collect(await client.get(f"{RUNS}/{run_id}/events", headers=h(member_key)))
    assert [e["data"]["state"] for e in replayed] == ["QUEUED", "CANCELLED"]  # events left: a 200 replay
    last, first = replayed[-1]["id"], replayed[0]["id"]

    for headers, query in (({}, f"?after={last}"), ({"Last-Event-ID": str(last)}, "")):
        resp = await client.get(f"{RUNS}/{run_id}/events{query}", headers=h(member_key, **headers))
        assert resp.status == 204 and await resp.read() == b""
    resumed = await collect(await client.get(f"{RUNS}/{run_id}/events?after={first}", headers=h(member_key)))
    assert [e["id"] for e in resumed] == [last]

    assert (await sign_in(client, member_key)).status == 303
    resp = await client.get(f"/console/runs/{run_id}/events?after={last}")
    assert resp.status == 204 and await resp.read() == b""


async def test_a_live_run_still_streams_after_its_newest_event(client: Any, member_key: str) -> None:
    run_id = await new_run(client, member_key)
    (queued,) = await collect(
        await client.get(f"{RUNS}/{run_id}/events", headers=h(member_key)), until="QUEUED"
    )
    resp = await client.get(f"{RUNS}/{run_id}/events?after={queued['id']}", headers=h(member_key))
    assert resp.status == 200
    assert "retry" in await asyncio.wait_for(anext(aiter(frames(resp))), 5)
    assert (await client.post(f"{RUNS}/{run_id}/cancel", headers=h(member_key))).status == 200
    got = await asyncio.wait_for(collect(resp), 5)
    assert [e["data"]["state"] for e in got] == ["CANCELLED"]
