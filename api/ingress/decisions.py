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
the cost on the hot path is one explanation per automation that does not match, for at most
:data:`MAX_EXPLAINED` of them per delivery.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection

from api.ingress.lookup import FilterCache, Route, WebhookRow, routes_in

# Test filter's own wording for a disabled automation (api.management.deliveries._webhook_check).
DISABLED = "the automation is disabled: it starts no runs until it is enabled"
# Misses explained per delivery: past this many, a miss is recorded without its reason, so a webhook with
# thousands of automations costs a bounded amount per delivery (docs/ingress.md, "Decisions").
MAX_EXPLAINED = 100
NOT_EXPLAINED = f"did not match (reasons are recorded for the first {MAX_EXPLAINED} automations that do not)"


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
    """Match ``payload`` against one webhook's routing rows (an automation matches when any of its triggers
    does) and record a decision per automation, in the rows' order (automation UIDs)."""
    matched: list[str] = []
    decisions: list[dict[str, Any]] = []
    compiled = filters.compiled
    explained = 0
    i, count = 0, len(routes)
    while i < count:
        _, uid, text, index, name, enabled = routes[i]
        end = i + 1
        while end < count and routes[end][1] == uid:  # its other triggers on this webhook
            end += 1
        hit = False
        if enabled:
            for k in range(i, end):
                if compiled(uid, routes[k][2]).matches(payload):
                    hit = True
                    break
        if not enabled:
            decisions.append(decision(uid, name, enabled=False, reason=DISABLED))
        elif hit:
            matched.append(uid)
            decisions.append(decision(uid, name))
        elif explained == MAX_EXPLAINED:
            decisions.append(decision(uid, name, reason=NOT_EXPLAINED))
        else:  # Test filter reports the first trigger's failure, numbered when there are several
            explained += 1
            result = filters.explain(uid, text, payload)
            prefix = f"trigger #{index + 1}: " if end - i > 1 else ""
            decisions.append(
                decision(uid, name, reason=prefix + result.detail, failed_path=result.failed_path)
            )
        i = end
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
