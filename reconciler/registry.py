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

from reconciler.objectspecs import AgentSpec, BenchmarkSpec, RunnerSpec, ScorerSpec, SkillSpec
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
    itself from a schema-checked document (``from_document``, or ``from_markdown`` for a Markdown file).
    ``scoped_by`` names a kind whose objects hold their own objects of this kind too
    (``agents/<agent>/skills/<name>/SKILL.md``, named ``<agent>/<name>``); ``children`` a folder of YAML
    documents inside each object's directory (``benchmarks/<suite>/tasks/*.yaml``, schema ``child_schema``).
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
    scoped_by: str | None = None
    children: str | None = None
    child_schema: str | None = None
    v1alpha1: bool = True  # part of the published format (False: a factoryctl extension)

    @property
    def markdown(self) -> bool:
        return bool(self.file and self.file.endswith(".md"))

    @property
    def depth(self) -> int:
        """How many directory levels below the folder hold this kind's files (git export, load cache)."""
        return 0 if not self.file else 2 if self.children else 1

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
    Kind("agent",        "agents",        "agent",        AgentSpec,        ids.AGENT,        order=2,
         file="agent.md", empty_ok=True),
    Kind("skill",        "skills",        "skill",        SkillSpec,        ids.SKILL,        order=1,
         file="SKILL.md", empty_ok=True, content=False, scoped_by="agents"),
    Kind("runner",       "runners",       "runner",       RunnerSpec,       ids.RUNNER,       order=1,
         empty_ok=True, content=False),
    Kind("webhook",      "webhooks",      "webhook",      WebhookSpec,      ids.WEBHOOK,      order=1,
         secret_version=True),
    Kind("automation",   "automations",   "automation",   AutomationSpec,   ids.AUTOMATION,   order=4,
         file="automation.md"),
    Kind("environment",  "environments",  "environment",  EnvironmentSpec,  ids.ENVIRONMENT,  order=3,
         empty_ok=True, content=False, v1alpha1=False),
    Kind("schedule",     "schedules",     "schedule",     ScheduleSpec,     ids.SCHEDULE,     order=5,
         values=("cron", "timezone", "automation"), v1alpha1=False),
    Kind("notification", "notifications", "notification", NotificationSpec, ids.NOTIFICATION, order=6,
         values=("url",), v1alpha1=False),
    Kind("scorer",       "scorers",       "scorer",       ScorerSpec,       ids.SCORER,       order=7,
         file="scorer.md", content=False),
    Kind("benchmark",    "benchmarks",    "benchmark",    BenchmarkSpec,    ids.BENCHMARK,    order=7,
         file="suite.yaml", content=False, children="tasks", child_schema="benchmark-task"),
)  # fmt: skip
BY_NAME = {kind.name: kind for kind in (FACTORY, *KINDS)}
APPLY_ORDER: tuple[Kind, ...] = tuple(sorted(KINDS, key=lambda kind: kind.order))
ROOTS = (*FACTORY_FILES, *(kind.folder for kind in KINDS))  # what a factory root holds that is loaded
NESTED = frozenset(kind.folder for kind in KINDS if kind.file)  # folders of directories, one per object
# How deep below each folder definition files lie (agents/<agent>/skills/<skill>/SKILL.md: 3 levels).
DEPTH: dict[str, int] = {kind.folder: kind.depth for kind in KINDS}
for _kind in KINDS:
    if _kind.scoped_by:
        DEPTH[_kind.scoped_by] = max(DEPTH[_kind.scoped_by], 3)
