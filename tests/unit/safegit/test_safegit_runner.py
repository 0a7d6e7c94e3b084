"""The git runner's hardening, against real git: what a user's git configuration or environment enables
(remote helpers, hooks, another repository) stays off, options never come from a URL, deadlines kill git
with everything it started."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

import safegit


def plain_git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env=env,
    )


@pytest.fixture
def source(tmp_path: Path) -> Path:
    repo = tmp_path / "source"
    repo.mkdir()
    plain_git(repo, "init", "--quiet", "--initial-branch", "main")
    (repo / "README").write_text("hello\n")
    plain_git(repo, "add", "README")
    plain_git(repo, "commit", "--quiet", "-m", "first")
    return repo


@pytest.fixture
def permissive_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A global git config (``GIT_CONFIG_GLOBAL``, which the runner keeps) that enables remote helpers
    and a hooks directory whose post-checkout hook touches ``<tmp>/hook-ran``; returns that marker."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    marker = tmp_path / "hook-ran"
    hook = hooks / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    config = tmp_path / "gitconfig"
    config.write_text(f'[protocol "ext"]\n\tallow = always\n[core]\n\thooksPath = {hooks}\n')
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    return marker


def test_remote_helpers_stay_off_even_when_the_user_config_allows_them(
    tmp_path: Path, permissive_git: Path
) -> None:
    pwned = tmp_path / "pwned"
    helper = f"ext::sh -c touch% {pwned}"
    with pytest.raises(safegit.GitFailed, match="transport 'ext' not allowed"):
        # The location check is bypassed on purpose: git itself must refuse the helper.
        safegit.run(["clone", "--", helper, str(tmp_path / "c")], policy=safegit.GIT_SOURCE)
    assert not pwned.exists()
    with pytest.raises(safegit.UnsafeLocation, match="remote helper"):
        safegit.clone(helper, tmp_path / "c", policy=safegit.GIT_SOURCE)
    assert not pwned.exists()


def test_hooks_named_by_configuration_never_run(tmp_path: Path, source: Path, permissive_git: Path) -> None:
    plain_git(tmp_path, "clone", "--quiet", "--", str(source), "control")
    assert permissive_git.exists()  # the configuration is live: a plain clone runs the hook
    permissive_git.unlink()
    safegit.clone(str(source), tmp_path / "safe", policy=safegit.ENVIRONMENT_REPOS)
    safegit.checkout(tmp_path / "safe", "main")
    assert (tmp_path / "safe" / "README").read_text() == "hello\n"
    assert not permissive_git.exists()


def test_an_option_as_url_never_reaches_git(tmp_path: Path, source: Path) -> None:
    pwned = tmp_path / "pwned"
    for url in (f"--upload-pack=touch {pwned}", f"-u touch {pwned}"):
        with pytest.raises(safegit.UnsafeLocation, match="must not start with '-'"):
            safegit.clone(url, tmp_path / "c", policy=safegit.GIT_SOURCE)
        with pytest.raises(safegit.UnsafeLocation, match="must not start with '-'"):
            safegit.fetch(source, url, policy=safegit.GIT_SOURCE)
    assert not pwned.exists()


def test_variables_that_point_git_elsewhere_are_dropped(
    tmp_path: Path, source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", "'core.hookspath'='/tmp'")
    monkeypatch.setenv("GIT_ASKPASS", "/bin/echo")
    top = safegit.run(["rev-parse", "--show-toplevel"], cwd=source).decode().strip()
    assert Path(top).resolve() == source.resolve()
    env = safegit.runner.environment()
    assert "GIT_DIR" not in env and "GIT_CONFIG_PARAMETERS" not in env and "GIT_ASKPASS" not in env
    assert env["GIT_TERMINAL_PROMPT"] == "0" and env["GIT_PROTOCOL_FROM_USER"] == "0"


def test_a_transport_outside_the_policy_is_refused_by_git_too(tmp_path: Path, source: Path) -> None:
    https_only = safegit.Policy("mirror", frozenset({"https"}))
    with pytest.raises(safegit.GitFailed, match="transport 'file' not allowed"):
        safegit.run(["clone", "--", str(source), str(tmp_path / "c")], policy=https_only)


def test_a_deadline_kills_git_and_what_it_started(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pid_file = tmp_path / "ssh.pid"
    fake_ssh = tmp_path / "ssh"
    fake_ssh.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 60\n")
    fake_ssh.chmod(0o755)
    monkeypatch.setenv("GIT_SSH_COMMAND", str(fake_ssh))  # kept: how operators reach ssh remotes
    (tmp_path / "m.git").mkdir()
    safegit.init_bare(tmp_path / "m.git")
    started = time.monotonic()
    with pytest.raises(safegit.GitTimeout, match="timed out after 1s"):
        safegit.fetch(tmp_path / "m.git", "ssh://git.example/repo.git", policy=safegit.GIT_SOURCE, timeout=1)
    assert time.monotonic() - started < 10
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _alive(pid):
        assert time.monotonic() < deadline, "the ssh child outlived git's deadline"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = (
        Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        if Path(f"/proc/{pid}").exists()
        else "X"
    )
    return state not in ("Z", "X")
