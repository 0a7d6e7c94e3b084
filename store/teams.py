"""Teams: every row belongs to one. A fresh store has the ``default`` team."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from store import ids
from store.clock import Clock, SystemClock
from store.models import Team

DEFAULT_TEAM = "default"


async def ensure_team(session: AsyncSession, name: str = DEFAULT_TEAM, clock: Clock | None = None) -> Team:
    """Return the team called ``name``, creating it if needed (safe under concurrent callers)."""
    team = (await session.execute(select(Team).where(Team.name == name))).scalar_one_or_none()
    if team is not None:
        return team
    team = Team(id=ids.new_id(ids.TEAM), name=name, created_at=(clock or SystemClock()).now())
    try:
        async with session.begin_nested():
            session.add(team)
    except IntegrityError:
        return (await session.execute(select(Team).where(Team.name == name))).scalar_one()
    return team
