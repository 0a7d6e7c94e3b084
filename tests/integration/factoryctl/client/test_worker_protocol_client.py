"""The client's worker resources against the real server, asynchronously, as the worker agent uses them.

What the agent relies on: each final error class (401/403 stop the worker, 404/409 end its hold on
a run), follow-ups handed over once, and 409s that name the run's state, which is how a repeated
report that already landed is recognised (docs/workers.md).
"""

from __future__ import annotations

import pytest
from live_servers import LiveServer, unique

from factoryctl.client import (
    AsyncFactoryClient,
    AuthenticationError,
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
    UnprocessableEntityError,
)
from factoryctl.client.worker_resources import conflict_run_state


async def test_a_run_through_every_worker_call(live: LiveServer) -> None:
    host = unique("host")  # admin keys may act for any host
    async with AsyncFactoryClient(live.url, live.admin_key) as api:
        assert await api.workers.claim(host, wait_seconds=0) is None  # idle: 204
        run_id = (await api.runs.create("work", config={"worker_host": host})).run_id
        claim = await api.workers.claim(host, wait_seconds=5, worker_id="w1")
        assert claim is not None and claim.run.run_id == run_id and claim.lease_seconds == 30
        assert claim.run.raw["prompt"] == "work"  # the run as sent, for Job.from_claim
        token = claim.lease_token
        assert token  # every call for the run presents it (docs/workers.md, "Leases")

        started = await api.workers.heartbeat(run_id, state="INPROGRESS", worker_id="w1", lease_token=token)
        assert (started.state, started.cancel_requested, started.followups) == ("INPROGRESS", False, [])
        followup = await api.runs.followup(run_id, "also add tests")
        beat = await api.workers.heartbeat(run_id, worker_id="w1", lease_token=token)
        assert [(f.followup_id, f.message) for f in beat.followups] == [
            (followup.followup_id, "also add tests")
        ]
        assert (
            await api.workers.heartbeat(run_id, worker_id="w1", lease_token=token)
        ).followups == []  # handed over once
        assert (
            await api.workers.append_logs(run_id, [("stdout", "working")], worker_id="w1", lease_token=token)
            == 1
        )
        assert (
            await api.workers.secrets(run_id, worker_id="w1", lease_token=token) == {}
        )  # the run references none

        with pytest.raises(ConflictError) as elsewhere:  # same key, another worker process
            await api.workers.heartbeat(run_id, worker_id="w2", lease_token=token)
        assert conflict_run_state(elsewhere.value) == "INPROGRESS"

        done = await api.workers.report_state(
            run_id, "SUCCEEDED", status_message="ok", worker_id="w1", lease_token=token
        )
        assert done.state == "SUCCEEDED"
        with pytest.raises(ConflictError) as repeated:
            await api.workers.report_state(
                run_id, "SUCCEEDED", status_message="ok", worker_id="w1", lease_token=token
            )
        assert conflict_run_state(repeated.value) == "SUCCEEDED"  # the worker takes it as recorded
        with pytest.raises(ConflictError) as other:
            await api.workers.report_state(run_id, "FAILED", worker_id="w1", lease_token=token)
        assert conflict_run_state(other.value) == "SUCCEEDED"  # not what was reported: refused
        for late in (
            api.workers.heartbeat(run_id, worker_id="w1", lease_token=token),
            api.workers.append_logs(run_id, [("stdout", "late")], worker_id="w1", lease_token=token),
            api.workers.secrets(run_id, worker_id="w1", lease_token=token),
        ):
            with pytest.raises(ConflictError):  # the lease went with the final report
                await late
        assert [x.text for x in (await api.runs.logs(run_id)).logs] == ["working"]


async def test_what_each_refusal_raises(live: LiveServer) -> None:
    host = unique("host")
    async with (
        AsyncFactoryClient(live.url, live.admin_key) as admin,
        AsyncFactoryClient(live.url, live.worker_key) as worker,  # serves host-a only
        AsyncFactoryClient(live.url, "fk_revoked") as stranger,
        AsyncFactoryClient(live.url, live.keys["other"]) as foreign,  # another team's admin
    ):
        with pytest.raises(PermissionDeniedError):
            await worker.workers.claim(host)
        with pytest.raises(AuthenticationError):
            await stranger.workers.claim(host)
        run_id = (await admin.runs.create("work", config={"worker_host": host})).run_id
        claimed = await admin.workers.claim(host, wait_seconds=5, worker_id="w1")
        assert claimed is not None
        token = claimed.lease_token
        with pytest.raises(PermissionDeniedError):  # a run routed to a host this key may not serve
            await worker.workers.heartbeat(run_id, worker_id="w1")
        with pytest.raises(NotFoundError):  # another team's run does not exist
            await foreign.workers.heartbeat(run_id, worker_id="w1")
        with pytest.raises(AuthenticationError):
            await stranger.workers.report_state(run_id, "SUCCEEDED", worker_id="w1")
        with pytest.raises(UnprocessableEntityError):
            await admin.workers.report_state(run_id, "QUEUED", worker_id="w1", lease_token=token)
        with pytest.raises(ConflictError) as early:  # a claimed run cannot succeed before it starts
            await admin.workers.report_state(run_id, "SUCCEEDED", worker_id="w1", lease_token=token)
        assert conflict_run_state(early.value) == "CLAIMED"
