"""Webhooks in the store: the rows a plan compares with ``webhooks/<name>.yaml``, and what apply writes.

- create: a new ``wh_`` UID; it captures its secret's current version (docs/reconcile.md, "Secret
  rotation").
- update: every definition field, the definition path and digest are rewritten, and the secret version
  is re-captured (a plain rotation is itself an update, shown as ``secret_version``).
- delete: soft delete (``deleted_at``) so the UID is never reused and ingress answers 404.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from reconciler.kinds.base import MANAGED_BY, KindStore, Writer, read_stored
from reconciler.plan import Change, StoredObject
from reconciler.registry import BY_NAME
from reconciler.specs import WebhookSpec, digest
from store.models import Webhook

# The compared columns, named as :meth:`WebhookSpec.fields` names them.
COLUMNS = (
    Webhook.auth_mode,
    Webhook.signature_scheme,
    Webhook.secret_name,
    Webhook.delivery_id_header,
    Webhook.enabled,
    Webhook.description,
)


async def read(session: AsyncSession, factory_uid: str) -> dict[str, StoredObject]:
    """The factory's live (not deleted) webhooks by name, with the secret version each captured."""
    where = (Webhook.factory_uid == factory_uid, Webhook.deleted_at.is_(None))
    return await read_stored(session, Webhook, COLUMNS, *where, captured=True)


async def write(writer: Writer, change: Change, spec: WebhookSpec | None) -> None:
    now = writer.now
    if change.action in ("delete", "replace"):
        uid = change.uid if change.action == "delete" else change.old_uid
        stmt = update(Webhook).where(Webhook.uid == uid).values(deleted_at=now, updated_at=now)
        await writer.session.execute(stmt)
    if spec is None or change.action == "delete":
        return
    fields = spec.fields()
    values: dict[str, Any] = dict(
        fields,
        secret_version=writer.state.secret_versions.get(spec.secret_name),
        definition_path=spec.path,
        spec_digest=digest(fields),
        updated_at=now,
    )
    await writer.write(Webhook, change, spec.name, values, managed_by=MANAGED_BY, deleted_at=None)


STORE = KindStore(BY_NAME["webhook"], read, write)
