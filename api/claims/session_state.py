"""A run's agent session state: the CLI's session files a worker packed after an attempt, kept for the
attempt that resumes the conversation (docs/agents.md, "Sessions and follow-ups").

The worker sends a ``tar.gz`` (at most :data:`MAX_SESSION_STATE_BYTES`); it is stored encrypted with the
key the team secrets use (:class:`store.crypto.SecretBox`), one row per run (``run_session_states``),
replaced by each attempt and deleted with the run (foreign key cascade). Only the holder of the run's
lease may write or read it; it is never logged and never part of a member's API answer. The caller owns the
session and the transaction.
"""

from __future__ import annotations

import base64
from typing import Final

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from api.claims.queue import locked_run, require_lease
from store.clock import Clock
from store.crypto import SecretBox
from store.models import RunSessionState

MAX_SESSION_STATE_BYTES: Final = 4 * 1024 * 1024  # the archive as sent, under the app's 8 MiB body limit


class SessionStateTooLarge(ValueError):
    """An archive over :data:`MAX_SESSION_STATE_BYTES`."""


async def save_state(
    session: AsyncSession,
    clock: Clock,
    box: SecretBox,
    run_id: str,
    archive: bytes,
    *,
    owner: str,
    lease_token: str | None,
    team_id: str | None = None,
) -> int:
    """Store ``archive`` as the run's session state (only by the lease holder); returns its size."""
    if len(archive) > MAX_SESSION_STATE_BYTES:
        raise SessionStateTooLarge(f"the session state exceeds {MAX_SESSION_STATE_BYTES} bytes")
    run = await locked_run(session, run_id, team_id)
    require_lease(run, owner, lease_token)
    # SecretBox seals text: the archive travels as base64 inside the token
    sealed = box.encrypt(base64.b64encode(archive).decode("ascii"))
    row = await session.get(RunSessionState, run_id)
    if row is None:
        row = RunSessionState(run_id=run_id)
        session.add(row)
    row.ciphertext, row.size, row.attempt, row.updated_at = sealed, len(archive), run.attempt, clock.now()
    return len(archive)


async def load_state(
    session: AsyncSession,
    box: SecretBox,
    run_id: str,
    *,
    owner: str,
    lease_token: str | None,
    team_id: str | None = None,
) -> bytes | None:
    """The run's stored session state for the lease holder; None when no attempt saved one."""
    run = await locked_run(session, run_id, team_id)
    require_lease(run, owner, lease_token)
    sealed = await session.scalar(select(RunSessionState.ciphertext).where(RunSessionState.run_id == run_id))
    if sealed is None:
        return None
    return base64.b64decode(box.decrypt(sealed))


__all__ = ["MAX_SESSION_STATE_BYTES", "SessionStateTooLarge", "load_state", "save_state"]
