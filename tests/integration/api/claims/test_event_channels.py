"""Both worker paths send an agent's transcript (issue 26): the service-hosted StoreChannel in-process and the
self-hosted HttpChannel through the typed client, each bounding and batching events the same way
(``event_batches``) and raising LeaseLost once the lease is gone; a self-hosted worker claims with the
harnesses it offers. SQLite and PostgreSQL (the ``engine`` fixture)."""

from __future__ import annotations

import asyncio
import json

import pytest

from api.claims import queue
from factoryctl.client import AsyncFactoryClient
from factoryctl.client.worker_resources import TOOL_INPUT_BYTES, bounded_event, event_batches
from factoryctl.serve.local_workers import store_channel
from factoryctl.worker.agent import HttpChannel, RemoteWorker
from factoryctl.worker.errors import LeaseLost
from factoryctl.worker.job import Outcome
from factoryctl.worker.presets import base
from store.clock import SystemClock

HOST = "myhost"
CLAUDE = {"harness": {"type": "claude"}, "worker_host": HOST}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def transcript(n_messages: int = 1) -> list[base.AgentEvent]:
    return [
        base.session("sess-9"),
        *[base.message(f"step {i}") for i in range(n_messages)],
        base.tool_call("c1", "Write", {"path": "a.txt", "content": "x" * (TOOL_INPUT_BYTES + 10)}),
        base.tool_result("c1", True, "é" * 4000),  # 4000 characters, 8000 bytes: cut to the byte bound
        base.usage(10, 2, 0.001),
    ]


def test_bounded_event_cuts_to_the_server_bounds() -> None:
    big = bounded_event(base.message("é" * 20_000).to_json())  # 40,000 bytes of UTF-8
    assert len(big["data"]["text"].encode()) <= 32 * 1024
    result = bounded_event(base.tool_result("1", True, "é" * 4000).to_json())["data"]
    assert len(result["output"].encode()) <= 4096 and result["truncated"] is True
    call = bounded_event(base.tool_call("1", "Write", {"content": '"' * 20_000}).to_json())["data"]
    assert len(json.dumps(call["input"], ensure_ascii=False).encode()) <= TOOL_INPUT_BYTES
    assert set(call["input"]) == {"truncated"}
    small = base.tool_call("2", "Read", {"path": "a"}).to_json()
    assert bounded_event(small) == small
    batches = event_batches([base.message(f"m{i}").to_json() for i in range(1201)])
    assert [len(b) for b in batches] == [500, 500, 201]
    assert len(event_batches([base.message("é" * 16_000).to_json()] * 100, max_bytes=1024 * 1024)) > 1


async def test_the_store_channel_sends_bounded_events_until_the_lease_is_gone(
    aiohttp_client, worker_app, make_key, new_run, get_run, sessions
) -> None:
    app = worker_app()
    client = await aiohttp_client(app)
    member = await make_key("member")
    run_id = await new_run(agent_config={"harness": {"type": "codex"}})
    async with sessions() as s, s.begin():
        run = await queue.claim_next(
            s, SystemClock(), worker_hosts=[""], owner="service:t/0", lease_seconds=30, harnesses=["codex"]
        )
        assert run is not None and run.run_id == run_id
        token = run.lease_token
    channel = store_channel(app, run_id, "service:t/0", 30.0, token)
    await channel.heartbeat(start=True)
    await channel.send_events(transcript(n_messages=600))  # two batches
    stored = await get_run(run_id)
    assert stored.session_id == "sess-9" and stored.request_usage == {
        "input_tokens": 10,
        "output_tokens": 2,
        "cost_usd": 0.001,
    }
    async with client.get(f"/api/v1/agent/runs/{run_id}/events", headers=auth(member)) as resp:
        text = ""
        while "event: usage" not in text:
            text += (await resp.content.readany()).decode()
    assert text.count("event: message") == 600 and '"truncated": {' not in text
    await channel.report(Outcome("SUCCEEDED"))
    with pytest.raises(LeaseLost):
        await channel.send_events([base.message("late")])


async def test_the_http_channel_and_the_claim_offer(
    aiohttp_client, worker_app, make_key, new_run, get_run, wait_state, tmp_path
) -> None:
    app = worker_app(claim_wait_max_seconds=1)
    client = await aiohttp_client(app)
    key = await make_key("worker", worker_hosts=[HOST])
    url = str(client.make_url(""))
    worker = RemoteWorker(url, key, HOST, harness="echo", workspace_root=tmp_path / "ws", wait_seconds=1)
    claude = await new_run(worker_host=HOST, agent_config=CLAUDE)
    echo = await new_run(worker_host=HOST, agent_config={"worker_host": HOST})
    task = asyncio.create_task(worker.run())
    try:  # an echo worker runs the echo run and leaves the claude run queued
        assert (await wait_state(echo, {"SUCCEEDED", "FAILED", "ERROR"})).state == "SUCCEEDED"
    finally:
        worker.stop.set()
        assert await asyncio.wait_for(task, 15) == 0
    assert (await get_run(claude)).state == "QUEUED"

    answer = await client.post(
        "/api/v1/workers/claim",
        json={"worker_host": HOST, "worker_id": worker.worker_id, "harnesses": ["claude"]},
        headers=auth(key),
    )
    token = (await answer.json())["lease_token"]
    async with AsyncFactoryClient(url, key, max_retries=0) as api:
        worker._client = api  # the channel calls through the worker's client, as in run()
        channel = HttpChannel(worker, claude, token)
        await channel.heartbeat(start=True)
        await channel.send_events(transcript())
        assert (await get_run(claude)).session_id == "sess-9"
        stale = HttpChannel(worker, claude, "stale-token")
        with pytest.raises(LeaseLost):
            await stale.send_events([base.message("not mine")])
        worker._client = None
