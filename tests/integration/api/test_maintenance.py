"""The maintenance job (issue 29, part 2): finished runs past the retention age go with everything they own,
live and recent ones stay; notification messages, console sessions and schedule fires have their own ages;
batches are bounded; one replica at a time holds the lease (docs/operations.md, "Retention")."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import uuid

from sqlalchemy import func, insert, select, text, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.app import create_app
from api.context import ServerSettings
from api.runs.maintenance import LEASE_SECONDS, apply_policy, maintenance_job, maintenance_pass, take_lease
from api.runs.retention import RetentionSettings, TablePolicy, prune_runs
from store.clock import ManualClock
from store.db import CHURNED_TABLES, create_engine, session_factory, vacuum_churned
from store.models import (
    ApiKey,
    ConsoleSession,
    Factory,
    NotificationAttempt,
    NotificationEndpoint,
    NotificationMessage,
    Run,
    RunArtifact,
    RunEvent,
    RunFollowup,
    RunLog,
    RunScore,
    RunSessionState,
    Schedule,
    ScheduleFire,
    Team,
)

NOW = dt.datetime(2026, 6, 1, 12, 0, tzinfo=dt.UTC)
EVENT_IDS = itertools.count(1)
OWNED = (RunEvent, RunLog, RunArtifact, RunSessionState, RunScore, RunFollowup, NotificationMessage)


def ago(days: float) -> dt.datetime:
    return NOW - dt.timedelta(days=days)


async def seed_team(sessions: async_sessionmaker[AsyncSession]) -> None:
    async with sessions() as s, s.begin():
        await s.execute(insert(Team).values(id="t1", name="t1", created_at=ago(400)))
        await s.execute(
            insert(Factory).values(
                uid="f1", team_id="t1", name="f", created_at=ago(400), updated_at=ago(400), **FACTORY_EXTRA
            )
        )
        await s.execute(
            insert(NotificationEndpoint).values(
                uid="ep1",
                team_id="t1",
                factory_uid="f1",
                name="n",
                url="https://example.test/hook",
                secret_name="s",
                managed_by="api",
                created_at=ago(400),
                updated_at=ago(400),
            )
        )


FACTORY_EXTRA: dict[str, object] = {"managed_by": "api"}


async def seed_run(
    sessions: async_sessionmaker[AsyncSession], state: str, *, created: float, finished: float | None
) -> str:
    """A run with one of every row a run owns (events, logs, artifact, session state, score, follow-up,
    a delivered notification message with an attempt)."""
    run_id = f"run_{uuid.uuid4().hex[:12]}"
    async with sessions() as s, s.begin():
        await s.execute(
            insert(Run).values(
                run_id=run_id,
                team_id="t1",
                title="t",
                prompt="p",
                state=state,
                created_at=ago(created),
                updated_at=ago(created),
                finished_at=None if finished is None else ago(finished),
                source="API",
                creator_type="user",
                creator_uid="u",
                log_lines=3,
                log_bytes=6,
            )
        )
        for i in range(3):
            await s.execute(
                insert(RunEvent).values(
                    run_id=run_id, team_id="t1", kind="state", data={"i": i}, created_at=ago(created)
                )
            )
            await s.execute(
                insert(RunLog).values(run_id=run_id, stream="stdout", text=f"l{i}", created_at=ago(created))
            )
        await s.execute(
            insert(RunArtifact).values(
                uid=f"a_{run_id}",
                run_id=run_id,
                artifact_type="FILE",
                created_at=ago(created),
                filename="x.txt",
                data=b"bytes",
            )
        )
        await s.execute(
            insert(RunSessionState).values(
                run_id=run_id, ciphertext=b"c", size=1, attempt=1, updated_at=ago(created)
            )
        )
        await s.execute(
            insert(RunScore).values(run_id=run_id, scorer_uid="sc1", scorer="s", created_at=ago(created))
        )
        await s.execute(
            insert(RunFollowup).values(
                id=f"fu_{run_id}", run_id=run_id, message="m", outcome="delivered", created_at=ago(created)
            )
        )
        message_id = f"msg_{run_id}"
        await s.execute(
            insert(NotificationMessage).values(
                id=message_id,
                team_id="t1",
                endpoint_uid="ep1",
                run_id=run_id,
                event_id=next(EVENT_IDS),
                event_type="run.state",
                payload="{}",
                status="delivered",
                created_at=ago(created),
            )
        )
        await s.execute(
            insert(NotificationAttempt).values(
                message_id=message_id,
                endpoint_uid="ep1",
                attempt=1,
                trigger="scheduled",
                started_at=ago(created),
                duration_ms=5,
                outcome="succeeded",
            )
        )
    return run_id


async def owned_rows(sessions: async_sessionmaker[AsyncSession], run_id: str) -> dict[str, int]:
    async with sessions() as s:
        counts = {
            model.__tablename__: int(
                await s.scalar(select(func.count()).select_from(model).where(model.run_id == run_id)) or 0
            )
            for model in OWNED
        }
        counts["runs"] = int(
            await s.scalar(select(func.count()).select_from(Run).where(Run.run_id == run_id)) or 0
        )
    return counts


async def count(sessions: async_sessionmaker[AsyncSession], model: type) -> int:
    async with sessions() as s:
        return int(await s.scalar(select(func.count()).select_from(model)) or 0)


async def test_old_finished_runs_go_with_everything_they_own(engine, sessions) -> None:
    await seed_team(sessions)
    old = [
        await seed_run(sessions, state, created=41, finished=40)
        for state in ("SUCCEEDED", "FAILED", "ERROR", "CANCELLED")
    ]
    # created long ago but finished lately: kept
    recent = await seed_run(sessions, "SUCCEEDED", created=41, finished=5)
    live = await seed_run(sessions, "INPROGRESS", created=60, finished=None)
    blocked = await seed_run(sessions, "BLOCKED", created=60, finished=50)  # can still be followed up

    runs_only = RetentionSettings(run_days=30, run_log_days=0, notification_days=0)
    report = await maintenance_pass(engine, sessions, runs_only, now=NOW, holder="a")

    assert report.leader and report.deleted == {
        "runs": 4,
        "run_logs": 0,
        "notification_messages": 0,
        "console_sessions": 0,
        "schedule_fires": 0,
    }
    for run_id in old:
        assert set((await owned_rows(sessions, run_id)).values()) == {0}
    kept = {
        table: 1 for table in ("runs", "run_artifacts", "run_session_states", "run_scores", "run_followups")
    }
    kept |= {"run_events": 3, "run_logs": 3, "notification_messages": 1}
    for run_id in (recent, live, blocked):
        assert await owned_rows(sessions, run_id) == kept
    assert await count(sessions, NotificationAttempt) == 3  # the kept runs' attempts


async def test_zero_days_keeps_runs_for_ever(engine, sessions) -> None:
    await seed_team(sessions)
    run_id = await seed_run(sessions, "SUCCEEDED", created=900, finished=900)
    settings = RetentionSettings(
        run_days=0, run_log_days=0, notification_days=0, console_session_days=0, schedule_fire_days=0
    )
    report = await maintenance_pass(engine, sessions, settings, now=NOW, holder="a")
    assert report.leader and report.total == 0
    assert (await owned_rows(sessions, run_id))["run_logs"] == 3


async def test_log_lines_may_go_before_their_run(engine, sessions) -> None:
    await seed_team(sessions)
    run_id = await seed_run(sessions, "SUCCEEDED", created=21, finished=20)
    settings = RetentionSettings(run_days=30, run_log_days=10, notification_days=0)
    report = await maintenance_pass(engine, sessions, settings, now=NOW, holder="a")
    assert report.deleted["run_logs"] == 1
    rows = await owned_rows(sessions, run_id)
    assert (rows["runs"], rows["run_logs"], rows["run_events"]) == (1, 0, 3)


async def test_runs_are_deleted_in_bounded_batches(sessions) -> None:
    await seed_team(sessions)
    for _ in range(7):
        await seed_run(sessions, "SUCCEEDED", created=40, finished=40)
    seen: list[int] = []

    async def recording(session: AsyncSession, cutoff: dt.datetime, batch: int) -> int:
        seen.append(n := await prune_runs(session, cutoff, batch))
        return n

    policy = TablePolicy("runs", dt.timedelta(days=30), 3, recording)
    assert await apply_policy(sessions, policy, NOW, pause=0) == 7
    assert seen == [3, 3, 1]
    assert await count(sessions, Run) == 0


async def test_notifications_sessions_and_fires_have_their_own_ages(engine, sessions) -> None:
    await seed_team(sessions)
    run_id = await seed_run(sessions, "SUCCEEDED", created=20, finished=20)  # within run retention
    async with sessions() as s, s.begin():
        await s.execute(
            insert(NotificationMessage).values(
                id="pending_old",
                team_id="t1",
                endpoint_uid="ep1",
                run_id=run_id,
                event_id=next(EVENT_IDS),
                event_type="run.state",
                payload="{}",
                status="pending",
                created_at=ago(20),
            )
        )
        await s.execute(
            insert(ApiKey).values(
                id="k1",
                team_id="t1",
                name="k",
                role="admin",
                prefix="fk_x",
                key_hash="h",
                created_at=ago(90),
            )
        )
        for sid, seen, expires in (("gone", 3, 2), ("idle", 2, -5), ("live", 0, -1)):
            await s.execute(
                insert(ConsoleSession).values(
                    id=sid,
                    team_id="t1",
                    key_id="k1",
                    role="admin",
                    csrf_token="c",
                    created_at=ago(4),
                    last_seen_at=ago(seen),
                    expires_at=ago(expires),
                )
            )
        await s.execute(insert(Schedule).values(**SCHEDULE_ROW))
        for days in (40, 31, 1):
            await s.execute(
                insert(ScheduleFire).values(schedule_uid="sch1", fire_time=ago(days), created_at=ago(days))
            )

    report = await maintenance_pass(engine, sessions, RetentionSettings(), now=NOW, holder="a")

    assert report.deleted == {
        "runs": 0,
        "run_logs": 0,
        "notification_messages": 1,
        "console_sessions": 2,
        "schedule_fires": 2,
    }
    async with sessions() as s:
        assert list(await s.scalars(select(NotificationMessage.id))) == ["pending_old"]
        assert list(await s.scalars(select(ConsoleSession.id))) == ["live"]
        assert list(await s.scalars(select(ScheduleFire.fire_time))) == [ago(1)]
    assert await count(sessions, NotificationAttempt) == 0  # the delivered message's attempt went with it


SCHEDULE_ROW: dict[str, object] = {
    "uid": "sch1",
    "team_id": "t1",
    "name": "nightly",
    "cron": "0 3 * * *",
    "managed_by": "api",
    "created_at": ago(90),
    "updated_at": ago(90),
}


async def test_one_replica_holds_the_lease_until_it_lapses(engine, sessions) -> None:
    assert await take_lease(sessions, "a", NOW)
    assert await take_lease(sessions, "a", NOW + dt.timedelta(seconds=10))  # renewed by its holder
    assert not await take_lease(sessions, "b", NOW + dt.timedelta(seconds=20))
    report = await maintenance_pass(engine, sessions, RetentionSettings(), now=NOW, holder="b")
    assert not report.leader and report.total == 0
    later = NOW + dt.timedelta(seconds=10 + LEASE_SECONDS + 1)
    assert await take_lease(sessions, "b", later)
    assert not await take_lease(sessions, "a", later)


async def test_the_job_runs_with_the_app(engine, sessions, box, tmp_path, aiohttp_client) -> None:
    await seed_team(sessions)
    run_id = await seed_run(sessions, "SUCCEEDED", created=40, finished=40)
    app = create_app(
        ServerSettings(data_dir=tmp_path),
        engine,
        box,
        clock=ManualClock(NOW),
        route_modules=("api.ops",),
        lifecycles=[maintenance_job(RetentionSettings(run_days=30), 0.05, first_delay_seconds=0)],
    )
    client = await aiohttp_client(app)
    for _ in range(200):
        if (await owned_rows(sessions, run_id))["runs"] == 0:
            break
        await asyncio.sleep(0.05)
    assert set((await owned_rows(sessions, run_id)).values()) == {0}
    assert not await take_lease(sessions, "another replica", NOW)
    await client.close()  # a graceful stop hands the lease back: another replica may prune at once
    assert await take_lease(sessions, "another replica", NOW)


async def test_a_pass_on_postgresql_vacuums_the_churned_tables(pg_url) -> None:
    """Dead rows of updated runs are reclaimed by the pass itself, whatever the server's autovacuum does
    (the test server runs with it off, as some do)."""
    engine = create_engine(pg_url)
    sessions = session_factory(engine)
    try:
        await seed_team(sessions)
        run_id = await seed_run(sessions, "SUCCEEDED", created=1, finished=1)
        for state in ("QUEUED", "CLAIMED", "INPROGRESS", "SUCCEEDED"):  # a run's life: a new row version each
            async with sessions() as s, s.begin():
                await s.execute(update(Run).where(Run.run_id == run_id).values(state=state))
        report = await maintenance_pass(engine, sessions, RetentionSettings(), now=NOW, holder="a")
        assert report.leader
        async with engine.connect() as conn:
            rows = await conn.execute(
                text(
                    "SELECT relname, vacuum_count, n_dead_tup FROM pg_stat_user_tables"
                    " WHERE relname = ANY(:t)"
                ),
                {"t": list(CHURNED_TABLES)},
            )
            stats = {name: (vacuums, dead) for name, vacuums, dead in rows}
        assert set(stats) == set(CHURNED_TABLES)  # every name is a real table
        assert all(vacuums >= 1 for vacuums, _ in stats.values()), stats
        assert stats["runs"][1] == 0
        assert await vacuum_churned(engine) == []
    finally:
        await engine.dispose()


async def test_sqlite_has_no_vacuum_pass(sqlite_url) -> None:
    engine = create_engine(sqlite_url)
    try:
        assert await vacuum_churned(engine) is None
    finally:
        await engine.dispose()
