"""The one way this project runs git (docs/operations.md, "Git URLs").

Every git process gets the same hardening, whoever starts it:

- no shell: git is executed with an argument list; URLs, paths and refs are checked first
  (:mod:`safegit.locations`) and always follow ``--``, so none can become an option;
- ``-c protocol.allow=never`` plus an ``always`` for each transport the caller's :class:`Policy`
  allows, and ``protocol.ext.allow=never`` / ``protocol.fd.allow=never`` spelled out: remote helpers
  that run commands are off even where a user or system config enables them;
- ``core.hooksPath=/dev/null`` and ``core.fsmonitor=false``: no program named by a repository's
  configuration or hook directory runs;
- the environment: ``GIT_TERMINAL_PROMPT=0`` and no ``GIT_ASKPASS``/``SSH_ASKPASS`` (a private
  repository without credentials fails at once instead of waiting for a password),
  ``GIT_PROTOCOL_FROM_USER=0``, ``LC_ALL=C`` (messages the callers recognise), and none of the ``GIT_*``
  variables that redirect git to another repository or inject configuration (``GIT_DIR``,
  ``GIT_CONFIG_PARAMETERS``...) — only ssh, TLS, HTTP, tracing and global-config settings are kept;
- a deadline: git runs in its own process group, killed whole (ssh, remote helpers) when it expires.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from safegit.errors import GitFailed, GitTimeout
from safegit.locations import NO_TRANSPORT, Policy, check_location, check_ref

DEFAULT_TIMEOUT = 120.0
HARDENING = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
)
_NO_HELPERS = ("-c", "protocol.ext.allow=never", "-c", "protocol.fd.allow=never")
_KEPT_GIT_VARIABLES = (
    "GIT_SSH",  # GIT_SSH, GIT_SSH_COMMAND, GIT_SSH_VARIANT: how the operator reaches ssh remotes
    "GIT_SSL_CAINFO",
    "GIT_SSL_CAPATH",
    "GIT_HTTP_",
    "GIT_TRACE",
    "GIT_CURL_VERBOSE",
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
)
_DROPPED = ("GIT_ASKPASS", "SSH_ASKPASS")


def environment(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment git runs with: ``base`` (default: this process's) hardened as described above."""
    env = {
        name: value
        for name, value in (os.environ if base is None else base).items()
        if name not in _DROPPED and (not name.startswith("GIT_") or name.startswith(_KEPT_GIT_VARIABLES))
    }
    env.update({"GIT_TERMINAL_PROMPT": "0", "GIT_PROTOCOL_FROM_USER": "0", "LC_ALL": "C"})
    return env


def command(args: Sequence[str], policy: Policy = NO_TRANSPORT) -> list[str]:
    """The full argument list for ``git ARGS`` under ``policy``."""
    return ["git", *HARDENING, *policy.protocol_config(), *_NO_HELPERS, *args]


def run(
    args: Sequence[str],
    *,
    cwd: Path | None = None,
    policy: Policy = NO_TRANSPORT,
    timeout: float = DEFAULT_TIMEOUT,
    stdin: bytes | None = None,
) -> bytes:
    """Run ``git ARGS`` and return its stdout; raises :class:`GitFailed` (or :class:`GitTimeout`).

    ``args`` must come from the caller's code or have been checked: URLs, paths and refs from
    outside go through :func:`clone`, :func:`fetch` and :func:`checkout`, which check them and put
    them after ``--``. The default policy allows no transport at all (plumbing on a local repository).
    """
    name = args[0] if args else "git"
    try:
        proc = subprocess.Popen(
            command(args, policy),
            cwd=cwd,
            env=environment(),
            stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise GitFailed(name, 127, f"fatal: cannot run git: {exc.strerror or exc}") from exc
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise GitTimeout(name, timeout) from None
    except BaseException:
        _kill(proc)
        raise
    if proc.returncode != 0:
        raise GitFailed(name, proc.returncode, err.decode("utf-8", errors="replace"))
    return out


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()


def clone(
    url: str,
    dest: Path,
    *,
    policy: Policy,
    timeout: float = DEFAULT_TIMEOUT,
    depth: int | None = None,
    cwd: Path | None = None,
) -> None:
    """``git clone -- URL DEST`` after checking ``url`` against ``policy``."""
    check_location(url, policy)
    shallow = ["--depth", str(int(depth))] if depth else []
    run(["clone", "--quiet", *shallow, "--", url, str(dest)], cwd=cwd, policy=policy, timeout=timeout)


def fetch(
    repo: Path,
    url: str,
    refspecs: Sequence[str] = (),
    *,
    policy: Policy,
    timeout: float = DEFAULT_TIMEOUT,
    depth: int | None = None,
) -> None:
    """``git fetch --no-tags -- URL REFSPEC...`` in ``repo`` after checking ``url`` against ``policy``
    (without refspecs the remote's HEAD lands in ``FETCH_HEAD``)."""
    check_location(url, policy)
    for refspec in refspecs:
        check_ref(refspec)
    shallow = ["--depth", str(int(depth))] if depth else []
    run(
        ["fetch", "--quiet", "--no-tags", *shallow, "--", url, *refspecs],
        cwd=repo,
        policy=policy,
        timeout=timeout,
    )


def checkout(repo: Path, ref: str, *, timeout: float = DEFAULT_TIMEOUT) -> None:
    """``git checkout --quiet REF --`` in ``repo`` (``ref`` is a branch, tag or commit, never an option)."""
    check_ref(ref)
    run(["checkout", "--quiet", ref, "--"], cwd=repo, timeout=timeout)


def reset_hard(repo: Path, commit: str = "FETCH_HEAD", *, timeout: float = DEFAULT_TIMEOUT) -> None:
    """``git reset --quiet --hard COMMIT --`` in ``repo``."""
    check_ref(commit)
    run(["reset", "--quiet", "--hard", commit, "--"], cwd=repo, timeout=timeout)


def init_bare(path: Path, *, timeout: float = DEFAULT_TIMEOUT) -> None:
    """``git init --quiet --bare -- PATH``."""
    run(["init", "--quiet", "--bare", "--", str(path)], timeout=timeout)
