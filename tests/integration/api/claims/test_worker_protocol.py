"""The worker protocol over HTTP, through the real app: claim, heartbeat, state, logs, auth."""

from __future__ import annotations

import asyncio
import base64
import time

from api.runs.claim_signal import wake_claimers
from api.runs.new_run import NewAttachment

CLAIM = "/api/v1/workers/claim"


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def setup_client(aiohttp_client, worker_app, **settings):
    app = worker_app(**settings)
    return app, await aiohttp_client(app)


async def claim(client, key, host="myhost", wait=0, worker_id="wk-1"):
    return await client.post(
        CLAIM, json={"worker_host": host, "wait_seconds": wait, "worker_id": worker_id}, headers=auth(key)
    )


async def test_claim_answers_204_when_idle_and_200_with_the_run(
    aiohttp_client, worker_app, make_key, new_run
) -> None:
    _app, client = await setup_client(aiohttp_client, worker_app, lease_seconds=45)
    key = await make_key("worker", worker_hosts=["myhost"])
    await new_run(worker_host=None, prompt="for the service")  # not for this worker
    assert (await claim(client, key)).status == 204

    run_id = await new_run(
        worker_host="myhost",
        prompt="Fix the bug",
        agent_config={"model_id": "m-1", "base_prompt": "You are careful.", "worker_host": "myhost"},
        attachments=[NewAttachment("event-payload.json", "application/json", b'{"a": 1}')],
    )
    resp = await claim(client, key)
    assert resp.status == 200
    body = await resp.json()
    assert body["lease_seconds"] == 45
    run = body["run"]
    assert (run["run_id"], run["prompt"], run["model_id"], run["attempt"]) == (
        run_id,
        "Fix the bug",
        "m-1",
        1,
    )
    assert run["base_prompt"] == "You are careful."
    assert run["agent_config"]["worker_host"] == "myhost"
    assert run["attachments"] == [
        {
            "file_name": "event-payload.json",
            "mime_type": "application/json",
            "data": base64.b64encode(b'{"a": 1}').decode(),
        }
    ]
    assert run["lease_expires_at"].endswith("Z")
    assert (await claim(client, key)).status == 204  # claimed once


async def test_worker_keys_claim_only_for_their_hosts(aiohttp_client, worker_app, make_key, new_run) -> None:
    _app, client = await setup_client(aiohttp_client, worker_app)
    key = await make_key("worker", worker_hosts=["myhost"])
    member = await make_key("member")
    admin = await make_key("admin")
    await new_run(worker_host="otherhost")
    service_run = await new_run(worker_host=None)

    resp = await claim(client, key, host="otherhost")
    assert resp.status == 403
    assert (await resp.json())["error_code"] == "not_authorized"
    assert (await claim(client, key, host="warp")).status == 403
    assert (await claim(client, member, host="myhost")).status == 403
    assert (await client.post(CLAIM, json={"worker_host": "myhost"})).status == 401
    resp = await claim(client, admin, host="warp")  # admins may claim service-hosted runs
    assert resp.status == 200 and (await resp.json())["run"]["run_id"] == service_run


async def test_heartbeat_state_and_logs(aiohttp_client, worker_app, make_key, new_run) -> None:
    _app, client = await setup_client(aiohttp_client, worker_app)
    key = await make_key("worker", worker_hosts=["myhost"])
    member = await make_key("member")
    run_id = await new_run(worker_host="myhost")
    resp = await claim(client, key)
    assert resp.status == 200
    token = (await resp.json())["lease_token"]
    base = f"/api/v1/workers/runs/{run_id}"

    resp = await client.post(
        f"{base}/heartbeat",
        json={"state": "INPROGRESS", "worker_id": "wk-1", "lease_token": token},
        headers=auth(key),
    )
    assert resp.status == 200
    body = await resp.json()
    assert (body["state"], body["cancel_requested"], body["followups"]) == ("INPROGRESS", False, [])

    # a user follows up and cancels; the next heartbeat tells the worker, follow-ups once
    runs = "/api/v1/agent/runs"
    resp = await client.post(
        f"{runs}/{run_id}/followups", json={"message": "also add tests"}, headers=auth(member)
    )
    assert resp.status == 200
    followup_id = (await resp.json())["followup_id"]
    assert (await client.post(f"{runs}/{run_id}/cancel", headers=auth(member))).status == 200
    body = await (
        await client.post(
            f"{base}/heartbeat", json={"worker_id": "wk-1", "lease_token": token}, headers=auth(key)
        )
    ).json()
    assert body["cancel_requested"] is True
    assert body["followups"] == [{"followup_id": followup_id, "message": "also add tests", "mode": None}]
    body = await (
        await client.post(
            f"{base}/heartbeat", json={"worker_id": "wk-1", "lease_token": token}, headers=auth(key)
        )
    ).json()
    assert body["followups"] == []

    lines = {
        "worker_id": "wk-1",
        "lease_token": token,
        "lines": [{"stream": "stdout", "text": "working"}, {"stream": "stderr", "text": "oops"}],
    }
    resp = await client.post(f"{base}/logs", json=lines, headers=auth(key))
    assert resp.status == 200 and (await resp.json())["appended"] == 2
    bad = {"worker_id": "wk-1", "lease_token": token, "lines": [{"stream": "elsewhere", "text": "x"}]}
    assert (await client.post(f"{base}/logs", json=bad, headers=auth(key))).status == 422

    state = {
        "worker_id": "wk-1",
        "lease_token": token,
        "state": "CANCELLED",
        "status_message": {"message": "run cancelled"},
    }
    resp = await client.post(f"{base}/state", json=state, headers=auth(key))
    assert resp.status == 200 and (await resp.json())["state"] == "CANCELLED"

    got = await (await client.get(f"{runs}/{run_id}", headers=auth(member))).json()
    assert got["state"] == "CANCELLED"
    logs = await (await client.get(f"{runs}/{run_id}/logs", headers=auth(member))).json()
    assert [(x["stream"], x["text"]) for x in logs["logs"]] == [("stdout", "working"), ("stderr", "oops")]

    # the run is finished: further reports conflict
    again = {"worker_id": "wk-1", "lease_token": token, "state": "SUCCEEDED"}
    resp = await client.post(f"{base}/state", json=again, headers=auth(key))
    assert resp.status == 409 and (await resp.json())["error_code"] == "conflict"


async def test_only_the_lease_owner_may_report(aiohttp_client, worker_app, make_key, new_run) -> None:
    _app, client = await setup_client(aiohttp_client, worker_app)
    key = await make_key("worker", worker_hosts=["myhost"])
    twin = await make_key("worker", worker_hosts=["myhost"])
    stranger = await make_key("worker", worker_hosts=["otherhost"])
    foreign = await make_key("worker", worker_hosts=["myhost"], team="other-team")
    run_id = await new_run(worker_host="myhost")
    resp = await claim(client, key, worker_id="wk-1")
    assert resp.status == 200
    token = (await resp.json())["lease_token"]
    base = f"/api/v1/workers/runs/{run_id}"
    report = {"state": "INPROGRESS", "lease_token": token}

    resp = await client.post(f"{base}/state", json={**report, "worker_id": "wk-2"}, headers=auth(key))
    assert resp.status == 409  # same key, another worker process
    resp = await client.post(
        f"{base}/state", json={**report, "worker_id": "wk-1", "lease_token": token}, headers=auth(twin)
    )
    assert resp.status == 409  # another key of the same host
    resp = await client.post(
        f"{base}/heartbeat", json={"worker_id": "wk-1", "lease_token": token}, headers=auth(stranger)
    )
    assert resp.status == 403  # a key for another host
    resp = await client.post(
        f"{base}/heartbeat", json={"worker_id": "wk-1", "lease_token": token}, headers=auth(foreign)
    )
    assert resp.status == 404  # another team's run does not exist
    resp = await client.post(
        f"{base}/state",
        json={"state": "QUEUED", "worker_id": "wk-1", "lease_token": token},
        headers=auth(key),
    )
    assert resp.status == 422
    resp = await client.post(
        f"{base}/state", json={**report, "worker_id": "wk-1", "lease_token": token}, headers=auth(key)
    )
    assert resp.status == 200 and (await resp.json())["state"] == "INPROGRESS"


async def test_long_poll_wakes_when_a_run_arrives(aiohttp_client, worker_app, make_key, new_run) -> None:
    app, client = await setup_client(aiohttp_client, worker_app, claim_wait_max_seconds=10)
    key = await make_key("worker", worker_hosts=["myhost"])

    async def later() -> str:
        await asyncio.sleep(0.3)
        run_id = await new_run(worker_host="myhost")
        wake_claimers(app)
        return run_id

    started = time.monotonic()
    resp, run_id = await asyncio.gather(claim(client, key, wait=30), later())
    elapsed = time.monotonic() - started
    assert resp.status == 200 and (await resp.json())["run"]["run_id"] == run_id
    assert elapsed < 2.0

    # a run queued by another process (no wake-up) is found by polling
    async def quietly() -> str:
        await asyncio.sleep(0.3)
        return await new_run(worker_host="myhost")

    resp, run_id = await asyncio.gather(claim(client, key, wait=30), quietly())
    assert resp.status == 200 and (await resp.json())["run"]["run_id"] == run_id

    # an idle long poll ends with 204 after at most claim_wait_max_seconds (here wait_seconds)
    started = time.monotonic()
    assert (await claim(client, key, wait=0.5)).status == 204
    assert 0.4 < time.monotonic() - started < 3.0


async def test_remote_worker_executes_and_honours_cancel(
    aiohttp_client, worker_app, make_key, new_run, wait_state, tmp_path
) -> None:
    from factoryctl.worker.agent import RemoteWorker

    app, client = await setup_client(aiohttp_client, worker_app, lease_seconds=1.5, claim_wait_max_seconds=1)
    key = await make_key("worker", worker_hosts=["myhost"])
    member = await make_key("member")
    worker = RemoteWorker(
        str(client.make_url("")),
        key,
        "myhost",
        harness="command",
        command="cat; sleep {model}",
        concurrency=2,
        workspace_root=tmp_path / "ws",
        wait_seconds=1,
    )
    task = asyncio.create_task(worker.run())
    try:
        quick = await new_run(worker_host="myhost", prompt="quick\n", agent_config={"model_id": "0"})
        slow = await new_run(worker_host="myhost", prompt="slow\n", agent_config={"model_id": "60"})
        wake_claimers(app)
        assert (await wait_state(quick, {"SUCCEEDED", "FAILED", "ERROR"})).state == "SUCCEEDED"
        logs = await (await client.get(f"/api/v1/agent/runs/{quick}/logs", headers=auth(member))).json()
        assert [x["text"] for x in logs["logs"] if x["stream"] == "stdout"] == ["quick"]

        await wait_state(slow, {"INPROGRESS"})
        assert (await client.post(f"/api/v1/agent/runs/{slow}/cancel", headers=auth(member))).status == 200
        assert (
            await wait_state(slow, {"CANCELLED", "SUCCEEDED", "FAILED", "ERROR"}, within=10)
        ).state == "CANCELLED"
    finally:
        worker.stop.set()
        assert await asyncio.wait_for(task, 15) == 0
    assert worker.completed == 2
