"""Why a delivery did what it did (docs/ingress.md, "Decisions").

At acceptance, every automation whose webhook trigger selects the delivery's webhook gets one decision,
disabled automations included: it matched (a run was started for it), or it did not, and why - the first
failing condition of its first trigger on that webhook, worded exactly as "Test filter" words it
(:func:`api.management.deliveries.evaluate_filter`, docs/management.md, "Test filter"), or "disabled".
The decisions are stored with the Accepted entry, in the accept transaction, as compact JSON; the run a
matched automation started is found later through ``runs.webhook_uid``, ``delivery_id`` and
``automation_id``, so no run ID is stored.

Matching runs each trigger's compiled filter (:meth:`CompiledFilter.matches`); only a miss is explained
(:meth:`CompiledFilter.explain`, whose single-check evaluators are built once per compiled filter), so
the cost on the hot path is one explanation per automation that does not match.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from api.ingress.lookup import FilterCache, Route, WebhookRow, routes_in

# Test filter's own wording for a disabled automation (api.management.deliveries._webhook_check).
DISABLED = "the automation is disabled: it starts no runs until it is enabled"


@dataclass(frozen=True, slots=True)
class Routed:
    """A delivery's routing: the automations it starts runs for, and every decision (None: not recorded,
    as for GitHub App deliveries)."""

    matched: list[str]
    decisions: list[dict[str, Any]] | None


def decision(
    uid: str, name: str, *, enabled: bool = True, reason: str | None = None, failed_path: str | None = None
) -> dict[str, Any]:
    """One stored decision; ``reason`` None means matched."""
    return {
        "automation_uid": uid,
        "automation_name": name,
        "enabled": enabled,
        "matched": reason is None,
        "reason": reason,
        "failed_path": failed_path,
    }


def decide(routes: Sequence[Route], payload: object, filters: FilterCache) -> Routed:
    """Match ``payload`` against each route (an automation matches when any of its triggers does) and
    record a decision for each; enabled automations in UID order, as the routing rows are read."""
    matched: list[str] = []
    decisions: list[dict[str, Any]] = []
    for route in routes:
        uid = route.automation_uid
        if not route.enabled:
            decisions.append(decision(uid, route.automation_name, enabled=False, reason=DISABLED))
            continue
        if any(filters.compiled(uid, text).matches(payload) for _, text in route.triggers):
            matched.append(uid)
            decisions.append(decision(uid, route.automation_name))
            continue
        index, text = route.triggers[0]  # Test filter reports the first trigger's failure, numbered
        result = filters.explain(uid, text, payload)
        prefix = f"trigger #{index + 1}: " if len(route.triggers) > 1 else ""
        decisions.append(
            decision(
                uid, route.automation_name, reason=prefix + result.detail, failed_path=result.failed_path
            )
        )
    return Routed(matched, decisions)


def only(routed: Routed, automation_uid: str) -> Routed:
    """A replay into one automation: the others are decided "not replayed into" whatever they matched."""
    if routed.decisions is None:
        return Routed([u for u in routed.matched if u == automation_uid], None)
    reason = f"not part of this replay: it was replayed into automation {automation_uid} only"
    decisions = [
        d
        if d["automation_uid"] == automation_uid
        else {**d, "matched": False, "reason": reason, "failed_path": None}
        for d in routed.decisions
    ]
    return Routed([u for u in routed.matched if u == automation_uid], decisions)


def decide_in(
    conn: Connection, deliveries: Sequence[tuple[WebhookRow, object]], filters: FilterCache
) -> list[Routed]:
    """:func:`decide` for each (webhook, payload), with one routing-rows SELECT for all the webhooks."""
    routes = routes_in(conn, [webhook.uid for webhook, _ in deliveries])
    return [decide(routes.get(webhook.uid, ()), payload, filters) for webhook, payload in deliveries]
