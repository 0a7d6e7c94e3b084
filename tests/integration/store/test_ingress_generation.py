"""Migration 0008: the database bumps ``ingress_generation`` on every change to ``webhooks`` and ``secrets``.

Ingress trusts its webhook cache only while this value is unchanged (docs/ingress.md, "Webhook lookup
cache"), so these tests also guard against a later migration dropping the triggers (SQLite drops a
table's triggers when Alembic's batch mode recreates the table).
"""

from __future__ import annotations

import builders
from sqlalchemy import delete, func, select, text, update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from store import secrets as secret_store
from store.clock import SystemClock
from store.crypto import SecretBox
from store.models import IngressGeneration, Secret, Webhook


async def _generation(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(IngressGeneration.value))).scalar_one())


async def _seed(sessions: async_sessionmaker[AsyncSession]) -> tuple[str, str]:
    """A team and a factory: (team id, factory uid)."""
    clock = SystemClock()
    async with sessions() as s, s.begin():
        team = await builders.team(s)
        factory = await builders.factory(s, clock, team.id, "gen")
        return team.id, factory.uid


async def test_one_row_seeded_by_the_migration(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        rows = (await conn.execute(select(IngressGeneration.id, IngressGeneration.value))).all()
    assert [tuple(r) for r in rows] == [(1, 0)]


async def test_every_insert_update_and_delete_of_webhooks_and_secrets_bumps_it(
    engine: AsyncEngine, sessions: async_sessionmaker[AsyncSession], box: SecretBox
) -> None:
    team_id, factory_uid = await _seed(sessions)  # a team and a factory: neither table is covered
    clock = SystemClock()
    seen = [await _generation(engine)]

    async def changed() -> None:
        now = await _generation(engine)
        assert now > seen[-1], "the last change did not bump ingress_generation"
        seen.append(now)

    async with sessions() as s, s.begin():  # secrets: insert
        await builders.secret(s, box, clock, team_id, "gen-secret", "v1")
    await changed()
    async with sessions() as s, s.begin():  # secrets: update (a new version moves current_version)
        await secret_store.set_value(s, box, clock, team_id, "gen-secret", "v2")
    await changed()
    async with sessions() as s, s.begin():  # webhooks: insert
        hook = await builders.webhook(
            s, clock, team_id, factory_uid, "gen-hook", secret_name="gen-secret", secret_version=2
        )
    await changed()
    for values in ({"enabled": False}, {"enabled": True}, {"secret_version": 1}, {"deleted_at": clock.now()}):
        async with sessions() as s, s.begin():  # webhooks: update
            await s.execute(update(Webhook).where(Webhook.uid == hook.uid).values(**values))
        await changed()
    async with sessions() as s, s.begin():  # webhooks: delete
        await s.execute(delete(Webhook).where(Webhook.uid == hook.uid))
    await changed()
    async with sessions() as s, s.begin():  # secrets: delete
        await s.execute(delete(Secret).where(Secret.team_id == team_id, Secret.name == "gen-secret"))
    await changed()


async def test_the_bump_commits_with_the_change_and_only_with_it(
    engine: AsyncEngine, sessions: async_sessionmaker[AsyncSession], box: SecretBox
) -> None:
    team_id, factory_uid = await _seed(sessions)
    clock = SystemClock()
    async with sessions() as s, s.begin():
        hook = await builders.webhook(s, clock, team_id, factory_uid, "atomic")
    before = await _generation(engine)

    async with sessions() as s:  # a rolled-back change leaves the value alone
        await s.execute(update(Webhook).where(Webhook.uid == hook.uid).values(enabled=False))
        await s.rollback()
    assert await _generation(engine) == before

    async with sessions() as s, s.begin():  # a change others cannot see yet has not bumped it for them
        await s.execute(update(Webhook).where(Webhook.uid == hook.uid).values(enabled=False))
        await s.flush()
        assert await _generation(engine) == before  # read on another connection
    after = await _generation(engine)
    assert after > before

    async with sessions() as s, s.begin():  # writes to other tables do not bump it
        await builders.factory(s, clock, team_id, "another")
        await s.execute(text("SELECT 1"))
    assert await _generation(engine) == after


async def test_postgresql_bumps_once_per_transaction(
    engine: AsyncEngine, sessions: async_sessionmaker[AsyncSession], box: SecretBox
) -> None:
    """One transaction touching many rows of both tables bumps the value once on PostgreSQL (deferred
    triggers that fire at commit); SQLite bumps it per row."""
    team_id, factory_uid = await _seed(sessions)
    clock = SystemClock()
    before = await _generation(engine)
    async with sessions() as s, s.begin():
        for i in range(3):
            await builders.secret(s, box, clock, team_id, f"many-{i}", "v")
            await builders.webhook(s, clock, team_id, factory_uid, f"many-{i}")
        await s.execute(update(Webhook).where(Webhook.team_id == team_id).values(enabled=False))
    bumps = await _generation(engine) - before
    if engine.dialect.name == "postgresql":
        assert bumps == 1
    else:
        async with sessions() as s:
            rows = (await s.execute(select(func.count()).select_from(Webhook))).scalar_one()
        assert bumps == 3 + 3 + rows  # one per inserted secret, inserted webhook, updated webhook

    again = await _generation(engine)  # the next transaction bumps again (the once-mark is per transaction)
    async with sessions() as s, s.begin():
        await s.execute(update(Webhook).where(Webhook.team_id == team_id).values(enabled=True))
    assert await _generation(engine) > again
