"""Prepare a run's environment in its workspace before the harness starts (docs/agent-config.md).

Steps, all within one wall-clock budget (``timeout_seconds``):

1. clone each of ``repos`` (``{url, path?, ref?}``) into ``<workspace>/<path>`` (default: the
   repository name from the URL) and check out ``ref`` when given (branch, tag or commit);
2. run each ``setup`` command with ``bash --noprofile --norc -eo pipefail -c`` in the workspace,
   in its own process group, with the environment's ``env`` and ``secrets`` as variables - inside the
   worker's sandbox when it has one (:func:`factoryctl.worker.sandbox.start_process`; the clones of
   step 1 are the worker's own git runs, outside it).

Any failure raises :class:`EnvironmentSetupFailed` carrying the last ~2 KB of output, secrets
redacted; :func:`setup_failure_outcome` turns it into the run's FAILED outcome with error_code
``environment_setup_failed``. To abandon a preparation, cancel the task: the running setup
command's process group is killed.

Clones run through :mod:`safegit` (the runner the git source and the skills resolver use too): the URL
is checked against :data:`safegit.ENVIRONMENT_REPOS` first — no ``-`` prefix (``--upload-pack=CMD``),
no ``<transport>::`` remote helper (``ext::sh -c …``), only https, http, ssh, git and local paths or
``file://`` — and follows ``--``; the ref is checked and followed by ``--`` too. git is killed with its
process group at the deadline and never prompts for credentials: a private repository without
credentials fails fast. Definitions are refused the same way when they load (FC011).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import unquote, urlsplit

import safegit
from factoryctl.worker import EnvironmentSetupFailed, InvalidClaim, RunnerSetupFailed
from factoryctl.worker.harness import (
    DEFAULT_GRACE_SECONDS,
    OutputCallback,
    OutputTail,
    RedactingEmitter,
    pump_lines,
    signal_process_group,
    terminate_process_group,
    wait_for_exit,
)
from factoryctl.worker.job import Outcome, parse_environment, redact
from factoryctl.worker.sandbox import Sandbox, start_process
from factoryctl.worker.workspace import safe_file_name

DEFAULT_SETUP_TIMEOUT_SECONDS = 900.0
OUTPUT_TAIL_CHARS = 2048
SETUP_SHELL = ("bash", "--noprofile", "--norc", "-eo", "pipefail", "-c")


async def prepare_environment(
    environment: Mapping[str, Any],
    workspace: Path,
    *,
    base_env: Mapping[str, str] | None = None,
    timeout_seconds: float = DEFAULT_SETUP_TIMEOUT_SECONDS,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    on_output: OutputCallback | None = None,
    sandbox: Sandbox | None = None,
    guarded: Sequence[Path] = (),
) -> list[Path]:
    """Clone the repositories and run the setup commands; returns the cloned directories.

    ``base_env`` is the variables setup commands start from (None inherits this process's
    environment). Output goes to ``on_output``: ``system`` for progress lines, ``stdout`` for the
    setup commands' combined stdout and stderr. ``sandbox`` confines the setup commands (None: they
    run on the worker's host). A local repository (path or ``file://``) inside ``guarded`` (the
    server's data directory) is refused: the clone would copy it into the run's reach.
    """
    try:
        spec = parse_environment(environment)
    except InvalidClaim as exc:
        raise EnvironmentSetupFailed(f"invalid environment: {exc}") from exc
    secrets = list(spec["secrets"].values())
    emit = RedactingEmitter(on_output, secrets)
    tail = OutputTail(OUTPUT_TAIL_CHARS, secrets)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_seconds

    def remaining() -> float:
        left = deadline - loop.time()
        if left <= 0:
            raise EnvironmentSetupFailed(
                f"environment setup timed out after {timeout_seconds:g}s", tail.text()
            )
        return left

    cloned = []
    for repo in spec["repos"]:
        url, ref = repo["url"], repo.get("ref")
        shown = display_url(url) + (f" at {ref}" if ref else "")
        dest = repo_destination(workspace, url, repo.get("path"))
        await emit("system", f"cloning {shown} into {dest.relative_to(workspace)}")
        try:
            await asyncio.to_thread(_clone, url, dest, ref, workspace, remaining(), guarded)
        except (safegit.GitError, OSError) as exc:
            tail.add(str(exc))
            raise EnvironmentSetupFailed(redact(f"cannot clone {shown}", secrets), tail.text()) from exc
        cloned.append(dest)

    env = dict(os.environ if base_env is None else base_env)
    env.update(spec["env"])
    env.update(spec["secrets"])
    commands: list[str] = spec["setup"]
    await _run_commands(
        commands, workspace, env, (remaining, timeout_seconds), grace_seconds, emit, tail, sandbox, _SETUP
    )
    return cloned


@dataclass(frozen=True)
class _Kind:
    """Whose setup commands run: their log prefix, the words of a timeout and the error they raise."""

    label: str
    what: str
    failure: type[EnvironmentSetupFailed]


_SETUP = _Kind("setup", "environment setup", EnvironmentSetupFailed)
_RUNNER = _Kind("runner setup", "runner setup", RunnerSetupFailed)


async def run_runner_setup(
    commands: Sequence[str],
    workspace: Path,
    env: Mapping[str, str],
    *,
    secrets: Sequence[str] = (),
    timeout_seconds: float = DEFAULT_SETUP_TIMEOUT_SECONDS,
    grace_seconds: float = DEFAULT_GRACE_SECONDS,
    on_output: OutputCallback | None = None,
    sandbox: Sandbox | None = None,
) -> None:
    """A runner's ``setup_commands``, exactly as an environment's ``setup`` runs (the same shell, process
    group, sandbox and output), within ``timeout_seconds``; raises :class:`RunnerSetupFailed`."""
    emit = RedactingEmitter(on_output, secrets)
    tail = OutputTail(OUTPUT_TAIL_CHARS, secrets)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_seconds

    def remaining() -> float:
        left = deadline - loop.time()
        if left <= 0:
            raise RunnerSetupFailed(f"runner setup timed out after {timeout_seconds:g}s", tail.text())
        return left

    budget = (remaining, timeout_seconds)
    await _run_commands(list(commands), workspace, env, budget, grace_seconds, emit, tail, sandbox, _RUNNER)


async def _run_commands(
    commands: list[str],
    workspace: Path,
    env: Mapping[str, str],
    budget: tuple[Callable[[], float], float],
    grace_seconds: float,
    emit: RedactingEmitter,
    tail: OutputTail,
    sandbox: Sandbox | None,
    kind: _Kind,
) -> None:
    """Run ``commands`` in order; ``budget``: the seconds left (raises at the deadline) and the total."""
    remaining, total = budget
    for index, command in enumerate(commands, 1):
        await emit("system", f"{kind.label} {index}/{len(commands)}: {command}")
        left = remaining()
        code = await _run_setup(
            command, workspace, env, left, grace_seconds, emit, tail, sandbox, kind.failure
        )
        if code is None:
            raise kind.failure(
                f"{kind.what} timed out after {total:g}s ({kind.label} command {index})", tail.text()
            )
        if code < 0:
            raise kind.failure(f"{kind.label} command {index} was killed by signal {-code}", tail.text())
        if code != 0:
            raise kind.failure(f"{kind.label} command {index} exited with status {code}", tail.text())


def setup_failure_outcome(exc: EnvironmentSetupFailed) -> Outcome:
    """The run outcome for a failed preparation: FAILED, ``environment_setup_failed`` (a runner's:
    ``runner_setup_failed``), with the tail."""
    message = f"{exc.message}\n{exc.output_tail}" if exc.output_tail else exc.message
    return Outcome.failed(message, exc.error_code)


def repo_destination(workspace: Path, url: str, path: str | None) -> Path:
    """Where a repository is cloned: ``path`` (relative, inside the workspace) or its URL's name."""
    relative = PurePosixPath(path) if path else PurePosixPath(_repo_name(url))
    if relative.is_absolute() or ".." in relative.parts or not relative.parts or "\0" in str(relative):
        raise EnvironmentSetupFailed(f"repository path {path!r} must be a relative path inside the workspace")
    return workspace.joinpath(*relative.parts)


def display_url(url: str) -> str:
    """``url`` with any credentials (``https://user:token@host/...``) replaced by ``***``."""
    return safegit.display_url(url)


def _repo_name(url: str) -> str:
    last = url.rstrip("/").replace(":", "/").rsplit("/", 1)[-1]
    return safe_file_name(last.removesuffix(".git"), fallback="repo")


def _borrows_objects(source: Path) -> str | None:
    """Why a local repository would make git read objects from outside it, or None. Its path alone says
    nothing: a ``.git`` file or ``commondir`` names another git directory, ``objects/info/alternates``
    lends another object store, and an ``objects`` symlink is one (docs/workers.md, "Sandbox")."""
    dot_git = source / ".git"
    if dot_git.is_file():
        return "has a .git file that names another git directory"
    git_dir = dot_git if dot_git.is_dir() else source
    if (git_dir / "commondir").exists():
        return "is a worktree of another repository (commondir)"
    objects = git_dir / "objects"
    if objects.exists() and not objects.resolve().is_relative_to(source.resolve()):
        return "keeps its objects outside itself"
    if (objects / "info" / "alternates").exists() or (objects / "info" / "http-alternates").exists():
        return "borrows objects from other repositories (objects/info/alternates)"
    return None


def _clone(url: str, dest: Path, ref: str | None, cwd: Path, timeout: float, guarded: Sequence[Path]) -> None:
    """Blocking clone (run in a thread); git is killed if it outlives ``timeout``."""
    if ref is not None:
        safegit.check_ref(ref)
    if safegit.check_location(url, safegit.ENVIRONMENT_REPOS) == "file":
        local = unquote(urlsplit(url).path) if url.startswith("file://") else url
        source = (cwd / local).resolve()  # an absolute path replaces cwd
        if any(source.is_relative_to(path.resolve()) for path in guarded):
            raise EnvironmentSetupFailed(
                f"repository {display_url(url)!r} is in the server's data directory: runs may not read it"
            )
        if guarded and (borrowed := _borrows_objects(source)) is not None:
            raise EnvironmentSetupFailed(
                f"repository {display_url(url)!r} {borrowed}: git would read another repository's objects "
                "(perhaps one in the server's data directory), so a service-hosted worker does not clone it"
            )
    if not dest.parent.resolve().is_relative_to(cwd.resolve()):  # e.g. through an earlier clone's symlink
        raise EnvironmentSetupFailed(f"repository path {str(dest.relative_to(cwd))!r} leaves the workspace")
    safegit.clone(url, dest, policy=safegit.ENVIRONMENT_REPOS, cwd=cwd, timeout=timeout)
    if ref:
        safegit.checkout(dest, ref, timeout=timeout)


async def _run_setup(
    command: str,
    workspace: Path,
    env: Mapping[str, str],
    limit_seconds: float,
    grace_seconds: float,
    emit: RedactingEmitter,
    tail: OutputTail,
    sandbox: Sandbox | None,
    failure: type[EnvironmentSetupFailed] = EnvironmentSetupFailed,
) -> int | None:
    """Run one setup command; its exit status, or None when it timed out (its group is killed)."""
    try:
        proc = await start_process(
            [*SETUP_SHELL, command],
            cwd=workspace,
            env=env,
            sandbox=sandbox,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except OSError as exc:
        raise failure(f"cannot start bash for setup: {exc}", tail.text()) from exc
    assert proc.stdout is not None
    pump = asyncio.create_task(pump_lines(proc.stdout, "stdout", emit, tail))
    stopped = False
    try:
        try:
            await asyncio.wait_for(wait_for_exit(proc), limit_seconds)
            timed_out = False
        except TimeoutError:
            timed_out = True
        await terminate_process_group(proc.pid, grace_seconds=grace_seconds)
        stopped = True
        await asyncio.wait({pump}, timeout=grace_seconds)
        if pump.done():
            pump.result()
    finally:
        if not stopped:
            signal_process_group(proc.pid, signal.SIGKILL)
        pump.cancel()
        await asyncio.gather(pump, return_exceptions=True)
    return None if timed_out else proc.returncode
