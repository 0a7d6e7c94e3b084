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
- a deadline: git runs in its own process group, killed whole (ssh, remote helpers) when it expires;
- optionally a size cap (``watch``/``max_bytes``): the directory git writes is measured while it runs and
  once more when it exits, and git is killed the same way as soon as it is larger (:class:`GitTooLarge`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from safegit.errors import GitFailed, GitTimeout, GitTooLarge
from safegit.locations import NO_TRANSPORT, Policy, check_filter, check_location, check_ref

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
WATCH_INTERVAL = 0.05  # seconds between two measurements of a size-capped directory


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
    watch: Path | None = None,
    max_bytes: int | None = None,
) -> bytes:
    """Run ``git ARGS`` and return its stdout; raises :class:`GitFailed` (or :class:`GitTimeout`, or
    :class:`GitTooLarge` when ``watch`` grows past ``max_bytes`` while git runs or when it is done).

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
    cap = (watch, max_bytes) if watch is not None and max_bytes is not None else None
    over, done = threading.Event(), threading.Event()
    if cap is not None:
        threading.Thread(target=_cap, args=(proc, *cap, over, done), daemon=True).start()
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill(proc)
        raise GitTimeout(name, timeout) from None
    except BaseException:
        _kill(proc)
        raise
    finally:
        done.set()
    if cap is not None and (over.is_set() or tree_bytes(cap[0]) > cap[1]):
        raise GitTooLarge(name, cap[1])
    if proc.returncode != 0:
        raise GitFailed(name, proc.returncode, err.decode("utf-8", errors="replace"))
    return out


def tree_bytes(path: Path) -> int:
    """The bytes of the files under ``path`` (0 when it does not exist; files that vanish are skipped)."""
    total = 0
    for folder, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def _cap(
    proc: subprocess.Popen[bytes], path: Path, max_bytes: int, over: threading.Event, done: threading.Event
) -> None:
    """Kill git's process group as soon as ``path`` holds more than ``max_bytes`` (run in a thread)."""
    while not done.wait(WATCH_INTERVAL):
        if tree_bytes(path) > max_bytes:
            over.set()
            _kill_group(proc)
            return


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL git's whole process group (ssh, remote helpers)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    _kill_group(proc)
    proc.communicate()


def clone(
    url: str,
    dest: Path,
    *,
    policy: Policy,
    timeout: float = DEFAULT_TIMEOUT,
    depth: int | None = None,
    cwd: Path | None = None,
    filter: str | None = None,
    no_checkout: bool = False,
    no_local: bool = False,
    max_bytes: int | None = None,
) -> None:
    """``git clone -- URL DEST`` after checking ``url`` against ``policy``.

    ``filter`` makes a partial clone (:func:`safegit.check_filter`; a server without filter support
    sends everything), ``no_local`` makes a local path go through the transport (so ``depth`` and
    ``filter`` apply, and nothing is hard-linked), ``max_bytes`` aborts the clone when ``DEST`` grows
    larger (:class:`GitTooLarge`)."""
    check_location(url, policy)
    options = ["--depth", str(int(depth))] if depth else []
    if filter is not None:
        options.append(f"--filter={check_filter(filter)}")
    options += ["--no-checkout"] if no_checkout else []
    options += ["--no-local"] if no_local else []
    run(
        ["clone", "--quiet", *options, "--", url, str(dest)],
        cwd=cwd,
        policy=policy,
        timeout=timeout,
        watch=dest if cwd is None or dest.is_absolute() else cwd / dest,
        max_bytes=max_bytes,
    )


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
