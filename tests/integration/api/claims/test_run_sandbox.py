"""A worker reports the run's sandbox with its start heartbeat; the run's JSON shows it and
``is_sandbox_running`` is true only while a bubblewrap-sandboxed run is leased (docs/workers.md, "Sandbox").
SQLite and PostgreSQL (the ``engine`` fixture)."""

from __future__ import annotations

CLAIM = "/api/v1/workers/claim"
BWRAP = {"kind": "bwrap", "network": "none"}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def claimed(client, key):
    resp = await client.post(CLAIM, json={"worker_host": "myhost", "worker_id": "wk-1"}, headers=auth(key))
    assert resp.status == 200
    body = await resp.json()
    return body["run"]["run_id"], body["lease_token"]


async def test_the_start_heartbeat_records_the_sandbox_on_the_run(
    aiohttp_client, worker_app, make_key, new_run
) -> None:
    client = await aiohttp_client(worker_app())
    key, member = await make_key("worker", worker_hosts=["myhost"]), await make_key("member")
    await new_run(worker_host="myhost")
    run_id, token = await claimed(client, key)
    view = f"/api/v1/agent/runs/{run_id}"
    before = await (await client.get(view, headers=auth(member))).json()
    assert before["sandbox"] is None and before["is_sandbox_running"] is False

    beat = f"/api/v1/workers/runs/{run_id}/heartbeat"
    body = {"worker_id": "wk-1", "lease_token": token, "state": "INPROGRESS", "sandbox": BWRAP}
    assert (await client.post(beat, json=body, headers=auth(key))).status == 200
    running = await (await client.get(view, headers=auth(member))).json()
    assert running["state"] == "INPROGRESS"
    assert running["sandbox"] == BWRAP and running["is_sandbox_running"] is True

    done = {"worker_id": "wk-1", "lease_token": token, "state": "SUCCEEDED"}
    assert (
        await client.post(f"/api/v1/workers/runs/{run_id}/state", json=done, headers=auth(key))
    ).status == 200
    finished = await (await client.get(view, headers=auth(member))).json()
    assert finished["sandbox"] == BWRAP and finished["is_sandbox_running"] is False


async def test_an_unsandboxed_run_is_not_a_running_sandbox(
    aiohttp_client, worker_app, make_key, new_run
) -> None:
    client = await aiohttp_client(worker_app())
    key, member = await make_key("worker", worker_hosts=["myhost"]), await make_key("member")
    await new_run(worker_host="myhost")
    run_id, token = await claimed(client, key)
    unsandboxed = {"kind": "none", "network": "open"}
    body = {"worker_id": "wk-1", "lease_token": token, "state": "INPROGRESS", "sandbox": unsandboxed}
    resp = await client.post(f"/api/v1/workers/runs/{run_id}/heartbeat", json=body, headers=auth(key))
    assert resp.status == 200
    run = await (await client.get(f"/api/v1/agent/runs/{run_id}", headers=auth(member))).json()
    assert run["state"] == "INPROGRESS"
    assert run["sandbox"] == unsandboxed and run["is_sandbox_running"] is False


async def test_a_malformed_sandbox_is_refused_with_422(aiohttp_client, worker_app, make_key, new_run) -> None:
    client = await aiohttp_client(worker_app())
    key, member = await make_key("worker", worker_hosts=["myhost"]), await make_key("member")
    await new_run(worker_host="myhost")
    run_id, token = await claimed(client, key)
    beat = f"/api/v1/workers/runs/{run_id}/heartbeat"
    for bad in ({"kind": "docker", "network": "none"}, {"kind": "bwrap"}, "bwrap", {**BWRAP, "extra": "x"}):
        body = {"worker_id": "wk-1", "lease_token": token, "state": "INPROGRESS", "sandbox": bad}
        resp = await client.post(beat, json=body, headers=auth(key))
        assert resp.status == 422, bad
        problem = await resp.json()
        assert resp.content_type == "application/problem+json"
        assert "sandbox must be" in problem["detail"]
    run = await (await client.get(f"/api/v1/agent/runs/{run_id}", headers=auth(member))).json()
    assert run["state"] == "CLAIMED" and run["sandbox"] is None


def test_the_client_reads_the_sandbox_of_a_run() -> None:
    from factoryctl.client.models import Run, RunSandbox

    run = Run.from_json({"run_id": "r1", "state": "INPROGRESS", "sandbox": BWRAP, "is_sandbox_running": True})
    assert run.sandbox == RunSandbox(kind="bwrap", network="none") and run.is_sandbox_running
    assert Run.from_json({"run_id": "r2", "state": "QUEUED", "sandbox": None}).sandbox is None
