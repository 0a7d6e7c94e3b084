"""Named readers' positions in the run event log (``notification_cursor`` rows): the notification
fan-out's and the scorers' judge's.

A reader reads events past its stored position and takes its turn by moving the position with a compare
and set, so one turn wins per position across replicas: on PostgreSQL a concurrent UPDATE waits for the
first transaction and then finds the position changed; on SQLite the statement takes the write lock.
A fresh cursor starts at the newest event (history is not replayed to a new reader).
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from api.runs import events
from store.models import NotificationCursor


async def read_cursor(session: AsyncSession, name: str, now: dt.datetime) -> events.Position | None:
    """The stored position of ``name``; None the first time (the cursor is then created at the newest
    event, in the caller's transaction)."""
    stmt = select(NotificationCursor.txid, NotificationCursor.event_id).where(NotificationCursor.name == name)
    row = (await session.execute(stmt)).first()
    if row is not None:
        return (int(row[0]), int(row[1]))
    start = await events.latest_position(session)
    insert_ = sqlite.insert if session.get_bind().dialect.name == "sqlite" else postgresql.insert
    await session.execute(
        insert_(NotificationCursor)
        .values(name=name, txid=start[0], event_id=start[1], updated_at=now)
        .on_conflict_do_nothing(index_elements=[NotificationCursor.name])
    )
    return None


async def advance_cursor(
    session: AsyncSession, name: str, old: events.Position, new: events.Position, now: dt.datetime
) -> bool:
    """Move ``name`` from ``old`` to ``new`` unless another turn moved it first (compare and set)."""
    result = await session.execute(
        update(NotificationCursor)
        .where(
            NotificationCursor.name == name,
            NotificationCursor.txid == old[0],
            NotificationCursor.event_id == old[1],
        )
        .values(txid=new[0], event_id=new[1], updated_at=now)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0))
