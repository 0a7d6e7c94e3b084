"""API keys: random bearer tokens, shown once, stored as SHA-256 digests.

Keys carry 256 bits of entropy, so a plain SHA-256 (not a slow password hash) is the right tool:
lookups stay one indexed equality per request and a stolen table reveals nothing usable.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from store import InvalidValue, NotFound, ids
from store.clock import Clock
from store.models import ApiKey

ROLES = ("admin", "member", "worker")
KEY_PREFIX = "fk_"
_TOUCH_EVERY = timedelta(seconds=60)


@dataclass(frozen=True)
class Principal:
    """Who is calling: resolved from a valid, unrevoked key."""

    key_id: str
    team_id: str
    name: str
    role: str
    worker_hosts: tuple[str, ...]


def hash_key(key: str) -> str:
    # surrogatepass: a header or form value that was not UTF-8 hashes to no key instead of raising (a 401
    # that counts against the failed-authentication budget, never a 500).
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


async def create_key(
    session: AsyncSession,
    clock: Clock,
    team_id: str,
    name: str,
    role: str,
    worker_hosts: list[str] | None = None,
) -> tuple[ApiKey, str]:
    """Create a key; returns the row and the plaintext key (the only time it exists)."""
    if role not in ROLES:
        raise InvalidValue(f"role must be one of {', '.join(ROLES)}")
    if not name.strip():
        raise InvalidValue("a key needs a name")
    if role == "worker" and not worker_hosts:
        raise InvalidValue("a worker key needs at least one --worker-host")
    plaintext = KEY_PREFIX + secrets.token_urlsafe(32)
    row = ApiKey(
        id=ids.new_id(ids.KEY),
        team_id=team_id,
        name=name.strip(),
        role=role,
        worker_hosts=list(worker_hosts or []),
        prefix=plaintext[:10],
        key_hash=hash_key(plaintext),
        created_at=clock.now(),
    )
    session.add(row)
    await session.flush()
    return row, plaintext


async def authenticate(session: AsyncSession, clock: Clock, presented: str) -> Principal | None:
    """Resolve a presented key, or None when it is unknown or revoked."""
    stmt = select(ApiKey).where(ApiKey.key_hash == hash_key(presented))
    row = (await session.execute(stmt)).scalar_one_or_none()
    if row is None or row.revoked_at is not None:
        return None
    now = clock.now()
    if row.last_used_at is None or now - row.last_used_at > _TOUCH_EVERY:
        await session.execute(update(ApiKey).where(ApiKey.id == row.id).values(last_used_at=now))
    return Principal(row.id, row.team_id, row.name, row.role, tuple(row.worker_hosts or ()))


async def revoke_key(session: AsyncSession, clock: Clock, team_id: str, key_id: str) -> None:
    row = await session.get(ApiKey, key_id)
    if row is None or row.team_id != team_id:
        raise NotFound(f"key {key_id} does not exist")
    row.revoked_at = clock.now()
    await session.flush()


async def list_keys(session: AsyncSession, team_id: str) -> list[ApiKey]:
    stmt = select(ApiKey).where(ApiKey.team_id == team_id).order_by(ApiKey.created_at)
    return list((await session.execute(stmt)).scalars())


async def count_keys(session: AsyncSession) -> int:
    return len((await session.execute(select(ApiKey.id).limit(1))).all())
