"""The per-factory apply lock: one apply of a given factory at a time, across processes and replicas.

The lock lives inside the apply transaction, so commit, rollback and a crashed process all release
it; there is nothing to expire or clean up.

- PostgreSQL: ``pg_advisory_xact_lock(hashtext(key))``. Another replica applying the same factory
  waits (or, with ``wait=False``, is told to skip). ``hashtext`` is 32-bit, so two different factories
  can share a lock slot; that only serialises them, it never lets two applies of one factory overlap.
- SQLite: the database has one writer at a time, so the write transaction itself is the lock. The
  trick is to *start* the transaction with a write: the driver issues ``BEGIN`` before the first
  write statement and reads before it would run outside the transaction (and could later fail to
  upgrade to a write lock in WAL mode). :func:`acquire` therefore upserts a row of the ``locks``
  table as the transaction's first statement, which takes SQLite's write lock up front (``BEGIN
  IMMEDIATE`` semantics); a concurrent apply waits on the busy timeout. The row only records the
  last holder; it is not consulted.

Call :func:`acquire` first in the transaction, before any read.
"""

from __future__ import annotations

import datetime as dt
import hashlib

from sqlalchemy import text
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncSession

from store.models import AppliedLock

_MAX_NAME = 200


def lock_name(team: str, factory: str) -> str:
    """The lock key of a factory; long names are hashed to fit the ``locks`` table."""
    name = f"factory:{team}:{factory}"
    if len(name) > _MAX_NAME:
        name = "factory:" + hashlib.sha256(name.encode("utf-8")).hexdigest()
    return name


async def acquire(
    session: AsyncSession,
    team: str,
    factory: str,
    *,
    now: dt.datetime,
    holder: str = "reconciler",
    wait: bool = True,
) -> bool:
    """Take the apply lock of ``team``/``factory`` for the rest of the session's transaction.

    Returns False only when ``wait`` is False and another transaction holds the lock (PostgreSQL).
    """
    name = lock_name(team, factory)
    if session.get_bind().dialect.name == "postgresql":
        if wait:
            await session.execute(text("SELECT pg_advisory_xact_lock(hashtext(:k))"), {"k": name})
            return True
        got = await session.execute(text("SELECT pg_try_advisory_xact_lock(hashtext(:k))"), {"k": name})
        return bool(got.scalar_one())
    stmt = sqlite_insert(AppliedLock).values(name=name, holder=holder, expires_at=now)
    stmt = stmt.on_conflict_do_update(
        index_elements=[AppliedLock.name], set_={"holder": holder, "expires_at": now}
    )
    await session.execute(stmt)
    return True
