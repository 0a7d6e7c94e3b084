"""Rules of the published format (v1alpha1) that a single file's schema cannot judge, and the
warnings for what factoryctl accepts but cannot do yet (docs/definitions.md, "What factoryctl does
with each key").

Errors: legacy keys inside a v1alpha1 ``factory.yaml`` (FC093); exactly one foreman (FC063); the
harness block (FC064: ``agentDefaults.harness`` needs ``type`` and ``model``, ``oz`` takes no ``auth``
or ``reasoningLevel``, ``managedSecret`` needs ``secretName``, ``workerEnvironment`` needs a self-hosted
``workerHost``, an override names at least one field); runner names that no ``runners/`` file defines
(FC065); scorers and benchmark suites naming unknown agents, a scorer whose labels cannot both pass and
fail, suite task lists that do not match the task files (FC066); triggers (FC045, by
:func:`store.rules.triggers.check_trigger`) and inline schedules (FC073: the cron expression, names).

Warnings, each naming the key: the legacy format's ``agents`` and ``workerHost`` (FC090, ``factoryctl
migrate`` rewrites them; an automation's ``config`` stays accepted); keys factoryctl stores but does not
act on (FC091); triggers of providers whose events factoryctl does not ingest (FC092: "not connected").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from reconciler.diagnostics import Diagnostic
from reconciler.objectspecs import AgentSpec, BenchmarkSpec, RunnerSpec, ScorerSpec
from reconciler.specs import AutomationSpec, FactoryDefinition, Location, place
from reconciler.yamlmarks import path_str
from store.rules import cron, github_events, triggers

AGENT_HARNESSES = ("claude", "codex", "gemini")  # need a worker that offers them (docs/workers.md)
UNSUPPORTED_FACTORY_KEYS = {
    "cloudProviders": "factoryctl does not federate cloud identities; runs get no cloud credentials from it",
    "credentialStrategy": "factoryctl runs every run with the team's credentials; it is recorded only",
}


def _at(
    rule: str, message: str, where: Location, hint: str | None = None, *, warning: bool = False
) -> Diagnostic:
    return Diagnostic(
        rule,
        message,
        where.path,
        where.line,
        where.column,
        hint=hint,
        severity="warning" if warning else "error",
    )


def check(definition: FactoryDefinition) -> list[Diagnostic]:
    """Every format problem and every "not yet" warning of ``definition``."""
    root = definition.root
    factory = definition.factory
    fpath = f"{root}/{factory.path}"
    out: list[Diagnostic] = []
    if factory.legacy:
        for key, new in (
            ("agents", "agents/<name>/agent.md files"),
            ("workerHost", "agentDefaults.workerHost"),
        ):
            if key in factory.locations:
                out.append(
                    _at(
                        "FC090",
                        f"'{key}' is factoryctl's legacy format (deprecated); v1alpha1 has {new}",
                        factory.locations[key],
                        "run 'factoryctl migrate .' to rewrite the tree as schemaVersion: v1alpha1",
                        warning=True,
                    )
                )
    else:
        out += _v1_factory(definition, fpath)
    runners = {r.name for r in definition.runners}
    agents = {a.name for a in definition.agents}
    for agent in definition.agents:
        if not agent.legacy:
            out += _agent(agent, definition, runners)
    for automation in definition.automations:
        out += _automation(automation, definition, runners)
    for runner in definition.runners:
        out += _runner(runner, root)
    for scorer in definition.scorers:
        out += _scorer(scorer, agents, root)
    for suite in definition.benchmarks:
        out += _benchmark(suite, agents, root)
    return out


def _v1_factory(definition: FactoryDefinition, fpath: str) -> list[Diagnostic]:
    factory, out = definition.factory, []
    locations = factory.locations
    for key, new in (("agents", "agents/<name>/agent.md files"), ("workerHost", "agentDefaults.workerHost")):
        if key in locations:
            out.append(
                _at(
                    "FC093",
                    f"'{key}' is factoryctl's legacy format; in v1alpha1 use {new}",
                    locations[key],
                    "or run 'factoryctl migrate .'",
                )
            )
    foremen = [a for a in definition.agents if a.is_foreman]
    if not definition.agents:
        out.append(
            _at(
                "FC063",
                "a factory needs at least one agent",
                Location(fpath),
                "add agents/foreman/agent.md with 'agentType: FOREMAN'",
            )
        )
    elif not foremen:
        out.append(
            _at(
                "FC063",
                "no agent is the foreman: exactly one agent needs 'agentType: FOREMAN'",
                Location(f"{definition.root}/{definition.agents[0].path}"),
            )
        )
    for extra in foremen[1:]:
        out.append(
            _at(
                "FC063",
                f"'{extra.name}' is a second foreman (the first is '{foremen[0].name}')",
                place(extra.locations, "agentType", f"{definition.root}/{extra.path}"),
                "exactly one agent is FOREMAN (alias MAIN)",
            )
        )
    defaults = factory.settings.get("agentDefaults") or {}
    harness = defaults.get("harness")
    if isinstance(harness, Mapping) and not (harness.get("type") and harness.get("model")):
        out.append(
            _at(
                "FC064",
                "agentDefaults.harness needs both 'type' and 'model'",
                place(locations, "agentDefaults.harness", fpath),
            )
        )
    out += _execution(defaults, "agentDefaults.", locations, fpath, definition, _host(defaults, None))
    for key, why in UNSUPPORTED_FACTORY_KEYS.items():
        if key in locations:
            out.append(
                _at("FC091", f"'{key}' is not supported by factoryctl: {why}", locations[key], warning=True)
            )
    for index, integration in enumerate(factory.settings.get("integrations") or ()):
        kind = integration.get("type")
        out.append(
            _at(
                "FC092",
                f"integration '{kind}' is not connected: factoryctl does not ingest {kind} events",
                place(locations, f"integrations[{index}]", fpath),
                "its triggers validate and apply and are listed as not connected",
                warning=True,
            )
        )
    return out


def _host(layer: Mapping[str, Any], inherited: str | None) -> str | None:
    if "workerHost" in layer:
        return layer["workerHost"] or None
    return inherited


def _execution(
    layer: Mapping[str, Any],
    prefix: str,
    locations: Mapping[str, Location],
    path: str,
    definition: FactoryDefinition,
    host: str | None,
    runners: set[str] | None = None,
) -> list[Diagnostic]:
    """The execution keys of one layer: harness rules, runner references, harnesses not offered."""
    out = []
    harness = layer.get("harness")
    if isinstance(harness, Mapping):
        where = place(locations, f"{prefix}harness", path)
        kind = harness.get("type")
        if not any(harness.get(k) is not None for k in ("type", "model", "reasoningLevel", "auth")):
            out.append(
                _at(
                    "FC064",
                    "an empty harness block: name at least one of type, model, reasoningLevel, auth",
                    where,
                )
            )
        if kind == "oz":
            for key in ("auth", "reasoningLevel"):
                if harness.get(key) is not None:
                    out.append(
                        _at(
                            "FC064",
                            f"the oz harness takes no '{key}'",
                            place(locations, f"{prefix}harness.{key}", path),
                        )
                    )
        auth = harness.get("auth")
        if isinstance(auth, Mapping):
            at = place(locations, f"{prefix}harness.auth", path)
            if auth.get("source") == "managedSecret" and not auth.get("secretName"):
                out.append(_at("FC064", "auth.source managedSecret needs auth.secretName", at))
            if auth.get("source") == "workerEnvironment":
                if auth.get("secretName"):
                    out.append(_at("FC064", "auth.source workerEnvironment takes no secretName", at))
                if not host or host == "warp":
                    out.append(
                        _at(
                            "FC064",
                            "auth.source workerEnvironment needs a self-hosted workerHost",
                            at,
                            "set workerHost to your worker's host ID, or use source: managedSecret",
                        )
                    )
        if kind in AGENT_HARNESSES or kind == "claude-code":
            out.append(
                _at(
                    "FC091",
                    f"harness '{kind}' runs only on workers that offer it",
                    place(locations, f"{prefix}harness.type", path),
                    "factoryctl's workers offer echo and command: such runs end FAILED harness_unavailable",
                    warning=True,
                )
            )
    runner = layer.get("runner")
    if runners is not None and isinstance(runner, str) and runner not in runners:
        known = ", ".join(sorted(runners)) or "none"
        out.append(
            _at(
                "FC065",
                f"unknown runner '{runner}'",
                place(locations, f"{prefix}runner", path),
                f"add runners/{runner}.yaml (defined: {known})",
            )
        )
    return out


def _agent(agent: AgentSpec, definition: FactoryDefinition, runners: set[str]) -> list[Diagnostic]:
    path = f"{definition.root}/{agent.path}"
    host = _host(agent.overrides, _host(definition.factory.settings.get("agentDefaults") or {}, None))
    out = _execution(agent.overrides, "", agent.locations, path, definition, host, runners)
    if "credentialStrategy" in agent.overrides:
        out.append(
            _at(
                "FC091",
                "'credentialStrategy' is not supported by factoryctl: runs use the team's credentials",
                place(agent.locations, "credentialStrategy", path),
                warning=True,
            )
        )
    return out


def _automation(
    automation: AutomationSpec, definition: FactoryDefinition, runners: set[str]
) -> list[Diagnostic]:
    path = f"{definition.root}/{automation.path}"
    front, locations = automation.front_matter, automation.locations
    out: list[Diagnostic] = []
    agents = {a.name: a for a in definition.agents}
    agent = agents.get(automation.agent)
    inherited = (agent.config.get("worker_host") if agent else None) or None
    out += _execution(front, "", locations, path, definition, _host(front, inherited), runners)
    out += _triggers(automation, front.get("triggers") or [], locations, path)
    return out


def _triggers(
    automation: AutomationSpec, written: Iterable[Any], locations: Mapping[str, Location], path: str
) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    names: dict[str | None, int] = {}
    for index, trigger in enumerate(written):
        if not isinstance(trigger, Mapping) or trigger.get("provider") == "webhook":
            continue
        base = f"triggers[{index}]"
        for problem in triggers.check_trigger(trigger):
            if problem.path[:2] == ("schedule", "cron"):
                continue  # the expression is FC073's, below
            key = base + (
                ("." if problem.path and isinstance(problem.path[0], str) else "") + path_str(problem.path)
            )
            out.append(_at("FC045", problem.message, place(locations, key, path), problem.code))
        flt = trigger.get("filter")
        if trigger.get("provider") == "github" and isinstance(flt, Mapping):
            for key in sorted(
                github_events.UNPROVABLE.get(str(trigger.get("event")), frozenset()) & set(flt)
            ):
                out.append(
                    _at(
                        "FC091",
                        f"filter.{key}: GitHub's {trigger.get('event')} payload does not carry {key}, so this"
                        " filter can never be proven and the trigger never fires",
                        place(locations, f"{base}.filter.{key}", path),
                        "remove the key, or use an event whose payload carries it",
                        warning=True,
                    )
                )
        unconnected = triggers.unconnected_problem(str(trigger.get("provider")))
        if unconnected:
            out.append(_at("FC092", unconnected, place(locations, f"{base}.provider", path), warning=True))
        schedule = trigger.get("schedule")
        if isinstance(schedule, Mapping) and isinstance(schedule.get("cron"), str):
            where = place(locations, f"{base}.schedule.cron", path)
            try:
                cron.expression_for_trigger(schedule["cron"])
            except cron.CronError as exc:
                out.append(_at("FC073", f"schedule.cron: {exc}", where))
            name = schedule.get("name")
            if name in names:
                what = (
                    f"two inline schedules are named '{name}'"
                    if name
                    else "more than one inline schedule has no name"
                )
                out.append(_at("FC073", what, where, "give each schedule of an automation its own name"))
            names[name] = index
    return out


def _runner(runner: RunnerSpec, root: str) -> list[Diagnostic]:
    path = f"{root}/{runner.path}"
    out = []
    platform = runner.platform or {}
    where = place(runner.locations, "platform", path)
    if platform.get("os") == "macos":
        out.append(
            _at(
                "FC091",
                "platform.os macos: factoryctl's workers run Linux only; runs that use this runner"
                " fail with runner_unavailable",
                where,
                warning=True,
            )
        )
    elif (
        platform.get("os", "linux") == "linux"
        and runner.platform is not None
        and not platform.get("docker_image")
    ):
        out.append(_at("FC066", "a Linux runner needs platform.linux.dockerImage", where))
    if platform.get("docker_image"):
        out.append(
            _at(
                "FC091",
                "platform.linux.dockerImage is not run: factoryctl runs the agent in a bubblewrap"
                ' sandbox over the worker\'s own system (docs/workers.md, "Sandbox")',
                place(runner.locations, "platform.linux.dockerImage", path),
                warning=True,
            )
        )
    if platform.get("os") == "macos" and platform.get("arch") == "x86_64":
        out.append(
            _at("FC066", "macOS runners are aarch64 only", place(runner.locations, "platform.arch", path))
        )
    if runner.instance_shape:
        out.append(
            _at(
                "FC091",
                "instanceShape is recorded and logged on each run; factoryctl's workers do not enforce"
                " CPU or memory sizes yet",
                place(runner.locations, "instanceShape", path),
                warning=True,
            )
        )
    return out


def _scorer(scorer: ScorerSpec, agents: set[str], root: str) -> list[Diagnostic]:
    path = f"{root}/{scorer.path}"
    out = []
    for index, name in enumerate(scorer.agents):
        if name not in agents:
            out.append(
                _at("FC066", f"unknown agent '{name}'", place(scorer.locations, f"agents[{index}]", path))
            )
    passing = scorer.document.get("passingScore", 0)
    scores = [label.get("score", 0) for label in scorer.document.get("labels", [])]
    if scores and not (any(s >= passing for s in scores) and any(s < passing for s in scores)):
        out.append(
            _at(
                "FC066",
                "labels need at least one score at or above passingScore and one below it",
                place(scorer.locations, "labels", path),
            )
        )
    out.append(
        _at(
            "FC091",
            "this scorer judges runs from their transcript only: the judge sees no artifacts and"
            " selfImprovement is not acted on",
            place(scorer.locations, "name", path),
            warning=True,
        )
    )
    return out


def _benchmark(suite: BenchmarkSpec, agents: set[str], root: str) -> list[Diagnostic]:
    path = f"{root}/{suite.path}"
    out = []
    if suite.agent not in agents:
        out.append(_at("FC066", f"unknown agent '{suite.agent}'", place(suite.locations, "agent", path)))
    for index, slug in enumerate(suite.task_order):
        if slug not in suite.tasks:
            out.append(
                _at(
                    "FC066",
                    f"task '{slug}' has no file tasks/{slug}.yaml",
                    place(suite.locations, f"tasks[{index}]", path),
                )
            )
    for slug in sorted(set(suite.tasks) - set(suite.task_order)):
        out.append(
            _at(
                "FC066",
                f"tasks/{slug}.yaml is not listed in the suite's tasks",
                place(suite.locations, "tasks", path),
            )
        )
    out.append(
        _at(
            "FC091",
            "benchmark suites are stored and shown; factoryctl does not run them yet",
            place(suite.locations, "name", path),
            warning=True,
        )
    )
    return out
