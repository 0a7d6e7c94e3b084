"""Reads that see one moment of the store.

A page or answer built from several queries must not mix moments: a factory's conditions read before an
apply committed beside the apply history read after it (a failed apply shown under a "Ready" heading).
Neither store gives that by default: pysqlite runs a SELECT outside any transaction (each statement sees
the newest commit) and PostgreSQL's READ COMMITTED takes a new snapshot per statement. :func:`snapshot_reads`
opens the transaction both stores need for it (docs/architecture.md, "Consistent reads").
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession


async def snapshot_reads(session: AsyncSession) -> None:
    """Make every later query of ``session``'s transaction read the same snapshot.

    Call it first, before the session has run a query. For reads only: on SQLite the snapshot is a
    deferred transaction, which a write would have to upgrade (and could find stale).
    """
    if session.get_bind().dialect.name == "sqlite":
        # pysqlite would not begin a transaction for a read; the snapshot is taken at the first read and
        # held until the session ends (its rollback).
        conn = await session.connection()
        await conn.exec_driver_sql("BEGIN DEFERRED")
    else:  # set before the session's connection begins its transaction
        await session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
