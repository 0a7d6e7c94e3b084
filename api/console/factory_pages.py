"""Console pages of one factory and one webhook (docs/console.md, "Pages").

Every read and every action goes through the API's own functions (:func:`api.factories.routes.factory_detail`,
:func:`api.management.webhooks.add_webhook`, ``set_enabled``, ``rotate``, ``remove``,
:func:`api.management.deliveries.read_log`, :func:`api.management.replay.replay`,
:func:`api.factories.reconcile.request_reconcile`), so the console applies exactly the API's rules. Admin
actions are POST forms checked by :func:`changing` (CSRF token and role), answered with a 303 back to the
page; a refused action (409, 422...) shows the page again with the API's message. A rotated or new secret is
rendered once, in the answer to the POST itself, and never put in a URL.
"""

from __future__ import annotations

from typing import Any, Final

from aiohttp import web
from sqlalchemy import select

from api.console import delivery_views
from api.console.definition_views import load_definitions, trigger_views
from api.console.delivery_views import delivery_view
from api.console.factory_health import factory_health, recent_applies
from api.console.rendering import or_404, render
from api.console.security import changing, signed_in
from api.console.sessions import ConsoleUser
from api.context import CLOCK, SESSIONS, SETTINGS
from api.environments.routes import environment_json
from api.errors import ApiError
from api.factories.reconcile import request_reconcile
from api.factories.routes import factory_detail, load_factory
from api.management.deliveries import OUTCOMES, read_log
from api.management.replay import replay
from api.management.webhook_rules import AUTH_MODES, parse_create
from api.management.webhooks import add_webhook, load_webhook, remove, rotate, set_enabled, webhook_view
from api.notifications.serialize import endpoint_json
from api.schedules.serialize import automation_views, schedule_item
from store.models import Environment, Factory, NotificationEndpoint, Schedule
from store.rules.vocabulary import SIGNATURE_SCHEMES
from store.snapshot import snapshot_reads

NO_WEBHOOK: Final = "No such webhook."
DELIVERIES: Final = 50
NOTICES: Final = {
    "reconcile": "Reconcile requested: the factory's definitions are being applied again.",
    "enabled": "Webhook enabled: senders are accepted again.",
    "disabled": "Webhook disabled: senders now get 404.",
    "replayed": "Delivery replayed: see the new Replayed entry and its runs below.",
    "deleted": "Webhook deleted: senders now get 404.",
}


def _notice(request: web.Request) -> str | None:
    return NOTICES.get(request.query.get("done", ""))


async def _factory_context(request: web.Request, user: ConsoleUser, uid: str) -> dict[str, Any]:
    async with request.app[SESSIONS]() as session:
        await snapshot_reads(session)  # conditions and apply history of the same moment
        # held before factory_detail, whose own lookup then finds it in the session's (weak) identity map
        factory = await session.get(Factory, uid)
        with or_404("No such factory."):
            detail = await factory_detail(session, user.team_id, uid, request.app[SETTINGS].base_url)
        assert factory is not None  # its team checked by factory_detail
        definitions = await load_definitions(session, user.team_id, factory)
        for auto in detail["automations"]:
            auto["trigger_views"] = trigger_views(auto["triggers"])
        applies = await recent_applies(session, user.team_id, uid)
        hook_uids = [w["uid"] for w in detail["webhooks"]]
        health = await factory_health(session, user.team_id, uid, hook_uids, request.app[CLOCK].now())
        envs = await session.scalars(
            select(Environment)
            .where(Environment.team_id == user.team_id, Environment.factory_uid == uid)
            .order_by(Environment.name)
        )
        scheds = list(
            await session.scalars(
                select(Schedule)
                .where(Schedule.team_id == user.team_id, Schedule.factory_uid == uid)
                .order_by(Schedule.name, Schedule.uid)
            )
        )
        views = await automation_views(session, scheds)
        endpoints = await session.scalars(
            select(NotificationEndpoint)
            .where(NotificationEndpoint.team_id == user.team_id, NotificationEndpoint.factory_uid == uid)
            .order_by(NotificationEndpoint.name)
        )
        return {
            "user": user,
            "nav": "factories",
            "f": detail,
            "defs": definitions,
            "applies": applies,
            "health": health,
            "environments": [environment_json(e) for e in envs],
            "schedules": [schedule_item(s, views) for s in scheds],
            "endpoints": [endpoint_json(e) for e in endpoints],
            "auth_modes": AUTH_MODES,
            "schemes": sorted(SIGNATURE_SCHEMES),
            "notice": _notice(request),
            "error": None,
        }


async def factory_page(request: web.Request) -> web.StreamResponse:
    user = await signed_in(request)
    return render(request, "factory.html", await _factory_context(request, user, request.match_info["uid"]))


async def _factory_refused(request: web.Request, user: ConsoleUser, exc: ApiError) -> web.Response:
    context = await _factory_context(request, user, request.match_info["uid"])
    context.update(notice=None, error=exc.detail)
    return render(request, "factory.html", context, status=exc.status)


async def reconcile_now(request: web.Request) -> web.StreamResponse:
    user, _ = await changing(request, admin=True)
    uid = request.match_info["uid"]
    try:
        async with request.app[SESSIONS]() as session:
            factory = await load_factory(session, user.team_id, uid)
        request_reconcile(request.app, factory)
    except ApiError as exc:
        return await _factory_refused(request, user, exc)
    raise web.HTTPSeeOther(f"/console/factories/{uid}?done=reconcile")


async def create_webhook(request: web.Request) -> web.StreamResponse:
    user, form = await changing(request, admin=True)
    uid = request.match_info["uid"]
    body: dict[str, Any] = {"name": form.get("name", "").strip(), "auth_mode": form.get("auth_mode", "token")}
    if body["auth_mode"] == "signature" and form.get("signature_scheme"):
        body["signature_scheme"] = form["signature_scheme"]
    try:
        spec = parse_create(body)
        async with request.app[SESSIONS]() as session, session.begin():
            row, shown = await add_webhook(session, request.app, user.team_id, uid, spec)
    except ApiError as exc:
        return await _factory_refused(request, user, exc)
    if shown is None:  # the provider issues the secret: nothing to show
        raise web.HTTPSeeOther(f"/console/factories/{uid}/webhooks/{row.uid}")
    return await _webhook_response(request, user, row.uid, secret=shown, created=True)


# --- one webhook -----------------------------------------------------------------------------------


async def _webhook_response(
    request: web.Request,
    user: ConsoleUser,
    wid: str,
    *,
    secret: str | None = None,
    deferred: bool = False,
    created: bool = False,
    error: ApiError | None = None,
) -> web.Response:
    uid = request.match_info["uid"]
    async with request.app[SESSIONS]() as session:
        with or_404(NO_WEBHOOK):
            factory, row = await load_webhook(session, user.team_id, uid, wid)
        outcome = request.query.get("outcome")
        outcome = outcome if outcome in OUTCOMES else None  # the page's filter links; anything else: all
        entries, runs = await read_log(session, user.team_id, wid, DELIVERIES, payloads=True, outcome=outcome)
    hook = webhook_view(row, request.app[SETTINGS].base_url)
    secret_url = None
    if secret is not None and row.auth_mode == "url_token":
        secret_url = hook["ingress_url"].replace("{token}", secret)
    context = {
        "user": user,
        "nav": "factories",
        "factory": {"uid": factory.uid, "name": factory.name, "managed_by": factory.managed_by},
        "hook": hook,
        "definition_path": row.definition_path,
        "deliveries": [delivery_view(e, runs.get(e.delivery_id, [])) for e in entries],
        "outcome": outcome,
        "secret": secret,
        "secret_url": secret_url,
        "deferred": deferred,
        "created": created,
        "notice": None if error or secret else _notice(request),
        "error": error.detail if error else None,
    }
    return render(request, "webhook.html", context, status=error.status if error else 200)


async def webhook_page(request: web.Request) -> web.StreamResponse:
    user = await signed_in(request)
    return await _webhook_response(request, user, request.match_info["wid"])


async def toggle_webhook(request: web.Request) -> web.StreamResponse:
    user, form = await changing(request, admin=True)
    uid, wid = request.match_info["uid"], request.match_info["wid"]
    enabled = form.get("enabled") == "true"
    async with request.app[SESSIONS]() as session, session.begin():
        with or_404(NO_WEBHOOK):
            _, row = await load_webhook(session, user.team_id, uid, wid)
        if row.enabled != enabled:
            await set_enabled(session, row, enabled)
            row.updated_at = request.app[CLOCK].now()
    raise web.HTTPSeeOther(
        f"/console/factories/{uid}/webhooks/{wid}?done={'enabled' if enabled else 'disabled'}"
    )


async def rotate_webhook_secret(request: web.Request) -> web.StreamResponse:
    """Shows the new secret in this POST's own answer (200, ``no-store``): a reload cannot show it again."""
    user, form = await changing(request, admin=True)
    uid, wid = request.match_info["uid"], request.match_info["wid"]
    given = form.get("secret", "").strip() or None
    try:
        with or_404(NO_WEBHOOK):
            async with request.app[SESSIONS]() as session, session.begin():
                factory, row = await load_webhook(session, user.team_id, uid, wid)
                value, deferred = await rotate(session, request.app, factory, row, given)
    except ApiError as exc:
        return await _webhook_response(request, user, wid, error=exc)
    return await _webhook_response(request, user, wid, secret=value, deferred=deferred)


async def delete_webhook(request: web.Request) -> web.StreamResponse:
    user, _ = await changing(request, admin=True)
    uid, wid = request.match_info["uid"], request.match_info["wid"]
    try:
        with or_404(NO_WEBHOOK):
            async with request.app[SESSIONS]() as session, session.begin():
                factory, row = await load_webhook(session, user.team_id, uid, wid)
                remove(factory, row, request.app[CLOCK].now())
    except ApiError as exc:
        return await _webhook_response(request, user, wid, error=exc)
    raise web.HTTPSeeOther(f"/console/factories/{uid}?done=deleted")


async def replay_delivery(request: web.Request) -> web.StreamResponse:
    user, form = await changing(request, admin=True)
    uid, wid = request.match_info["uid"], request.match_info["wid"]
    try:
        await replay(request.app, user.principal(), uid, wid, form.get("delivery_id", ""), None)
    except ApiError as exc:
        return await _webhook_response(request, user, wid, error=exc)
    raise web.HTTPSeeOther(f"/console/factories/{uid}/webhooks/{wid}?done=replayed")


def setup(app: web.Application) -> None:
    """Register the factory and webhook pages and their admin actions."""
    base = "/console/factories/{uid}"
    app.router.add_get(base, factory_page)
    app.router.add_post(base + "/reconcile", reconcile_now)
    app.router.add_post(base + "/webhooks", create_webhook)
    app.router.add_get(base + "/webhooks/{wid}", webhook_page)
    app.router.add_post(base + "/webhooks/{wid}/enabled", toggle_webhook)
    app.router.add_post(base + "/webhooks/{wid}/rotate-secret", rotate_webhook_secret)
    app.router.add_post(base + "/webhooks/{wid}/delete", delete_webhook)
    app.router.add_post(base + "/webhooks/{wid}/replay", replay_delivery)
    delivery_views.setup(app)
