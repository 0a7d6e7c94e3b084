"""The run queue on real SQLite and PostgreSQL: routing, exactly-once claims, leases and lapses."""

from __future__ import annotations

import asyncio
import datetime as dt

import builders
import pytest
from sqlalchemy import func, select

from api.claims import queue, run_logs
from api.runs import records as runs
from api.runs.states import IllegalTransition
from store.clock import ManualClock
from store.models import Run, RunFollowup

LEASE = 30.0


async def claim(sessions, clock, hosts, owner="w1", team_id=None):
    async with sessions() as s, s.begin():
        run = await queue.claim_next(
            s, clock, worker_hosts=hosts, owner=owner, lease_seconds=LEASE, team_id=team_id
        )
        return None if run is None else run.run_id


async def reap(sessions, clock) -> int:
    async with sessions() as s, s.begin():
        return await queue.reap_expired_leases(s, clock)


async def current_token(sessions, run_id):
    """The run's current lease token: what its genuine holder got with the claim."""
    async with sessions() as s:
        return await s.scalar(select(Run.lease_token).where(Run.run_id == run_id))


async def beat(sessions, clock, run_id, owner="w1", start=False):
    token = await current_token(sessions, run_id)
    async with sessions() as s, s.begin():
        return await queue.heartbeat(
            s, clock, run_id, owner=owner, lease_token=token, lease_seconds=LEASE, start=start
        )


async def report(sessions, clock, run_id, state, owner="w1", message=None):
    token = await current_token(sessions, run_id)
    async with sessions() as s, s.begin():
        run = await queue.report_state(
            s, clock, run_id, owner=owner, lease_token=token, state=state, status_message=message
        )
        return run.state


async def test_claims_route_by_worker_host(sessions, new_run, get_run) -> None:
    clock = ManualClock()
    service = await new_run(worker_host=None, clock=clock)
    clock.advance(1)
    warp = await new_run(worker_host="warp", clock=clock)
    mine = await new_run(worker_host="myhost", clock=clock)
    other = await new_run(worker_host="otherhost", clock=clock)

    assert await claim(sessions, clock, ["myhost"]) == mine
    assert await claim(sessions, clock, ["myhost"]) is None  # never another host's or a service run
    assert await claim(sessions, clock, [""]) == service  # unset and "warp" are service-hosted
    assert await claim(sessions, clock, [""]) == warp
    assert await claim(sessions, clock, [""]) is None
    assert await claim(sessions, clock, ["myhost", "otherhost"]) == other

    run = await get_run(mine)
    assert (run.state, run.lease_owner, run.attempt) == ("CLAIMED", "w1", 1)
    assert run.lease_expires_at == clock.now() + dt.timedelta(seconds=LEASE)


async def test_claims_oldest_first_and_only_for_the_team(sessions, new_run) -> None:
    clock = ManualClock()
    first = await new_run(clock=clock)
    clock.advance(1)
    foreign = await new_run(clock=clock, team="other-team")
    clock.advance(1)
    second = await new_run(clock=clock)
    async with sessions() as s, s.begin():
        team_id = (await builders.team(s)).id

    assert await claim(sessions, clock, [""], team_id=team_id) == first
    assert await claim(sessions, clock, [""], team_id=team_id) == second
    assert await claim(sessions, clock, [""], team_id=team_id) is None
    assert await claim(sessions, clock, [""]) == foreign  # service workers serve every team


async def test_four_concurrent_claimers_claim_each_run_exactly_once(sessions, new_run, db_url) -> None:
    clock = ManualClock()
    total = 200
    async with sessions() as s, s.begin():
        team = await builders.team(s)
        for _ in range(total):
            await builders.run(s, clock, team.id, prompt="p")

    async def claimer(owner: str) -> list[str]:
        got: list[str] = []
        while True:
            run_id = await claim(sessions, clock, [""], owner=owner)
            if run_id is not None:
                got.append(run_id)
                continue
            async with sessions() as s:
                if not await queue.queued_exists(s, worker_hosts=[""]):
                    return got

    results = await asyncio.gather(*(claimer(f"w{i}") for i in range(4)))
    claimed = [r for got in results for r in got]
    assert len(claimed) == total
    assert len(set(claimed)) == total  # zero double claims
    if db_url.startswith("postgres"):
        assert sum(1 for got in results if got) > 1  # SKIP LOCKED lets claimers work side by side
    async with sessions() as s:
        rows = (
            await s.execute(select(Run.state, Run.attempt, func.count()).group_by(Run.state, Run.attempt))
        ).all()
        owners = {
            o: n
            for o, n in (
                await s.execute(select(Run.lease_owner, func.count()).group_by(Run.lease_owner))
            ).all()
        }
    assert [tuple(r) for r in rows] == [("CLAIMED", 1, total)]
    assert owners == {f"w{i}": len(got) for i, got in enumerate(results) if got}


async def test_claimed_but_unstarted_run_goes_back_to_queued_keeping_its_place(
    sessions, new_run, get_run
) -> None:
    clock = ManualClock()
    old = await new_run(clock=clock)
    clock.advance(5)
    newer = await new_run(clock=clock)
    assert await claim(sessions, clock, [""], owner="crashed") == old

    clock.advance(LEASE - 1)
    assert await reap(sessions, clock) == 0  # lease still valid
    clock.advance(2)
    assert await reap(sessions, clock) == 1
    run = await get_run(old)
    assert (run.state, run.lease_owner, run.lease_expires_at) == ("QUEUED", None, None)

    assert await claim(sessions, clock, [""], owner="w2") == old  # ahead of the newer run
    assert (await get_run(old)).attempt == 2
    assert await claim(sessions, clock, [""], owner="w2") == newer
    with pytest.raises(queue.NotLeaseHolder):  # the first owner cannot come back
        await beat(sessions, clock, old, owner="crashed")


async def test_in_progress_run_whose_lease_lapses_ends_error_retryable(sessions, new_run, get_run) -> None:
    clock = ManualClock()
    run_id = await new_run(clock=clock)
    await claim(sessions, clock, [""])
    hb = await beat(sessions, clock, run_id, start=True)
    assert hb.state == "INPROGRESS"
    assert (await get_run(run_id)).started_at == clock.now()

    clock.advance(LEASE + 1)
    assert await reap(sessions, clock) == 1
    run = await get_run(run_id)
    assert run.state == "ERROR"
    assert run.status_message is not None
    assert run.status_message["error_code"] == "resource_unavailable"
    assert run.status_message["retryable"] is True
    assert run.finished_at == clock.now()
    assert await reap(sessions, clock) == 0
    with pytest.raises(queue.NotLeaseHolder):
        await report(sessions, clock, run_id, "SUCCEEDED")


async def test_heartbeats_keep_the_lease_alive(sessions, new_run, get_run) -> None:
    clock = ManualClock()
    run_id = await new_run(clock=clock)
    await claim(sessions, clock, [""])
    await beat(sessions, clock, run_id, start=True)
    for _ in range(5):
        clock.advance(LEASE * 0.6)
        hb = await beat(sessions, clock, run_id)
        assert hb.lease_expires_at == clock.now() + dt.timedelta(seconds=LEASE)
        assert await reap(sessions, clock) == 0
    assert (await get_run(run_id)).state == "INPROGRESS"


async def test_heartbeat_answers_cancel_and_hands_followups_over_once(sessions, new_run) -> None:
    clock = ManualClock()
    run_id = await new_run(clock=clock)
    await claim(sessions, clock, [""])
    hb = await beat(sessions, clock, run_id, start=True)
    assert (hb.cancel_requested, hb.followups) == (False, [])

    async with sessions() as s, s.begin():
        team = await builders.team(s)
        await runs.add_followup(s, clock, team.id, run_id, "also update the docs", None)
        await runs.cancel_run(s, clock, team.id, run_id)
    hb = await beat(sessions, clock, run_id)
    assert hb.cancel_requested is True
    assert [f.message for f in hb.followups] == ["also update the docs"]
    assert (await beat(sessions, clock, run_id)).followups == []  # delivered once

    assert await report(sessions, clock, run_id, "CANCELLED") == "CANCELLED"


async def test_state_reports_go_through_the_state_machine(sessions, new_run, get_run) -> None:
    clock = ManualClock()
    run_id = await new_run(clock=clock)
    await claim(sessions, clock, [""])
    with pytest.raises(queue.NotLeaseHolder):
        await report(sessions, clock, run_id, "INPROGRESS", owner="intruder")
    assert await report(sessions, clock, run_id, "INPROGRESS") == "INPROGRESS"
    clock.advance(3)
    assert await report(sessions, clock, run_id, "SUCCEEDED", message={"message": "done"}) == "SUCCEEDED"
    run = await get_run(run_id)
    assert run.finished_at == clock.now() and run.updated_at == clock.now()
    assert (run.lease_owner, run.lease_expires_at) == (None, None)
    assert run.status_message == {"message": "done"}
    with pytest.raises(queue.NotLeaseHolder):  # a finished run has no lease any more
        await report(sessions, clock, run_id, "FAILED")
    with pytest.raises(ValueError):
        await report(sessions, clock, run_id, "QUEUED")


async def test_illegal_reports_are_refused_and_change_nothing(sessions, new_run, get_run) -> None:
    clock = ManualClock()
    run_id = await new_run(clock=clock)
    await claim(sessions, clock, [""])
    with pytest.raises(IllegalTransition):
        await report(sessions, clock, run_id, "SUCCEEDED")  # never started
    with pytest.raises(IllegalTransition):
        await report(sessions, clock, run_id, "CANCELLED")  # nobody asked for a cancel
    await report(sessions, clock, run_id, "INPROGRESS")
    with pytest.raises(IllegalTransition):
        await report(sessions, clock, run_id, "INPROGRESS")  # already started
    run = await get_run(run_id)
    assert (run.state, run.lease_owner) == ("INPROGRESS", "w1")


async def test_claimed_run_cancelled_before_it_starts_never_runs(sessions, new_run, get_run) -> None:
    clock = ManualClock()
    run_id = await new_run(clock=clock)
    await claim(sessions, clock, [""])
    async with sessions() as s, s.begin():
        team = await builders.team(s)
        await runs.cancel_run(s, clock, team.id, run_id)
    hb = await beat(sessions, clock, run_id, start=True)
    assert (hb.state, hb.cancel_requested) == ("CANCELLED", True)
    run = await get_run(run_id)
    assert (run.state, run.started_at, run.lease_owner) == ("CANCELLED", None, None)
    with pytest.raises(queue.NotLeaseHolder):
        await beat(sessions, clock, run_id)


async def test_lapsed_lease_with_a_pending_cancel_ends_cancelled(sessions, new_run, get_run) -> None:
    clock = ManualClock()
    claimed = await new_run(clock=clock)
    running = await new_run(clock=clock)
    await claim(sessions, clock, [""])
    await claim(sessions, clock, [""])
    await beat(sessions, clock, running, start=True)
    async with sessions() as s, s.begin():
        team = await builders.team(s)
        for run_id in (claimed, running):
            await runs.cancel_run(s, clock, team.id, run_id)
    clock.advance(LEASE + 1)
    assert await reap(sessions, clock) == 2
    for run_id in (claimed, running):
        run = await get_run(run_id)
        assert (run.state, run.cancel_requested, run.lease_owner) == ("CANCELLED", False, None)


async def test_blocked_run_releases_its_lease(sessions, new_run, get_run) -> None:
    clock = ManualClock()
    run_id = await new_run(clock=clock)
    await claim(sessions, clock, [""])
    await report(sessions, clock, run_id, "INPROGRESS")
    assert await report(sessions, clock, run_id, "BLOCKED", message={"message": "which branch?"}) == "BLOCKED"
    run = await get_run(run_id)
    assert (run.lease_owner, run.lease_expires_at, run.finished_at) == (None, None, None)
    clock.advance(LEASE + 1)
    assert await reap(sessions, clock) == 0  # nothing to lapse: no worker holds it
    with pytest.raises(queue.NotLeaseHolder):
        await beat(sessions, clock, run_id)


async def test_logs_only_from_the_lease_holder(sessions, new_run) -> None:
    clock = ManualClock()
    run_id = await new_run(clock=clock)
    await claim(sessions, clock, [""])
    token = await current_token(sessions, run_id)
    async with sessions() as s, s.begin():
        lines = [("stdout", "a"), ("stderr", "b")]
        assert await run_logs.append_logs(s, clock, run_id, lines, owner="w1", lease_token=token) == 2
    with pytest.raises(queue.NotLeaseHolder):
        async with sessions() as s, s.begin():
            await run_logs.append_logs(
                s, clock, run_id, [("stdout", "x")], owner="intruder", lease_token=token
            )
    with pytest.raises(queue.NotLeaseHolder):  # the right owner without the claim's token
        async with sessions() as s, s.begin():
            await run_logs.append_logs(s, clock, run_id, [("stdout", "x")], owner="w1")
    async with sessions() as s:
        team = await builders.team(s)
        lines, more = await runs.list_logs(s, team.id, run_id, after=0, limit=10)
    assert [(x.stream, x.text) for x in lines] == [("stdout", "a"), ("stderr", "b")] and not more


async def test_a_stale_holder_of_an_earlier_attempt_is_refused(sessions, new_run, get_run) -> None:
    """Same owner (one key and worker ID shared by --concurrency slots), two attempts: only the current
    claim's lease token acts on the run (docs/workers.md, "Leases")."""
    clock = ManualClock()
    run_id = await new_run(clock=clock)
    assert await claim(sessions, clock, [""], owner="w1") == run_id
    first = await current_token(sessions, run_id)
    clock.advance(LEASE + 1)
    assert await reap(sessions, clock) == 1  # attempt 1's lease lapsed before it started: QUEUED again
    assert await claim(sessions, clock, [""], owner="w1") == run_id  # attempt 2, same owner
    second = await current_token(sessions, run_id)
    assert first and second and first != second and (await get_run(run_id)).attempt == 2

    for call in (
        lambda s: queue.report_state(s, clock, run_id, owner="w1", lease_token=first, state="SUCCEEDED"),
        lambda s: queue.heartbeat(s, clock, run_id, owner="w1", lease_token=first, lease_seconds=LEASE),
        lambda s: run_logs.append_logs(s, clock, run_id, [("stdout", "x")], owner="w1", lease_token=first),
    ):
        with pytest.raises(queue.NotLeaseHolder):
            async with sessions() as s, s.begin():
                await call(s)
    run = await get_run(run_id)
    assert (run.state, run.finished_at, run.log_lines) == ("CLAIMED", None, 0)
    async with sessions() as s, s.begin():
        beat = await queue.heartbeat(
            s, clock, run_id, owner="w1", lease_token=second, lease_seconds=LEASE, start=True
        )
    assert beat.state == "INPROGRESS"
    assert await report(sessions, clock, run_id, "SUCCEEDED") == "SUCCEEDED"
    assert (await get_run(run_id)).lease_token is None  # released with the lease


async def test_a_row_being_added_for_a_queued_run_does_not_hide_it_from_claims(
    sessions, new_run, db_url
) -> None:
    """A transaction adding a follow-up (or an event, a notification) for a queued run holds a key-share
    lock on it on PostgreSQL; the claim must still take the run, not skip it as locked."""
    if not db_url.startswith("postgres"):
        pytest.skip("SQLite has one writer at a time: a claim waits for the open transaction instead")
    clock = ManualClock()
    run_id = await new_run(clock=clock)
    async with sessions() as writer, writer.begin():
        writer.add(
            RunFollowup(
                id="f-open", run_id=run_id, message="m", mode=None, outcome="queued", created_at=clock.now()
            )
        )
        await writer.flush()  # the insert (and its FOR KEY SHARE on the run) is in, not committed
        assert await claim(sessions, clock, [""]) == run_id
