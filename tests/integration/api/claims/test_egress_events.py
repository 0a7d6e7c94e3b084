"""``egress_refused`` events over the worker protocol (issue 27; docs/events.md, "Egress refusals"): a worker
reports each destination its egress proxy refused, the server checks and keeps only the documented keys,
and the event reaches the run's stream and the team stream without ``logs=true`` (a security signal, not
output). SQLite and PostgreSQL (the ``engine`` fixture)."""

from __future__ import annotations

import json
from typing import Any

import sse_support

HOST = "myhost"
CLAUDE = {"harness": {"type": "claude", "model_id": "sonnet"}, "worker_host": HOST}
REFUSED_DATA: dict[str, Any] = {"host": "example.invalid", "port": 443, "reason": "not listed"}
REFUSED = {"kind": "egress_refused", "data": REFUSED_DATA}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def claimed(client: Any, key: str, run_id: str) -> str:
    body = {"worker_host": HOST, "worker_id": "wk-1", "harnesses": ["claude"]}
    answer = await (await client.post("/api/v1/workers/claim", json=body, headers=auth(key))).json()
    assert answer["run"]["run_id"] == run_id
    token = str(answer["lease_token"])
    resp = await client.post(
        f"/api/v1/workers/runs/{run_id}/heartbeat",
        json={"worker_id": "wk-1", "lease_token": token, "state": "INPROGRESS"},
        headers=auth(key),
    )
    assert resp.status == 200
    return token


async def send(client: Any, key: str, run_id: str, token: str, events: Any) -> Any:
    return await client.post(
        f"/api/v1/workers/runs/{run_id}/events",
        json={"worker_id": "wk-1", "lease_token": token, "events": events},
        headers=auth(key),
    )


async def test_a_refused_destination_is_a_run_event_on_both_streams(
    aiohttp_client, worker_app, make_key, new_run
) -> None:
    client = await aiohttp_client(worker_app())
    key = await make_key("worker", worker_hosts=[HOST])
    member = await make_key("member")
    run_id = await new_run(worker_host=HOST, agent_config=CLAUDE)
    token = await claimed(client, key, run_id)
    extra = {"kind": "egress_refused", "data": {**REFUSED_DATA, "port": 80, "secret": "dropped"}}
    resp = await send(client, key, run_id, token, [REFUSED, extra])
    assert resp.status == 200 and (await resp.json())["accepted"] == 2
    resp = await client.post(
        f"/api/v1/workers/runs/{run_id}/state",
        json={"worker_id": "wk-1", "lease_token": token, "state": "SUCCEEDED"},
        headers=auth(key),
    )
    assert resp.status == 200

    async with client.get(f"/api/v1/agent/runs/{run_id}/events", headers=auth(member)) as stream:
        refused = [e["data"] for e in await sse_support.collect(stream) if e["kind"] == "egress_refused"]
    assert refused == [REFUSED_DATA, {"host": "example.invalid", "port": 80, "reason": "not listed"}]

    async with client.get(sse_support.TEAM_EVENTS, params={"after": "0-0"}, headers=auth(member)) as stream:
        seen: list[str] = []
        async for frame in sse_support.frames(stream):
            if "data" in frame:
                seen.append(json.loads(frame["data"])["kind"])
                if seen.count("egress_refused") == 2 or len(seen) >= 10:
                    break
    assert seen.count("egress_refused") == 2


async def test_malformed_refusals_are_422(aiohttp_client, worker_app, make_key, new_run) -> None:
    client = await aiohttp_client(worker_app())
    key = await make_key("worker", worker_hosts=[HOST])
    run_id = await new_run(worker_host=HOST, agent_config=CLAUDE)
    token = await claimed(client, key, run_id)
    good = REFUSED_DATA
    for data in (
        {**good, "port": 0},
        {**good, "port": "443"},
        {**good, "port": True},
        {**good, "host": ""},
        {**good, "host": "h" * 256},
        {**good, "reason": "r" * 1025},
    ):
        resp = await send(client, key, run_id, token, [{"kind": "egress_refused", "data": data}])
        assert resp.status == 422, data
        assert resp.content_type == "application/problem+json"
