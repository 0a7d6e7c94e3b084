"""Skill specs, SKILL.md parsing and resolution against local and git sources (api.runs.skills)."""

from __future__ import annotations

import os
from pathlib import Path

import git
import pytest

from api.runs.skills import (
    MAX_SKILL_BYTES,
    SkillResolver,
    SkillUnavailable,
    factory_repositories,
    parse_skill_file,
    parse_skill_spec,
)

SKILL = "---\nname: triage-bot\ndescription: Sorts issues\n---\n\nYou triage issues.\n"


def make_repo(path: Path, files: dict[str, str]) -> git.Repo:
    repo = git.Repo.init(path)
    for name, text in files.items():
        target = path / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    repo.index.add(list(files))
    actor = git.Actor("t", "t@example.com")
    repo.index.commit("skills", author=actor, committer=actor)
    return repo


def test_spec_forms() -> None:
    ref = parse_skill_spec("acme/skills:triage")
    assert (ref.owner, ref.repo, ref.skill, ref.path) == ("acme", "skills", "triage", None)
    ref = parse_skill_spec("acme/skills:.warp/skills/review/SKILL.md")
    assert ref.path == ".warp/skills/review/SKILL.md" and ref.skill is None


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("acme/skills:../etc/passwd", "'..'"),
        ("acme/skills:/etc/passwd", "not absolute"),
        ("../x/skills:triage", "invalid owner"),
        ("acme/..:triage", "invalid repository"),
        ("acme:triage", "owner/repo"),
    ],
)
def test_unsafe_or_malformed_specs_are_refused(spec: str, why: str) -> None:
    with pytest.raises(SkillUnavailable, match=why):
        parse_skill_spec(spec)


def test_front_matter_is_split_from_the_body() -> None:
    meta, body = parse_skill_file(SKILL)
    assert meta == {"name": "triage-bot", "description": "Sorts issues"}
    assert body == "You triage issues."
    assert parse_skill_file("just text\n") == ({}, "just text")


def test_local_source_finds_skills_in_every_known_directory(tmp_path: Path) -> None:
    root = tmp_path / "acme" / "skills"
    for i, folder in enumerate(("skills", ".agents/skills", ".claude/skills")):
        (root / folder / f"s{i}").mkdir(parents=True)
        (root / folder / f"s{i}" / "SKILL.md").write_text(f"body {i}\n")
    resolver = SkillResolver(str(tmp_path / "{owner}" / "{repo}"), tmp_path / "cache")
    for i in range(3):
        skill = resolver.resolve(f"acme/skills:s{i}")
        assert (skill.name, skill.body) == (f"s{i}", f"body {i}")


def test_unknown_repository_skill_and_path(tmp_path: Path) -> None:
    (tmp_path / "acme" / "skills" / "skills" / "a").mkdir(parents=True)
    (tmp_path / "acme" / "skills" / "skills" / "a" / "SKILL.md").write_text(SKILL)
    resolver = SkillResolver(str(tmp_path / "{owner}" / "{repo}"), tmp_path / "cache")
    with pytest.raises(SkillUnavailable, match="unknown repository acme/nope"):
        resolver.resolve("acme/nope:a")
    with pytest.raises(SkillUnavailable, match="no skill 'b'"):
        resolver.resolve("acme/skills:b")
    with pytest.raises(SkillUnavailable, match="does not exist"):
        resolver.resolve("acme/skills:docs/SKILL.md")
    assert resolver.resolve("acme/skills:skills/a/SKILL.md").name == "triage-bot"


def test_symlink_out_of_the_repository_and_oversize_files_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "acme" / "skills"
    (root / "skills" / "leak").mkdir(parents=True)
    (tmp_path / "outside.md").write_text("secret")
    os.symlink(tmp_path / "outside.md", root / "skills" / "leak" / "SKILL.md")
    (root / "skills" / "big").mkdir()
    (root / "skills" / "big" / "SKILL.md").write_text("x" * (MAX_SKILL_BYTES + 1))
    resolver = SkillResolver(str(tmp_path / "{owner}" / "{repo}"), tmp_path / "cache")
    with pytest.raises(SkillUnavailable, match="outside the repository"):
        resolver.resolve("acme/skills:leak")
    with pytest.raises(SkillUnavailable, match="at most 262144 bytes"):
        resolver.resolve("acme/skills:big")


def test_git_url_source_is_cloned_into_the_cache_and_refreshed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "src" / "acme" / "skills", {"skills/triage/SKILL.md": SKILL})
    now = [0.0]
    resolver = SkillResolver(
        "file://" + str(tmp_path / "src" / "{owner}" / "{repo}"),
        tmp_path / "cache",
        refresh_seconds=60,
        monotonic=lambda: now[0],
    )
    assert resolver.resolve("acme/skills:triage").body == "You triage issues."
    assert len(list((tmp_path / "cache").iterdir())) == 1
    (tmp_path / "src" / "acme" / "skills" / "skills" / "triage" / "SKILL.md").write_text("v2\n")
    repo.index.add(["skills/triage/SKILL.md"])
    repo.index.commit("v2")
    assert resolver.resolve("acme/skills:triage").body == "You triage issues."  # within the refresh window
    now[0] = 61.0
    assert resolver.resolve("acme/skills:triage").body == "v2"
    with pytest.raises(SkillUnavailable, match="unknown repository acme/other"):
        resolver.resolve("acme/other:triage")


def test_factory_repository_serves_its_own_owner_repo(tmp_path: Path) -> None:
    make_repo(tmp_path / "acme" / "factory", {"skills/ops/SKILL.md": "do ops\n"})
    repos = factory_repositories({"fa_1": f"file://{tmp_path}/acme/factory@main"})
    assert repos == {"acme/factory": f"file://{tmp_path}/acme/factory"}
    resolver = SkillResolver(None, tmp_path / "cache")
    assert resolver.resolve("acme/factory:ops", repos=repos).body == "do ops"
    with pytest.raises(SkillUnavailable, match="no skills source is configured"):
        resolver.resolve("acme/other:ops", repos=repos)
