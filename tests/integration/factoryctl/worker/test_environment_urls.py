"""An environment's repositories are cloned through safegit: a URL or ref git must not be given is refused
before git runs, with a message that says why, and nothing a git configuration names (remote helpers,
hooks) runs during the clone or the checkout."""

from __future__ import annotations

from pathlib import Path

import pytest
from gitobjects import git

from factoryctl.worker import EnvironmentSetupFailed
from factoryctl.worker.environment import prepare_environment


@pytest.fixture
def app(tmp_path: Path) -> Path:
    repo = tmp_path / "src" / "app"
    repo.mkdir(parents=True)
    git(repo, "init", "--quiet", "--initial-branch", "main")
    (repo / "version.txt").write_text("1\n")
    git(repo, "add", "version.txt")
    git(repo, "commit", "--quiet", "-m", "v1")
    git(repo, "tag", "v1")
    return repo


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("--upload-pack=touch {pwned}", "must not start with '-'"),
        ("ext::sh -c touch% {pwned}", "remote helper syntax 'ext::'"),
        ("fd::5", "remote helper syntax 'fd::'"),
        ("ftp://git.example/app.git", "transport 'ftp' is not allowed"),
    ],
)
async def test_unsafe_urls_fail_the_setup_before_git_runs(
    ws: Path, tmp_path: Path, url: str, why: str
) -> None:
    pwned = tmp_path / "pwned"
    with pytest.raises(EnvironmentSetupFailed) as caught:
        await prepare_environment({"repos": [{"url": url.format(pwned=pwned), "path": "x"}]}, ws)
    assert why in caught.value.output_tail
    assert not pwned.exists() and not (ws / "x").exists()


async def test_an_option_like_ref_fails_the_setup(ws: Path, app: Path) -> None:
    with pytest.raises(EnvironmentSetupFailed) as caught:
        await prepare_environment({"repos": [{"url": str(app), "ref": "--orphan=x"}]}, ws)
    assert "must not start with '-'" in caught.value.output_tail


async def test_hooks_and_helpers_enabled_by_git_configuration_stay_off(
    ws: Path, app: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    ran = tmp_path / "hook-ran"
    (hooks / "post-checkout").write_text(f"#!/bin/sh\necho $0 >> {ran}\n")
    (hooks / "post-checkout").chmod(0o755)
    config = tmp_path / "gitconfig"
    config.write_text(f'[core]\n\thooksPath = {hooks}\n[protocol "ext"]\n\tallow = always\n')
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))  # as a worker host's ~/.gitconfig would

    cloned = await prepare_environment({"repos": [{"url": str(app), "path": "app", "ref": "v1"}]}, ws)
    assert cloned == [ws / "app"] and (ws / "app" / "version.txt").read_text() == "1\n"
    assert not ran.exists()  # neither the clone's checkout nor the ref's ran the configured hook
