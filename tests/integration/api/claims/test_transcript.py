"""An agent preset's transcript over the worker protocol (issue 26): ``POST /workers/runs/{id}/events``
(kinds, bounds, lease), the events in the run's stream and the team stream, the run fields they set
(session, usage, run time, sandbox), the claim filtered by the worker's offered harnesses and the
session a follow-up's continuation resumes. SQLite and PostgreSQL (the ``engine`` fixture)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Any

import sse_support

from api.claims import transcript
from api.claims.protocol import Holder, WorkerProtocol
from api.runs import events as run_events
from api.runs.claim_signal import wake_claimers
from api.runs.serialize import run_time
from store.clock import ManualClock

CLAIM = "/api/v1/workers/claim"
HOST = "myhost"
CLAUDE = {"harness": {"type": "claude", "model_id": "sonnet"}, "worker_host": HOST}
TRANSCRIPT = [
    {"kind": "session", "data": {"session_id": "sess-1"}},
    {"kind": "message", "data": {"role": "assistant", "text": "<script>alert(1)</script> on it"}},
    {"kind": "tool_call", "data": {"id": "t1", "name": "Bash", "input": {"command": "ls"}}},
    {"kind": "tool_result", "data": {"id": "t1", "ok": True, "output": "README.md\n", "truncated": False}},
    {"kind": "usage", "data": {"input_tokens": 100, "output_tokens": 20, "cost_usd": 0.25}},
    {"kind": "session", "data": {"session_id": "sess-ignored"}},  # the first of the attempt wins
    {"kind": "usage", "data": {"input_tokens": 5, "output_tokens": 5, "cost_usd": None}},
]


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def claim(client: Any, key: str, harnesses: list[str] | None = None, worker_id: str = "wk-1") -> Any:
    body: dict[str, Any] = {"worker_host": HOST, "worker_id": worker_id}
    if harnesses is not None:
        body["harnesses"] = harnesses
    return await client.post(CLAIM, json=body, headers=auth(key))


async def start(client: Any, key: str, run_id: str, token: str) -> None:
    resp = await client.post(
        f"/api/v1/workers/runs/{run_id}/heartbeat",
        json={
            "worker_id": "wk-1",
            "lease_token": token,
            "state": "INPROGRESS",
            "sandbox": {"kind": "bwrap", "network": "none"},
        },
        headers=auth(key),
    )
    assert resp.status == 200


async def send(client: Any, key: str, run_id: str, token: str | None, events: Any) -> Any:
    return await client.post(
        f"/api/v1/workers/runs/{run_id}/events",
        json={"worker_id": "wk-1", "lease_token": token, "events": events},
        headers=auth(key),
    )


async def finish(client: Any, key: str, run_id: str, token: str) -> None:
    resp = await client.post(
        f"/api/v1/workers/runs/{run_id}/state",
        json={"worker_id": "wk-1", "lease_token": token, "state": "SUCCEEDED"},
        headers=auth(key),
    )
    assert resp.status == 200


async def test_a_claude_run_waits_for_a_worker_that_offers_claude(
    aiohttp_client, worker_app, make_key, new_run
) -> None:
    client = await aiohttp_client(worker_app())
    key = await make_key("worker", worker_hosts=[HOST])
    claude = await new_run(worker_host=HOST, agent_config=CLAUDE)
    assert (await claim(client, key, ["echo", "command"])).status == 204
    assert (await claim(client, key, ["echo", "codex", "gemini"])).status == 204
    plain = await new_run(worker_host=HOST, agent_config={"harness": {"type": "oz"}, "worker_host": HOST})
    resp = await claim(client, key, ["echo"])  # the claude run is older, but this worker skips it
    assert resp.status == 200 and (await resp.json())["run"]["run_id"] == plain
    resp = await claim(client, key, ["echo", "claude"], worker_id="wk-2")
    assert resp.status == 200
    run = (await resp.json())["run"]
    assert run["run_id"] == claude and run["agent_config"]["harness"] == CLAUDE["harness"]
    assert "resume_session_id" not in run


async def test_a_worker_that_names_no_harnesses_claims_any_run(
    aiohttp_client, worker_app, make_key, new_run
) -> None:
    client = await aiohttp_client(worker_app())
    key = await make_key("worker", worker_hosts=[HOST])
    claude = await new_run(worker_host=HOST, agent_config=CLAUDE)
    resp = await claim(client, key)
    assert resp.status == 200 and (await resp.json())["run"]["run_id"] == claude
    bad = await client.post(CLAIM, json={"worker_host": HOST, "harnesses": "claude"}, headers=auth(key))
    assert bad.status == 422 and bad.content_type == "application/problem+json"


async def test_idle_peek_and_long_poll_honour_the_offer(
    aiohttp_client, worker_app, make_key, new_run, sessions
) -> None:
    app = worker_app()
    client = await aiohttp_client(app)
    key = await make_key("worker", worker_hosts=[HOST])
    protocol = WorkerProtocol.of(app)
    await new_run(worker_host="", agent_config={"harness": {"type": "gemini"}})
    assert await protocol.claim(("",), "svc:1", peek=True, harnesses=("echo",)) is None
    assert await protocol.claim(("",), "svc:1", harnesses=("echo",)) is None
    answer = await protocol.claim(("",), "svc:1", peek=True, harnesses=("echo", "gemini"))
    assert answer is not None and answer["run"]["agent_config"]["harness"]["type"] == "gemini"

    waiting = asyncio.ensure_future(
        client.post(
            CLAIM,
            json={"worker_host": HOST, "worker_id": "wk-1", "harnesses": ["codex"], "wait_seconds": 10},
            headers=auth(key),
        )
    )
    await new_run(worker_host=HOST, agent_config=CLAUDE)  # not for it: it keeps waiting
    codex = await new_run(worker_host=HOST, agent_config={"harness": {"type": "codex"}, "worker_host": HOST})
    wake_claimers(app)
    resp = await asyncio.wait_for(waiting, 15)
    assert resp.status == 200 and (await resp.json())["run"]["run_id"] == codex


async def test_transcript_events_stream_and_set_the_run_fields(
    aiohttp_client, worker_app, make_key, new_run
) -> None:
    clock = ManualClock()
    client = await aiohttp_client(worker_app(clock=clock, public_url="https://factory.example.com/"))
    key = await make_key("worker", worker_hosts=[HOST])
    member = await make_key("member")
    run_id = await new_run(worker_host=HOST, agent_config=CLAUDE, clock=clock)
    token = (await (await claim(client, key, ["claude"])).json())["lease_token"]
    await start(client, key, run_id, token)
    clock.advance(90.5)
    resp = await send(client, key, run_id, token, TRANSCRIPT)
    assert resp.status == 200 and await resp.json() == {"run_id": run_id, "accepted": len(TRANSCRIPT)}

    item = await (await client.get(f"/api/v1/agent/runs/{run_id}", headers=auth(member))).json()
    assert (item["session_id"], item["conversation_id"]) == ("sess-1", "sess-1")
    assert item["session_link"] == f"https://factory.example.com/console/runs/{run_id}"
    assert item["request_usage"] == {"total_tokens": 130, "inference_cost_usd": 0.25, "inference_cost": 0.25}
    assert item["is_sandbox_running"] is True and item["artifacts"] == []
    assert item["run_time"] == "PT1M30.5S"  # running: until now

    clock.advance(10)
    await finish(client, key, run_id, token)
    item = await (await client.get(f"/api/v1/agent/runs/{run_id}", headers=auth(member))).json()
    assert item["is_sandbox_running"] is False and item["run_time"] == "PT1M40.5S"

    async with client.get(f"/api/v1/agent/runs/{run_id}/events", headers=auth(member)) as stream:
        events = await sse_support.collect(stream)
    kinds = [e["kind"] for e in events if e["kind"] != "state"]
    assert kinds == [e["kind"] for e in TRANSCRIPT]
    tool = next(e for e in events if e["kind"] == "tool_call")
    assert tool["data"] == {"id": "t1", "name": "Bash", "input": {"command": "ls"}}
    message = next(e for e in events if e["kind"] == "message")
    assert message["data"]["text"] == "<script>alert(1)</script> on it"
    after = next(e["id"] for e in events if e["kind"] == "tool_call")  # Last-Event-ID resumes after it
    headers = {**auth(member), "Last-Event-ID": str(after)}
    async with client.get(f"/api/v1/agent/runs/{run_id}/events", headers=headers) as stream:
        rest = await sse_support.collect(stream)
    assert [e["kind"] for e in rest][:2] == ["tool_result", "usage"]

    async with client.get(
        sse_support.TEAM_EVENTS, params={"after": "0-0", "logs": "true"}, headers=auth(member)
    ) as stream:
        seen: list[str] = []
        async for frame in sse_support.frames(stream):
            if "data" in frame:
                seen.append(json.loads(frame["data"])["kind"])
                if len(seen) >= len(TRANSCRIPT) + 4:  # QUEUED, CLAIMED, INPROGRESS, ..., SUCCEEDED
                    break
    assert [k for k in seen if k != "state"] == [e["kind"] for e in TRANSCRIPT]


async def test_a_followup_continuation_resumes_the_recorded_session(
    aiohttp_client, worker_app, make_key, new_run
) -> None:
    client = await aiohttp_client(worker_app())
    key = await make_key("worker", worker_hosts=[HOST])
    member = await make_key("member")
    run_id = await new_run(worker_host=HOST, agent_config=CLAUDE)
    token = (await (await claim(client, key, ["claude"])).json())["lease_token"]
    await start(client, key, run_id, token)
    assert (await send(client, key, run_id, token, TRANSCRIPT[:2])).status == 200
    await finish(client, key, run_id, token)

    resp = await client.post(
        f"/api/v1/agent/runs/{run_id}/followups", json={"message": "and the tests"}, headers=auth(member)
    )
    assert resp.status in (200, 201, 202)
    answer = await (await claim(client, key, ["claude"])).json()
    assert answer["run"]["run_id"] == run_id and answer["run"]["attempt"] == 2
    assert answer["run"]["resume_session_id"] == "sess-1"
    token = answer["lease_token"]
    await start(client, key, run_id, token)
    new_session = [{"kind": "session", "data": {"session_id": "sess-2"}}]
    assert (await send(client, key, run_id, token, new_session)).status == 200  # a new attempt: it wins
    item = await (await client.get(f"/api/v1/agent/runs/{run_id}", headers=auth(member))).json()
    assert (item["session_id"], item["conversation_id"]) == ("sess-2", "sess-2")


BIG = "é" * (16 * 1024 + 1)  # 2 bytes each: over 32 KiB of UTF-8


async def test_malformed_or_oversized_batches_are_422_and_store_nothing(
    aiohttp_client, worker_app, make_key, new_run, get_run
) -> None:
    client = await aiohttp_client(worker_app())
    key = await make_key("worker", worker_hosts=[HOST])
    run_id = await new_run(worker_host=HOST, agent_config=CLAUDE)
    token = (await (await claim(client, key, ["claude"])).json())["lease_token"]
    ok = {"kind": "message", "data": {"role": "assistant", "text": "fine"}}
    for bad in (
        [ok] * 501,
        [ok, {"kind": "shell", "data": {}}],
        [{"kind": "message", "data": "text"}],
        [{"kind": "message", "data": {"role": "robot", "text": "x"}}],
        [{"kind": "message", "data": {"text": BIG}}],
        [{"kind": "tool_call", "data": {"id": "1", "name": "Write", "input": {"content": "x" * 16_400}}}],
        [{"kind": "tool_call", "data": {"id": "1", "input": {}}}],
        [{"kind": "tool_result", "data": {"id": "1", "ok": "yes", "output": ""}}],
        [{"kind": "tool_result", "data": {"id": "1", "ok": True, "output": "x" * 4097}}],
        [{"kind": "usage", "data": {"input_tokens": -1, "output_tokens": 0}}],
        [{"kind": "usage", "data": {"input_tokens": 1, "output_tokens": 0, "cost_usd": "free"}}],
        [{"kind": "session", "data": {"session_id": ""}}],
        [{"kind": "session", "data": {"session_id": "s" * 101}}],
        "not a list",
    ):
        resp = await send(client, key, run_id, token, bad)
        assert resp.status == 422, bad if not isinstance(bad, list) else bad[-1]
        assert resp.content_type == "application/problem+json"
    limit = {"kind": "tool_result", "data": {"id": "1", "ok": False, "output": "x" * 4096}}
    assert (await send(client, key, run_id, token, [limit, ok])).status == 200
    run = await get_run(run_id)
    assert run.session_id is None and run.request_usage is None


async def test_only_the_lease_holder_sends_events(
    aiohttp_client, worker_app, make_key, new_run, get_run
) -> None:
    client = await aiohttp_client(worker_app())
    key = await make_key("worker", worker_hosts=[HOST])
    other = await make_key("worker", worker_hosts=["elsewhere"])
    run_id = await new_run(worker_host=HOST, agent_config=CLAUDE)
    events = TRANSCRIPT[:1]
    assert (await send(client, key, run_id, None, events)).status == 409  # not claimed yet
    token = (await (await claim(client, key, ["claude"])).json())["lease_token"]
    assert (await send(client, key, run_id, "stale-token", events)).status == 409
    assert (await send(client, other, run_id, token, events)).status == 403
    assert (await send(client, key, "run_missing", token, events)).status == 404
    await start(client, key, run_id, token)
    await finish(client, key, run_id, token)
    assert (await send(client, key, run_id, token, events)).status == 409  # finished: the lease is gone
    assert (await get_run(run_id)).session_id is None


async def test_transcript_events_count_against_the_run_event_cap(
    worker_app, sessions, new_run, get_run
) -> None:
    clock = ManualClock()
    run_id = await new_run(worker_host=HOST, agent_config=CLAUDE, clock=clock)
    answer = await WorkerProtocol.of(worker_app(clock=clock)).claim((HOST,), "wk", harnesses=("claude",))
    assert answer is not None
    holder = Holder("wk", answer["lease_token"])
    batch = transcript.parse_events(TRANSCRIPT)
    async with sessions() as s, s.begin():  # a cap of 4: QUEUED and CLAIMED, then two of the batch
        stored = await transcript.append_events(
            s, clock, run_id, batch, owner=holder.owner, lease_token=holder.lease_token, event_cap=4
        )
    assert stored == 2
    run = await get_run(run_id)
    # past the cap the events are dropped, but the run still takes the session and every usage
    assert run.session_id == "sess-1" and run.request_usage == {
        "input_tokens": 105,
        "output_tokens": 25,
        "cost_usd": 0.25,
    }
    async with sessions() as s:
        kinds = [e.kind for e in await run_events.read_after(s, run_id, 0, 100)]
    assert kinds == ["state", "state", "session", "message", "truncated"]


def test_run_time_is_an_iso_8601_duration() -> None:
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert run_time(None, t0) is None
    assert run_time(t0, t0) == "PT0S"
    assert run_time(t0, t0 + dt.timedelta(hours=2, seconds=3)) == "PT2H3S"
    assert run_time(t0, t0 + dt.timedelta(minutes=2, seconds=30)) == "PT2M30S"
