"""The SDK's ``config.skills`` as pure rules (api/runs/skill_list.py): validation, the primary skill in
resolution, and the directory each other skill gets under ``$FACTORY_SKILLS_DIR``."""

from __future__ import annotations

from api.runs.config import resolve_config, validate_config
from api.runs.requests import parse_run_request
from api.runs.skill_list import MAX_SKILLS, directory_name, extra_skill, primary_skill, unique_names
from api.runs.skills import ResolvedSkill


def test_a_list_of_specs_is_valid_and_its_first_is_the_primary() -> None:
    config = {"skills": ["acme/tools:triage", "acme/tools:.agents/skills/lint/SKILL.md"]}
    assert validate_config(config) == []
    resolved = resolve_config(config, None, None, None)
    assert resolved["skill_spec"] == "acme/tools:triage" and resolved["skills"] == config["skills"]
    assert primary_skill(config) == "acme/tools:triage"


def test_definition_skill_names_are_not_specs() -> None:
    """An automation's ``skills`` name skill objects: no primary skill comes of them."""
    resolved = resolve_config(None, {"skills": ["triage", "oncall/check"]}, None, None)
    assert "skill_spec" not in resolved and primary_skill(resolved) is None


def test_limits_and_shapes() -> None:
    too_many = {"skills": [f"acme/tools:s{i}" for i in range(MAX_SKILLS + 1)]}
    assert [e["field"] for e in validate_config(too_many)] == ["config.skills"]
    bad = validate_config({"skills": ["acme/tools:ok", "no-colon", "acme/tools:/etc/x/SKILL.md"]})
    assert [e["field"] for e in bad] == ["config.skills[1]", "config.skills[2]"]
    assert "absolute" in bad[1]["message"]


def test_a_request_needs_no_prompt_with_skills() -> None:
    parsed = parse_run_request({"config": {"skills": ["acme/tools:triage"]}}, max_attachment_bytes=10)
    assert parsed.prompt == "" and parsed.config["skills"] == ["acme/tools:triage"]


def test_other_skills_get_one_plain_directory_each() -> None:
    by_path = extra_skill(ResolvedSkill("acme/t:.claude/skills/lint/SKILL.md", "Lint!", "d", "b"))
    by_name = extra_skill(ResolvedSkill("acme/t:lint", "lint", None, "c"))
    assert by_path["skill_name"] == by_name["skill_name"] == "lint"
    assert [s["skill_name"] for s in unique_names([by_path, by_name, by_name])] == [
        "lint",
        "lint-2",
        "lint-3",
    ]
    assert directory_name("..hidden name") == "hidden-name" and directory_name("...") == "skill"


def test_skill_spec_may_repeat_only_the_first_of_skills() -> None:
    """A config read back from the API (``skill_spec`` = the first of ``skills``) can be sent again."""
    shown = {"skill_spec": "acme/tools:a", "skills": ["acme/tools:a", "acme/tools:b"]}
    assert validate_config(shown) == []
    other = validate_config({"skill_spec": "acme/tools:b", "skills": ["acme/tools:a", "acme/tools:b"]})
    assert [e["field"] for e in other] == ["config.skills"] and "not both" in other[0]["message"]
