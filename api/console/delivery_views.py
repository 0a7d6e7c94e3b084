"""The webhook page's delivery rows: what each delivery started, or why it started nothing, with the live
state of its runs (docs/console.md, "Webhook page").

A row of an Accepted (or Replayed) entry shows each run it started with the run's state, and each
automation that did not match with its reason as Test filter words it (:mod:`api.ingress.decisions`).
"Started nothing" is a pill of its own, so it never reads like a run that has not started yet (that one
shows its run with the state QUEUED). ``deliveries.js`` keeps the states live by asking
:func:`run_states` for the rows' unfinished runs every few seconds until they are all finished.
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web
from sqlalchemy import select

from api.console.rendering import or_404, pretty_json, when
from api.console.security import signed_in
from api.context import SESSIONS
from api.ingress.pipeline import ACCEPTED
from api.management.deliveries import WITH_RUNS, Entry, RunRef, decisions_json, parse_payload
from api.management.webhooks import load_webhook
from api.runs.states import TERMINAL
from store.clock import rfc3339
from store.models import Run

MAX_STATES: Final = 200  # run IDs one poll may ask about (the page shows 50 deliveries)


def delivery_view(entry: Entry, runs: list[RunRef]) -> dict[str, Any]:
    """One row of the webhook page's "Recent deliveries"."""
    stored = entry.status in WITH_RUNS  # only these keep their payload, start runs and record decisions
    payload = pretty_json(parse_payload(entry.payload)) if stored and entry.payload is not None else None
    decisions = decisions_json(entry, runs) if stored else None
    return {
        "delivery_id": entry.delivery_id,
        "status": entry.status,
        "size": entry.size,
        "received_at": when(entry.received_at),
        "received_iso": rfc3339(entry.received_at),
        "detail": entry.detail,
        "runs": [{"run_id": r.run_id, "state": r.state, "live": r.state not in TERMINAL} for r in runs]
        if stored
        else [],
        "decisions": decisions,
        # matched automations without a run (its run was deleted) are listed with the misses
        "unmatched": [d for d in decisions or () if not d["matched"] or d["run_id"] is None],
        "started_nothing": stored and decisions is not None and not runs,
        "payload": payload,
        "replayable": entry.status == ACCEPTED,
    }


async def run_states(request: web.Request) -> web.Response:
    """``GET /console/factories/{uid}/webhooks/{wid}/run-states?run_id=...``: the current state of the
    listed runs that this webhook's deliveries started (others are left out)."""
    user = await signed_in(request)
    uid, wid = request.match_info["uid"], request.match_info["wid"]
    wanted = sorted(set(request.query.getall("run_id", [])))[:MAX_STATES]
    async with request.app[SESSIONS]() as session:
        with or_404("No such webhook."):
            await load_webhook(session, user.team_id, uid, wid)
        found = {}
        if wanted:
            stmt = select(Run.run_id, Run.state).where(
                Run.team_id == user.team_id, Run.webhook_uid == wid, Run.run_id.in_(wanted)
            )
            found = {run_id: state for run_id, state in (await session.execute(stmt)).all()}
    return web.json_response({"states": found, "terminal": sorted(str(s) for s in TERMINAL)})


def setup(app: web.Application) -> None:
    app.router.add_get("/console/factories/{uid}/webhooks/{wid}/run-states", run_states)
