"""Lease tokens over HTTP (issue 23, item 12): a claim's token, not just the key and worker ID, holds the
lease, so a stale holder of an earlier attempt cannot act on the next one (docs/workers.md, "Leases")."""

from __future__ import annotations

from api.claims import queue
from store.clock import ManualClock

LEASE = 30.0
CLAIM = "/api/v1/workers/claim"


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_a_stale_attempt_cannot_finish_the_next_one(
    aiohttp_client, worker_app, sessions, make_key, new_run, get_run
) -> None:
    clock = ManualClock()
    client = await aiohttp_client(worker_app(clock=clock, lease_seconds=LEASE))
    key = await make_key("worker", worker_hosts=["myhost"])
    run_id = await new_run(worker_host="myhost", clock=clock)
    base = f"/api/v1/workers/runs/{run_id}"
    same = {"worker_id": "wk-1"}  # --concurrency N: every slot of one worker shares it

    first = await client.post(CLAIM, json={"worker_host": "myhost", **same}, headers=auth(key))
    assert first.status == 200
    stale = (await first.json())["lease_token"]
    clock.advance(LEASE + 1)  # attempt 1 stalls; its lease lapses and the reaper re-queues the run
    async with sessions() as s, s.begin():
        assert await queue.reap_expired_leases(s, clock) == 1
    second = await client.post(CLAIM, json={"worker_host": "myhost", **same}, headers=auth(key))
    assert second.status == 200
    body = await second.json()
    current = body["lease_token"]
    assert body["run"]["attempt"] == 2 and current != stale
    resp = await client.post(
        f"{base}/heartbeat", json={**same, "state": "INPROGRESS", "lease_token": current}, headers=auth(key)
    )
    assert resp.status == 200 and (await resp.json())["state"] == "INPROGRESS"

    # the attempt-1 holder wakes up: every call of it is refused like a lost lease
    for call, extra in (
        ("state", {"state": "SUCCEEDED", "status_message": "done by attempt 1"}),
        ("heartbeat", {}),
        ("logs", {"lines": [{"stream": "stdout", "text": "from attempt 1"}]}),
        ("secrets", {}),
    ):
        resp = await client.post(
            f"{base}/{call}", json={**same, **extra, "lease_token": stale}, headers=auth(key)
        )
        assert resp.status == 409, call
        assert resp.content_type == "application/problem+json"
    resp = await client.post(f"{base}/state", json={**same, "state": "SUCCEEDED"}, headers=auth(key))
    assert resp.status == 409  # no token at all

    run = await get_run(run_id)
    assert (run.state, run.finished_at, run.status_message, run.log_lines) == ("INPROGRESS", None, None, 0)
    resp = await client.post(
        f"{base}/state", json={**same, "state": "SUCCEEDED", "lease_token": current}, headers=auth(key)
    )
    assert resp.status == 200 and (await get_run(run_id)).state == "SUCCEEDED"
