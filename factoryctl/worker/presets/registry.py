"""The agent presets this worker knows (:data:`PRESETS`), and finding a preset's CLI at worker start.

A preset module (``claude``, ``codex``, ``gemini``) exports ``PRESET``; :func:`load_presets` imports
each one that is present, so a worker built without one still starts (and offers the others).

A worker that offers a preset finds its CLI once, when it starts (:func:`find_cli`): the path given
with ``--agent-cli NAME=PATH``, else the preset's command name on ``PATH``. It runs ``<cli> --version``
and refuses a CLI that is missing, does not say its version, or is older than the preset's
``minimum_version`` (:class:`AgentCliProblem`, which ``factoryctl worker`` and ``serve`` turn into exit
status 2). Runs never choose the CLI: they get the one found here (docs/workers.md, "Harnesses").
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from factoryctl.worker.errors import HarnessError
from factoryctl.worker.presets.base import Preset
from factoryctl.worker.sandbox import SYSTEM_DIRS

PRESET_TYPES = ("claude", "codex", "gemini")  # the SDK's harness types beside "oz"
NPM_PACKAGES = {  # where each CLI comes from, for the error that says how to install it
    "claude": "@anthropic-ai/claude-code",
    "codex": "@openai/codex",
    "gemini": "@google/gemini-cli",
}
VERSION_TIMEOUT_SECONDS = 30.0


class AgentCliProblem(HarnessError):
    """A preset's CLI is missing, unreadable or too old: the worker does not start."""


@dataclass(frozen=True)
class AgentCli:
    """A preset's CLI as found at worker start: its absolute path, its version, and the directories a
    sandbox must show (read-only) for it to run there (its ``node_modules``, or its own directory)."""

    preset: Preset
    executable: str
    version: tuple[int, ...]
    install_dirs: tuple[Path, ...] = ()


def load_presets(names: tuple[str, ...] = PRESET_TYPES) -> dict[str, Preset]:
    """``PRESET`` of each preset module present, by name."""
    found: dict[str, Preset] = {}
    for name in names:
        try:
            module = importlib.import_module(f"factoryctl.worker.presets.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"factoryctl.worker.presets.{name}":
                raise  # the module exists but something it imports does not: a real bug
            continue
        found[name] = module.PRESET
    return found


PRESETS: dict[str, Preset] = load_presets()


def version_text(version: tuple[int, ...]) -> str:
    return ".".join(str(part) for part in version)


def find_cli(
    preset: Preset, configured: str | None = None, *, env: Mapping[str, str] | None = None
) -> AgentCli:
    """``preset``'s CLI: ``configured`` (a path, or a command name looked up on ``PATH``), else its
    command name on ``PATH`` (from ``env``, default this process's), checked with ``--version``.

    Raises :class:`AgentCliProblem` naming the CLI, the version found and the minimum.
    """
    env = os.environ if env is None else env
    wanted = configured or preset.executable
    minimum = version_text(preset.minimum_version)
    how = (
        f"install it (npm install -g {NPM_PACKAGES.get(preset.name, preset.executable)}@{minimum} or newer) "
        f"or point at it with --agent-cli {preset.name}=PATH"
    )
    found = shutil.which(wanted, path=env.get("PATH", os.defpath))
    if found is None:
        where = f"at {wanted}" if configured else "on PATH"
        raise AgentCliProblem(
            f"the {preset.name} harness needs its CLI `{preset.executable}` {minimum} or newer, and none is "
            f"{where} (or it is not executable): {how}"
        )
    executable = os.path.abspath(found)
    output = _version_output(executable, env)
    version = preset.version(output)
    if version is None:
        first = output.strip().splitlines()[0][:200] if output.strip() else "(nothing)"
        raise AgentCliProblem(
            f"the {preset.name} harness cannot tell the version of {executable}: `--version` printed "
            f"{first!r}; it needs `{preset.executable}` {minimum} or newer: {how}"
        )
    if version < tuple(preset.minimum_version):
        raise AgentCliProblem(
            f"the {preset.name} harness needs `{preset.executable}` {minimum} or newer, and {executable} "
            f"is version {version_text(version)}: {how}"
        )
    return AgentCli(preset, executable, version, install_dirs(executable))


def install_dirs(executable: str) -> tuple[Path, ...]:
    """What a sandbox must show for ``executable`` to run: the ``node_modules`` it is installed in (npm
    CLIs load their bundle and native binary from there), else its own directory; and, for a Node script,
    the directory of ``node``. Nothing inside the system directories every sandbox already sees."""
    real = Path(os.path.realpath(executable))
    dirs = [next((p for p in real.parents if p.name == "node_modules"), real.parent)]
    try:
        with open(real, "rb") as handle:
            head = handle.read(128)
    except OSError:
        head = b""
    if head.startswith(b"#!") and b"node" in head.split(b"\n", 1)[0]:
        node = shutil.which("node")
        if node is not None:
            dirs.append(Path(os.path.realpath(node)).parent)
    system = [Path(d).resolve() for d in SYSTEM_DIRS if os.path.isdir(d)]
    kept: list[Path] = []
    for path in dirs:
        if not any(path.is_relative_to(s) for s in system) and path not in kept:
            kept.append(path)
    return tuple(kept)


def _version_output(executable: str, env: Mapping[str, str]) -> str:
    # A scratch HOME: a CLI that writes its settings on first start writes them nowhere that matters.
    with tempfile.TemporaryDirectory(prefix="factoryctl-cli-version-") as home:
        try:
            done = subprocess.run(
                [executable, "--version"],
                env={**env, "HOME": home},
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=VERSION_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise AgentCliProblem(f"cannot run `{executable} --version`: {exc}") from exc
    return done.stdout.decode(errors="replace") + "\n" + done.stderr.decode(errors="replace")


def parse_agent_cli(values: Iterable[str]) -> dict[str, str]:
    """``--agent-cli NAME=PATH`` values (or ``FACTORY_AGENT_CLI``'s comma-separated ones) by preset name;
    raises ValueError for a malformed one or an unknown name."""
    paths: dict[str, str] = {}
    for value in values:
        name, sep, path = value.partition("=")
        name = name.strip()
        if not sep or not path.strip():
            raise ValueError(f"--agent-cli {value!r}: expected NAME=PATH (e.g. claude=/opt/bin/claude)")
        if name not in PRESET_TYPES:
            raise ValueError(f"--agent-cli {value!r}: {name!r} is not a preset ({', '.join(PRESET_TYPES)})")
        paths[name] = path.strip()
    return paths


def agents_for(
    harness: str, paths: Mapping[str, str], *, env: Mapping[str, str] | None = None
) -> dict[str, AgentCli]:
    """The agent CLIs a worker whose default harness is ``harness`` offers: that preset's, found and
    checked (:func:`find_cli`), or none. Raises :class:`AgentCliProblem` for a CLI that is missing or
    too old, a preset this installation lacks, or a path given for a preset the worker does not run."""
    for name in paths:
        if name != harness:
            raise AgentCliProblem(
                f"--agent-cli {name}=... names a preset this worker does not run: it runs {harness!r} "
                f"(--harness); a worker offers echo, its --harness and command (docs/workers.md, 'Harnesses')"
            )
    if harness not in PRESET_TYPES:
        return {}
    preset = PRESETS.get(harness)
    if preset is None:
        raise AgentCliProblem(f"the {harness} preset is not part of this factoryctl installation")
    return {harness: find_cli(preset, paths.get(harness), env=env)}
