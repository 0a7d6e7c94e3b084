"""Plan: what applying a factory's definition files would change in the store.

Pure code (no I/O): :func:`diff` compares a :class:`FactoryDefinition` with a :class:`StoreState`
(read by :func:`reconciler.apply.read_state`) and returns a :class:`Plan`, which renders as the text
of docs/reconcile.md ("Plan output") or as stable JSON. The same plan object drives
:func:`reconciler.apply.apply_plan`, so what ``plan`` prints is exactly what ``apply`` does.

Identity: the factory is (team, ``name``); webhooks, environments, schedules and notifications are keyed
by file stem and automations by directory name. A removed name and an added name whose specs are
identical are shown as one ``-/+`` replace (a rename: new UID, and for webhooks a new URL).

An update lists the changed fields, then each changed value as ``path: old -> new`` (nested values by
their path, e.g. ``config.model_id``), in text and in JSON (``values``). Secret values never appear: a
webhook's ``secret_name`` change shows the names, a newer version of its secret (a rotation not yet
picked up, docs/reconcile.md, "Secret rotation") shows ``secret_version`` with version numbers, and a
value under a key that names a credential (``token``, ``password``, ``authorization``...) shows as
``(hidden)``: definitions are committed, but a plan is pasted into tickets and CI logs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from reconciler.registry import APPLY_ORDER, BY_NAME, FACTORY
from reconciler.specs import KNOWN_AFTER_APPLY, AutomationSpec, FactoryDefinition, digest

Action = Literal["create", "update", "delete", "replace"]

KIND_ORDER: tuple[str, ...] = tuple(kind.name for kind in (FACTORY, *APPLY_ORDER))
UID_PREFIX: dict[str, str] = {name: kind.prefix for name, kind in BY_NAME.items()}
SECRET_FIELDS = frozenset({"secret_name", "secret_version"})
HIDDEN = "(hidden)"
# A key whose value is a credential, wherever it is nested (a header, an environment variable); a key
# ending in _name (secret_name, token_secret_name) names a team secret and is shown.
_CREDENTIAL_KEY = re.compile(r"(secret|token|password|passwd|authorization|api[_-]?key|credential)", re.I)
SHOWN_CHARS = 72  # a text value line is cut after this many characters of its JSON (JSON has it whole)


@dataclass(frozen=True)
class StoredObject:
    """One live object as the store holds it; ``fields`` has the keys of the matching spec's ``fields()``."""

    uid: str
    name: str
    fields: dict[str, Any]
    spec_digest: str | None = None
    secret_version: int | None = None  # webhooks: the captured secret version


@dataclass(frozen=True)
class StoreState:
    """What the store holds for one factory, plus the team facts a plan needs.

    ``stored`` has each kind's live objects by name, keyed by kind (:mod:`reconciler.registry`).
    """

    factory: StoredObject | None = None
    managed_by: str | None = None
    stored: Mapping[str, Mapping[str, StoredObject]] = field(default_factory=dict)
    secret_versions: Mapping[str, int] = field(default_factory=dict)  # team secret name -> current version
    taken_environments: Mapping[str, str] = field(default_factory=dict)  # env name -> owner, other factories

    def objects(self, kind: str) -> Mapping[str, StoredObject]:
        if kind == FACTORY.name:
            return {self.factory.name: self.factory} if self.factory else {}
        return self.stored.get(kind, {})


@dataclass(frozen=True)
class FieldChange:
    """One changed value of an update: ``path`` is the field, then nested keys (``config.model_id``) and
    list indexes (``triggers[0].filter``); ``old``/``new`` are None where the key is absent."""

    path: str
    old: Any
    new: Any

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "old": self.old, "new": self.new}


@dataclass(frozen=True)
class Change:
    """One line of a plan. ``uid`` is None for objects that get their UID on apply."""

    action: Action
    kind: str  # a kind of the registry (reconciler.registry)
    name: str
    uid: str | None = None
    fields: tuple[str, ...] = ()
    old_name: str | None = None  # replace: the removed name
    old_uid: str | None = None  # replace: the removed object's UID
    details: tuple[tuple[str, str], ...] = ()  # field -> "old -> new" for secret fields (names, versions)
    values: tuple[FieldChange, ...] = ()  # update: each changed value, old -> new (credentials hidden)
    # automations: webhooks named in ``webhooks:`` whose UID this apply assigns (None until it has)
    webhooks: tuple[tuple[str, str | None], ...] = ()

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "action": self.action,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "fields": list(self.fields),
        }
        if self.action == "replace":
            out["old_name"] = self.old_name
            out["old_uid"] = self.old_uid
        if self.webhooks:
            out["webhooks"] = dict(self.webhooks)
        if self.values:
            out["values"] = [v.to_json() for v in self.values]
        return out


@dataclass(frozen=True)
class Plan:
    factory_name: str
    factory_uid: str | None
    changes: tuple[Change, ...] = ()
    managed_by: str | None = None
    # Every webhook the definition declares -> its UID (None until the apply that creates it).
    webhooks: tuple[tuple[str, str | None], ...] = ()

    @property
    def has_changes(self) -> bool:
        return bool(self.changes)

    def summary(self) -> dict[str, int]:
        """Terraform counting: a replace is one add and one destroy."""
        add = sum(c.action in ("create", "replace") for c in self.changes)
        change = sum(c.action == "update" for c in self.changes)
        destroy = sum(c.action in ("delete", "replace") for c in self.changes)
        return {"add": add, "change": change, "destroy": destroy}

    def digest(self) -> str:
        """Identifies what this plan would do (used to check an approved plan is still the plan)."""
        return digest([c.to_json() | {"details": list(c.details)} for c in self.changes])

    def with_uids(self, assigned: Mapping[tuple[str, str], str]) -> Plan:
        """The plan after apply: UIDs minted by apply, keyed by (kind, name), filled in."""
        changes = tuple(
            replace(
                c,
                uid=c.uid or assigned.get((c.kind, c.name)),
                webhooks=tuple((n, uid or assigned.get(("webhook", n))) for n, uid in c.webhooks),
            )
            for c in self.changes
        )
        factory_uid = self.factory_uid or assigned.get(("factory", self.factory_name))
        webhooks = tuple((name, uid or assigned.get(("webhook", name))) for name, uid in self.webhooks)
        return replace(self, changes=changes, factory_uid=factory_uid, webhooks=webhooks)

    def to_json(self) -> dict[str, Any]:
        return {
            "factory": {
                "name": self.factory_name,
                "uid": self.factory_uid,
                "managed_by": self.managed_by,
                "webhooks": dict(self.webhooks),
            },
            "changes": [c.to_json() for c in self.changes],
            "summary": self.summary(),
        }


# --- diff -----------------------------------------------------------------------------------------


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def changed_fields(stored: Mapping[str, Any], desired: Mapping[str, Any]) -> tuple[str, ...]:
    """Names of fields whose values differ; compared as canonical JSON so ``1`` and ``true`` differ."""
    return tuple(k for k in desired if _canon(stored.get(k)) != _canon(desired[k]))


def field_changes(
    stored: Mapping[str, Any], desired: Mapping[str, Any], changed: tuple[str, ...]
) -> tuple[FieldChange, ...]:
    """The changed values of ``changed`` fields, down to the nested keys that differ."""
    out: list[FieldChange] = []
    for name in changed:
        if name in desired:  # secret_version is no field of the spec: its details say it
            out.extend(_leaves(name, stored.get(name), desired[name], hidden=False))
    return tuple(out)


def _leaves(path: str, old: Any, new: Any, *, hidden: bool) -> Iterator[FieldChange]:
    """Where ``old`` and ``new`` differ: dicts by key, lists of the same length by index, else whole."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in [*old, *(k for k in new if k not in old)]:
            if _canon(old.get(key)) != _canon(new.get(key)):
                secret = hidden or _is_credential(str(key))
                yield from _leaves(f"{path}.{key}", old.get(key), new.get(key), hidden=secret)
        return
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for index, (before, after) in enumerate(zip(old, new, strict=True)):
            if _canon(before) != _canon(after):
                yield from _leaves(f"{path}[{index}]", before, after, hidden=hidden)
        return
    if hidden:
        yield FieldChange(path, None if old is None else HIDDEN, None if new is None else HIDDEN)
    else:
        yield FieldChange(path, old, new)


def _is_credential(key: str) -> bool:
    return bool(_CREDENTIAL_KEY.search(key)) and not key.lower().endswith("_name")


def _unchanged(stored: StoredObject, desired: dict[str, Any], desired_digest: str) -> bool:
    """Fast path: the digest applied last time still matches and nobody edited the row since."""
    return stored.spec_digest == desired_digest and stored.fields == desired


def _diff_kind(
    kind: str,
    desired: Mapping[str, dict[str, Any]],
    stored: Mapping[str, StoredObject],
    secret_versions: Mapping[str, int] | None = None,
) -> list[Change]:
    changes: list[Change] = []
    added: list[str] = []
    for name in sorted(desired):
        fields = desired[name]
        current = stored.get(name)
        if current is None:
            added.append(name)
            continue
        changed: tuple[str, ...] = ()
        if not _unchanged(current, fields, digest(fields)):
            changed = changed_fields(current.fields, fields)
        details: list[tuple[str, str]] = []
        if "secret_name" in changed:
            details.append(("secret_name", f"{current.fields.get('secret_name')} -> {fields['secret_name']}"))
        elif secret_versions is not None:
            latest = secret_versions.get(str(fields.get("secret_name")))
            if latest is not None and latest != current.secret_version:
                changed += ("secret_version",)
                details.append(("secret_version", f"{current.secret_version} -> {latest}"))
        if changed:
            values = field_changes(current.fields, fields, changed)
            changes.append(
                Change("update", kind, name, current.uid, changed, details=tuple(details), values=values)
            )
    removed = {name: obj for name, obj in stored.items() if name not in desired}
    by_digest: dict[str, list[str]] = {}
    for name in sorted(removed):
        by_digest.setdefault(digest(removed[name].fields), []).append(name)
    for name in added:
        twins = by_digest.get(digest(desired[name]))
        if twins:
            old = twins.pop(0)
            changes.append(Change("replace", kind, name, None, old_name=old, old_uid=removed.pop(old).uid))
        else:
            changes.append(Change("create", kind, name))
    changes.extend(Change("delete", kind, name, removed[name].uid) for name in sorted(removed))
    return changes


def factory_fields(definition: FactoryDefinition) -> dict[str, Any]:
    """The factory's compared fields: its name is its identity, not a field."""
    fields = definition.factory.fields()
    fields.pop("name", None)
    return fields


def _desired(spec: Any, uids: Mapping[str, str | None]) -> dict[str, Any]:
    """A spec's compared fields; an automation's resolve the webhook names of its triggers."""
    fields: dict[str, Any] = spec.fields(uids) if isinstance(spec, AutomationSpec) else spec.fields()
    return fields


def diff(definition: FactoryDefinition, state: StoreState) -> Plan:
    """Every change needed to make the store match ``definition``.

    Ordered by kind (:data:`KIND_ORDER`, the registry's apply order: factory, skills, runners, webhooks,
    agents, environments, automations, schedules, notifications, scorers, benchmarks); within a kind
    updates, then creates and replaces, then deletes, each by name. Apply relies on that order: webhooks
    get their UIDs before the automations that name them are written.

    A schedule names its automation by name, resolved when it fires (not at apply), so only its own
    file decides whether it changes: renaming the automation it runs is an update of its ``automation``.

    An automation's compared fields resolve the webhook names of its triggers: a webhook the store
    keeps gives its UID; one this apply creates (new, renamed, or recreated) gives ``(known after
    apply)``, so an automation naming it is created or updated ("re-pointed") in the same apply.
    """
    webhooks = state.objects("webhook")
    uids: dict[str, str | None] = {
        w.name: stored.uid if (stored := webhooks.get(w.name)) else None for w in definition.webhooks
    }
    name = definition.factory.name
    changes: list[Change] = []
    if state.factory is None:
        changes.append(Change("create", FACTORY.name, name))
    else:
        desired_factory = factory_fields(definition)
        changed = changed_fields(state.factory.fields, desired_factory)
        if changed:
            values = field_changes(state.factory.fields, desired_factory, changed)
            changes.append(Change("update", FACTORY.name, name, state.factory.uid, changed, values=values))
    for kind in APPLY_ORDER:
        desired = {spec.name: _desired(spec, uids) for spec in kind.specs(definition)}
        versions = state.secret_versions if kind.secret_version else None
        changes += _diff_kind(kind.name, desired, state.objects(kind.name), versions)
    named = {a.name: a.webhook_names for a in definition.automations}
    changes = [
        replace(c, webhooks=tuple((n, None) for n in named.get(c.name, ()) if uids.get(n) is None))
        if c.kind == "automation"
        else c
        for c in changes
    ]
    return Plan(
        factory_name=name,
        factory_uid=state.factory.uid if state.factory else None,
        changes=tuple(changes),
        managed_by=state.managed_by or "definitions",
        webhooks=tuple((name, uids[name]) for name in sorted(uids)),
    )


# --- text rendering -------------------------------------------------------------------------------

_SYMBOL = {"create": "+", "update": "~", "delete": "-", "replace": "-/+"}
_COLOR = {"create": "\x1b[32m", "update": "\x1b[33m", "delete": "\x1b[31m", "replace": "\x1b[35m"}
_RESET = "\x1b[0m"


def _field_text(change: Change) -> str:
    details = dict(change.details)
    parts = []
    for name in change.fields:
        if name in SECRET_FIELDS:
            detail = details.get(name)
            parts.append(f"{name} ({detail}, value hidden)" if detail else f"{name} (value hidden)")
        else:
            parts.append(name)
    return ", ".join(parts)


def render_change(change: Change, *, color: bool = False) -> str:
    """A change's line, e.g. ``~ webhook alerts: enabled, description`` (ANSI-coloured if asked), then
    for an update one indented ``path: old -> new`` line per changed value (secret fields say theirs
    on the first line)."""
    line = _render(change)
    line = f"{_COLOR[change.action]}{line}{_RESET}" if color else line
    shown = [v for v in change.values if v.path not in SECRET_FIELDS]
    return "\n".join([line, *(f"    {v.path}: {_shown(v.old)} -> {_shown(v.new)}" for v in shown)])


def _shown(value: Any) -> str:
    if value is None:
        return "(none)"
    if value == HIDDEN:
        return HIDDEN
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def _named_webhooks(change: Change, verb: str) -> str:
    """``webhook NAME (known after apply)`` per webhook the automation names and this apply creates."""
    return ", ".join(
        f"{verb}webhook {name} {f'({uid})' if uid else KNOWN_AFTER_APPLY}" for name, uid in change.webhooks
    )


def _render(change: Change) -> str:
    symbol = _SYMBOL[change.action]
    if change.action == "create":
        uid = change.uid or f"{UID_PREFIX[change.kind]}_... assigned on apply"
        text = f"{symbol} {change.kind} {change.name} ({uid})"
        return f"{text}: {_named_webhooks(change, '')}" if change.webhooks else text
    if change.action == "update":
        text = f"{symbol} {change.kind} {change.name}"
        fields = _field_text(change)
        if change.webhooks:  # a webhook it names gets a new UID (created, renamed): routing follows it
            fields = f"{fields}; {_named_webhooks(change, 're-points to ')}"
        return f"{text}: {fields}" if fields else text
    if change.action == "delete":
        return f"{symbol} {change.kind} {change.name} ({change.uid})"
    new = "new UID, new URL" if change.kind == "webhook" else "new UID"
    line = f"{symbol} {change.kind} {change.old_name} -> {change.name} ({new})"
    line = f"{line[:-1]}: {change.uid})" if change.uid else line
    return f"{line}: {_named_webhooks(change, '')}" if change.webhooks else line


def summary_line(plan: Plan) -> str:
    if not plan.has_changes:
        return "No changes."
    s = plan.summary()
    return f"Plan: {s['add']} to add, {s['change']} to change, {s['destroy']} to destroy."


def render_text(plan: Plan, *, color: bool = False) -> str:
    """The plan as text: one line per change, a blank line, then the summary line."""
    lines = [render_change(c, color=color) for c in plan.changes]
    if lines:
        lines.append("")
    lines.append(summary_line(plan))
    return "\n".join(lines) + "\n"
