"""The sandbox every run-controlled process starts in: bubblewrap (``bwrap``), docs/workers.md "Sandbox".

Run-controlled processes are an environment's ``setup`` commands and the command harness (and so
whatever the agent starts: the stdio MCP servers of ``.mcp.json``, its tools). Through
:func:`start_process`, the one place they are started, each runs as
``bwrap ... -- ARGV`` with:

- every namespace unshared (``--unshare-all``: user, pid, ipc, uts, cgroup and network — the host's
  network, its loopback among it, is out of reach, so neither the database on localhost nor the API
  is), no capabilities,
  ``--die-with-parent`` (the sandbox dies with the worker) and ``--new-session``;
- a root that holds only read-only system directories (``/usr``, ``/bin``, ``/sbin``, ``/lib*``), a
  chosen list of ``/etc`` files (never ``/etc`` whole: it holds ``shadow``, TLS private keys and the
  environment files services keep their keys in), a fresh ``/proc`` (only the sandbox's processes),
  a minimal ``/dev``, an empty ``/tmp`` and an empty private ``HOME``;
- the run's workspace, read-write, at the same path as on the host, and nothing else of the worker's
  machine but the directories the operator named (``--sandbox-ro`` / ``--sandbox-rw``). The data
  directory, its key and database, the server's home and working directory and the other runs'
  workspaces are never there.

bwrap itself runs on the host, so nothing of the run reaches it: it is found once, by absolute path,
when the :class:`Sandbox` is made (never through a ``PATH`` a run chose, which could name a ``bwrap``
the run wrote into its workspace), and it starts with a fixed environment (no ``LD_PRELOAD`` or the
like of the run's). The run's environment goes in through ``--clearenv`` and ``--setenv`` pairs read
from an unlinked file (``--args FD``): inside the sandbox it is exactly the one given, and it is never
on a command line, which every user of the machine could read in ``/proc/PID/cmdline``.

A run's network (:class:`~factoryctl.worker.egress_sandbox.SandboxNetwork`, docs/workers.md,
"Network") adds either ``--share-net`` (``open``: the host's network) or the egress relay, which starts
ARGV with the proxy variables pointing at the worker's egress proxy. Without one (the probe, a sandbox no
run owns) there is no network at all.

Whether bwrap works is probed once per :class:`Sandbox` (``bwrap ... true`` with the same
arguments a run gets) and cached: install bubblewrap, then restart the worker.
"""

from __future__ import annotations

import asyncio
import copy
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from factoryctl.worker.egress_sandbox import SandboxNetwork
from factoryctl.worker.errors import SandboxUnavailable
from factoryctl.worker.job import Job
from factoryctl.worker.netpolicy import NetworkPolicy

DEFAULT_BWRAP = "bwrap"
ERROR_CODE = SandboxUnavailable.error_code
SANDBOX_HOME = "/home/sandbox"
SANDBOX_TMP = "/tmp"  # noqa: S108 - a fresh tmpfs inside the sandbox, not the host's /tmp
PROBE_TIMEOUT_SECONDS = 10.0
# The environment bwrap itself starts with, on the host: fixed, whatever the run asked for.
LAUNCH_ENV = {"PATH": "/usr/bin:/bin"}
BASE_VARIABLES = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM")
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What programs need from /etc to run, and nothing that may hold a credential.
ETC_FILES = (
    "/etc/alternatives",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/debian_version",
    "/etc/gai.conf",
    "/etc/group",
    "/etc/host.conf",
    "/etc/hosts",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/locale.alias",
    "/etc/localtime",
    "/etc/mime.types",
    "/etc/nsswitch.conf",
    "/etc/os-release",
    "/etc/passwd",
    "/etc/protocols",
    "/etc/resolv.conf",
    "/etc/services",
    "/etc/ssl/certs",
    "/etc/timezone",
)


class Sandbox:
    """How to confine a run-controlled process; ``bwrap`` is the executable (a name looked up on PATH,
    or a path), ``read_only``/``writable`` the operator's extra directories, bound at their own path.
    ``address_refusal``: the rule the egress proxy applies to the addresses a destination that is not
    listed by name resolves to (``store.rules.addresspolicy``'s, given by the worker's entry point; None:
    :func:`factoryctl.worker.egress.public_only`). ``network``: set per run by :meth:`with_network`.

    What the operator lets a run's environment choose (docs/workers.md, "Network"): ``open_network``
    whether ``mode: open`` (the host's network) is honoured — otherwise the run gets an allowlist of its
    model endpoint alone; ``listed_private`` whether a listed destination may reach a private, loopback
    or link-local address. ``serve`` (one machine shared by every team) allows neither unless told to;
    a self-hosted worker (a machine of its team's own) allows both."""

    network: SandboxNetwork | None = None

    def __init__(
        self,
        bwrap: str = DEFAULT_BWRAP,
        *,
        read_only: Iterable[Path] = (),
        writable: Iterable[Path] = (),
        address_refusal: Callable[[str], str | None] | None = None,
        open_network: bool = True,
        listed_private: bool = True,
    ) -> None:
        self.bwrap = bwrap
        # Resolved once, with the worker's own PATH: a run's PATH never chooses what runs on the host.
        self.executable = bwrap if os.path.isabs(bwrap) else shutil.which(bwrap) or bwrap
        self.read_only = tuple(Path(p) for p in read_only)
        self.writable = tuple(Path(p) for p in writable)
        self.address_refusal = address_refusal
        self.open_network = open_network
        self.listed_private = listed_private
        self._lock = threading.Lock()
        self._probed = False
        self._problem: str | None = None

    def __repr__(self) -> str:
        return f"Sandbox(bwrap={self.bwrap!r})"

    def policy(self, requested: NetworkPolicy) -> NetworkPolicy:
        """The policy a run asking for ``requested`` gets here: ``open`` only where the operator allows it
        (else an allowlist with no entries: the model endpoint alone)."""
        if requested.mode == "open" and not self.open_network:
            return NetworkPolicy("allowlist", ())
        return requested

    def with_network(self, network: SandboxNetwork) -> Sandbox:
        """This sandbox for one run's processes, with that run's network (the probe result is shared)."""
        run = copy.copy(self)
        run.network = network
        return run

    def argv(
        self,
        argv: Sequence[str],
        workspace: Path,
        *,
        args_fd: int | None = None,
        read_only: Sequence[Path] = (),
        writable: Sequence[Path] = (),
    ) -> list[str]:
        """The bwrap command line that runs ``argv`` in ``workspace`` inside the sandbox; ``args_fd``: a
        descriptor bwrap reads more NUL-separated arguments from (the environment, :func:`start_process`);
        ``read_only``/``writable``: directories of this one process (an agent CLI's install directory, the
        run's agent home), bound at their own path besides the operator's."""
        ws = str(workspace)
        out = [self.executable, *(["--args", str(args_fd)] if args_fd is not None else [])]
        out += ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
        if self.network is not None:
            out += self.network.bwrap_args()
        for top in SYSTEM_DIRS:
            if os.path.islink(top):  # merged /usr: /bin -> usr/bin
                out += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                out += ["--ro-bind", top, top]
        for name in ETC_FILES:
            out += ["--ro-bind-try", name, name]
        out += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", SANDBOX_TMP, "--tmpfs", SANDBOX_HOME]
        for path in self.read_only:
            out += ["--ro-bind", str(path), str(path)]
        for path in self.writable:
            out += ["--bind", str(path), str(path)]
        for path in read_only:
            out += ["--ro-bind", str(path), str(path)]
        for path in writable:
            out += ["--bind", str(path), str(path)]
        command = self.network.command(argv) if self.network is not None else list(argv)
        out += ["--bind", ws, ws, "--chdir", ws, "--", *command]
        return out

    @staticmethod
    def environment(env: Mapping[str, str], home: Path | None = None) -> dict[str, str]:
        """``env`` with ``HOME`` and ``TMPDIR`` pointing at the sandbox's own empty directories (``HOME``:
        ``home`` when the process has its own, bound into the sandbox)."""
        return {**env, "HOME": str(home) if home is not None else SANDBOX_HOME, "TMPDIR": SANDBOX_TMP}

    @classmethod
    def environment_args(cls, env: Mapping[str, str], home: Path | None = None) -> bytes:
        """The ``--args`` payload that gives the sandboxed process exactly :meth:`environment` of ``env``."""
        parts = ["--clearenv"]
        for name, value in cls.environment(env, home).items():
            parts += ["--setenv", name, value]
        return b"".join(part.encode("utf-8", "surrogateescape") + b"\0" for part in parts)

    def problem(self) -> str | None:
        """Why this sandbox cannot be used on this machine, or None when it works (probed once)."""
        with self._lock:
            if not self._probed:
                self._problem = self._probe()
                self._probed = True
            return self._problem

    def available(self) -> bool:
        return self.problem() is None

    def _probe(self) -> str | None:
        with tempfile.TemporaryDirectory(prefix="factoryctl-sandbox-probe-") as scratch:
            try:
                done = subprocess.run(
                    self.argv(["true"], Path(scratch)),
                    env=LAUNCH_ENV,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=PROBE_TIMEOUT_SECONDS,
                    check=False,
                )
            except FileNotFoundError:
                return f"bubblewrap is not installed ({self.bwrap!r} not found)"
            except (OSError, subprocess.TimeoutExpired) as exc:
                return f"{self.bwrap} cannot be run: {exc}"
        if done.returncode != 0:
            reason = done.stderr.decode(errors="replace").strip().splitlines()
            return f"{self.bwrap} does not work here: {reason[-1] if reason else f'exit {done.returncode}'}"
        return None


async def start_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    sandbox: Sandbox | None,
    home: Path | None = None,
    read_only: Sequence[Path] = (),
    **streams: Any,
) -> asyncio.subprocess.Process:
    """Start a run-controlled process in its own process group: inside ``sandbox`` (confined to the
    workspace ``cwd``) or, with None, on the worker's host. ``streams``: ``stdin``/``stdout``/``stderr``.

    ``home``: the process's own home directory (an agent preset's per-run agent home), bound writable
    into the sandbox and its ``HOME`` there; ``read_only``: more directories it must see (the agent
    CLI's installation). On the host, ``env`` is used as given.

    Killing the group kills the whole sandbox: bwrap is the group's leader and ``--die-with-parent``
    takes everything inside with it.
    """
    if sandbox is None:
        return await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=dict(env), start_new_session=True, **streams
        )
    writable = [home] if home is not None else []
    with tempfile.TemporaryFile() as spec:  # unlinked: only bwrap's inherited descriptor reaches it
        spec.write(sandbox.environment_args(env, home))
        spec.flush()
        spec.seek(0)
        return await asyncio.create_subprocess_exec(
            *sandbox.argv(argv, cwd, args_fd=spec.fileno(), read_only=read_only, writable=writable),
            cwd=cwd,
            env=LAUNCH_ENV,
            start_new_session=True,
            pass_fds=(spec.fileno(),),
            **streams,
        )


def service_environment(env: Mapping[str, str], passed: Iterable[str] = ()) -> dict[str, str]:
    """What of the server's environment a service-hosted run's processes start from: ``PATH``, the locale
    (``LANG``, ``LANGUAGE``, ``LC_*``), ``TZ``, ``TERM`` and the variables the operator names
    (``serve --agent-env NAME``). Never the rest: it holds the server's own credentials (a database
    password, cloud keys) that a setup command would print to a log its team reads."""
    names = {*BASE_VARIABLES, *passed}
    return {k: v for k, v in env.items() if k in names or k.startswith("LC_")}


def run_controlled(job: Job, *, harness: bool) -> list[str]:
    """What of ``job`` would start a run-controlled process (empty: nothing, no sandbox needed);
    ``harness``: its harness runs as a process (every harness does: docs/workers.md, "Sandbox")."""
    found = []
    if job.environment and job.environment.get("setup"):
        found.append("environment setup commands")
    if job.runner and job.runner.get("setup_commands"):
        found.append("runner setup commands")
    if any("command" in server for server in job.mcp_servers.values()):
        found.append("stdio MCP servers")
    if harness:
        found.append("the run's harness")
    return found


def refusal_message(needs: Sequence[str], problem: str) -> str:
    """The status message of a run refused for want of a sandbox (docs/workers.md, "Sandbox")."""
    return (
        f"this run needs a sandbox ({', '.join(needs)}): this worker starts such processes only inside "
        f"one, and none works on its machine ({problem}). Install bubblewrap (`apt-get install "
        "bubblewrap`) and restart the worker (`factoryctl serve` for service-hosted runs), or send the "
        "run to a self-hosted worker (config.worker_host)"
    )


def overlap(path: Path, other: Path) -> bool:
    """Whether one of two directories is the other or inside it (after resolving symlinks)."""
    a, b = path.resolve(), other.resolve()
    return a == b or a.is_relative_to(b) or b.is_relative_to(a)


def check_layout(
    guarded: Sequence[Path],
    workspace_root: Path | None,
    read_only: Iterable[Path] = (),
    writable: Iterable[Path] = (),
) -> None:
    """Refuse a layout that would put the server's files (``guarded``: the data directory, a SQLite
    database's directory) within reach of a run: a workspace root overlapping one, an extra sandbox
    directory overlapping one or the workspace root, or one inside a system directory every sandbox
    sees. Raises ValueError with what to change."""
    for path in guarded:
        if workspace_root is not None and overlap(workspace_root, path):
            raise ValueError(
                f"the workspace directory {workspace_root} overlaps {path}, which holds the server's key "
                "or database: runs would reach them; choose a workspace directory outside it"
            )
        system = next((d for d in SYSTEM_DIRS if path.resolve().is_relative_to(Path(d).resolve())), None)
        if system is not None:
            raise ValueError(f"{path} is inside {system}, which every sandbox sees read-only; move it")
    for extra in (*read_only, *writable):
        if not Path(extra).is_dir():
            raise ValueError(f"sandbox directory {extra} does not exist or is not a directory")
        for other in (*guarded, *([workspace_root] if workspace_root is not None else [])):
            if overlap(Path(extra), other):
                raise ValueError(f"sandbox directory {extra} overlaps {other}, which runs must not reach")


async def sandbox_for(job: Job, *, harness: bool, sandbox: Sandbox | None, required: bool) -> Sandbox | None:
    """The sandbox ``job``'s run-controlled processes start in, None for the worker's host.

    ``required`` (service-hosted workers): a job that would start such a process with no working
    sandbox raises :class:`SandboxUnavailable`. Otherwise a missing or broken sandbox means the host.
    ``harness``: the job's harness runs as a process (the worker passes True: every harness does).
    """
    needs = run_controlled(job, harness=harness)
    if not needs:
        return None
    problem = "no sandbox is configured" if sandbox is None else await asyncio.to_thread(sandbox.problem)
    if problem is None:
        return sandbox
    if required:
        raise SandboxUnavailable(refusal_message(needs, problem))
    return None
