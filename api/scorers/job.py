"""The scorers' periodic job in every ``serve`` process (docs/scorers.md, "How runs are judged").

Every replica runs it; the cursor's compare-and-set and the ``run_scores`` primary key decide which one
acts on a finish, so none coordinates with another. After a turn that queued judge runs, this process's
claimers are woken; after one that recorded judgements, the run streams are.
"""

from __future__ import annotations

import logging

from aiohttp import web

from api.context import CLOCK, SESSIONS
from api.periodic import Lifecycle, periodic
from api.runs.event_hub import notify_events, runs_queued
from api.scorers.judging import Turn, judge_tick

log = logging.getLogger("factoryctl.scorers")

DEFAULT_INTERVAL_SECONDS = 2.0


def scorer_job(interval_seconds: float = DEFAULT_INTERVAL_SECONDS) -> Lifecycle:
    """The scorers' job as a ``cleanup_ctx`` lifecycle, one turn every ``interval_seconds``."""

    async def tick(app: web.Application) -> Turn:
        def committed(turn: Turn) -> None:
            if turn.started:
                runs_queued(app)
            notify_events(app)

        return await judge_tick(app[SESSIONS], app[CLOCK], committed=committed)

    return periodic("scorers", interval_seconds, tick, log=log)
