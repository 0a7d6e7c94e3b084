"""Specs of the v1alpha1 kinds that are stored as written: agents, skills, runners, scorers and benchmark
suites (docs/definitions.md). Each keeps its file and the locations of its keys, like every spec.

An agent's run configuration depends on ``factory.yaml`` (``agentDefaults``, the factory-wide ``secrets``
and ``mcpServers``) and on the skills of the tree, so the loader finishes agents with :func:`resolve`
once every file is read; an agent's compared fields then include what its runs will use, and a change of
``agentDefaults`` shows as a change of every agent it reaches.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler import execution
from reconciler.specs import Location

FOREMAN = "FOREMAN"
AGENT_TYPE_ALIASES = {"MAIN": FOREMAN}


@dataclass(frozen=True)
class AgentSpec:
    """``agents/<name>/agent.md``: front matter (role, execution overrides) and the prompt (the body).

    ``config`` is the resolved run configuration (:func:`resolve`); a legacy agent from ``factory.yaml``'s
    ``agents`` map carries its configuration as written there (``legacy``).
    """

    name: str
    path: str
    prompt: str = ""
    agent_type: str = "CUSTOM"
    description: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    skills: tuple[str, ...] = ()
    legacy: bool = False
    locations: dict[str, Location] = field(default_factory=dict, compare=False)

    @classmethod
    def from_markdown(
        cls,
        name: str,
        path: str,
        data: Mapping[str, Any],
        locations: dict[str, Location],
        body: str,
        body_at: Location,
    ) -> AgentSpec:
        overrides = {k: v for k, v in data.items() if k not in ("description", "agentType")}
        kind = str(data.get("agentType") or "CUSTOM")
        return cls(
            name=name,
            path=path,
            prompt=body.strip(),
            agent_type=AGENT_TYPE_ALIASES.get(kind, kind),
            description=data.get("description"),
            overrides=overrides,
            locations={**locations, **execution.location_aliases(locations), "prompt": body_at},
        )

    @classmethod
    def from_legacy(
        cls, name: str, config: Mapping[str, Any], locations: dict[str, Location], foreman: bool
    ) -> AgentSpec:
        """An agent of a legacy ``factory.yaml`` ``agents`` map (AmbientAgentConfig as written)."""
        return cls(
            name=name,
            path="factory.yaml",
            prompt=str(config.get("base_prompt") or "").strip(),
            agent_type=FOREMAN if foreman else "CUSTOM",
            config=dict(config),
            legacy=True,
            locations=locations,
        )

    @property
    def is_foreman(self) -> bool:
        return self.agent_type == FOREMAN

    def fields(self) -> dict[str, Any]:
        return {
            "agent_type": self.agent_type,
            "description": self.description,
            "prompt": self.prompt,
            "overrides": self.overrides,
            "config": self.config,
            "skills": list(self.skills),
        }


@dataclass(frozen=True)
class SkillSpec:
    """``skills/<name>/SKILL.md`` (every agent's) or ``agents/<agent>/skills/<name>/SKILL.md`` (one
    agent's, named ``<agent>/<name>``). Skills need no git fetch: runs get their text from the store."""

    name: str
    path: str
    body: str
    agent: str | None = None
    front_matter: dict[str, Any] = field(default_factory=dict)
    locations: dict[str, Location] = field(default_factory=dict, compare=False)

    @classmethod
    def from_markdown(
        cls,
        name: str,
        path: str,
        data: Mapping[str, Any],
        locations: dict[str, Location],
        body: str,
        body_at: Location,
    ) -> SkillSpec | str:
        if not body.strip():
            return "the skill has no instructions: write them as Markdown below the front matter"
        agent, _, _ = name.rpartition("/")
        return cls(name, path, body, agent or None, dict(data), {**locations, "body": body_at})

    @property
    def skill_name(self) -> str:
        return str(self.front_matter.get("name") or self.name.rpartition("/")[2])

    def fields(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "skill_name": self.skill_name,
            "description": self.front_matter.get("description"),
            "front_matter": self.front_matter,
            "body": self.body,
        }


@dataclass(frozen=True)
class RunnerSpec:
    """``runners/<name>.yaml``: setup commands and the compute shape and platform of a run."""

    name: str
    path: str
    description: str | None = None
    setup_commands: tuple[str, ...] = ()
    instance_shape: dict[str, int] | None = None
    platform: dict[str, Any] | None = None
    locations: dict[str, Location] = field(default_factory=dict, compare=False)

    @classmethod
    def from_document(
        cls, name: str, path: str, data: Mapping[str, Any], locations: dict[str, Location]
    ) -> RunnerSpec:
        shape = data.get("instanceShape")
        platform = data.get("platform")
        return cls(
            name=name,
            path=path,
            description=data.get("description"),
            setup_commands=tuple(data.get("setupCommands") or ()),
            instance_shape={"vcpus": shape["vcpus"], "memory_gb": shape["memoryGb"]} if shape else None,
            platform=_platform(platform) if platform is not None else None,
            locations=locations,
        )

    def fields(self) -> dict[str, Any]:
        return {
            "description": self.description,
            "setup_commands": list(self.setup_commands),
            "instance_shape": self.instance_shape,
            "platform": self.platform,
        }


def _platform(platform: Mapping[str, Any]) -> dict[str, Any]:
    os_name = platform.get("os", "linux")
    return {
        "os": os_name,
        "arch": platform.get("arch", "aarch64" if os_name == "macos" else "x86_64"),
        "docker_image": (platform.get("linux") or {}).get("dockerImage"),
        "mac_version": (platform.get("mac") or {}).get("version"),
    }


@dataclass(frozen=True)
class ScorerSpec:
    """``scorers/<name>/scorer.md``: the classification contract (front matter) and its rubric (body)."""

    name: str
    path: str
    scorer_name: str
    rubric: str
    document: dict[str, Any] = field(default_factory=dict)
    locations: dict[str, Location] = field(default_factory=dict, compare=False)

    @classmethod
    def from_markdown(
        cls,
        name: str,
        path: str,
        data: Mapping[str, Any],
        locations: dict[str, Location],
        body: str,
        body_at: Location,
    ) -> ScorerSpec | str:
        if not body.strip():
            return "the scorer has no rubric: write it as Markdown below the front matter"
        return cls(
            name, path, data.get("name") or name, body.strip(), dict(data), {**locations, "rubric": body_at}
        )

    @property
    def agents(self) -> tuple[str, ...]:
        return tuple(self.document.get("agents", ()))

    def fields(self) -> dict[str, Any]:
        doc = self.document
        return {
            "scorer_name": self.scorer_name,
            "description": doc.get("description"),
            "agents": list(self.agents),
            "labels": doc.get("labels", []),
            "passing_score": doc.get("passingScore"),
            "sampling_rate": doc.get("samplingRate", 25),
            "model": doc.get("model"),
            "output": doc.get("output", "classification"),
            "self_improvement": doc.get("selfImprovement", False),
            "rubric": self.rubric,
        }


@dataclass(frozen=True)
class BenchmarkSpec:
    """``benchmarks/<suite>/suite.yaml`` with its ``tasks/<task>.yaml`` files, in the suite's order."""

    name: str
    path: str
    suite_name: str
    agent: str
    description: str | None = None
    task_order: tuple[str, ...] = ()
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    locations: dict[str, Location] = field(default_factory=dict, compare=False)

    @classmethod
    def from_document(
        cls,
        name: str,
        path: str,
        data: Mapping[str, Any],
        locations: dict[str, Location],
        children: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> BenchmarkSpec:
        return cls(
            name=name,
            path=path,
            suite_name=data["name"],
            agent=data["agent"],
            description=data.get("description"),
            task_order=tuple(data.get("tasks") or ()),
            tasks={slug: dict(doc) for slug, doc in (children or {}).items()},
            locations=locations,
        )

    def fields(self) -> dict[str, Any]:
        ordered = [*self.task_order, *sorted(set(self.tasks) - set(self.task_order))]
        tasks = [
            {
                "slug": slug,
                "title": doc.get("title"),
                "prompt": doc.get("prompt"),
                "success_criteria": doc.get("successCriteria"),
                "source_run_id": doc.get("sourceRunId"),
                "starting_repo_refs": doc.get("startingRepoRefs", []),
            }
            for slug in ordered
            if (doc := self.tasks.get(slug)) is not None
        ]
        return {
            "suite_name": self.suite_name,
            "description": self.description,
            "agent": self.agent,
            "tasks": tasks,
        }


def resolve_agents(
    agents: tuple[AgentSpec, ...], factory: Mapping[str, Any], skills: tuple[SkillSpec, ...]
) -> tuple[AgentSpec, ...]:
    """Each v1alpha1 agent with its run configuration: ``agentDefaults``, then its own overrides, then the
    factory-wide grants; its base prompt is its body; its skills are the factory-wide ones and its own."""
    defaults = execution.to_config(factory.get("agentDefaults") or {})
    shared = tuple(s.name for s in skills if s.agent is None)
    out = []
    for agent in agents:
        if agent.legacy:
            out.append(agent)
            continue
        config = execution.inherit(defaults, execution.to_config(agent.overrides))
        config = execution.with_factory_grants(config, factory)
        own = tuple(s.name for s in skills if s.agent == agent.name)
        if agent.prompt:
            config["base_prompt"] = agent.prompt
        if shared or own:
            config["skills"] = [*shared, *own]
        out.append(dataclasses.replace(agent, config=config, skills=(*shared, *own)))
    return tuple(out)
