"""Whether an open event stream may go on: its credential, re-checked in the database (docs/events.md,
"Revocation and sign-out").

A stream is authenticated once, when it opens, and may then stay open for hours. What it was opened with —
an API key, or a console session and the key behind it — is its :class:`Grant`. Each app's hub asks
:func:`ended` about the grants of all its open streams together, every ``auth_check_seconds``: one query
per batch of distinct keys and one per batch of distinct console sessions, whatever the number of streams.
The database is the one thing replicas share, so a key revoked or a session signed out through any replica
ends the streams of every replica within one check interval.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from store.models import ApiKey, ConsoleSession

CHUNK: Final = 500  # ids per IN list (well under SQLite's and asyncpg's parameter limits)


@dataclass(frozen=True)
class Grant:
    """What a stream was opened with: an API key, and for a console stream the session too (its row id,
    the digest of the cookie's token)."""

    key_id: str
    console_session: str | None = None


def _chunks(values: Collection[str]) -> Iterator[Sequence[str]]:
    ordered = sorted(values)
    for start in range(0, len(ordered), CHUNK):
        yield ordered[start : start + CHUNK]


async def ended(session: AsyncSession, now: dt.datetime, grants: Collection[Grant]) -> set[Grant]:
    """The grants that no longer hold: their key is revoked (or gone), or their console session was signed
    out, ended by the revocation of its key, or reached its absolute end (docs/console.md, "Signing in").

    A console session's idle limit is not applied here: an open stream is the page being used.
    """
    keys = {g.key_id for g in grants}
    live_keys: set[str] = set()
    for chunk in _chunks(keys):
        stmt = select(ApiKey.id).where(ApiKey.id.in_(chunk), ApiKey.revoked_at.is_(None))
        live_keys.update(await session.scalars(stmt))
    sessions = {g.console_session for g in grants if g.console_session is not None}
    live_sessions: set[str] = set()
    for chunk in _chunks(sessions):
        stmt = select(ConsoleSession.id).where(ConsoleSession.id.in_(chunk), ConsoleSession.expires_at > now)
        live_sessions.update(await session.scalars(stmt))
    return {
        g
        for g in grants
        if g.key_id not in live_keys
        or (g.console_session is not None and g.console_session not in live_sessions)
    }


__all__ = ["Grant", "ended"]
