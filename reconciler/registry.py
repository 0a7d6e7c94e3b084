"""The registry of definition kinds: one row per kind of definition file, like a Kubernetes scheme.

A row says where a kind's files are (folder and file pattern), which JSON Schema checks them, which
spec they load into, the prefix of the UIDs its objects get and where it comes in a plan (its apply
order). The loader, the load cache, the git source's export, the planner and the applier iterate
:data:`KINDS` instead of naming kinds; each kind's store side is one module of :mod:`reconciler.kinds`
(docs/architecture.md, "Adding a definition kind").

Pure data: the offline validation path imports it, so it imports no SQLAlchemy and no store model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reconciler.specs import (
    AutomationSpec,
    EnvironmentSpec,
    FactoryDefinition,
    FactorySpec,
    NotificationSpec,
    ScheduleSpec,
    WebhookSpec,
)
from store import ids


@dataclass(frozen=True)
class Kind:
    """One kind of definition file.

    ``folder`` is also the kind's field of :class:`FactoryDefinition` and the keyword of
    :class:`reconciler.plan.StoreState`. Files are ``<folder>/<name>.yaml`` (or ``.yml``) when ``file`` is
    None, else ``<folder>/<name>/<file>``: Markdown whose front matter is the document. ``spec`` builds
    itself from a schema-checked document (``from_document``, or ``from_markdown`` for the latter).
    """

    name: str  # singular: the plan's kind ("webhook")
    folder: str
    schema: str  # schemas/<schema>.schema.json
    spec: type[Any]
    prefix: str  # the UID prefix (store.ids)
    order: int  # apply order: a plan lists kinds by it (webhooks before the automations that name them)
    file: str | None = None
    values: tuple[str, ...] = ()  # keys whose diagnostics point at the value, where the fix goes
    empty_ok: bool = False  # an empty document is an empty mapping
    secret_version: bool = False  # plan: a newer version of its secret is a change (docs/reconcile.md)
    content: bool = True  # a tree with no object of any content kind is refused as empty (FC050)

    @property
    def pattern(self) -> str:
        return f"{self.folder}/<name>/{self.file}" if self.file else f"{self.folder}/<name>.yaml"

    def specs(self, definition: FactoryDefinition) -> tuple[Any, ...]:
        """The definition's specs of this kind."""
        found: tuple[Any, ...] = getattr(definition, self.folder)
        return found


FACTORY = Kind("factory", "", "factory", FactorySpec, ids.FACTORY, order=0)  # the root object: factory.yaml
FACTORY_FILES = ("factory.yaml", "factory.yml")  # factory.yml is read only to hint at its right name

# In the order their files are loaded (and their diagnostics found).
KINDS: tuple[Kind, ...] = (
    #    name            folder           schema          spec              prefix            apply order
    Kind("webhook",      "webhooks",      "webhook",      WebhookSpec,      ids.WEBHOOK,      order=1,
         secret_version=True),
    Kind("automation",   "automations",   "automation",   AutomationSpec,   ids.AUTOMATION,   order=3,
         file="automation.md"),
    Kind("environment",  "environments",  "environment",  EnvironmentSpec,  ids.ENVIRONMENT,  order=2,
         empty_ok=True, content=False),
    Kind("schedule",     "schedules",     "schedule",     ScheduleSpec,     ids.SCHEDULE,     order=4,
         values=("cron", "timezone", "automation")),
    Kind("notification", "notifications", "notification", NotificationSpec, ids.NOTIFICATION, order=5,
         values=("url",)),
)  # fmt: skip
BY_NAME = {kind.name: kind for kind in (FACTORY, *KINDS)}
APPLY_ORDER: tuple[Kind, ...] = tuple(sorted(KINDS, key=lambda kind: kind.order))
ROOTS = (*FACTORY_FILES, *(kind.folder for kind in KINDS))  # what a factory root holds that is loaded
NESTED = frozenset(kind.folder for kind in KINDS if kind.file)  # folders of directories, one per object
