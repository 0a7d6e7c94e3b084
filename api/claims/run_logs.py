"""A run's log lines from its worker, within the run's caps (docs/workers.md, "Log limits").

:func:`append_logs` is the one place a run's log grows, for self-hosted (HTTP) and service-hosted
workers alike (both through :mod:`api.claims.protocol`), so the caps hold whatever the path. It locks
the run like every other queue write (:func:`api.claims.queue.locked_run`). The caller owns the session
and the transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncSession

from api.claims.queue import locked_run, require_lease
from api.runs import events
from store.clock import Clock
from store.models import Run, RunLog

LOG_STREAMS = ("stdout", "stderr", "system")


@dataclass(frozen=True)
class LogLimits:
    """Per-run caps on a run's log (docs/workers.md, "Log limits"): past either, one ``system`` marker
    line says so and every later line is dropped and counted in ``runs.log_dropped``."""

    max_lines: int = 100_000
    max_bytes: int = 16 * 1024 * 1024  # UTF-8 bytes of the lines' text


DEFAULT_LOG_LIMITS = LogLimits()


async def append_logs(
    session: AsyncSession,
    clock: Clock,
    run_id: str,
    lines: Sequence[tuple[str, str]],
    *,
    owner: str | None = None,
    lease_token: str | None = None,
    team_id: str | None = None,
    limits: LogLimits = DEFAULT_LOG_LIMITS,
    event_cap: int = events.MAX_EVENTS_PER_RUN,
) -> int:
    """Append output lines to a run's log (only by the lease holder when ``owner`` is given), and their
    ``log`` events within ``event_cap`` (docs/events.md, "Bounds"); returns how many were stored.

    The one place a run's log grows, for self-hosted (HTTP) and service-hosted workers alike, so the
    caps of ``limits`` hold whatever the path (docs/workers.md, "Log limits"). The run is locked first
    so its events commit in id order (docs/events.md, "Ordering and delivery") and its counters
    cannot race.
    """
    if not lines and owner is None:
        return 0
    run = await locked_run(session, run_id, team_id)
    if owner is not None:
        require_lease(run, owner, lease_token)
    if not lines:
        return 0
    kept, dropped, size = _within_limits(run, lines, limits)
    stored = len(kept)
    run.log_lines += stored
    run.log_bytes += size
    if dropped:
        if not run.log_dropped:  # the first refused line: say so once, in the log itself (not counted)
            kept.append(("system", _truncated_marker(limits)))
        run.log_dropped += dropped
    if not kept:
        return 0
    now = clock.now()
    await session.execute(
        insert(RunLog), [{"run_id": run_id, "stream": s, "text": t, "created_at": now} for s, t in kept]
    )
    await events.record_logs(session, run, kept, now, cap=event_cap)
    return stored


def _within_limits(
    run: Run, lines: Sequence[tuple[str, str]], limits: LogLimits
) -> tuple[list[tuple[str, str]], int, int]:
    """The lines that fit the run's remaining budget (none once it was truncated), how many did not,
    and the bytes of those kept."""
    if run.log_dropped:
        return [], len(lines), 0
    kept: list[tuple[str, str]] = []
    count, size = run.log_lines or 0, run.log_bytes or 0
    added = 0
    for index, (stream, text) in enumerate(lines):
        length = len(text.encode("utf-8", "surrogatepass"))
        if count + 1 > limits.max_lines or size + added + length > limits.max_bytes:
            return kept, len(lines) - index, added
        kept.append((stream, text))
        count += 1
        added += length
    return kept, 0, added


def _truncated_marker(limits: LogLimits) -> str:
    return (
        f"[log truncated: this run's log reached its limit of {limits.max_lines} lines or "
        f"{limits.max_bytes} bytes; later output is dropped and counted]"
    )
