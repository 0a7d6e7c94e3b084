"""Bounds on a run's pending follow-ups (docs/api.md, "Follow-ups"): how many, and how many bytes.

A follow-up waits (``delivered_at`` NULL) until a worker's heartbeat or the next claim hands it over,
and the claim carries every pending one in the run's prompt. Without a bound, a member could queue
any number of them and every claim answer (and the agent's prompt) would grow with them. The check
runs in :func:`api.runs.records.add_followup` - the one path of the API and the console - after the
run row is locked, so concurrent follow-ups cannot both slip under the bound.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import LargeBinary, cast, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from api.context import ServerSettings
from store import WriteRefused
from store.models import RunFollowup


@dataclass(frozen=True)
class FollowupLimits:
    max_pending: int = 20
    max_pending_bytes: int = 1_048_576  # UTF-8 bytes of the pending messages, the new one included

    @classmethod
    def of(cls, settings: ServerSettings) -> FollowupLimits:
        return cls(settings.followups_max_pending, settings.followups_max_pending_bytes)


DEFAULT_FOLLOWUP_LIMITS = FollowupLimits()


class TooManyFollowups(WriteRefused):
    """The run already holds as many pending follow-ups (or bytes of them) as it may: ``409``."""


async def check_pending(session: AsyncSession, run_id: str, message: str, limits: FollowupLimits) -> None:
    """Raise :class:`TooManyFollowups` when ``message`` would take ``run_id`` past ``limits``."""
    if session.get_bind().dialect.name == "postgresql":
        size = func.octet_length(RunFollowup.message)
    else:  # SQLite: the length of a BLOB is its byte count
        size = func.length(cast(RunFollowup.message, LargeBinary))
    stmt = select(func.count(), func.coalesce(func.sum(size), 0)).where(
        RunFollowup.run_id == run_id, RunFollowup.delivered_at.is_(None)
    )
    count, total = (await session.execute(stmt)).one()
    added = len(message.encode("utf-8", "surrogatepass"))
    if count + 1 > limits.max_pending:
        raise TooManyFollowups(
            f"run {run_id} already has {count} follow-ups waiting for a worker "
            f"(at most {limits.max_pending}); send more once the agent has received them"
        )
    if int(total) + added > limits.max_pending_bytes:
        raise TooManyFollowups(
            f"run {run_id}'s waiting follow-ups would hold {int(total) + added} bytes (at most "
            f"{limits.max_pending_bytes}); send more once the agent has received them"
        )
