"""Offline rules across the files of one factory (after each file passed its own schema).

What a single file's schema cannot see: limits over the whole factory, duplicate names, payload
filter syntax, triggers that name webhook *files* in ``webhook_ids`` instead of UIDs (FC031), names
in ``webhooks`` that no file of the factory defines (FC032), and references from automations and
agents to agents and environments. Pure functions over a :class:`FactoryDefinition`: no I/O.

Environment repositories: every ``repos[].url`` and ``ref`` must be something git may be given
(:func:`safegit.check_location` with the policy the worker clones under, FC011): no ``-`` prefix, no
``<transport>::`` remote helper, an allowed transport — refused here with file:line, not at run time.

Environment network policies: each ``allow`` pattern must be a ``host[:port]`` pattern and ``allow`` is
read only with ``mode: allowlist`` (FC012, :func:`store.rules.network_policy.network_problems`, the API's
rule too).

Environments: an ``environment_id`` must name ``environments/<name>.yaml`` in the same tree, or an
environment the caller knows from the store (``known_environments``); offline, only the tree counts.

Schedules: what their schema cannot judge — the cron expression (FC070) and the time zone (FC071), by
:mod:`store.rules.cron`, the scheduler's parser, so an expression that validates is one it can fire;
``automation`` naming an automation of the same tree (FC072): the scheduler resolves it by name when
the schedule fires, so it must exist once this tree is applied.

Notifications: the URL must be one a message may be sent to (FC080, :func:`store.rules.urlpolicy.url_refusal`,
the rule the management API and the sender keep: https, or http to a loopback host, and no private,
link-local or reserved literal address — server-side request forgery); ``events`` and ``filter`` must be
storable (FC081, :func:`store.rules.notification_rules.canonical_events` and ``canonical_filter``, the API's
rules too); at most :data:`MAX_NOTIFICATIONS_PER_FACTORY` endpoints per factory (FC082). Filter names
(``factories``, ``automations``) are not checked against anything: ``factories`` may widen the scope to
other factories, whose automations this tree cannot see.

MCP servers: every ``url`` (an environment's ``mcpServers``, a run config's ``mcp_servers``) obeys the same
outbound address rule (FC080); a command in a run config is a schema error (FC010): only environments
define one (docs/agent-config.md, "MCP servers"); a reference (``{warp_id: NAME}``) whose environment is in
the tree must name one of its ``mcpServers`` (FC062; other environments are judged when a run is created).
"""

from __future__ import annotations

import difflib
import re
import zoneinfo
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

import safegit
from reconciler import format_rules
from reconciler.diagnostics import Diagnostic
from reconciler.registry import KINDS
from reconciler.specs import (
    MAX_NOTIFICATIONS_PER_FACTORY,
    MAX_WEBHOOKS_PER_FACTORY,
    AutomationSpec,
    EnvironmentSpec,
    FactoryDefinition,
    Location,
    NotificationSpec,
    ScheduleSpec,
    place,
)
from store.rules import cron, network_policy, notification_rules, payload_filter, urlpolicy

UID_RE = re.compile(r"^wh_[0-9a-z]{26}$")


def is_webhook_uid(value: str) -> bool:
    """``wh_`` followed by 26 lowercase letters or digits: the shape of a service-assigned UID."""
    return bool(UID_RE.match(value))


def _at(
    rule: str, message: str, where: Location | None, fallback: str, hint: str | None = None
) -> Diagnostic:
    if where is None:
        return Diagnostic(rule, message, fallback, hint=hint)
    return Diagnostic(rule, message, where.path, where.line, where.column, hint=hint)


def check(
    definition: FactoryDefinition,
    known_uids: Mapping[str, str] | None = None,
    *,
    known_environments: Collection[str] = (),
) -> list[Diagnostic]:
    """Every cross-file problem of ``definition``.

    ``known_uids`` maps webhook name -> UID (from the store, when one is available) so that a
    trigger naming a webhook file can be told which UID to use instead.
    """
    out: list[Diagnostic] = []
    out += _limits(definition)
    for kind in KINDS:  # x.yaml and x.yml name one object
        if kind.file is None:
            specs = ((s.name, s.path, s.locations) for s in kind.specs(definition))
            out += _duplicates(kind.name, specs, definition.root)
    for env in definition.environments:
        out += _repositories(env, definition.root)
        out += _network(env, definition.root)
    environments = {e.name for e in definition.environments} | set(known_environments)
    agents = {a.name for a in definition.agents} | ({"foreman"} if definition.factory.legacy else set())
    for config, prefix, locations, _path in agent_places(definition):
        out += _environment(config, prefix, locations, environments, definition.root)
    for automation in definition.automations:
        out += _automation(automation, definition, agents, environments, known_uids or {})
    automations = {a.name for a in definition.automations}
    for schedule in definition.schedules:
        out += _schedule(schedule, automations, environments, definition.root)
    for notification in definition.notifications:
        out += _notification(notification, definition.root)
    out += _mcp_urls(definition)
    out += _mcp_references(definition)
    out += format_rules.check(definition)
    return sorted(out, key=lambda d: (d.path, d.line, d.column, d.rule))


def agent_places(
    definition: FactoryDefinition,
) -> list[tuple[Mapping[str, Any], str, Mapping[str, Location], str]]:
    """Each agent's run configuration with where its keys are written: ``factory.yaml``'s ``agents.<name>``
    in a legacy tree, else the agent's own file (its locations carry ``config.<key>`` aliases)."""
    factory = definition.factory
    return [
        (a.config, f"agents.{a.name}", factory.locations, factory.path)
        if a.legacy
        else (a.config, "config", a.locations, a.path)
        for a in definition.agents
    ]


def _limits(definition: FactoryDefinition) -> list[Diagnostic]:
    webhooks = [(w.path, w.locations) for w in definition.webhooks]
    notifications = [(n.path, n.locations) for n in definition.notifications]
    return [
        *_limit("FC021", "webhooks", webhooks, MAX_WEBHOOKS_PER_FACTORY, definition),
        *_limit("FC082", "notification endpoints", notifications, MAX_NOTIFICATIONS_PER_FACTORY, definition),
    ]


def _limit(
    rule: str,
    what: str,
    files: Sequence[tuple[str, Mapping[str, Location]]],
    limit: int,
    definition: FactoryDefinition,
) -> list[Diagnostic]:
    """``rule`` at the first file past ``limit`` (in path order) when a factory defines too many ``what``."""
    if len(files) <= limit:
        return []
    path, locations = sorted(files, key=lambda item: item[0])[limit]
    factory = definition.factory.name
    message = f"factory '{factory}' defines {len(files)} {what}; the limit is {limit} per factory"
    return [_at(rule, message, locations.get(""), _file(definition.root, path))]


def _file(root: str, rel: str) -> str:
    return f"{root.rstrip('/')}/{rel}" if root not in ("", ".") else rel


def _duplicates(
    kind: str, items: Iterable[tuple[str, str, Mapping[str, Location]]], root: str
) -> list[Diagnostic]:
    seen: dict[str, str] = {}
    out = []
    for name, rel, locations in sorted(items, key=lambda item: item[1]):
        if name in seen:
            message = f"{kind} '{name}' is defined twice: {seen[name]} and {rel}"
            out.append(
                _at(
                    "FC020", message, locations.get(""), _file(root, rel), hint="delete or rename one of them"
                )
            )
        else:
            seen[name] = rel
    return out


def _repositories(env: EnvironmentSpec, root: str) -> list[Diagnostic]:
    """FC011 for each repository URL or ref of ``env`` that git must not be given (docs/definitions.md)."""
    return [
        _at("FC011", why, place(env.locations, f"repos[{index}].{key}", root), _file(root, env.path))
        for index, key, why in safegit.repository_problems(env.spec.get("repos"))
    ]


def _network(env: EnvironmentSpec, root: str) -> list[Diagnostic]:
    """FC012 for each problem of ``env``'s ``network`` policy (docs/definitions.md, "Network policy")."""
    out = []
    for where, why in network_policy.network_problems(env.spec.get("network")):
        key = "network" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in where)
        out.append(_at("FC012", why, place(env.locations, key, root), _file(root, env.path)))
    return out


def _environment(
    config: Mapping[str, Any], prefix: str, locations: Mapping[str, Location], known: set[str], root: str
) -> list[Diagnostic]:
    env = config.get("environment_id")
    if not isinstance(env, str) or env in known:
        return []
    where = place(locations, f"{prefix}.environment_id", root)
    hint = f"add environments/{env}.yaml" + (f" (defined: {', '.join(sorted(known))})" if known else "")
    return [_at("FC060", f"unknown environment '{env}'", where, root, hint=hint)]


def _automation(
    automation: AutomationSpec,
    definition: FactoryDefinition,
    agents: set[str],
    environments: set[str],
    known_uids: Mapping[str, str],
) -> list[Diagnostic]:
    root, locations = definition.root, automation.locations
    out = _environment(automation.config, "config", locations, environments, root)
    if automation.agent not in agents:
        defined = ", ".join(sorted(agents))
        out.append(
            _at(
                "FC061",
                f"unknown agent '{automation.agent}'",
                place(locations, "agent", root),
                root,
                hint=f"add agents/{automation.agent}/agent.md (defined: {defined})",
            )
        )
    stems = {w.name for w in definition.webhooks}
    for index, trigger in enumerate(automation.triggers):
        base = f"triggers[{index}].filter"
        for position, entry in enumerate(trigger.webhook_ids):
            problem = _webhook_id(entry, stems, known_uids)
            if problem is not None:
                rule, message, hint = problem
                out.append(
                    _at(rule, message, place(locations, f"{base}.webhook_ids[{position}]", root), root, hint)
                )
        for position, name in enumerate(trigger.webhooks):
            if name not in stems:
                where = place(locations, f"{base}.webhooks[{position}]", root)
                out.append(_missing_webhook(name, stems, where, root))
        for found in payload_filter.check(trigger.payload_filter):
            key = ".".join([f"{base}.payload", *found.path])
            shown = payload_filter.format_path(found.path) if found.path else "payload"
            message = f"invalid payload filter at '{shown}': {found.message}"
            out.append(_at("FC030", message, place(locations, key, root), root))
    return out


def _webhook_id(
    entry: str, stems: set[str], known_uids: Mapping[str, str]
) -> tuple[str, str, str | None] | None:
    if is_webhook_uid(entry):
        return None
    stem = entry.removesuffix(".yaml").removesuffix(".yml").removeprefix("webhooks/")
    if stem in stems or stem in known_uids or entry != stem:
        uid = known_uids.get(stem)
        hint = f"reference it by name: webhooks: [{stem}]" + (f" (or use its UID: {uid})" if uid else "")
        return "FC031", f"webhook_ids names the webhook file '{entry}' instead of its UID", hint
    message = f"'{entry}' is not a webhook UID (expected 'wh_' followed by 26 lowercase letters or digits)"
    return "FC010", message, "webhook UIDs are assigned on first apply; `factoryctl webhooks list` shows them"


def _missing_webhook(name: str, stems: set[str], where: Location, root: str) -> Diagnostic:
    """FC032: ``webhooks:`` names no ``webhooks/<name>.yaml`` of this factory."""
    defined = ", ".join(sorted(stems)) or "none"
    message = f"webhook '{name}' is not defined in this factory (webhooks: {defined})"
    stem = name.removesuffix(".yaml").removesuffix(".yml").removeprefix("webhooks/")
    if is_webhook_uid(name):
        hint = f"'webhooks' takes file names; a UID goes in webhook_ids: [{name}]"
    elif stem != name and stem in stems:
        hint = f"use the file stem: {stem}"
    else:
        hint = f"add webhooks/{name}.yaml or name one of the factory's webhooks"
    return _at("FC032", message, where, root, hint)


def _schedule(
    schedule: ScheduleSpec, automations: set[str], environments: set[str], root: str
) -> list[Diagnostic]:
    """FC070-FC072 for one schedule, and FC060 for the environment its ``config`` names."""
    locations, fallback = schedule.locations, _file(root, schedule.path)
    out = _environment(schedule.config, "config", locations, environments, root)
    try:
        cron.parse(schedule.cron)
    except cron.CronError as exc:  # the message names the field, the value and why
        hint = None if exc.field is None else f"the fields are {', '.join(cron.FIELD_NAMES)}"
        where = place(locations, "cron", root)
        out.append(_at("FC070", f"invalid cron expression: {exc.message}", where, fallback, hint))
    try:
        cron.zone(schedule.timezone)
    except cron.CronError as exc:
        near = difflib.get_close_matches(schedule.timezone, zoneinfo.available_timezones(), n=1, cutoff=0.8)
        hint = f"did you mean '{near[0]}'?" if near and f"'{near[0]}'" not in exc.message else None
        out.append(_at("FC071", exc.message, place(locations, "timezone", root), fallback, hint))
    name = schedule.automation
    if name is not None and name not in automations:
        defined = ", ".join(sorted(automations)) or "none"
        message = f"automation '{name}' is not defined in this factory (automations: {defined})"
        hint = f"add automations/{name}/automation.md or name one of the factory's automations"
        out.append(_at("FC072", message, place(locations, "automation", root), fallback, hint))
    return out


def _notification(notification: NotificationSpec, root: str) -> list[Diagnostic]:
    """FC080 for the URL of one notification endpoint, FC081 for its ``events`` and ``filter``."""
    locations, fallback = notification.locations, _file(root, notification.path)
    out = []
    refusal = urlpolicy.url_refusal(notification.url)
    if refusal is not None:
        hint = (
            "to reach an internal service, run a relay on the server's host and point the URL at it"
            " (http://127.0.0.1:PORT/...)"
            if refusal.startswith("the URL points at a private network")
            else None
        )
        message = f"notification URL refused: {refusal}"
        out.append(_at("FC080", message, place(locations, "url", root), fallback, hint))
    try:
        notification_rules.canonical_events(list(notification.events))
    except notification_rules.RuleError as exc:
        hint = _near_event(notification.events, exc.field)
        out.append(_at("FC081", str(exc), place(locations, exc.field, root), fallback, hint))
    for key, value in notification.filter.items():  # each key on its own: one problem per key
        try:
            notification_rules.canonical_filter({key: value})
        except notification_rules.RuleError as exc:
            out.append(_at("FC081", str(exc), place(locations, exc.field, root), fallback))
    return out


def _near_event(events: Sequence[str], field: str) -> str | None:
    """``did you mean 'SUCCEEDED'?`` for the refused item ``events[i]`` (case first, then spelling)."""
    index = field.removeprefix("events[").removesuffix("]")
    if not index.isdigit() or int(index) >= len(events):
        return None
    item = events[int(index)]
    states = notification_rules.RUN_STATES
    choices = (*states, *map(notification_rules.event_type, states), notification_rules.ALL)
    near = {c.lower(): c for c in choices}.get(item.lower())
    near = near or next(iter(difflib.get_close_matches(item, choices, n=1, cutoff=0.6)), None)
    near = near or next(iter(difflib.get_close_matches(item.upper(), states, n=1, cutoff=0.6)), None)
    return f"did you mean '{near}'?" if near else None


def _mcp_urls(definition: FactoryDefinition) -> list[Diagnostic]:
    """FC080 for each MCP server URL the outbound address rules refuse, at its value."""
    root = definition.root
    places: list[tuple[Any, str, Mapping[str, Location], str]] = [
        (env.spec.get("mcpServers"), "mcpServers", env.locations, env.path) for env in definition.environments
    ]
    for config, prefix, locations, path in agent_places(definition):
        places.append((config.get("mcp_servers"), f"{prefix}.mcp_servers", locations, path))
    specs: list[AutomationSpec | ScheduleSpec] = [*definition.automations, *definition.schedules]
    for spec in specs:
        places.append((spec.config.get("mcp_servers"), "config.mcp_servers", spec.locations, spec.path))
    out = []
    for servers, prefix, locations, path in places:
        for name, server in (servers if isinstance(servers, Mapping) else {}).items():
            url = server.get("url") if isinstance(server, Mapping) else None
            refusal = urlpolicy.url_refusal(url) if isinstance(url, str) else None
            if refusal is not None:
                where = place(locations, f"{prefix}.{name}.url", root)
                out.append(_at("FC080", f"MCP server URL refused: {refusal}", where, _file(root, path)))
    return out


def _mcp_references(definition: FactoryDefinition) -> list[Diagnostic]:
    """FC062 for each ``{warp_id: NAME}`` that the config's environment (its own ``environment_id``, for an
    automation else its agent's) defines no server for, when that environment is in this tree."""
    root = definition.root
    defined = {e.name: e.spec.get("mcpServers") for e in definition.environments}
    agents = {a.name: a.config for a in definition.agents}
    places: list[tuple[Mapping[str, Any], Any, str, Mapping[str, Location], str]] = [
        (config, config.get("environment_id"), prefix, locations, path)
        for config, prefix, locations, path in agent_places(definition)
    ]
    for automation in definition.automations:
        env = automation.config.get("environment_id") or agents.get(automation.agent, {}).get(
            "environment_id"
        )
        places.append((automation.config, env, "config", automation.locations, automation.path))
    for schedule in definition.schedules:
        places.append(
            (
                schedule.config,
                schedule.config.get("environment_id"),
                "config",
                schedule.locations,
                schedule.path,
            )
        )
    out = []
    for config, env, prefix, locations, path in places:
        servers = config.get("mcp_servers")
        if not isinstance(env, str) or env not in defined or not isinstance(servers, Mapping):
            continue
        found = defined[env]
        names: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
        for name, server in servers.items():
            ref = server.get("warp_id") if isinstance(server, Mapping) else None
            if isinstance(ref, str) and ref not in names:
                listed = ", ".join(sorted(map(str, names))) or "none"
                message = f"environment '{env}' defines no MCP server '{ref}' (defined: {listed})"
                hint = f"add it under mcpServers in environments/{env}.yaml"
                where = place(locations, f"{prefix}.mcp_servers.{name}.warp_id", root)
                out.append(_at("FC062", message, where, _file(root, path), hint))
    return out
