"""The skills resolver goes through safegit: a template or location git must not be given is refused
(at server start for the template, at run creation — a 422 — for each substituted location)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import safegit
from api.runs import skills
from api.runs.skills import SkillResolver, SkillUnavailable


def make_skills_repo(root: Path) -> Path:
    repo = root / "acme" / "skills"
    (repo / "skills" / "triage").mkdir(parents=True)
    (repo / "skills" / "triage" / "SKILL.md").write_text("---\nname: triage\n---\nTriage it.\n")
    for args in (("init", "--quiet"), ("add", "."), ("commit", "--quiet", "-m", "skills")):
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
            cwd=repo,
            check=True,
            capture_output=True,
        )
    return repo


@pytest.mark.parametrize(
    "template",
    ["/srv/git/{owner}/{repo}", "https://git.example/{owner}/{repo}.git", "git@git.example:{owner}/{repo}"],
)
def test_usual_templates_are_accepted(template: str) -> None:
    skills.check_source_template(template)


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("--upload-pack=touch /tmp/x/{owner}/{repo}", "must not start with '-'"),
        ("ext::sh -c touch% /tmp/{owner}", "remote helper syntax 'ext::'"),
        ("ftp://git.example/{owner}/{repo}", "transport 'ftp' is not allowed"),
    ],
)
def test_unsafe_templates_are_refused(template: str, why: str) -> None:
    with pytest.raises(safegit.UnsafeLocation, match=why):
        skills.check_source_template(template)


def test_an_unsafe_location_is_a_skill_unavailable_and_git_never_runs(tmp_path: Path) -> None:
    pwned = tmp_path / "pwned"
    resolver = SkillResolver(f"ext::sh -c touch% {pwned}/{{owner}}", tmp_path / "cache")
    with pytest.raises(SkillUnavailable, match="remote helper syntax 'ext::'"):
        resolver.resolve("acme/skills:triage")
    factory_repo = {"acme/skills": "--upload-pack=touch " + str(pwned)}
    with pytest.raises(SkillUnavailable, match="must not start with '-'"):
        SkillResolver(None, tmp_path / "cache").resolve("acme/skills:triage", repos=factory_repo)
    assert not pwned.exists() and not (tmp_path / "cache").exists()


def test_a_remote_skills_repository_is_cloned_and_refreshed_through_the_runner(tmp_path: Path) -> None:
    make_skills_repo(tmp_path / "git")
    now = [0.0]
    resolver = SkillResolver(
        f"file://{tmp_path}/git/{{owner}}/{{repo}}",
        tmp_path / "cache",
        refresh_seconds=1,
        monotonic=lambda: now[0],
    )
    assert resolver.resolve("acme/skills:triage").body == "Triage it."
    now[0] = 5.0  # due for a refresh: fetch + reset through safegit
    assert resolver.resolve("acme/skills:triage").body == "Triage it."
