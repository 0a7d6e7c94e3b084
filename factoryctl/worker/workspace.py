"""Per-run workspaces: a fresh private directory holding the run's files, removed afterwards.

Layout of ``<base>/<run_id>-<random>/``:

- every attachment, under a sanitised basename (:func:`safe_file_name`); a name that collides
  with another attachment or a reserved file gets a ``-1``, ``-2``... suffix before its extension;
- ``PROMPT.md``: the assembled prompt (also fed on stdin by the command harness);
- ``.mcp.json``: ``{"mcpServers": {name: {...}}}``, the shape Claude Code-style CLIs read, when the
  run has MCP servers (mode 0600: resolved headers and env may hold secrets);
- ``.factory/skills/<skill_name>/SKILL.md``: the run's skills (:func:`skill_text`), when it has any;
  the harness finds them through ``FACTORY_SKILLS_DIR``. Environment repositories are cloned beside it.
- ``.factory/outputs/``: empty; what the agent writes there (``FACTORY_OUTPUTS``), and the links it
  declares in ``.factory/artifacts.jsonl`` (``FACTORY_ARTIFACTS_FILE``), become the run's artifacts
  (:mod:`factoryctl.worker.artifacts`).

Beside it, ``<base>/<run_id>-<random>.home/`` is the run's agent home (:func:`agent_home`): an agent
preset's ``HOME`` and its CLI's configuration and session files, outside the workspace so the agent's
checkout never holds them; :func:`remove_workspace` removes both.

Attachment names come from webhook senders and API callers, so they are never trusted as paths.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from factoryctl.worker import WorkspaceError
from factoryctl.worker.artifacts import artifacts_file, outputs_dir
from factoryctl.worker.job import Job

PROMPT_FILE = "PROMPT.md"
MCP_CONFIG_FILE = ".mcp.json"
RESULT_FILE = "RESULT.md"
SKILLS_DIR = ".factory/skills"
RESERVED_NAMES = frozenset({PROMPT_FILE, MCP_CONFIG_FILE, ".factory"})
DEFINED_BY = "environment"  # on a command server of the claim: the environment that defined it
MAX_NAME_BYTES = 200

_UNSAFE_CHARS = re.compile(r"[\x00-\x1f\x7f]")
_PLAIN_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")


def safe_file_name(name: str, *, fallback: str = "attachment") -> str:
    """Reduce an untrusted name to a plain basename that cannot leave the workspace.

    Drops any directory part (``/`` or ``\\``), control characters and NUL; ``.``, ``..`` and
    empty results become ``fallback``; overlong names are shortened, keeping the extension.
    """
    base = re.split(r"[/\\]", name)[-1]
    base = _UNSAFE_CHARS.sub("", base).strip()
    if base in {"", ".", ".."}:
        return fallback
    if len(base.encode()) > MAX_NAME_BYTES:
        stem, dot, ext = base.rpartition(".")
        ext = f".{ext}" if dot and stem and len(ext) <= 16 else ""
        budget = MAX_NAME_BYTES - len(ext.encode())
        base = base[: len(base) - len(ext)].encode()[:budget].decode(errors="ignore") + ext
    return base


def attachment_names(names: Sequence[str], *, reserved: frozenset[str] = RESERVED_NAMES) -> list[str]:
    """The file name each attachment is written under: sanitised and unique, in input order."""
    taken = set(reserved)
    result = []
    for name in names:
        candidate = safe_file_name(name)
        stem, dot, ext = candidate.rpartition(".")
        if not dot or not stem:
            stem, ext = candidate, ""
        else:
            ext = f".{ext}"
        n = 0
        while candidate in taken:
            n += 1
            candidate = f"{stem}-{n}{ext}"
        taken.add(candidate)
        result.append(candidate)
    return result


def mcp_config(servers: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """``.mcp.json`` content for the run's MCP servers.

    ``{command, args?, env?}`` stays a stdio server (``args`` defaults to ``[]``) only when it carries
    the environment that defined it (:data:`DEFINED_BY`, set by the server when it expands a run's
    reference; dropped here): a command any other source names — a run's own config, an older server —
    is refused, so no run's creator chooses a program (docs/agent-config.md, "MCP servers"). ``{url,
    headers?}`` gets ``"type": "http"`` unless a type is given; ``{error}`` (a server the claim could not
    expand) is refused; unexpanded ``{warp_id}`` entries (an older server) are left out.
    """
    entries: dict[str, Any] = {}
    for name, server in servers.items():
        entry = dict(server)
        if "error" in entry:
            raise WorkspaceError(f"MCP server {name!r}: {entry['error']}")
        if "warp_id" in entry and "command" not in entry and "url" not in entry:
            continue
        if "command" in entry:
            if not entry.pop(DEFINED_BY, None):
                why = "may not start a command: only an environment's mcpServers define one"
                raise WorkspaceError(f"MCP server {name!r} {why}")
            entry.setdefault("args", [])
        elif "url" in entry:
            entry.setdefault("type", "http")
        else:
            raise WorkspaceError(f"MCP server {name!r} has no command or url")
        entries[name] = entry
    return {"mcpServers": entries}


def create_workspace(base_dir: Path, job: Job) -> Path:
    """Create ``<base_dir>/<run_id>-<random>`` (mode 0700) and write the run's files into it."""
    try:
        base_dir.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=f"{safe_file_name(job.run_id, fallback='run')}-", dir=base_dir))
    except OSError as exc:
        raise WorkspaceError(f"cannot create a workspace under {base_dir}: {exc}") from exc
    try:
        names = attachment_names([a.file_name for a in job.attachments])
        for attachment, name in zip(job.attachments, names, strict=True):
            _write_new(path / name, attachment.data)
        _write_new(path / PROMPT_FILE, job.prompt.encode())
        if job.mcp_servers:
            config = json.dumps(mcp_config(job.mcp_servers), indent=2, sort_keys=True)
            _write_new(path / MCP_CONFIG_FILE, config.encode(), mode=0o600)
        write_skills(path, job.skills)
        outputs_dir(path).mkdir(parents=True)
    except BaseException as exc:
        remove_workspace(path)
        if isinstance(exc, OSError):
            raise WorkspaceError(f"cannot write the workspace {path}: {exc}") from exc
        raise
    return path


def write_skills(workspace: Path, skills: Sequence[Mapping[str, Any]]) -> Path | None:
    """Write each skill as ``<workspace>/.factory/skills/<skill_name>/SKILL.md``; the directory, or None.

    Two skills of one ``skill_name`` (a factory-wide skill and the agent's own of that name): the later
    one in the run's list, the agent's own, wins. ``skill_name`` was checked to be one plain path segment
    (:func:`factoryctl.worker.job.parse_skill`) and is checked again here.
    """
    if not skills:
        return None
    by_name = {str(s["skill_name"]): s for s in skills}
    root = workspace.joinpath(*SKILLS_DIR.split("/"))
    root.mkdir(parents=True)
    for name, skill in by_name.items():
        if safe_file_name(name, fallback="") != name or name.startswith("."):
            raise WorkspaceError(f"skill name {name!r} is not a plain directory name")
        (root / name).mkdir()
        _write_new(root / name / "SKILL.md", skill_text(skill).encode())
    return root


def skill_text(skill: Mapping[str, Any]) -> str:
    """A ``SKILL.md``: front matter (the stored keys, ``name`` and ``description`` from the skill), then
    the body. Values are written as JSON, which YAML reads as the same strings, lists and maps."""
    front = {**dict(skill.get("front_matter") or {}), "name": skill["skill_name"]}
    if skill.get("description"):
        front["description"] = skill["description"]
    lines = [f"{_yaml_key(str(k))}: {json.dumps(v, ensure_ascii=False)}" for k, v in front.items()]
    return "---\n" + "\n".join(lines) + "\n---\n\n" + str(skill.get("body") or "").strip("\n") + "\n"


def _yaml_key(key: str) -> str:
    return key if _PLAIN_KEY.fullmatch(key) else json.dumps(key)


def agent_home(workspace: Path) -> Path:
    """The run's agent home: ``<workspace>.home``, a sibling of the workspace (docs/workers.md,
    "Harnesses"), created by the preset harness and removed with the workspace."""
    return workspace.with_name(workspace.name + ".home")


def run_environment(
    base: Mapping[str, str], job: Job, workspace: Path, model_id: str | None
) -> dict[str, str]:
    """The environment of a harness process: ``base``, then the job environment's env and secrets, then
    ``FACTORY_RUN_ID``, ``FACTORY_MODEL_ID`` (when ``model_id``), ``FACTORY_WORKSPACE``,
    ``FACTORY_PROMPT_FILE``, ``FACTORY_OUTPUTS``, ``FACTORY_ARTIFACTS_FILE`` and ``FACTORY_SKILLS_DIR``
    (when the run has skills)."""
    env = dict(base)
    env.update(job.environment_variables())
    for name in ("FACTORY_MODEL_ID", "FACTORY_SKILLS_DIR"):
        env.pop(name, None)
    env["FACTORY_RUN_ID"] = job.run_id
    if model_id:
        env["FACTORY_MODEL_ID"] = model_id
    env["FACTORY_WORKSPACE"] = str(workspace)
    env["FACTORY_PROMPT_FILE"] = str(workspace / PROMPT_FILE)
    env["FACTORY_OUTPUTS"] = str(outputs_dir(workspace))
    env["FACTORY_ARTIFACTS_FILE"] = str(artifacts_file(workspace))
    if job.skills:
        env["FACTORY_SKILLS_DIR"] = str(workspace.joinpath(*SKILLS_DIR.split("/")))
    return env


def remove_workspace(path: Path) -> None:
    """Delete a workspace and its agent home, including read-only directories a tool may have left."""
    for target, what in ((path, "workspace"), (agent_home(path), "agent home")):
        if not os.path.lexists(target):
            continue
        try:
            shutil.rmtree(target, onerror=_make_writable_and_retry)
        except OSError as exc:
            raise WorkspaceError(f"cannot remove the {what} {target}: {exc}") from exc


@contextmanager
def workspace(base_dir: Path, job: Job, *, keep: bool = False) -> Iterator[Path]:
    """A fresh workspace for ``job``, removed on exit unless ``keep`` (for debugging a run)."""
    path = create_workspace(base_dir, job)
    try:
        yield path
    finally:
        if not keep:
            remove_workspace(path)


def replace_file(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write ``data`` at ``path`` in a workspace that run-controlled processes have used: whatever they
    left at that name (a symlink to a file of the host's, a directory) is removed, never written through
    (docs/workers.md, "Sandbox")."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        shutil.rmtree(path)
    _write_new(path, data, mode=mode)


def write_missing(path: Path, data: bytes) -> None:
    """Write ``data`` at ``path`` when nothing - not even a dangling symlink - is there."""
    if not os.path.lexists(path):
        _write_new(path, data)


def _write_new(path: Path, data: bytes, *, mode: int = 0o644) -> None:
    # O_EXCL|O_NOFOLLOW: never write through something that already exists at that name.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _make_writable_and_retry(func: Callable[..., Any], path: str, _exc_info: Any) -> None:
    # Called by rmtree for an entry it could not remove or open: grant ourselves access, retry once.
    if not os.path.lexists(path):
        return
    parent = os.path.dirname(path)
    os.chmod(parent, os.stat(parent).st_mode | stat.S_IRWXU)
    is_dir = os.path.isdir(path) and not os.path.islink(path)
    if is_dir:
        os.chmod(path, os.stat(path).st_mode | stat.S_IRWXU)
    if func in (os.unlink, os.remove, os.rmdir):
        func(path)
    elif is_dir:
        shutil.rmtree(path)
