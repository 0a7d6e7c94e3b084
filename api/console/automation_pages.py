"""The console's automation page, ``/console/factories/{uid}/automations/{aid}`` (docs/console.md, "Pages").

An automation, its triggers and payload conditions in words, and "Test filter" against a stored delivery
(:func:`api.management.deliveries.evaluate_filter`, as the API's test-filter endpoint).
"""

from __future__ import annotations

import json
from typing import Any, Final

from aiohttp import web
from sqlalchemy import select

from api.console.rendering import missing, or_404, pretty_json, render, when
from api.console.security import changing, signed_in
from api.context import SESSIONS
from api.errors import ApiError
from api.factories.serialize import trigger_json
from api.ingress.pipeline import ACCEPTED
from api.management.deliveries import WOULD_TRIGGER, evaluate_filter, load_automation
from store.models import Automation, Delivery, Webhook
from store.rules import payload_filter

RECENT_DELIVERIES: Final = 50
OPS: Final = {
    "eq": "equals",
    "in": "is one of",
    "not_in": "is none of",
}


def _show(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def condition_sentences(spec: object) -> list[dict[str, str]]:
    """A payload filter's conditions, in check order, as ``{field, test}`` rows people can read."""
    if not isinstance(spec, dict) or not spec:
        return []
    try:
        found = payload_filter.conditions(spec)
    except payload_filter.InvalidFilter as exc:
        return [{"field": "—", "test": f"the filter is invalid: {exc}"}]
    out = []
    for path, op, operand in found:
        if op == "exists":
            test = "is present" if operand else "is absent"
        elif op == "object":
            test = "is an object"
        elif op == "eq":
            test = f"equals {_show(operand)}"
        else:
            values = operand if isinstance(operand, list) else [operand]
            test = f"{OPS[op]} {', '.join(_show(v) for v in values)}"
        out.append({"field": path, "test": test})
    return out


def _triggers(automation: Automation, hooks: dict[str, Webhook]) -> list[dict[str, Any]]:
    out = []
    for index, raw in enumerate(automation.triggers or []):
        trigger = trigger_json(raw)
        if not isinstance(trigger, dict):
            out.append({"index": index + 1, "kind": _show(trigger), "webhooks": [], "conditions": []})
            continue
        flt: dict[str, Any] = trigger["filter"] if isinstance(trigger.get("filter"), dict) else {}
        uids = [u for u in flt.get("resolved_webhook_ids") or [] if isinstance(u, str)]
        out.append(
            {
                "index": index + 1,
                "kind": f"{trigger.get('provider', '?')} · {trigger.get('event', '?')}",
                "webhooks": [
                    {
                        "uid": uid,
                        "name": hooks[uid].name if uid in hooks else None,
                        "live": uid in hooks and hooks[uid].deleted_at is None and hooks[uid].enabled,
                    }
                    for uid in uids
                ],
                "names": [n for n in flt.get("webhooks") or [] if isinstance(n, str)],
                "has_filter": flt.get("payload") is not None,
                "conditions": condition_sentences(flt.get("payload")),
            }
        )
    return out


async def automation_page(request: web.Request) -> web.StreamResponse:
    """``GET|POST /console/factories/{uid}/automations/{aid}``: the automation and "Test filter" (reads
    only, so the form may be a GET; a POST is CSRF-checked like every POST)."""
    if request.method == "POST":
        user, form = await changing(request)
        choice = form.get("delivery", "")
    else:
        user = await signed_in(request)
        choice = request.query.get("delivery", "")
    uid, aid = request.match_info["uid"], request.match_info["aid"]
    async with request.app[SESSIONS]() as session:
        with or_404(missing(f"automation {aid} of factory {uid}")):
            factory, automation = await load_automation(session, user.team_id, uid, aid)
        hooks = {
            h.uid: h for h in (await session.scalars(select(Webhook).where(Webhook.factory_uid == uid))).all()
        }
        triggers = _triggers(automation, hooks)
        selected = list(dict.fromkeys(w["uid"] for t in triggers for w in t["webhooks"] if w["uid"] in hooks))
        deliveries = (
            await session.execute(
                select(Delivery.delivery_id, Delivery.webhook_uid, Delivery.received_at, Delivery.size)
                .where(
                    Delivery.team_id == user.team_id,
                    Delivery.webhook_uid.in_(selected or list(hooks)),
                    Delivery.status == ACCEPTED,
                )
                .order_by(Delivery.seq.desc())
                .limit(RECENT_DELIVERIES)
            )
        ).all()
        result, test_error = None, None
        if choice:
            webhook_uid, _, delivery_id = choice.partition(" ")
            try:
                result = await evaluate_filter(
                    session, user.team_id, uid, aid, delivery_id, webhook_uid or None
                )
            except ApiError as exc:
                test_error = str(exc)
    return render(
        request,
        "automation.html",
        {
            "user": user,
            "nav": "factories",
            "factory": {"uid": factory.uid, "name": factory.name},
            "automation": {
                "uid": automation.uid,
                "name": automation.name,
                "enabled": automation.enabled,
                "agent": automation.agent,
                "title": automation.title,
                "prompt": automation.prompt,
                "definition_path": automation.definition_path,
                "config_json": pretty_json(automation.config or {}),
                "has_config": bool(automation.config),
                "updated": automation.updated_at,
            },
            "triggers": triggers,
            "deliveries": [
                {
                    "value": f"{wid} {did}",
                    "label": f"{did} · {hooks[wid].name if wid in hooks else wid} · {when(at)} · {size} B",
                }
                for did, wid, at, size in deliveries
            ],
            "choice": choice,
            "result": result,
            "would_trigger": result is not None and result["result"] == WOULD_TRIGGER,
            "test_error": test_error,
        },
    )


def setup(app: web.Application) -> None:
    """Register the automation page (GET shows it, POST runs Test filter)."""
    app.router.add_get("/console/factories/{uid}/automations/{aid}", automation_page)
    app.router.add_post("/console/factories/{uid}/automations/{aid}", automation_page)
