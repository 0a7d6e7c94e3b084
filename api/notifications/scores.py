"""``run.scored`` messages: a scorer's judgement reaches notification subscribers (docs/notifications.md,
"Scores").

A judgement is recorded as a ``score`` event in the judged run's stream (:mod:`api.scorers.judging`), so it
travels the same outbox as state changes: the fan-out reads it past the same cursor and makes one message
per endpoint that is told about it. Which endpoints: the ones that would be told the run's *current* state
(normally the ``SUCCEEDED`` or ``FAILED`` it was judged in) by their ``events`` and ``filter`` — an endpoint
that hears of a run's outcome hears of its judgement, and ``run.*`` hears every one. There is no separate
subscription: the event names an endpoint stores are run states (store/rules/notification_rules.py).
"""

from __future__ import annotations

from typing import Any, Final

from api.scorers.judging import SCORE
from store.clock import rfc3339
from store.models import RunEvent
from store.rules.notification_rules import RunFacts

SCORED: Final = "run.scored"  # the message type (and the message row's event_type)


def is_score(event: RunEvent) -> bool:
    return event.kind == SCORE


def score_facts(run: Any) -> RunFacts:
    """What an endpoint's match looks at for a score of ``run``: its current state, as if it had just
    entered it (a score is news whatever the state was before), and where the run came from."""
    return RunFacts(
        state=run.state,
        previous_state=None,
        factory_uid=run.factory_uid,
        factory_name=run.factory_name,
        automation_name=run.automation_name,
        source=run.source,
    )


def score_body(event: RunEvent, run: Any) -> dict[str, Any]:
    """The ``run.scored`` message (before JSON encoding): the run as a state message describes it, with
    ``score`` — the judgement exactly as the run API's ``scores`` and the ``score`` event carry it."""
    return {
        "type": SCORED,
        "timestamp": rfc3339(event.created_at),
        "data": {
            "run_id": event.run_id,
            "state": run.state,
            "score": dict(event.data or {}),
            **run_part(event, run),
        },
    }


def run_part(event: RunEvent, run: Any) -> dict[str, Any]:
    """What every message says of its run and event, whatever its type (docs/notifications.md, "The
    message"): the state messages of :mod:`api.notifications.fanout` and ``run.scored`` alike."""
    return {
        "title": run.title,
        "source": run.source,
        "factory": {"uid": run.factory_uid, "name": run.factory_name} if run.factory_uid else None,
        "automation": ({"id": run.automation_id, "name": run.automation_name} if run.automation_id else None),
        "schedule_id": run.schedule_id,
        "run_created_at": rfc3339(run.created_at),
        "event_id": event.id,
    }
