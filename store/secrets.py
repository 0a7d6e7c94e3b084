"""Team secrets: versioned, encrypted at rest, values write-only to callers.

Setting a secret adds a version; a webhook keeps using the version it captured when its
definition last applied (docs/reconcile.md, "Secret rotation") until its next apply. Versions are kept so
that the captured version still verifies until then.
"""

from __future__ import annotations

import re
import secrets as _random
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from store import InvalidValue, NotFound, WriteRefused, ids
from store.clock import Clock
from store.crypto import SecretBox
from store.models import Secret, SecretVersion

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
URL_SAFE_RE = re.compile(r"^[A-Za-z0-9._~-]+$")
MAX_VALUE_BYTES = 16 * 1024


@dataclass(frozen=True)
class SecretInfo:
    name: str
    version: int
    created_at: datetime
    updated_at: datetime


def generate_value(nbytes: int = 32) -> str:
    """A URL-safe random secret (usable for every auth mode, including ``url_token``)."""
    return _random.token_urlsafe(nbytes)


def check_name(name: str) -> None:
    if not NAME_RE.match(name):
        raise InvalidValue(
            f"invalid secret name {name!r}: use letters, digits, '.', '_' or '-' (1-200, starting alnum)"
        )


def check_value(value: str) -> None:
    if not value:
        raise InvalidValue("a secret value must not be empty")
    if len(value.encode("utf-8")) > MAX_VALUE_BYTES:
        raise InvalidValue(f"a secret value must be at most {MAX_VALUE_BYTES} bytes")


def _info(row: Secret) -> SecretInfo:
    return SecretInfo(row.name, row.current_version, row.created_at, row.updated_at)


async def get(session: AsyncSession, team_id: str, name: str) -> Secret | None:
    stmt = select(Secret).where(Secret.team_id == team_id, Secret.name == name)
    return (await session.execute(stmt)).scalar_one_or_none()


async def create(
    session: AsyncSession, box: SecretBox, clock: Clock, team_id: str, name: str, value: str
) -> SecretInfo:
    check_name(name)
    check_value(value)
    if await get(session, team_id, name) is not None:
        raise WriteRefused(f"secret {name!r} already exists")
    now = clock.now()
    row = Secret(
        id=ids.new_id(ids.SECRET),
        team_id=team_id,
        name=name,
        current_version=1,
        created_at=now,
        updated_at=now,
    )
    session.add(row)
    session.add(SecretVersion(secret_id=row.id, version=1, ciphertext=box.encrypt(value), created_at=now))
    await session.flush()
    return _info(row)


async def set_value(
    session: AsyncSession, box: SecretBox, clock: Clock, team_id: str, name: str, value: str
) -> SecretInfo:
    """Add a new version (the secret must exist)."""
    check_value(value)
    row = await get(session, team_id, name)
    if row is None:
        raise NotFound(f"secret {name!r} does not exist")
    now = clock.now()
    row.current_version += 1
    row.updated_at = now
    session.add(
        SecretVersion(
            secret_id=row.id, version=row.current_version, ciphertext=box.encrypt(value), created_at=now
        )
    )
    await session.flush()
    return _info(row)


async def list_secrets(session: AsyncSession, team_id: str) -> list[SecretInfo]:
    rows = (
        await session.execute(select(Secret).where(Secret.team_id == team_id).order_by(Secret.name))
    ).scalars()
    return [_info(r) for r in rows]


async def delete_secret(session: AsyncSession, team_id: str, name: str) -> None:
    row = await get(session, team_id, name)
    if row is None:
        raise NotFound(f"secret {name!r} does not exist")
    await session.execute(delete(SecretVersion).where(SecretVersion.secret_id == row.id))
    await session.delete(row)
    await session.flush()


async def reveal(
    session: AsyncSession, box: SecretBox, team_id: str, name: str, version: int | None = None
) -> tuple[str, int]:
    """Decrypt a secret's value (current version unless one is named). Never log the result."""
    row = await get(session, team_id, name)
    if row is None:
        raise NotFound(f"secret {name!r} does not exist")
    wanted = row.current_version if version is None else version
    stmt = select(SecretVersion.ciphertext).where(
        SecretVersion.secret_id == row.id, SecretVersion.version == wanted
    )
    token = (await session.execute(stmt)).scalar_one_or_none()
    if token is None:
        raise NotFound(f"secret {name!r} has no version {wanted}")
    return box.decrypt(token), wanted
