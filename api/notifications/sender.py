"""The outbox's second half: claim due messages, deliver them signed, record every attempt.

docs/notifications.md, "At least once". A claim moves a message's ``next_attempt_at`` past the attempt's
deadline (its lease) and stamps a ``claim_token``; on PostgreSQL the due rows are picked with
``FOR UPDATE SKIP LOCKED``, so two replicas never claim the same message at once. A sender killed in the
middle of an attempt leaves the message due again when the lease runs out: it is delivered again with
the same ``webhook-id`` (receivers de-duplicate on it). A result is written only by the claim that made
the attempt (the token fences out a stale one); the attempt itself is always recorded.

Every claimed message ends its turn as a recorded attempt, whatever happened (docs/notifications.md,
"Retries"): an attempt task that raised — a resolver raising on a URL written before a rule, any bug —
is recorded as a failed attempt by :meth:`Sender.step`, the one place every attempt's end goes through, so
it counts toward the schedule, the ``failing`` mark and ``consecutive_failures`` like any other failure;
a signing secret the key cannot decrypt fails its attempts rather than rolling the claim back; and text
is made storable (PostgreSQL refuses NUL in text). Nothing is left to be re-claimed at every lease.

One loop per replica owns the database work — write finished results, fan out new events, claim as many
messages as there is room for — while up to ``max_in_flight`` attempts run as tasks that only do HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import logging
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Final

from sqlalchemy import Table, bindparam, case, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from api.ingress import signatures
from api.notifications import fanout, policy
from api.notifications.transport import FAILED as ATTEMPT_FAILED
from api.notifications.transport import SUCCEEDED, Outcome, Transport
from api.problems import store_unavailable
from store import NotFound, SecretKeyError, ids
from store import secrets as secret_store
from store.clock import Clock
from store.crypto import SecretBox
from store.models import NotificationAttempt, NotificationEndpoint, NotificationMessage

log = logging.getLogger("factoryctl.notifications")

PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
SCHEME: Final = "standard_webhooks"
INTERNAL_ERROR: Final = "internal error during the attempt"
MAX_TEXT: Final = 500  # characters of an answer or an error kept with an attempt
_MESSAGES: Table = NotificationMessage.__table__  # type: ignore[assignment]
_ATTEMPTS: Table = NotificationAttempt.__table__  # type: ignore[assignment]


@dataclasses.dataclass(frozen=True)
class Claimed:
    """A message this replica may attempt now, with where it goes and what signs it."""

    id: str
    team_id: str
    endpoint_uid: str
    payload: str
    attempts: int
    manual: bool
    token: str
    url: str
    secret_name: str


@dataclasses.dataclass(frozen=True)
class Result:
    message: Claimed
    outcome: Outcome
    started_at: dt.datetime


async def claim(
    session: AsyncSession, clock: Clock, settings: policy.NotificationSettings, limit: int
) -> list[Claimed]:
    """Take up to ``limit`` due messages of enabled endpoints, oldest due first. The caller commits."""
    now = clock.now()
    due = (
        select(NotificationMessage.id)
        .join(NotificationEndpoint, NotificationEndpoint.uid == NotificationMessage.endpoint_uid)
        .where(
            NotificationMessage.status == PENDING,
            NotificationMessage.next_attempt_at <= now,
            NotificationEndpoint.enabled.is_(True),
        )
        .order_by(NotificationMessage.next_attempt_at)
        .limit(limit)
    )
    # a read first: an idle sender never takes SQLite's write lock (ingress needs it)
    if (await session.execute(due.limit(1))).first() is None:
        return []
    if session.get_bind().dialect.name == "postgresql":
        due = due.with_for_update(skip_locked=True, of=NotificationMessage)
    token = ids.new_id("clm")
    stmt = (
        update(NotificationMessage)
        .where(NotificationMessage.id.in_(due), NotificationMessage.status == PENDING)
        .values(next_attempt_at=now + dt.timedelta(seconds=settings.lease_seconds), claim_token=token)
        .returning(
            NotificationMessage.id,
            NotificationMessage.team_id,
            NotificationMessage.endpoint_uid,
            NotificationMessage.payload,
            NotificationMessage.attempts,
            NotificationMessage.manual,
        )
        .execution_options(synchronize_session=False)
    )
    rows = (await session.execute(stmt)).all()
    if not rows:
        return []
    targets = {
        uid: (url, secret_name)
        for uid, url, secret_name in await session.execute(
            select(
                NotificationEndpoint.uid, NotificationEndpoint.url, NotificationEndpoint.secret_name
            ).where(NotificationEndpoint.uid.in_({r.endpoint_uid for r in rows}))
        )
    }
    return [
        Claimed(
            r.id, r.team_id, r.endpoint_uid, r.payload, r.attempts, r.manual, token, *targets[r.endpoint_uid]
        )
        for r in rows
    ]


async def signing_secrets(
    session: AsyncSession, box: SecretBox, claimed: Sequence[Claimed]
) -> dict[tuple[str, str], str | None]:
    """The current value of each (team, secret name) the claimed messages are signed with; None when it
    is gone, is no longer a ``webhook`` secret (a run-readable value must never sign) or cannot be
    decrypted with the configured key (raising here would roll back the claim and make it again at once)."""
    out: dict[tuple[str, str], str | None] = {}
    wanted = {(c.team_id, c.secret_name) for c in claimed}
    for team_id in {team for team, _ in wanted}:
        names = sorted(name for team, name in wanted if team == team_id)
        found = await secret_store.scopes(session, team_id, names)
        for name in names:
            out[team_id, name] = None
            if found.get(name) != secret_store.WEBHOOK:
                continue
            try:
                out[team_id, name], _ = await secret_store.reveal(session, box, team_id, name)
            except NotFound:
                pass
            except SecretKeyError:
                log.error("notification signing secret %r of team %s cannot be decrypted", name, team_id)
    return out


async def attempt(transport: Transport, message: Claimed, secret: str | None, clock: Clock) -> Result:
    """One signed POST (docs/notifications.md, "Signatures"); never raises for the receiver's faults."""
    started_at = clock.now()
    body = message.payload.encode("utf-8")
    if secret is None or not signatures.standard_webhooks_secret_ok(secret):
        error = (
            f"team secret {message.secret_name!r} is missing, not webhook-scoped, cannot be decrypted"
            " with the server's key, or is not a Standard Webhooks secret (whsec_ + base64)"
        )
        return Result(message, Outcome("failed", 0, error=error), started_at)
    headers = signatures.sign(SCHEME, secret, body, started_at, message.id)
    return Result(message, await transport.post(message.url, body, headers), started_at)


def _text(value: str | None) -> str | None:
    """``value`` as every text column takes it: no NUL (PostgreSQL refuses it), no lone surrogate (which
    aiohttp's ``surrogateescape`` decoding can leave in an exception's text), at most :data:`MAX_TEXT`."""
    if not value:
        return None
    return value[:MAX_TEXT].replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")


def _decision(
    settings: policy.NotificationSettings, result: Result, now: dt.datetime
) -> tuple[str, dt.datetime | None]:
    """The message's status and next attempt time after ``result``."""
    if result.outcome.outcome == SUCCEEDED:
        return DELIVERED, None
    if result.message.manual:
        return FAILED, None  # a resend by hand is one attempt
    retry_after = None
    if result.outcome.status in policy.RETRY_AFTER_STATUSES:
        retry_after = policy.retry_after_seconds(result.outcome.retry_after, now)
    delay = policy.next_delay(settings, result.message.attempts + 1, retry_after=retry_after)
    if delay is None:
        return FAILED, None
    return PENDING, now + dt.timedelta(seconds=delay)


async def record(
    session: AsyncSession, clock: Clock, settings: policy.NotificationSettings, results: Sequence[Result]
) -> None:
    """Write the attempts, their messages' new state and their endpoints' health. The caller commits."""
    if not results:
        return
    now = clock.now()
    attempts, changes = [], []
    for r in results:
        status, next_at = _decision(settings, r, now)
        o = r.outcome
        attempts.append(
            {
                "message_id": r.message.id,
                "endpoint_uid": r.message.endpoint_uid,
                "attempt": r.message.attempts + 1,
                "trigger": "manual" if r.message.manual else "scheduled",
                "started_at": r.started_at,
                "duration_ms": o.duration_ms,
                "outcome": o.outcome,
                "response_status": o.status,
                "response_excerpt": _text(o.excerpt),
                "error": _text(o.error),
                "next_attempt_at": next_at,
            }
        )
        changes.append(
            {
                "b_id": r.message.id,
                "b_token": r.message.token,
                "b_status": status,
                "b_next": next_at,
                "b_attempts": r.message.attempts + 1,
                "b_at": r.started_at,
                "b_code": o.status,
                "b_error": _text(o.error),
                "b_delivered": now if status == DELIVERED else None,
            }
        )
    # an endpoint deleted meanwhile took its messages with it: their attempts have nothing to belong to
    alive = select(NotificationMessage.id).where(
        NotificationMessage.id.in_([a["message_id"] for a in attempts])
    )
    if session.get_bind().dialect.name == "postgresql":
        alive = alive.with_for_update(key_share=True)  # and none may go before this commits
    kept = set((await session.scalars(alive)).all())
    attempts = [a for a in attempts if a["message_id"] in kept]
    if attempts:
        await session.execute(insert(_ATTEMPTS), attempts)
    await session.execute(_UPDATE_MESSAGE, changes)
    for uid, (reset, failures) in _health(results).items():
        await _update_endpoint(session, settings, uid, reset, failures, now)


_UPDATE_MESSAGE: Final = (
    _MESSAGES.update()
    .where(_MESSAGES.c.id == bindparam("b_id"), _MESSAGES.c.claim_token == bindparam("b_token"))
    .values(
        status=bindparam("b_status"),
        next_attempt_at=bindparam("b_next"),
        attempts=bindparam("b_attempts"),
        claim_token=None,
        manual=False,
        last_attempt_at=bindparam("b_at"),
        last_response_status=bindparam("b_code"),
        last_error=bindparam("b_error"),
        delivered_at=bindparam("b_delivered"),
    )
)


def _health(results: Sequence[Result]) -> dict[str, tuple[bool, int]]:
    """Per endpoint: whether a success reset its failure count, and the failures counted after that."""
    out: dict[str, tuple[bool, int]] = defaultdict(lambda: (False, 0))
    for r in sorted(results, key=lambda r: r.started_at):
        reset, failures = out[r.message.endpoint_uid]
        out[r.message.endpoint_uid] = (True, 0) if r.outcome.outcome == SUCCEEDED else (reset, failures + 1)
    return out


async def _update_endpoint(
    session: AsyncSession,
    settings: policy.NotificationSettings,
    uid: str,
    reset: bool,
    failures: int,
    now: dt.datetime,
) -> None:
    """``failing`` once ``failing_after`` attempts in a row failed; a success clears it. Every entry of
    :func:`_health` has a result behind it (a reset, or at least one failure), so each is written."""
    e = NotificationEndpoint
    count: Any = failures if reset else e.consecutive_failures + failures
    values: dict[str, Any] = {"consecutive_failures": count, "failing": count >= settings.failing_after}
    if reset:
        values["last_success_at"] = now
        values["failing_since"] = now if failures >= settings.failing_after else None
    else:
        values["failing_since"] = case(
            (e.failing_since.is_(None) & (count >= settings.failing_after), now), else_=e.failing_since
        )
    await session.execute(update(e).where(e.uid == uid).values(**values))


class Sender:
    """One replica's delivery loop (a ``cleanup_ctx`` task). On shutdown :meth:`stop` ends it after the
    turn in progress, so no database call is cut off; attempts still in flight are then cancelled (they
    are made again after their lease, with the same webhook-id)."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        clock: Clock,
        box: SecretBox,
        transport: Transport,
        settings: policy.NotificationSettings,
    ) -> None:
        self.sessions, self.clock, self.box = sessions, clock, box
        self.transport, self.settings = transport, settings
        self.wakeup = asyncio.Event()
        # each attempt in flight, with the message it attempts and when it started
        self._running: dict[asyncio.Task[Result], tuple[Claimed, dt.datetime]] = {}
        self._fanned_at = float("-inf")
        self._stopping = False

    def wake(self) -> None:
        self.wakeup.set()

    def stop(self) -> None:
        """End :meth:`run` after its current turn."""
        self._stopping = True
        self.wakeup.set()

    async def step(self) -> int:
        """Write finished results, fan out, claim into the free room; returns how many attempts started."""
        results = self._finished()
        if results:
            async with self.sessions() as session, session.begin():
                await record(session, self.clock, self.settings, results)
        now = self.clock.monotonic()
        if now - self._fanned_at >= self.settings.poll_seconds or not self._running:
            # while attempts keep the loop busy, fan out once per poll interval, not on every turn
            self._fanned_at = now
            async with self.sessions() as session, session.begin():
                await fanout.fan_out(session, self.clock, batch=self.settings.fanout_batch)
        room = self.settings.max_in_flight - len(self._running)
        if room <= 0:
            return 0
        async with self.sessions() as session, session.begin():
            claimed = await claim(session, self.clock, self.settings, room)
            secrets = await signing_secrets(session, self.box, claimed) if claimed else {}
        for message in claimed:
            secret = secrets[message.team_id, message.secret_name]
            task = asyncio.create_task(attempt(self.transport, message, secret, self.clock))
            self._running[task] = (message, self.clock.now())
        return len(claimed)

    def _finished(self) -> list[Result]:
        """The results of the attempts that ended. One that raised (or was cancelled under the loop) is a
        failed attempt like any other: recorded, counted toward the schedule, its claim released."""
        out = []
        for task in [t for t in self._running if t.done()]:
            message, started_at = self._running.pop(task)
            error = None if task.cancelled() else task.exception()
            if not task.cancelled() and error is None:
                out.append(task.result())
                continue
            log.error("notification attempt of %s crashed", message.id, exc_info=error)
            ms = max(int((self.clock.now() - started_at).total_seconds() * 1000), 0)
            what = "cancelled" if error is None else type(error).__name__
            outcome = Outcome(ATTEMPT_FAILED, ms, error=f"{INTERNAL_ERROR} ({what})")
            out.append(Result(message, outcome, started_at))
        return out

    async def run(self) -> None:
        try:
            while not self._stopping:
                try:
                    started = await self.step()
                except Exception as exc:  # retried on the next turn
                    reason = store_unavailable(exc)
                    if reason is None:
                        log.exception("notification sender turn failed; retrying")
                    else:
                        log.warning("notification sender: store unavailable (%s); retrying", reason)
                    started = 0
                if started or self._stopping:
                    continue  # more may be due right now
                self.wakeup.clear()
                woken = asyncio.ensure_future(self.wakeup.wait())
                try:
                    await asyncio.wait(
                        {woken, *self._running},
                        timeout=self.settings.poll_seconds,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    woken.cancel()  # also when this task is cancelled: no waiter outlives the loop
        finally:
            for task in self._running:
                task.cancel()
            for task in self._running:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


__all__ = ["Claimed", "Result", "Sender", "attempt", "claim", "record", "signing_secrets"]
