"""Console sessions (docs/console.md, "Signing in"): opened with an API key, kept server-side.

The browser holds only a random session token in a cookie (``HttpOnly``, ``SameSite=Strict``, ``Secure`` when
the public URL is https, path ``/console``); the database holds its SHA-256, so a copy of the table opens
nothing. The key the user signed in with is checked once and never stored — not in the cookie, not in the
session row, not in a page. A session ends after :attr:`SessionSettings.idle` without a request, at
:attr:`SessionSettings.absolute` after sign-in, on sign-out, and as soon as its key is revoked (every request
joins the key and checks ``revoked_at``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
from dataclasses import dataclass

from aiohttp import web
from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from store.apikeys import Principal
from store.clock import Clock
from store.models import ApiKey, ConsoleSession

COOKIE = "factory_console"
LOGIN_COOKIE = (
    "factory_console_login"  # the sign-in form's CSRF token (double submit), before a session exists
)
PATH = "/console"


@dataclass(frozen=True)
class SessionSettings:
    idle: dt.timedelta = dt.timedelta(minutes=30)
    absolute: dt.timedelta = dt.timedelta(hours=12)
    touch_every: dt.timedelta = dt.timedelta(minutes=1)  # last_seen_at is written at most this often


SESSION_SETTINGS = web.AppKey("console_session_settings", SessionSettings)


@dataclass(frozen=True)
class ConsoleUser:
    """Who is signed in: the session, its team, role and CSRF token, and the key it was opened with."""

    session_id: str
    team_id: str
    key_id: str
    key_name: str
    role: str
    csrf_token: str

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    def principal(self) -> Principal:
        """The caller as the API's functions take it (the session's key, team and role)."""
        return Principal(self.key_id, self.team_id, self.key_name, self.role, ())


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).hexdigest()


async def open_session(
    session: AsyncSession, clock: Clock, who: Principal, settings: SessionSettings
) -> tuple[str, ConsoleUser]:
    """A new session for an authenticated member or admin; returns the cookie token (shown to nobody else)."""
    token = secrets.token_urlsafe(32)
    now = clock.now()
    row = ConsoleSession(
        id=_digest(token),
        team_id=who.team_id,
        key_id=who.key_id,
        role=who.role,
        csrf_token=secrets.token_urlsafe(32),
        created_at=now,
        last_seen_at=now,
        expires_at=now + settings.absolute,
    )
    session.add(row)
    await session.flush()
    return token, ConsoleUser(row.id, row.team_id, row.key_id, who.name, row.role, row.csrf_token)


async def find_session(
    session: AsyncSession, clock: Clock, token: str, settings: SessionSettings
) -> ConsoleUser | None:
    """The live session of a cookie token, or None (unknown, expired, idle too long, or its key revoked).

    An ended session is deleted when it is found; ``last_seen_at`` moves at most once per ``touch_every``.
    """
    sid = _digest(token)
    stmt = (
        select(ConsoleSession, ApiKey.name, ApiKey.revoked_at)
        .join(ApiKey, ApiKey.id == ConsoleSession.key_id)
        .where(ConsoleSession.id == sid)
    )
    found = (await session.execute(stmt)).first()
    if found is None:
        return None
    row, key_name, revoked_at = found
    now = clock.now()
    if revoked_at is not None or now >= row.expires_at or now - row.last_seen_at >= settings.idle:
        await session.execute(delete(ConsoleSession).where(ConsoleSession.id == sid))
        return None
    if now - row.last_seen_at >= settings.touch_every:
        await session.execute(update(ConsoleSession).where(ConsoleSession.id == sid).values(last_seen_at=now))
    return ConsoleUser(row.id, row.team_id, row.key_id, key_name, row.role, row.csrf_token)


async def close_session(session: AsyncSession, token: str) -> None:
    await session.execute(delete(ConsoleSession).where(ConsoleSession.id == _digest(token)))


def set_cookie(response: web.StreamResponse, name: str, value: str, *, secure: bool, max_age: int) -> None:
    response.set_cookie(
        name, value, path=PATH, httponly=True, samesite="Strict", secure=secure, max_age=max_age
    )


def clear_cookie(response: web.StreamResponse, name: str) -> None:
    response.del_cookie(name, path=PATH)


__all__ = [
    "COOKIE",
    "LOGIN_COOKIE",
    "SESSION_SETTINGS",
    "ConsoleUser",
    "SessionSettings",
    "clear_cookie",
    "close_session",
    "find_session",
    "open_session",
    "set_cookie",
]
