"""A run's ordered skill list: the SDK's ``AmbientAgentConfig.skills`` (docs/agent-config.md, "Skills").

A request's ``skills`` is an ordered list of skill specs (``owner/repo:skill`` or ``owner/repo:path``),
mutually exclusive with ``skill_spec`` — except the ``skill_spec`` a response shows beside ``skills`` (their
first), so a config read back from the API can be sent again as it is. The first is the run's *primary*
skill: it is stored as ``skill_spec`` too, so the one path that reads the primary skill (the prompt rule,
resolution at creation, the claim's ``skill_body``) reads one key, and responses show it there as the SDK's
do. The others are resolved at creation like the primary and stored under the private key
:data:`EXTRA_SKILLS_KEY`; the claim hands them to the worker as the files under ``$FACTORY_SKILLS_DIR``
that an agent's own skills are.

Definitions name skills in the same ``skills`` key, by *object* name (``triage`` or ``agent/triage``,
docs/definitions.md); such a name never contains ``:``, which every spec does (:func:`is_spec`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from api.http.bodies import field_error
from api.runs.skills import ResolvedSkill, SkillUnavailable, parse_skill_spec

MAX_SKILLS = 20
MAX_SPEC = 500
EXTRA_SKILLS_KEY = "_skills"  # private: stripped from every API answer, read by the claim payload
_SHAPE = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+:[^\s:][^:]*$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def is_spec(item: Any) -> bool:
    """A skill spec (``owner/repo:target``), as opposed to a definition's skill object name."""
    return isinstance(item, str) and ":" in item


def spec_problem(value: str) -> str | None:
    """Why ``value`` is not a usable skill spec: its shape, then what the resolver refuses (``..``,
    absolute paths, bad owner or repository names), so an unsafe spec is a 422 before any lookup."""
    if not _SHAPE.match(value):
        return "must be 'owner/repo:skill-name' or 'owner/repo:path/to/SKILL.md'"
    try:
        parse_skill_spec(value)
    except SkillUnavailable as exc:
        return str(exc)
    return None


def validate_skills(config: Mapping[str, Any], field: str) -> list[dict[str, Any]]:
    """Field errors of a request config's ``skills``: a non-empty list of distinct valid specs, at most
    :data:`MAX_SKILLS`, and not given together with another ``skill_spec`` than its first."""
    value = config.get("skills")
    where = f"{field}.skills"
    if value is None:
        return []
    spec = config.get("skill_spec")
    if spec is not None and not (isinstance(value, list) and value and value[0] == spec):
        return [
            field_error(
                where,
                f"give either {field}.skill_spec or {field}.skills, not both"
                f" ({field}.skill_spec may only repeat the first of {field}.skills, as responses show it)",
            )
        ]
    if not isinstance(value, list):
        return [field_error(where, "must be an array of skill specs ('owner/repo:skill-name')")]
    if not value:
        return [field_error(where, "must name at least one skill spec (omit the key for none)")]
    if len(value) > MAX_SKILLS:
        return [field_error(where, f"at most {MAX_SKILLS} skills")]
    errors: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(value):
        at = f"{where}[{i}]"
        if not isinstance(item, str):
            errors.append(field_error(at, "must be a string"))
        elif len(item) > MAX_SPEC:
            errors.append(field_error(at, f"must be at most {MAX_SPEC} characters"))
        elif (problem := spec_problem(item)) is not None:
            errors.append(field_error(at, problem))
        elif item in seen:
            errors.append(field_error(at, f"repeats {where}[{seen[item]}]"))
        else:
            seen[item] = i
    return errors


def request_specs(config: Mapping[str, Any]) -> list[str]:
    """The skill specs of a config's ``skills`` (a request's list; none for a definition's names)."""
    value = config.get("skills")
    return [s for s in value if is_spec(s)] if isinstance(value, list) else []


def with_primary(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` with ``skill_spec`` set to the first of its ``skills`` specs, when it lists any."""
    out = dict(config)
    specs = request_specs(out)
    if specs:
        out["skill_spec"] = specs[0]
    return out


def primary_skill(config: Mapping[str, Any]) -> str | None:
    """The run's primary skill spec: ``skill_spec``, else the first of ``skills``."""
    spec = config.get("skill_spec")
    if isinstance(spec, str) and spec:
        return spec
    specs = request_specs(config)
    return specs[0] if specs else None


def extra_skill(skill: ResolvedSkill) -> dict[str, Any]:
    """A resolved non-primary skill as stored on the run and sent in the claim (the shape of
    :func:`api.claims.definitions.skill_json`): its directory name is the SKILL.md's directory."""
    ref = parse_skill_spec(skill.spec)
    directory = PurePosixPath(ref.path).parent.name if ref.path is not None else str(ref.skill)
    return {
        "name": skill.spec,
        "skill_name": directory_name(directory or ref.repo),
        "description": skill.description,
        "body": skill.body,
        "front_matter": {},
    }


def directory_name(name: str) -> str:
    """``name`` as one plain path segment (the worker refuses anything else, factoryctl/worker/job.py)."""
    safe = _UNSAFE.sub("-", name).lstrip(".-")[:200]
    return safe or "skill"


def unique_names(skills: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Skills whose ``skill_name`` repeats an earlier one's get a ``-2``, ``-3`` suffix: each is its own
    directory under ``$FACTORY_SKILLS_DIR``, none overwrites another."""
    taken: set[str] = set()
    out = []
    for skill in skills:
        name, n = str(skill["skill_name"]), 1
        while name in taken:
            n += 1
            name = f"{skill['skill_name']}-{n}"
        taken.add(name)
        out.append({**skill, "skill_name": name})
    return out
