"""Team secrets: versioned, encrypted at rest, values write-only to callers.

Setting a secret adds a version; a webhook keeps using the version it captured when its
definition last applied (docs/reconcile.md, "Secret rotation") until its next apply. Versions are kept so
that the captured version still verifies until then.

Every secret has exactly one scope (docs/management.md, "Team secrets"): ``webhook`` backs a webhook's
auth and is never resolvable into a run; ``run`` may be referenced by runs (environments' ``secrets``,
MCP ``secret:NAME`` values). A value an agent can read must never also verify deliveries, or any member
who can start a run could forge them. The rules live here, once: :func:`run_problem` and
:func:`webhook_problem` say whether a use fits; :func:`reveal_for_run` is the only way a run's secrets
are read; a secret a live webhook names can never become ``run`` (:func:`create`, :func:`set_scope`).
Without a scope a secret is ``webhook``, the closed one: forgetting ``run`` costs a clear refusal, never
a leak.
"""

from __future__ import annotations

import re
import secrets as _random
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession

from store import InvalidValue, NotFound, WriteRefused, ids
from store.clock import Clock
from store.crypto import SecretBox
from store.models import Factory, NotificationEndpoint, Secret, SecretVersion, Webhook

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
URL_SAFE_RE = re.compile(r"^[A-Za-z0-9._~-]+$")
MAX_VALUE_BYTES = 16 * 1024
SECRET_PREFIX = "secret:"  # noqa: S105 - a reference prefix, not a secret
RUN, WEBHOOK = "run", "webhook"
SCOPES = (RUN, WEBHOOK)
DEFAULT_SCOPE = WEBHOOK


@dataclass(frozen=True)
class SecretInfo:
    name: str
    version: int
    created_at: datetime
    updated_at: datetime
    scope: str


@dataclass(frozen=True)
class RunSecrets:
    """What a run may read: ``values`` of its run-scoped secrets; ``refused``: name -> why not."""

    values: dict[str, str]
    refused: dict[str, str]


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


def check_scope(scope: str) -> None:
    if scope not in SCOPES:
        raise InvalidValue(f"invalid secret scope {scope!r}: use {' or '.join(SCOPES)}")


def run_problem(name: str, scope: str | None) -> str | None:
    """Why a run may not reference team secret ``name`` (``scope`` None: it does not exist), or None."""
    if scope is None:
        return f"team secret {name!r} does not exist"
    if scope != RUN:
        return f"team secret {name!r} may not be used by runs (scope: {scope})"
    return None


def webhook_problem(name: str, scope: str) -> str | None:
    """Why team secret ``name`` may not back a webhook's auth, or None."""
    if scope != WEBHOOK:
        return f"team secret {name!r} may not back a webhook (scope: {scope}); use a webhook-scoped secret"
    return None


def secret_ref(value: Any) -> str | None:
    """The team secret name of a ``secret:NAME`` value, else None."""
    if isinstance(value, str) and value.startswith(SECRET_PREFIX):
        return value[len(SECRET_PREFIX) :].strip()
    return None


def mcp_secret_refs(servers: Any) -> Iterator[tuple[str, str]]:
    """``(field, secret name)`` for every ``secret:NAME`` value in MCP ``env`` and ``headers``: what a
    run's ``mcp_servers`` asks of the team's secrets (run creation and apply-time checks share it)."""
    if not isinstance(servers, Mapping):
        return
    for name, server in servers.items():
        if not isinstance(server, Mapping):
            continue
        for key in ("env", "headers"):
            values = server.get(key)
            if isinstance(values, Mapping):
                for var, value in values.items():
                    ref = secret_ref(value)
                    if ref is not None:
                        yield f"mcp_servers.{name}.{key}.{var}", ref


def _info(row: Secret) -> SecretInfo:
    return SecretInfo(row.name, row.current_version, row.created_at, row.updated_at, row.scope)


async def get(session: AsyncSession, team_id: str, name: str) -> Secret | None:
    stmt = select(Secret).where(Secret.team_id == team_id, Secret.name == name)
    return (await session.execute(stmt)).scalar_one_or_none()


async def webhook_users(session: AsyncSession, team_id: str, name: str) -> list[str]:
    """``factory/webhook`` names of the live webhooks (enabled or not) that name secret ``name``."""
    stmt = (
        select(Factory.name, Webhook.name)
        .join(Factory, Factory.uid == Webhook.factory_uid)
        .where(Webhook.team_id == team_id, Webhook.secret_name == name, Webhook.deleted_at.is_(None))
        .order_by(Factory.name, Webhook.name)
    )
    return [f"{factory}/{hook}" for factory, hook in (await session.execute(stmt)).all()]


async def notification_users(session: AsyncSession, team_id: str, name: str) -> list[str]:
    """``factory/endpoint`` names of the notification endpoints that sign with secret ``name``."""
    stmt = (
        select(Factory.name, NotificationEndpoint.name)
        .join(Factory, Factory.uid == NotificationEndpoint.factory_uid)
        .where(NotificationEndpoint.team_id == team_id, NotificationEndpoint.secret_name == name)
        .order_by(Factory.name, NotificationEndpoint.name)
    )
    return [f"{factory}/{endpoint}" for factory, endpoint in (await session.execute(stmt)).all()]


async def _refuse_run_scope_in_use(session: AsyncSession, team_id: str, name: str) -> None:
    """A secret that authenticates webhooks or signs notifications never becomes readable by runs."""
    users = await webhook_users(session, team_id, name)
    if users:
        raise WriteRefused(
            f"secret {name!r} is named by webhook{'s' if len(users) > 1 else ''} {', '.join(users)}:"
            " a webhook's secret may not be used by runs; give runs their own secret"
        )
    signers = await notification_users(session, team_id, name)
    if signers:
        raise WriteRefused(
            f"secret {name!r} signs notification endpoint{'s' if len(signers) > 1 else ''}"
            f" {', '.join(signers)}: it may not be used by runs; give runs their own secret"
        )


async def create(
    session: AsyncSession,
    box: SecretBox,
    clock: Clock,
    team_id: str,
    name: str,
    value: str,
    *,
    scope: str = DEFAULT_SCOPE,
) -> SecretInfo:
    """Version 1 of a new secret. A ``run`` secret may not take a name a live webhook uses (WriteRefused)."""
    check_name(name)
    check_value(value)
    check_scope(scope)
    if await get(session, team_id, name) is not None:
        raise WriteRefused(f"secret {name!r} already exists")
    if scope == RUN:
        await _refuse_run_scope_in_use(session, team_id, name)
    now = clock.now()
    row = Secret(
        id=ids.new_id(ids.SECRET),
        team_id=team_id,
        name=name,
        scope=scope,
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


async def set_scope(session: AsyncSession, clock: Clock, team_id: str, name: str, scope: str) -> SecretInfo:
    """Change what may use a secret (no new version). Refused (WriteRefused) to make a secret that a live
    webhook names ``run``; making one ``webhook`` only narrows it (runs referencing it then fail)."""
    check_scope(scope)
    row = await get(session, team_id, name)
    if row is None:
        raise NotFound(f"secret {name!r} does not exist")
    if row.scope != scope:
        if scope == RUN:
            await _refuse_run_scope_in_use(session, team_id, name)
        row.scope, row.updated_at = scope, clock.now()
        await session.flush()
    return _info(row)


async def scopes(session: AsyncSession, team_id: str, names: Iterable[str]) -> dict[str, str]:
    """Name -> scope of those of ``names`` that exist in the team."""
    wanted = sorted(set(names))
    if not wanted:
        return {}
    stmt = select(Secret.name, Secret.scope).where(Secret.team_id == team_id, Secret.name.in_(wanted))
    return {name: scope for name, scope in (await session.execute(stmt)).all()}


async def reveal_for_run(
    session: AsyncSession, box: SecretBox, team_id: str, names: Iterable[str]
) -> RunSecrets:
    """The current values of the run-scoped secrets among ``names``; every other name is refused with its
    :func:`run_problem` (missing, or another scope). The only way a run's secret values are read."""
    wanted = sorted(set(names))
    found = await scopes(session, team_id, wanted)
    values: dict[str, str] = {}
    refused: dict[str, str] = {}
    for name in wanted:
        problem = run_problem(name, found.get(name))
        if problem is not None:
            refused[name] = problem
            continue
        try:
            values[name], _version = await reveal(session, box, team_id, name)
        except NotFound:  # deleted meanwhile
            refused[name] = run_problem(name, None) or ""
    return RunSecrets(values, refused)


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
