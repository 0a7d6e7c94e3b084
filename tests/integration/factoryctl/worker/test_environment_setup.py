"""Environment preparation against real git repositories and real setup commands."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import git
import pytest

from factoryctl.worker import EnvironmentSetupFailed
from factoryctl.worker.environment import (
    display_url,
    prepare_environment,
    repo_destination,
    setup_failure_outcome,
)

AUTHOR = git.Actor("Factory Test", "test@factory.invalid")


def commit(repo: git.Repo, files: dict[str, str], message: str) -> str:
    root = Path(repo.working_tree_dir or "")
    for name, text in files.items():
        (root / name).write_text(text)
    repo.index.add(list(files))
    return repo.index.commit(message, author=AUTHOR, committer=AUTHOR).hexsha


@pytest.fixture
def repos(tmp_path: Path) -> dict[str, Path]:
    """``app``: v1 (tagged), then v2 on the default branch. ``lib``: main plus a ``feature`` branch."""
    app = git.Repo.init(tmp_path / "src" / "app")
    commit(app, {"version.txt": "1"}, "v1")
    app.create_tag("v1")
    commit(app, {"version.txt": "2"}, "v2")
    lib = git.Repo.init(tmp_path / "src" / "lib.git")
    commit(lib, {"README.md": "lib main"}, "main")
    default = lib.active_branch
    feature = lib.create_head("feature")
    feature.checkout()
    commit(lib, {"README.md": "lib feature"}, "feature work")
    default.checkout()
    return {"app": tmp_path / "src" / "app", "lib": tmp_path / "src" / "lib.git"}


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def gone(pid: int) -> bool:
    """True when the process has exited (a zombie awaiting its reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone, possibly between open() and read()
        return True
    return stat[stat.rfind(")") + 2] in "ZX"


class Lines:
    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    async def __call__(self, stream: str, line: str) -> None:
        self.lines.append((stream, line))


async def test_clones_local_repositories_at_refs(repos: dict[str, Path], ws: Path) -> None:
    environment = {
        "repos": [
            {"url": str(repos["app"]), "ref": "v1"},
            {"url": repos["lib"].as_uri(), "path": "libs/lib"},
            {"url": repos["lib"].as_uri(), "path": "feature-lib", "ref": "feature"},
        ]
    }
    cloned = await prepare_environment(environment, ws)
    assert cloned == [ws / "app", ws / "libs" / "lib", ws / "feature-lib"]
    assert (ws / "app" / "version.txt").read_text() == "1"
    assert (ws / "libs" / "lib" / "README.md").read_text() == "lib main"
    assert (ws / "feature-lib" / "README.md").read_text() == "lib feature"
    assert git.Repo(ws / "feature-lib").active_branch.name == "feature"


async def test_setup_runs_in_the_workspace_with_env_and_secrets(repos: dict[str, Path], ws: Path) -> None:
    environment = {
        "repos": [{"url": str(repos["app"])}],
        "setup": [
            'echo "$GREETING $API_TOKEN" > setup-out.txt',
            "cp app/version.txt copied.txt && echo copied",
        ],
        "env": {"GREETING": "hello"},
        "secrets": {"API_TOKEN": "tok-123456"},
    }
    out = Lines()
    await prepare_environment(environment, ws, base_env={"PATH": "/usr/bin:/bin"}, on_output=out)
    assert (ws / "setup-out.txt").read_text() == "hello tok-123456\n"
    assert (ws / "copied.txt").read_text() == "2"
    assert ("stdout", "copied") in out.lines
    assert ("system", "setup 2/2: cp app/version.txt copied.txt && echo copied") in out.lines
    assert any(stream == "system" and line.startswith("cloning ") for stream, line in out.lines)
    assert not any("tok-123456" in line for _, line in out.lines)


async def test_setup_failure_carries_the_output_tail(ws: Path) -> None:
    script = (
        "for i in $(seq 1 500); do echo noise line $i; done;"
        ' echo "token $API_TOKEN"; echo final words >&2; exit 7'
    )
    environment = {"setup": ["true", script, "touch never.txt"], "secrets": {"API_TOKEN": "tok-123456"}}
    with pytest.raises(EnvironmentSetupFailed) as caught:
        await prepare_environment(environment, ws)
    exc = caught.value
    assert exc.message == "setup command 2 exited with status 7"
    assert exc.output_tail.endswith("token ***\nfinal words")
    assert len(exc.output_tail) <= 2048
    assert "noise line 1\n" not in exc.output_tail
    assert not (ws / "never.txt").exists()
    outcome = setup_failure_outcome(exc)
    assert outcome.state == "FAILED"
    assert outcome.status_message is not None
    assert outcome.status_message["error_code"] == "environment_setup_failed"
    assert outcome.status_message["message"].startswith("setup command 2 exited with status 7\n")


async def test_a_failing_step_inside_a_setup_command_fails_it(ws: Path) -> None:
    with pytest.raises(EnvironmentSetupFailed, match="status 1"):
        await prepare_environment({"setup": ["false\necho still here > after.txt"]}, ws)
    assert not (ws / "after.txt").exists()


async def test_setup_timeout_kills_the_command_and_its_children(ws: Path) -> None:
    environment = {"setup": ["sleep 1000 & echo $! > child.pid; wait"]}
    started = time.monotonic()
    with pytest.raises(EnvironmentSetupFailed, match=r"timed out after 0\.4s"):
        await prepare_environment(environment, ws, timeout_seconds=0.4, grace_seconds=0.5)
    assert time.monotonic() - started < 1.5
    assert gone(int((ws / "child.pid").read_text()))


async def test_background_children_of_setup_do_not_block_or_survive(ws: Path) -> None:
    environment = {"setup": ["sleep 1000 & echo $! > child.pid; echo started", "echo next > next.txt"]}
    started = time.monotonic()
    await prepare_environment(environment, ws, timeout_seconds=5, grace_seconds=0.5)
    assert time.monotonic() - started < 1.5
    assert (ws / "next.txt").exists()
    assert gone(int((ws / "child.pid").read_text()))


async def test_clone_failure_is_a_setup_failure(tmp_path: Path, ws: Path) -> None:
    with pytest.raises(EnvironmentSetupFailed, match="cannot clone") as caught:
        await prepare_environment({"repos": [{"url": str(tmp_path / "missing")}]}, ws)
    assert "does not exist" in caught.value.output_tail


async def test_credentials_in_clone_urls_are_not_shown(ws: Path) -> None:
    url = "https://bot:hunter2-token@127.0.0.1:9/org/repo.git"
    with pytest.raises(EnvironmentSetupFailed) as caught:
        await prepare_environment({"repos": [{"url": url}]}, ws, timeout_seconds=5)
    assert caught.value.message == "cannot clone https://***@127.0.0.1:9/org/repo.git"
    assert "hunter2-token" not in caught.value.output_tail
    assert display_url("git@github.com:org/repo.git") == "git@github.com:org/repo.git"


async def test_unknown_ref_is_a_setup_failure(repos: dict[str, Path], ws: Path) -> None:
    with pytest.raises(EnvironmentSetupFailed, match="at no-such-ref"):
        await prepare_environment({"repos": [{"url": str(repos["app"]), "ref": "no-such-ref"}]}, ws)


async def test_a_clone_cannot_be_written_through_a_symlink(
    repos: dict[str, Path], ws: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "link").symlink_to(outside)
    with pytest.raises(EnvironmentSetupFailed, match="leaves the workspace"):
        await prepare_environment({"repos": [{"url": str(repos["app"]), "path": "link/app"}]}, ws)
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("path", ["../outside", "/abs/path", "a/../../b", "."])
def test_repository_paths_stay_inside_the_workspace(ws: Path, path: str) -> None:
    with pytest.raises(EnvironmentSetupFailed, match="inside the workspace"):
        repo_destination(ws, "https://git.example/org/repo.git", path)


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("https://git.example/org/repo.git", "repo"),
        ("git@github.com:org/tool.git", "tool"),
        ("/srv/git/thing/", "thing"),
        ("file:///srv/git/x.git", "x"),
    ],
)
def test_default_clone_directory_is_the_repository_name(ws: Path, url: str, name: str) -> None:
    assert repo_destination(ws, url, None) == ws / name


async def test_malformed_environment_is_a_setup_failure(ws: Path) -> None:
    bad: dict[str, Any] = {"repos": [{"path": "x"}]}
    with pytest.raises(EnvironmentSetupFailed, match="invalid environment"):
        await prepare_environment(bad, ws)


async def test_unsafe_git_transports_are_refused(ws: Path) -> None:
    with pytest.raises(EnvironmentSetupFailed, match="cannot clone"):
        await prepare_environment({"repos": [{"url": "ext::sh -c touch% pwned", "path": "x"}]}, ws)
    assert not (ws / "pwned").exists()
