"""Factory, webhook, automation and apply-record rows as the wire objects of docs/api.md, "Factories"."""

from __future__ import annotations

from typing import Any

from store.clock import rfc3339
from store.models import ApplyRecord, Automation, Factory, Webhook

TOKEN_PLACEHOLDER = "{token}"  # noqa: S105 - a literal placeholder, not a credential


def factory_json(row: Factory) -> dict[str, Any]:
    return {
        "uid": row.uid,
        "name": row.name,
        "description": row.description,
        "managed_by": row.managed_by,
        "worker_host": row.worker_host,
        "last_applied_revision": row.last_applied_revision,
        "last_attempted_revision": row.last_attempted_revision,
        "conditions": list(row.conditions or []),
        "sync": sync_json(row),
        "manager": dict(row.manager) if row.manager else None,
        "applied_commit": dict(row.applied_commit) if row.applied_commit else None,
        "created_at": rfc3339(row.created_at),
        "updated_at": rfc3339(row.updated_at),
    }


def sync_json(row: Factory) -> dict[str, Any] | None:
    """The factory's GitOps sync record (docs/reconcile.md, "Sync status"); ``Unknown`` until the first
    comparison, null for API-managed factories (they have no source)."""
    if row.managed_by != "definitions":
        return None
    found = dict(row.sync or {})
    return {
        "status": found.get("status", "Unknown"),
        "revision": found.get("revision", row.last_applied_revision),
        "drift": list(found.get("drift") or []),
        "checked_at": found.get("checked_at"),
        "message": found.get("message") or ("" if found else "not compared with its source yet"),
        "last_heal": found.get("last_heal"),
    }


def ingress_url(base_url: str, uid: str, auth_mode: str) -> str:
    """Where senders POST: ``<base>/webhooks/w/<uid>``, plus ``/{token}`` for ``url_token`` webhooks.

    The token itself is a credential and is never part of a stored or listed URL.
    """
    url = f"{base_url.rstrip('/')}/webhooks/w/{uid}"
    return f"{url}/{TOKEN_PLACEHOLDER}" if auth_mode == "url_token" else url


def webhook_json(row: Webhook, base_url: str) -> dict[str, Any]:
    return {
        "uid": row.uid,
        "name": row.name,
        "factory_uid": row.factory_uid,
        "auth_mode": row.auth_mode,
        "signature_scheme": row.signature_scheme,
        "secret_name": row.secret_name,
        "delivery_id_header": row.delivery_id_header,
        "enabled": row.enabled,
        "ingress_url": ingress_url(base_url, row.uid, row.auth_mode),
        "managed_by": row.managed_by,
        "created_at": rfc3339(row.created_at),
        "updated_at": rfc3339(row.updated_at),
    }


def trigger_json(trigger: Any) -> Any:
    """A stored trigger with both references of its filter (docs/definitions.md, "Referencing webhooks"):
    ``webhook_ids`` and ``webhooks`` as written, and ``resolved_webhook_ids``, the UIDs it routes from."""
    if not isinstance(trigger, dict) or not isinstance(trigger.get("filter"), dict):
        return trigger
    flt = dict(trigger["filter"])
    flt.setdefault("webhook_ids", [])
    flt.setdefault("webhooks", [])
    flt.setdefault("resolved_webhook_ids", list(flt["webhook_ids"]))
    return {**trigger, "filter": flt}


def automation_json(row: Automation) -> dict[str, Any]:
    return {
        "uid": row.uid,
        "name": row.name,
        "enabled": row.enabled,
        "agent": row.agent,
        "triggers": [trigger_json(t) for t in row.triggers or []],
        "definition_path": row.definition_path,
    }


def apply_json(row: ApplyRecord | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {
        "revision": row.revision,
        "outcome": row.outcome,
        "started_at": rfc3339(row.started_at),
        "duration_ms": row.duration_ms,
        "summary": row.summary or {},
        "errors": list(row.errors or []),
        "commit": dict(row.commit) if row.commit else None,
    }


def factory_detail_json(
    row: Factory,
    webhooks: list[Webhook],
    automations: list[Automation],
    last_apply: ApplyRecord | None,
    base_url: str,
) -> dict[str, Any]:
    out = factory_json(row)
    out["webhooks"] = [webhook_json(w, base_url) for w in webhooks]
    out["automations"] = [automation_json(a) for a in automations]
    out["last_apply"] = apply_json(last_apply)
    return out
