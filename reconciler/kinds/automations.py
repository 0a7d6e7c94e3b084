"""Automations in the store: the rows a plan compares with ``automations/<name>/automation.md``, what
apply writes, and the routing index ingress reads.

- create/update: its routing rows (:class:`AutomationWebhook`) are rebuilt from its triggers; webhook
  names (``filter.webhooks``) resolve to the UIDs the store holds or this apply just minted (webhooks
  are written first), and the stored triggers carry them as ``filter.resolved_webhook_ids``.
- delete: the row and its routing rows are removed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import delete
from sqlalchemy.ext.asyncio import AsyncSession

from reconciler.errors import ReconcileError
from reconciler.kinds.base import KindStore, Writer, read_stored
from reconciler.plan import Change, StoredObject
from reconciler.registry import BY_NAME
from reconciler.specs import KNOWN_AFTER_APPLY, AutomationSpec, digest
from store.models import Automation, AutomationWebhook

# The compared columns, named as :meth:`AutomationSpec.fields` names them.
COLUMNS = (
    Automation.enabled,
    Automation.agent,
    Automation.title,
    Automation.config,
    Automation.prompt,
    Automation.triggers,
)


async def read(session: AsyncSession, factory_uid: str) -> dict[str, StoredObject]:
    """The factory's automations by name."""
    return await read_stored(session, Automation, COLUMNS, Automation.factory_uid == factory_uid)


def routing_rows(
    automation_uid: str, spec: AutomationSpec, uids: Mapping[str, str | None] | None = None
) -> list[AutomationWebhook]:
    """The routing index of one automation: a row per (webhook trigger, selected webhook UID).

    ``uids`` maps webhook name -> UID for the names in ``filter.webhooks``; the index only ever holds
    UIDs, so every named webhook must have one by now (apply writes webhooks first).
    """
    rows: list[AutomationWebhook] = []
    for index, trigger in enumerate(spec.triggers):
        if trigger.provider != "webhook":
            continue
        resolved = trigger.resolved_webhook_ids(uids or {})
        if KNOWN_AFTER_APPLY in resolved:
            raise ReconcileError(
                f"automation {spec.name!r} names a webhook without a UID: {trigger.webhooks}"
            )
        for uid in resolved:  # de-duplicated, order kept
            rows.append(
                AutomationWebhook(
                    automation_uid=automation_uid,
                    trigger_index=index,
                    webhook_uid=uid,
                    payload_filter=trigger.payload_filter,
                )
            )
    return rows


async def write(writer: Writer, change: Change, spec: AutomationSpec | None) -> None:
    session = writer.session
    stale = change.uid if change.action in ("delete", "update") else change.old_uid
    if stale is not None:
        await session.execute(delete(AutomationWebhook).where(AutomationWebhook.automation_uid == stale))
    if change.action in ("delete", "replace"):
        await session.execute(delete(Automation).where(Automation.uid == stale))
    if spec is None or change.action == "delete":
        return
    uids = writer.webhook_uids()  # webhooks precede automations in a plan (reconciler.plan.diff)
    fields = spec.fields(uids)
    values: dict[str, Any] = dict(
        fields, definition_path=spec.path, spec_digest=digest(fields), updated_at=writer.now
    )
    uid = await writer.write(Automation, change, spec.name, values)
    writer.routing += routing_rows(uid, spec, uids)  # added once the automation rows are flushed


STORE = KindStore(BY_NAME["automation"], read, write)
