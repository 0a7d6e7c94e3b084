"""What may be a skill, and what a skill costs (docs/agent-config.md, "Skills"), with real git repositories:
only ``SKILL.md`` files in the allowed layouts, never through ``.git``; remote repositories cloned shallow,
partial and sparse into a cache bounded in bytes and entries (least recently used evicted), a clone that
grows past its cap aborted, a failing repository not cloned again within the failure window, and a spec
refused before anything is cloned."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from gitobjects import git

from api.runs.skills import CacheLimits, SkillResolver, SkillUnavailable, parse_skill_spec
from factoryctl.cli import build_parser
from factoryctl.context import CliContext
from factoryctl.serve.options import ServeOptions
from schemas import load_schema

SKILL = "---\nname: triage-bot\n---\n\nYou triage issues.\n"
CREDENTIALED = "https://deploy:ghp_token123456@git.example/acme/skills.git"


def repo(path: Path, files: dict[str, str | bytes], symlinks: dict[str, str] | None = None) -> Path:
    """A repository on ``main`` with ``files`` and ``symlinks`` committed; it serves partial clones."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "--quiet", "--initial-branch", "main")
    git(path, "config", "uploadpack.allowFilter", "true")
    git(path, "remote", "add", "origin", CREDENTIALED)
    for name, content in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            (path / name).write_bytes(content)
        else:
            (path / name).write_text(content)
    for name, target in (symlinks or {}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path / name)
    git(path, "add", "-A")
    git(path, "commit", "--quiet", "-m", "skills")
    return path


def tree_bytes(path: Path) -> int:
    return sum(f.lstat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def entries(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if not p.name.startswith(".")) if cache.exists() else []


@pytest.mark.parametrize(
    "target",
    [
        ".git/config",
        ".git/HEAD",
        ".GIT/config",
        ".Git/HEAD",
        "skills/.git/SKILL.md",
        "README.md",
        "skills/triage/notes.md",
        "skills/triage/skill.md",
        "docs/deep/nested/SKILL.md",
        "SKILL.md",
    ],
)
def test_only_skill_md_files_in_an_allowed_layout_are_specs(target: str) -> None:
    with pytest.raises(SkillUnavailable):
        parse_skill_spec(f"acme/skills:{target}")


@pytest.mark.parametrize(
    "target",
    [
        "skills/triage/SKILL.md",
        ".agents/skills/triage/SKILL.md",
        ".claude/skills/triage/SKILL.md",
        ".warp/skills/triage/SKILL.md",
        ".github/skills/triage/SKILL.md",
        "agents/foreman/skills/triage/SKILL.md",
        "triage/SKILL.md",
    ],
)
def test_the_published_layouts_are_specs(target: str) -> None:
    assert parse_skill_spec(f"acme/skills:{target}").path == target


def test_a_working_tree_read_in_place_never_yields_its_git_directory(tmp_path: Path) -> None:
    """The reported leak: ``.git/config`` (with a credentialed remote) read as a skill, directly or through
    a symlink that stays inside the repository."""
    repo(
        tmp_path / "acme" / "skills",
        {"skills/triage/SKILL.md": SKILL, ".warp/skills/deploy/SKILL.md": "Deploy it.\n"},
        symlinks={
            "skills/evil/SKILL.md": "../../.git/config",
            ".claude/skills/readme/SKILL.md": "../../../README",
        },
    )
    (tmp_path / "acme" / "skills" / "README").write_text("not a skill\n")
    resolver = SkillResolver(str(tmp_path / "{owner}" / "{repo}"), tmp_path / "cache")
    for spec in (
        "acme/skills:.git/config",
        "acme/skills:.git/HEAD",
        "acme/skills:evil",
        "acme/skills:readme",
    ):
        with pytest.raises(SkillUnavailable) as caught:
            resolver.resolve(spec)
        assert "ghp_token" not in str(caught.value)
    assert resolver.resolve("acme/skills:triage").body == "You triage issues."
    assert resolver.resolve("acme/skills:deploy").body == "Deploy it."  # .warp/skills, found by name


def test_a_fifo_is_not_a_skill(tmp_path: Path) -> None:
    root = tmp_path / "acme" / "skills"
    (root / "skills" / "pipe").mkdir(parents=True)
    os.mkfifo(root / "skills" / "pipe" / "SKILL.md")
    resolver = SkillResolver(str(tmp_path / "{owner}" / "{repo}"), tmp_path / "cache")
    with pytest.raises(SkillUnavailable, match="not a regular file"):
        resolver.resolve("acme/skills:pipe")


def test_a_remote_repository_is_cloned_partial_and_sparse(tmp_path: Path) -> None:
    """Only the SKILL.md files of a 4 MB repository reach the cache; its ``.git`` is never readable."""
    repo(
        tmp_path / "git" / "acme" / "skills",
        {"skills/triage/SKILL.md": SKILL, "assets/big.bin": os.urandom(4 << 20), "src/main.py": "print()\n"},
    )
    cache = tmp_path / "cache"
    resolver = SkillResolver(f"file://{tmp_path}/git/{{owner}}/{{repo}}", cache)
    assert resolver.resolve("acme/skills:triage").body == "You triage issues."
    (entry,) = entries(cache)
    assert tree_bytes(cache / entry) < 1 << 20, "the whole repository was fetched"
    assert not (cache / entry / "assets").exists() and not (cache / entry / "src").exists()
    with pytest.raises(SkillUnavailable):
        resolver.resolve("acme/skills:.git/config")


def test_a_refused_spec_clones_nothing(tmp_path: Path) -> None:
    repo(tmp_path / "git" / "acme" / "skills", {"skills/triage/SKILL.md": SKILL})
    cache = tmp_path / "cache"
    resolver = SkillResolver(f"file://{tmp_path}/git/{{owner}}/{{repo}}", cache)
    for spec in ("acme/skills:.git/config", "acme/skills:README.md", "acme/skills:../x/SKILL.md"):
        with pytest.raises(SkillUnavailable):
            resolver.resolve(spec)
    assert not cache.exists() or list(cache.iterdir()) == []


def test_the_cache_is_capped_in_entries_and_evicts_the_least_recently_used(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        repo(tmp_path / "git" / "acme" / name, {f"skills/{name}/SKILL.md": f"skill {name}\n"})
    cache = tmp_path / "cache"
    limits = CacheLimits(max_entries=2)
    resolver = SkillResolver(f"file://{tmp_path}/git/{{owner}}/{{repo}}", cache, limits=limits)
    resolver.resolve("acme/a:a")
    first = set(entries(cache))
    resolver.resolve("acme/b:b")
    resolver.resolve("acme/a:a")  # a is now more recently used than b
    resolver.resolve("acme/c:c")
    assert len(entries(cache)) == 2
    assert first <= set(entries(cache)), "the recently used entry was evicted"
    assert resolver.resolve("acme/b:b").body == "skill b"  # cloned again, evicting a or c
    assert len(entries(cache)) == 2


def test_the_cache_is_capped_in_bytes(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):  # no partial-clone support: each clone carries its 300 kB blob
        path = repo(tmp_path / "git" / "acme" / name, {f"{name}/SKILL.md": name, "blob": os.urandom(300_000)})
        git(path, "config", "uploadpack.allowFilter", "false")
    cache = tmp_path / "cache"
    limits = CacheLimits(max_bytes=800_000, clone_max_bytes=500_000)
    resolver = SkillResolver(f"file://{tmp_path}/git/{{owner}}/{{repo}}", cache, limits=limits)
    for name in ("a", "b", "c"):
        assert resolver.resolve(f"acme/{name}:{name}").body == name
        assert tree_bytes(cache) <= 800_000
    assert len(entries(cache)) == 2


def test_a_clone_past_its_cap_is_aborted_and_leaves_nothing(tmp_path: Path) -> None:
    path = repo(tmp_path / "git" / "acme" / "huge", {"skills/x/SKILL.md": "x", "blob": os.urandom(2 << 20)})
    git(path, "config", "uploadpack.allowFilter", "false")
    cache = tmp_path / "cache"
    limits = CacheLimits(clone_max_bytes=1 << 20)
    resolver = SkillResolver(f"file://{tmp_path}/git/{{owner}}/{{repo}}", cache, limits=limits)
    with pytest.raises(SkillUnavailable, match="larger than 1048576 bytes"):
        resolver.resolve("acme/huge:x")
    assert tree_bytes(cache) == 0


def test_a_failing_repository_is_not_cloned_again_within_the_failure_window(tmp_path: Path) -> None:
    now = [0.0]
    cache = tmp_path / "cache"
    resolver = SkillResolver(
        f"file://{tmp_path}/git/{{owner}}/{{repo}}",
        cache,
        monotonic=lambda: now[0],
        limits=CacheLimits(failure_seconds=30),
    )
    with pytest.raises(SkillUnavailable, match="unknown repository acme/late"):
        resolver.resolve("acme/late:triage")
    repo(tmp_path / "git" / "acme" / "late", {"skills/triage/SKILL.md": SKILL})
    for _ in range(3):  # the repository exists now: only a cached failure explains a refusal
        now[0] += 5
        with pytest.raises(SkillUnavailable, match="unknown repository acme/late"):
            resolver.resolve("acme/late:triage")
    assert entries(cache) == []
    now[0] = 31.0
    assert resolver.resolve("acme/late:triage").body == "You triage issues."


def test_a_refresh_fetches_new_skills_into_the_sparse_checkout(tmp_path: Path) -> None:
    path = repo(tmp_path / "git" / "acme" / "skills", {"skills/triage/SKILL.md": SKILL})
    now = [0.0]
    resolver = SkillResolver(
        f"file://{tmp_path}/git/{{owner}}/{{repo}}", tmp_path / "cache", monotonic=lambda: now[0]
    )
    assert resolver.resolve("acme/skills:triage").name == "triage-bot"
    (path / ".agents" / "skills" / "new").mkdir(parents=True)
    (path / ".agents" / "skills" / "new" / "SKILL.md").write_text("New skill.\n")
    git(path, "add", "-A")
    git(path, "commit", "--quiet", "-m", "new")
    now[0] = 61.0
    assert resolver.resolve("acme/skills:new").body == "New skill."


@pytest.mark.parametrize(
    "target",
    [
        "triage",
        "triage.v2",
        "notes.md",
        ".git/config",
        ".GIT/HEAD",
        "README.md",
        "SKILL.md",
        "triage/SKILL.md",
        "skills/triage/SKILL.md",
        ".opencode/skills/triage/SKILL.md",
        "agents/foreman/skills/triage/SKILL.md",
        "agents/foreman/triage/SKILL.md",
        "docs/triage/SKILL.md",
        "skills/triage/skill.md",
        "../triage/SKILL.md",
        "/skills/triage/SKILL.md",
    ],
)
def test_definitions_and_the_api_agree_on_what_a_spec_may_name(target: str) -> None:
    """The definition schema's pattern (validate/apply: a file:line diagnostic) and the resolver's check (a
    422) accept the same specs, so a definition never carries a spec every run would refuse."""
    pattern = load_schema("agent-config")["properties"]["skill_spec"]["pattern"]
    spec = f"acme/skills:{target}"
    try:
        parse_skill_spec(spec)
    except SkillUnavailable:
        accepted = False
    else:
        accepted = True
    assert bool(re.match(pattern, spec)) == accepted


def test_a_refresh_past_the_cap_drops_the_clone(tmp_path: Path) -> None:
    path = repo(tmp_path / "git" / "acme" / "grows", {"skills/x/SKILL.md": "x"})
    git(path, "config", "uploadpack.allowFilter", "false")
    now = [0.0]
    cache = tmp_path / "cache"
    limits = CacheLimits(clone_max_bytes=1 << 20)
    resolver = SkillResolver(
        f"file://{tmp_path}/git/{{owner}}/{{repo}}", cache, monotonic=lambda: now[0], limits=limits
    )
    assert resolver.resolve("acme/grows:x").body == "x"
    (path / "blob").write_bytes(os.urandom(2 << 20))
    git(path, "add", "-A")
    git(path, "commit", "--quiet", "-m", "big")
    now[0] = 61.0
    with pytest.raises(SkillUnavailable, match="larger than 1048576 bytes"):
        resolver.resolve("acme/grows:x")
    assert entries(cache) == [] and tree_bytes(cache) == 0


def test_the_cache_settings_come_from_the_environment_with_documented_defaults(tmp_path: Path) -> None:
    def limits(env: dict[str, str]) -> CacheLimits:
        args = build_parser(["serve"]).parse_args(["serve", "--workers", "0"])
        ctx = CliContext(tmp_path, f"sqlite+aiosqlite:///{tmp_path / 'factory.db'}", env)
        return SkillResolver.from_settings(ServeOptions.from_args(ctx, args).settings).cache.limits

    assert limits({}) == CacheLimits(
        max_bytes=512 * 1024 * 1024, max_entries=64, clone_max_bytes=64 * 1024 * 1024, failure_seconds=60.0
    )
    env = {
        "FACTORY_SKILLS_CACHE_MAX_BYTES": "1000000",
        "FACTORY_SKILLS_CACHE_MAX_ENTRIES": "3",
        "FACTORY_SKILLS_CLONE_MAX_BYTES": "500000",
        "FACTORY_SKILLS_FAILURE_SECONDS": "5",
    }
    assert limits(env) == CacheLimits(1_000_000, 3, 500_000, 5.0)
