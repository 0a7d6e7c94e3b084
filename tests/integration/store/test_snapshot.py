"""A multi-query read sees one moment of the store, while writers commit between its queries."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from store.ids import new_id
from store.models import Team
from store.snapshot import snapshot_reads


async def _names(session: AsyncSession) -> list[str]:
    return list(await session.scalars(select(Team.name).where(Team.name.like("snap-%")).order_by(Team.name)))


async def _add(sessions: async_sessionmaker[AsyncSession], name: str) -> None:
    async with sessions() as session, session.begin():
        session.add(Team(id=new_id("tm"), name=name, created_at=dt.datetime.now(dt.UTC)))


@pytest.mark.parametrize("snapshot", [True, False], ids=["snapshot", "plain"])
async def test_a_commit_between_two_reads_is_seen_only_without_a_snapshot(
    sessions: async_sessionmaker[AsyncSession], snapshot: bool
) -> None:
    await _add(sessions, "snap-a")
    async with sessions() as reader:
        if snapshot:
            await snapshot_reads(reader)
        assert await _names(reader) == ["snap-a"]
        await _add(sessions, "snap-b")  # commits while the reader's session is open
        second = await _names(reader)
    # the plain session shows how the stores behave by default: each query sees the newest commit
    assert second == (["snap-a"] if snapshot else ["snap-a", "snap-b"])
    async with sessions() as after:
        assert await _names(after) == ["snap-a", "snap-b"]
