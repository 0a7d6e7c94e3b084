"""Typed specs: what a factory's definition files mean once loaded and schema-checked.

The loader turns files into these; validation, plan and apply only ever see specs. Every spec
keeps the file it came from and the source location of its keys so that later checks (online
checks, plan) can point at file:line:column.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler import execution
from store.rules import triggers
from store.rules.notification_rules import canonical_events, canonical_filter
from store.rules.vocabulary import canonical_scheme

AUTH_MODES = ("token", "url_token", "signature")
MAX_WEBHOOKS_PER_FACTORY = 20
MAX_NOTIFICATIONS_PER_FACTORY = 20


def digest(obj: Any) -> str:
    """Stable SHA-256 of a JSON-able value: equal specs have equal digests."""
    data = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Location:
    """A place in a file; ``line`` and ``column`` are 1-based (0 when unknown)."""

    path: str
    line: int = 0
    column: int = 0

    def __str__(self) -> str:
        if self.line:
            return f"{self.path}:{self.line}:{self.column or 1}"
        return self.path


def place(locations: Mapping[str, Location], key: str, fallback: str) -> Location:
    """The location of ``key`` (``triggers[0].filter.labels``) or of its nearest recorded parent, else the
    file's (``""``), else ``fallback``: where a rule's diagnostic points."""
    while key:
        if key in locations:
            return locations[key]
        cut = max(key.rfind("."), key.rfind("["))
        key = key[:cut] if cut > 0 else ""
    return locations.get("") or Location(fallback)


@dataclass(frozen=True)
class FactorySpec:
    """``factory.yaml``. ``settings`` holds the v1alpha1 keys kept as written (``schemaVersion``,
    ``credentialStrategy``, ``secrets``, ``mcpServers``, ``cloudProviders``, ``integrations``,
    ``agentDefaults``); ``agents`` is a legacy file's inline map (its agents become agent specs)."""

    name: str
    path: str
    description: str | None = None
    worker_host: str | None = None
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    alias: str | None = None
    repositories: tuple[tuple[str, str], ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)
    locations: dict[str, Location] = field(default_factory=dict, compare=False)

    @property
    def legacy(self) -> bool:
        """A file without ``schemaVersion``: factoryctl's legacy format (docs/definitions.md, "Legacy")."""
        return "schemaVersion" not in self.settings

    def fields(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "worker_host": self.worker_host,
            "alias": self.alias.strip() if self.alias else None,
            "repositories": [{"owner": o, "name": n} for o, n in self.repositories],
            "settings": self.settings,
        }


@dataclass(frozen=True)
class WebhookSpec:
    """``webhooks/<name>.yaml``; ``signature_scheme`` is canonical (aliases resolved)."""

    name: str
    path: str
    secret_name: str
    auth_mode: str = "token"
    signature_scheme: str | None = None
    delivery_id_header: str | None = None
    enabled: bool = True
    description: str | None = None
    locations: dict[str, Location] = field(default_factory=dict, compare=False)

    @classmethod
    def from_document(
        cls, name: str, path: str, data: Mapping[str, Any], locations: dict[str, Location]
    ) -> WebhookSpec:
        """The spec of a document that passed ``webhook.schema.json``."""
        scheme = data.get("signatureScheme")
        return cls(
            name=name,
            path=path,
            secret_name=data["secretName"],
            auth_mode=data.get("authMode", "token"),
            signature_scheme=canonical_scheme(scheme) if scheme else None,
            delivery_id_header=data.get("deliveryIdHeader"),
            enabled=data.get("enabled", True),
            description=data.get("description"),
            locations=locations,
        )

    def fields(self) -> dict[str, Any]:
        return {
            "auth_mode": self.auth_mode,
            "signature_scheme": self.signature_scheme,
            "secret_name": self.secret_name,
            "delivery_id_header": self.delivery_id_header,
            "enabled": self.enabled,
            "description": self.description,
        }


KNOWN_AFTER_APPLY = "(known after apply)"  # the UID of a webhook the same apply creates


@dataclass(frozen=True)
class TriggerSpec:
    """One trigger. A webhook trigger's ``webhook_ids`` are UIDs and its ``webhooks`` webhook file names of
    the same factory, resolved to UIDs at apply (docs/definitions.md, "Referencing webhooks"). Every other
    provider's ``filter`` is canonical (:func:`store.rules.triggers.normalize_filter`); ``schedule`` is an
    inline schedule of a ``schedule``/``cron_fired`` trigger (``cron`` as written, ``name`` or None)."""

    provider: str
    event: str
    webhook_ids: tuple[str, ...] = ()
    payload_filter: dict[str, Any] | None = None
    location: Location | None = field(default=None, compare=False)
    webhooks: tuple[str, ...] = ()
    filter: dict[str, Any] | None = None
    schedule: dict[str, Any] | None = None

    def resolved_webhook_ids(self, uids: Mapping[str, str | None]) -> tuple[str, ...]:
        """``webhook_ids``, then the UIDs of ``webhooks`` by name, de-duplicated in order.

        ``uids`` maps webhook name -> UID; a name whose webhook has no UID yet (None, or absent)
        resolves to :data:`KNOWN_AFTER_APPLY`.
        """
        named = (uids.get(name) or KNOWN_AFTER_APPLY for name in self.webhooks)
        return tuple(dict.fromkeys((*self.webhook_ids, *named)))

    def to_json(self, uids: Mapping[str, str | None] | None = None) -> dict[str, Any]:
        """The trigger as stored; with ``uids``, a trigger that names webhooks also carries
        ``filter.resolved_webhook_ids`` (what the routing index holds)."""
        if self.provider != "webhook":
            out: dict[str, Any] = {
                "provider": self.provider,
                "event": self.event,
                "filter": self.filter or {},
            }
            if self.schedule is not None:
                out["schedule"] = self.schedule
            return out
        flt: dict[str, Any] = {"webhook_ids": list(self.webhook_ids)}
        if self.webhooks:
            flt["webhooks"] = list(self.webhooks)
            if uids is not None:
                flt["resolved_webhook_ids"] = list(self.resolved_webhook_ids(uids))
        if self.payload_filter is not None:
            flt["payload"] = self.payload_filter
        return {"provider": self.provider, "event": self.event, "filter": flt}


@dataclass(frozen=True)
class AutomationSpec:
    """``automations/<name>/automation.md``: front matter plus the prompt (the Markdown body)."""

    name: str
    path: str
    prompt: str
    enabled: bool = True
    agent: str = ""  # the foreman's name when the file names none (set by the loader)
    title: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    triggers: tuple[TriggerSpec, ...] = ()
    locations: dict[str, Location] = field(default_factory=dict, compare=False)
    front_matter: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def from_markdown(
        cls,
        name: str,
        path: str,
        data: Mapping[str, Any],
        locations: dict[str, Location],
        body: str,
        body_at: Location,
    ) -> AutomationSpec | str:
        """The spec of a file whose front matter passed ``automation.schema.json`` and whose Markdown
        ``body`` (at ``body_at``) is the prompt; or why the body will not do."""
        prompt, config = body.strip(), execution.automation_config(data, {})
        if not prompt and not config.get("skill_spec"):
            return "the automation has no prompt: write it as Markdown below the front matter"
        locations = {**locations, **execution.location_aliases(locations), "prompt": body_at}
        triggers = tuple(
            _trigger(t, locations.get(f"triggers[{i}]")) for i, t in enumerate(data.get("triggers", []))
        )
        return cls(
            name=name,
            path=path,
            prompt=prompt,
            enabled=data.get("enabled", True),
            agent=data.get("agent", ""),
            title=data.get("title"),
            config=config,
            triggers=triggers,
            locations=locations,
            front_matter=dict(data),
        )

    @property
    def webhook_names(self) -> tuple[str, ...]:
        """Every webhook file name its triggers reference, de-duplicated in order."""
        return tuple(dict.fromkeys(name for t in self.triggers for name in t.webhooks))

    def fields(self, uids: Mapping[str, str | None] | None = None) -> dict[str, Any]:
        """The stored fields; with ``uids`` (webhook name -> UID), webhook names are resolved too."""
        return {
            "enabled": self.enabled,
            "agent": self.agent,
            "title": self.title,
            "config": self.config,
            "prompt": self.prompt,
            "triggers": [t.to_json(uids) for t in self.triggers],
        }


def _trigger(t: Mapping[str, Any], location: Location | None) -> TriggerSpec:
    """A schema-checked trigger; a non-webhook filter is canonical when the trigger rules accept it (the
    rules report it otherwise, and a spec the rules refused is never applied)."""
    provider, event, flt = t["provider"], t["event"], t.get("filter") or {}
    if provider == "webhook":
        return TriggerSpec(
            provider=provider,
            event=event,
            webhook_ids=tuple(flt.get("webhook_ids", ())),
            webhooks=tuple(flt.get("webhooks", ())),
            payload_filter=flt.get("payload"),
            location=location,
        )
    try:
        normalized: dict[str, Any] = triggers.normalize_filter(provider, event, flt)
    except triggers.TriggerError:
        normalized = dict(flt)
    schedule = t.get("schedule")
    inline = {"name": schedule.get("name"), "cron": schedule["cron"]} if schedule else None
    return TriggerSpec(provider, event, location=location, filter=normalized, schedule=inline)


@dataclass(frozen=True)
class EnvironmentSpec:
    """``environments/<name>.yaml``: repos, setup commands, env and secrets for run workspaces."""

    name: str
    path: str
    spec: dict[str, Any] = field(default_factory=dict)
    locations: dict[str, Location] = field(default_factory=dict, compare=False)

    @classmethod
    def from_document(
        cls, name: str, path: str, data: Mapping[str, Any], locations: dict[str, Location]
    ) -> EnvironmentSpec:
        """The spec of a document that passed ``environment.schema.json`` (empty is an empty spec)."""
        return cls(name=name, path=path, spec=dict(data), locations=locations)

    def fields(self) -> dict[str, Any]:
        return {"spec": self.spec}


@dataclass(frozen=True)
class ScheduleSpec:
    """``schedules/<name>.yaml``: a cron expression in a time zone that starts runs.

    Either ``automation`` (a name of this factory's automations, resolved when the schedule fires) or
    ``prompt`` with ``config`` says what a fire runs. ``description`` is documentation only: it has no
    column, so it is neither stored nor compared (editing it plans no change).
    """

    name: str
    path: str
    cron: str
    timezone: str = "UTC"
    automation: str | None = None
    prompt: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    enabled: bool = True
    description: str | None = None
    locations: dict[str, Location] = field(default_factory=dict, compare=False)
    inline_of: str | None = None  # the automation whose schedule/cron_fired trigger declares it

    @classmethod
    def from_document(
        cls, name: str, path: str, data: Mapping[str, Any], locations: dict[str, Location]
    ) -> ScheduleSpec:
        """The spec of a document that passed ``schedule.schema.json``."""
        return cls(
            name=name,
            path=path,
            cron=data["cron"],
            timezone=data.get("timezone", "UTC"),
            automation=data.get("automation"),
            prompt=data.get("prompt"),
            config=data.get("config", {}),
            enabled=data.get("enabled", True),
            description=data.get("description"),
            locations=locations,
        )

    def fields(self) -> dict[str, Any]:
        """The compared fields; ``config`` is stored as ``agent_config``."""
        return {
            "cron": self.cron,
            "timezone": self.timezone,
            "automation": self.automation,
            "prompt": self.prompt,
            "config": self.config,
            "enabled": self.enabled,
        }


@dataclass(frozen=True)
class NotificationSpec:
    """``notifications/<name>.yaml``: an endpoint told about run state changes (docs/definitions.md,
    "Notifications").

    ``events`` and ``filter`` are kept as written; :meth:`fields` gives them canonical
    (:mod:`store.rules.notification_rules`), which only a spec the rules passed (FC081) may be asked for.
    """

    name: str
    path: str
    url: str
    secret_name: str
    events: tuple[str, ...]
    filter: dict[str, Any] = field(default_factory=dict)
    enabled: bool = True
    description: str | None = None
    locations: dict[str, Location] = field(default_factory=dict, compare=False)

    @classmethod
    def from_document(
        cls, name: str, path: str, data: Mapping[str, Any], locations: dict[str, Location]
    ) -> NotificationSpec:
        """The spec of a document that passed ``notification.schema.json``."""
        return cls(
            name=name,
            path=path,
            url=data["url"],
            secret_name=data["secretName"],
            events=tuple(data["events"]),
            filter=data.get("filter", {}),
            enabled=data.get("enabled", True),
            description=data.get("description"),
            locations=locations,
        )

    def fields(self) -> dict[str, Any]:
        """The compared fields, as stored: ``events`` and ``filter`` canonical."""
        return {
            "url": self.url,
            "secret_name": self.secret_name,
            "events": canonical_events(list(self.events)),
            "filter": canonical_filter(self.filter),
            "enabled": self.enabled,
            "description": self.description,
        }


@dataclass(frozen=True)
class FactoryDefinition:
    """Everything one factory directory declares, plus a content digest of its files."""

    root: str
    factory: FactorySpec
    webhooks: tuple[WebhookSpec, ...] = ()
    automations: tuple[AutomationSpec, ...] = ()
    environments: tuple[EnvironmentSpec, ...] = ()
    content_digest: str = ""
    schedules: tuple[ScheduleSpec, ...] = ()
    notifications: tuple[NotificationSpec, ...] = ()
    agents: tuple[Any, ...] = ()  # reconciler.objectspecs: AgentSpec, SkillSpec, RunnerSpec, ...
    skills: tuple[Any, ...] = ()
    runners: tuple[Any, ...] = ()
    scorers: tuple[Any, ...] = ()
    benchmarks: tuple[Any, ...] = ()

    @property
    def foreman(self) -> str:
        """The foreman's name: the agent whose type is FOREMAN (``foreman`` in a legacy tree)."""
        return next((a.name for a in self.agents if a.agent_type == "FOREMAN"), "foreman")
