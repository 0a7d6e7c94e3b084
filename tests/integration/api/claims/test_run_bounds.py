"""Bounds on what a run accumulates (issue 23, item 10): log lines and bytes per run with one visible
"truncated" marker, on both worker paths (HTTP and the in-process StoreChannel); pending follow-ups
(count and bytes, 409 past them); follow-ups carried once in the claim answer; the log request limit."""

from __future__ import annotations

import json

from api.claims import queue
from factoryctl.serve.local_workers import store_channel
from store.clock import SystemClock

CLAIM = "/api/v1/workers/claim"
RUNS = "/api/v1/agent/runs"
MARKER = "[log truncated"


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def logs_of(client, key, run_id):
    body = await (await client.get(f"{RUNS}/{run_id}/logs?limit=1000", headers=auth(key))).json()
    return [(x["stream"], x["text"]) for x in body["logs"]]


async def test_http_logs_stop_at_the_runs_cap_with_one_marker(
    aiohttp_client, worker_app, make_key, new_run, get_run
) -> None:
    client = await aiohttp_client(worker_app(run_log_max_lines=5, run_log_max_bytes=1000))
    worker = await make_key("worker", worker_hosts=["myhost"])
    member = await make_key("member")
    run_id = await new_run(worker_host="myhost")
    claimed = await (
        await client.post(CLAIM, json={"worker_host": "myhost", "worker_id": "w"}, headers=auth(worker))
    ).json()
    lease = {"worker_id": "w", "lease_token": claimed["lease_token"]}
    url = f"/api/v1/workers/runs/{run_id}/logs"

    async def send(texts):
        lines = [{"stream": "stdout", "text": t} for t in texts]
        resp = await client.post(url, json={"lines": lines, **lease}, headers=auth(worker))
        assert resp.status == 200, await resp.text()
        return (await resp.json())["appended"]

    assert await send(["one", "two", "three"]) == 3
    assert await send(["four", "five", "six", "seven"]) == 2  # the cap falls inside this batch
    assert await send(["eight"] * 30) == 0  # dropped and counted, the marker is not repeated
    logs = await logs_of(client, member, run_id)
    assert [t for _s, t in logs[:5]] == ["one", "two", "three", "four", "five"]
    assert len(logs) == 6 and logs[5][0] == "system" and logs[5][1].startswith(MARKER)
    run = await get_run(run_id)
    assert (run.log_lines, run.log_dropped) == (5, 32)


async def test_bytes_cap_and_the_in_process_channel_share_the_rule(
    aiohttp_client, worker_app, make_key, new_run, get_run, sessions
) -> None:
    """A service-hosted worker's StoreChannel goes through the same queue.append_logs and caps."""
    app = worker_app(run_log_max_lines=1000, run_log_max_bytes=100)
    client = await aiohttp_client(app)
    member = await make_key("member")
    run_id = await new_run()
    async with sessions() as s, s.begin():
        run = await queue.claim_next(
            s, SystemClock(), worker_hosts=[""], owner="service:t/0", lease_seconds=30
        )
        assert run is not None and run.run_id == run_id
        token = run.lease_token
    channel = store_channel(app, run_id, "service:t/0", 30.0, token)
    await channel.send_logs([("stdout", "é" * 30)])  # 60 bytes in UTF-8
    await channel.send_logs([("stdout", "x" * 30), ("stdout", "y" * 15)])  # 60 + 30 + 15 > 100: cut at y
    await channel.send_logs([("stdout", "z")])
    logs = await logs_of(client, member, run_id)
    assert logs[:2] == [("stdout", "é" * 30), ("stdout", "x" * 30)]
    assert len(logs) == 3 and logs[2][0] == "system" and logs[2][1].startswith(MARKER)
    run = await get_run(run_id)
    assert (run.log_lines, run.log_bytes, run.log_dropped) == (2, 90, 2)


async def test_pending_followups_are_bounded_and_carried_once(
    aiohttp_client, worker_app, make_key, new_run
) -> None:
    client = await aiohttp_client(worker_app(followups_max_pending=3, followups_max_pending_bytes=2000))
    worker = await make_key("worker", worker_hosts=["myhost"])
    member = await make_key("member")
    run_id = await new_run(worker_host="myhost")
    url = f"{RUNS}/{run_id}/followups"
    for i in range(3):
        resp = await client.post(url, json={"message": f"follow-up number {i}"}, headers=auth(member))
        assert resp.status == 200
    resp = await client.post(url, json={"message": "one too many"}, headers=auth(member))
    assert resp.status == 409 and resp.content_type == "application/problem+json"
    assert "at most 3" in (await resp.json())["detail"]

    other = await new_run(worker_host="myhost")
    resp = await client.post(f"{RUNS}/{other}/followups", json={"message": "é" * 1001}, headers=auth(member))
    assert resp.status == 409 and "2000" in (await resp.json())["detail"]  # 2002 bytes, 1001 characters

    resp = await client.post(CLAIM, json={"worker_host": "myhost", "worker_id": "w"}, headers=auth(worker))
    answer = await resp.json()
    assert answer["run"]["run_id"] == run_id
    text = json.dumps(answer)
    for i in range(3):  # the claim answer carries each follow-up's text once: in the prompt
        assert text.count(f"follow-up number {i}") == 1
        assert f"follow-up number {i}" in answer["run"]["prompt"]
    assert [set(f) for f in answer["run"]["followups"]] == [{"followup_id", "mode"}] * 3
    # handed over: the run takes new follow-ups again
    resp = await client.post(url, json={"message": "after the claim"}, headers=auth(member))
    assert resp.status == 200


async def test_a_log_request_over_the_documented_limit_is_413(
    aiohttp_client, worker_app, make_key, new_run
) -> None:
    client = await aiohttp_client(worker_app())
    worker = await make_key("worker", worker_hosts=["myhost"])
    run_id = await new_run(worker_host="myhost")
    claimed = await (
        await client.post(CLAIM, json={"worker_host": "myhost", "worker_id": "w"}, headers=auth(worker))
    ).json()
    lines = [{"stream": "stdout", "text": "\u4e2d" * 16_000}] * 50  # 50 x 96 kB escaped: 4.8 MB
    body = {"worker_id": "w", "lease_token": claimed["lease_token"], "lines": lines}
    resp = await client.post(f"/api/v1/workers/runs/{run_id}/logs", json=body, headers=auth(worker))
    assert resp.status == 413 and resp.content_type == "application/problem+json"
