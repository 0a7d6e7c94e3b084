"""``POST /api/v1/factory/{uid}/reconcile``: re-apply a definitions-managed factory now.

Wakes the reconciler loop of this process (``serve --repo`` / ``--git``), which re-reads its
source and applies it even if the git revision did not move (a failed revision is otherwise not
retried until a new commit). The apply itself is asynchronous: watch ``GET /factory/{uid}``.
"""

from __future__ import annotations

from aiohttp import web

from api.auth import require
from api.context import RECONCILE, sessions
from api.errors import Conflict, ResourceUnavailable
from api.factories.routes import load_factory
from api.http.paths import API_V1
from store.models import Factory


def request_reconcile(app: web.Application, factory: Factory) -> str | None:
    """Wake the reconciler for ``factory`` (API and console); 409/503 when there is nothing to reconcile.
    Returns the source it follows."""
    if factory.managed_by != "definitions":
        raise Conflict("this factory is managed through the API; there are no definitions to reconcile")
    trigger = app[RECONCILE]
    if trigger.force is None:
        raise ResourceUnavailable(
            "this server follows no definitions source (start it with --repo or --git)", retryable=False
        )
    trigger.force()
    return trigger.source


async def force_reconcile(request: web.Request) -> web.Response:
    who = await require(request, "admin")
    async with sessions(request)() as session:
        factory = await load_factory(session, who.team_id, request.match_info["uid"])
    source = request_reconcile(request.app, factory)
    return web.json_response({"factory_uid": factory.uid, "accepted": True, "source": source}, status=202)


def setup(app: web.Application) -> None:
    app.router.add_post(API_V1 + "/factory/{uid}/reconcile", force_reconcile)
