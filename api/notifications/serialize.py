"""Notification rows as the management API shows them (docs/management.md, "Notification endpoints").

An endpoint never shows a secret value: only the name of the team secret that signs its messages. A
message's ``payload`` is the exact body every attempt sends, parsed back into JSON for the reader. In
the single-message view the attempts are listed as ``attempt_log``, because ``attempts`` is already the
message's count of attempts made (the same member, the same type, in every view of a message).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from api.notifications.transport import NOT_ALLOWED, REFUSED
from store.clock import rfc3339
from store.models import NotificationAttempt, NotificationEndpoint, NotificationMessage


def endpoint_json(row: NotificationEndpoint) -> dict[str, Any]:
    return {
        "id": row.uid,
        "name": row.name,
        "url": row.url,
        "events": list(row.events),
        "filter": dict(row.filter or {}),
        "enabled": row.enabled,
        "description": row.description,
        "secret_name": row.secret_name,
        "managed_by": row.managed_by,
        "definition_path": row.definition_path,
        "failing": row.failing,
        "consecutive_failures": row.consecutive_failures,
        "failing_since": rfc3339(row.failing_since),
        "last_success_at": rfc3339(row.last_success_at),
        "created_at": rfc3339(row.created_at),
        "updated_at": rfc3339(row.updated_at),
    }


def message_json(row: NotificationMessage) -> dict[str, Any]:
    """A message in a listing: its state, never its body."""
    return {
        "id": row.id,
        "endpoint_id": row.endpoint_uid,
        "run_id": row.run_id,
        "event_type": row.event_type,
        "status": row.status,
        "attempts": row.attempts,
        "next_attempt_at": rfc3339(row.next_attempt_at),
        "last_attempt_at": rfc3339(row.last_attempt_at),
        "last_response_status": row.last_response_status,
        "last_error": row.last_error,
        "delivered_at": rfc3339(row.delivered_at),
        "created_at": rfc3339(row.created_at),
    }


def attempt_error(row: NotificationAttempt) -> str | None:
    """A refused attempt says only that its destination is not allowed, as the transport records it now
    (docs/notifications.md, "Where a notification may be sent"); rows recorded before that may carry
    what a refused name resolved to, which is not shown."""
    if row.outcome == REFUSED and not (row.error or "").startswith(NOT_ALLOWED):
        return NOT_ALLOWED
    return row.error


def attempt_json(row: NotificationAttempt) -> dict[str, Any]:
    return {
        "attempt": row.attempt,
        "trigger": row.trigger,
        "started_at": rfc3339(row.started_at),
        "duration_ms": row.duration_ms,
        "outcome": row.outcome,
        "response_status": row.response_status,
        "response_excerpt": row.response_excerpt,
        "error": attempt_error(row),
        "next_attempt_at": rfc3339(row.next_attempt_at),
    }


def _payload(text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError:  # the fan-out writes JSON only; show the text rather than fail
        return text


def message_detail_json(row: NotificationMessage, attempts: Sequence[NotificationAttempt]) -> dict[str, Any]:
    """One message: its state, the body it sends (``payload``) and its attempts, oldest first."""
    return message_json(row) | {
        "payload": _payload(row.payload),
        "attempt_log": [attempt_json(a) for a in attempts],
    }


__all__ = ["attempt_json", "endpoint_json", "message_detail_json", "message_json"]
