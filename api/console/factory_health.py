"""A factory's health on its console page (docs/console.md, "Factory health"): per webhook its last delivery
and the accepted / rejected counts over 24 h, per automation and per schedule its last run, the factory's
runs over 24 h, and the apply history as changes (no-change applies folded into one line).

Every read is bounded and rides an index, whatever the store holds (docs/console.md, "Runs at scale"):

- deliveries: each webhook's newest :data:`DELIVERY_WINDOW` entries through ``(webhook_uid, seq)``, counted
  in SQL, all webhooks in one statement (a ``UNION ALL`` of one aggregate per webhook); a webhook with more
  than that in 24 h shows the count as ``1,000+``;
- runs: the factory's newest :data:`RUN_WINDOW` runs through ``(team_id, factory_uid, created_at)``; an
  automation or schedule whose last run is older says so ("none in the newest 500 runs");
- applies: the newest :data:`APPLIES` that changed something or failed.

Health is one statement (see :func:`factory_health`), so the page's statement count stays fixed.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sqlalchemy import (
    DateTime,
    Integer,
    Select,
    String,
    and_,
    case,
    cast,
    func,
    literal,
    null,
    select,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncSession

from api.factories.serialize import apply_json
from store.models import ApplyRecord, Delivery, Run

DAY: Final = dt.timedelta(hours=24)
DELIVERY_WINDOW: Final = 1_000  # newest deliveries per webhook the 24 h counts look at
RUN_WINDOW: Final = 500  # newest runs of the factory the last-run columns look at (2,000 cost 30-45 ms)
APPLIES: Final = 10
WEBHOOKS_PER_STATEMENT: Final = 100  # SQLite caps a compound SELECT at 500 terms
ACCEPTED: Final = ("Accepted", "Replayed")
FINISHED_BAD: Final = ("FAILED", "ERROR")


@dataclass(frozen=True)
class WebhookHealth:
    last_delivery: dt.datetime | None = None
    accepted: int = 0
    rejected: int = 0
    capped: bool = False  # the window held only the last 24 h: there were more


@dataclass(frozen=True)
class LastRun:
    run_id: str
    state: str
    created_at: dt.datetime


@dataclass
class FactoryHealth:
    webhooks: dict[str, WebhookHealth] = field(default_factory=dict)
    automations: dict[str, LastRun] = field(default_factory=dict)
    schedules: dict[str, LastRun] = field(default_factory=dict)
    runs_24h: dict[str, int] = field(default_factory=dict)  # succeeded, failed, active, other
    runs_window_full: bool = False  # older last runs were not looked at
    run_window: int = RUN_WINDOW
    delivery_window: int = DELIVERY_WINDOW


def _webhook_term(team_id: str, webhook_uid: str, since: dt.datetime) -> Select[*tuple[Any, ...]]:
    """One webhook's row: its newest :data:`DELIVERY_WINDOW` deliveries counted."""
    newest = (
        select(Delivery.status, Delivery.received_at)
        .where(Delivery.webhook_uid == webhook_uid, Delivery.team_id == team_id)
        .order_by(Delivery.seq.desc())
        .limit(DELIVERY_WINDOW)
        .subquery()
    )
    recent = newest.c.received_at >= since
    return select(
        literal("webhook").label("kind"),
        literal(webhook_uid).label("key"),
        cast(null(), String).label("state"),
        func.max(newest.c.received_at).label("at"),
        cast(null(), String).label("automation_id"),
        cast(null(), String).label("schedule_id"),
        func.sum(case((and_(recent, newest.c.status.in_(ACCEPTED)), 1), else_=0)).label("accepted"),
        func.sum(case((and_(recent, newest.c.status.like("Rejected%")), 1), else_=0)).label("rejected"),
        func.count().label("seen"),
        func.min(newest.c.received_at).label("oldest"),
    )


def _runs_term(team_id: str, factory_uid: str) -> Select[*tuple[Any, ...]]:
    """The factory's newest :data:`RUN_WINDOW` runs, one row each, in the webhooks' columns."""
    newest = (
        select(Run.run_id, Run.state, Run.created_at, Run.automation_id, Run.schedule_id)
        .where(Run.team_id == team_id, Run.factory_uid == factory_uid)
        .order_by(Run.created_at.desc(), Run.run_id.desc())
        .limit(RUN_WINDOW)
        .subquery()
    )
    return select(
        literal("run").label("kind"),
        newest.c.run_id.label("key"),
        newest.c.state.label("state"),
        newest.c.created_at.label("at"),
        newest.c.automation_id.label("automation_id"),
        newest.c.schedule_id.label("schedule_id"),
        cast(null(), Integer).label("accepted"),
        cast(null(), Integer).label("rejected"),
        cast(null(), Integer).label("seen"),
        cast(null(), DateTime).label("oldest"),
    )


def _aware(value: dt.datetime | str | None) -> dt.datetime | None:
    """SQLite hands aggregates back as naive UTC (or as text); make them comparable with ``now``."""
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    if value is not None and value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    return value


def _bucket(state: str) -> str:
    if state == "SUCCEEDED":
        return "succeeded"
    if state in FINISHED_BAD:
        return "failed"
    if state in ("QUEUED", "PENDING", "CLAIMED", "INPROGRESS"):
        return "active"
    return "other"


def _add_webhook(health: FactoryHealth, row: Any, since: dt.datetime) -> None:
    oldest = _aware(row.oldest)
    health.webhooks[row.key] = WebhookHealth(
        last_delivery=_aware(row.at),
        accepted=int(row.accepted or 0),
        rejected=int(row.rejected or 0),
        capped=row.seen == DELIVERY_WINDOW and oldest is not None and oldest >= since,
    )


async def factory_health(
    session: AsyncSession, team_id: str, factory_uid: str, webhook_uids: Sequence[str], now: dt.datetime
) -> FactoryHealth:
    """Everything above in one statement (a ``UNION ALL`` of the runs window and one aggregate per webhook;
    past :data:`WEBHOOKS_PER_STATEMENT` webhooks, one more statement per hundred)."""
    since, health, day, runs = now - DAY, FactoryHealth(), Counter[str](), 0
    chunks = [
        webhook_uids[i : i + WEBHOOKS_PER_STATEMENT]
        for i in range(0, len(webhook_uids), WEBHOOKS_PER_STATEMENT)
    ]
    for number, chunk in enumerate(chunks or [[]]):
        terms = [_webhook_term(team_id, uid, since) for uid in chunk]
        if number == 0:
            terms.insert(0, _runs_term(team_id, factory_uid))
        statement = terms[0] if len(terms) == 1 else union_all(*terms)
        for row in (await session.execute(statement)).all():
            if row.kind == "webhook":
                _add_webhook(health, row, since)
                continue
            runs += 1
            created = _aware(row.at)
            assert created is not None
            last = LastRun(row.key, row.state, created)
            if row.automation_id:
                health.automations.setdefault(row.automation_id, last)
            if row.schedule_id:
                health.schedules.setdefault(row.schedule_id, last)
            if created >= since:
                day[_bucket(row.state)] += 1
    health.runs_24h = {key: day[key] for key in ("succeeded", "failed", "active", "other")}
    health.runs_window_full = runs == RUN_WINDOW
    return health


async def recent_applies(session: AsyncSession, team_id: str, factory_uid: str) -> list[dict[str, Any]]:
    """The newest applies that changed something or failed: the history shows changes, not restarts (a
    no-change apply is the factory's ``last_apply`` when it is the newest, shown as one line)."""
    changes = await session.scalars(
        select(ApplyRecord)
        .where(
            ApplyRecord.factory_uid == factory_uid,
            ApplyRecord.team_id == team_id,
            ApplyRecord.outcome != "noop",
        )
        .order_by(ApplyRecord.started_at.desc(), ApplyRecord.id.desc())
        .limit(APPLIES)
    )
    return [a for a in (apply_json(row) for row in changes.all()) if a is not None]


__all__ = ["FactoryHealth", "LastRun", "WebhookHealth", "factory_health", "recent_applies"]
