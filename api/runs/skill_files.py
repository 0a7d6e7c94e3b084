"""What may be a skill inside a repository, and the one reader of a SKILL.md (docs/agent-config.md, "Skills").

A skill is a regular file named exactly ``SKILL.md`` in one of the allowed layouts (:func:`layout_problem`):

- ``<dir>/<name>/SKILL.md``, ``<dir>`` one of :data:`SKILL_DIRS` (the product's project skill directories);
- ``agents/<agent>/skills/<name>/SKILL.md`` (a factory agent's own skills);
- ``<name>/SKILL.md`` (a repository of skills, laid out like the product's bundled skills).

The rule is applied twice: to the path a spec names, before any repository is touched, and to the file's
real path once every symlink is resolved, so a ``SKILL.md`` symlinked to ``.git/config``, a README or
anything outside the repository is refused. No path component is ever ``.git`` in any case. The file is
opened without following a last symlink, must be a regular file (a FIFO would block the reader) and is
read up to :data:`MAX_SKILL_BYTES`.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

MAX_SKILL_BYTES = 256 * 1024
SKILL_FILE = "SKILL.md"
# Looked up in this order by name (``owner/repo:name``), then ``<name>/SKILL.md``; the first three are the
# historical ones, the rest the product's other project skill directories.
SKILL_DIRS = (
    "skills",
    ".agents/skills",
    ".claude/skills",
    ".warp/skills",
    ".codex/skills",
    ".cursor/skills",
    ".gemini/skills",
    ".copilot/skills",
    ".factory/skills",
    ".github/skills",
    ".opencode/skills",
)
# What a sparse checkout of a cached clone holds: exactly the files the layouts allow (gitignore syntax).
SPARSE_PATTERNS = (
    *(f"/{folder}/*/{SKILL_FILE}" for folder in SKILL_DIRS),
    f"/agents/*/skills/*/{SKILL_FILE}",
    f"/*/{SKILL_FILE}",
)
MAX_LISTED_SKILLS = 100  # SKILL.md files listed per repository (docs/api.md, "Agents (skills)")
MAX_DIR_ENTRIES = 1000  # entries read from one skills directory while listing
SKILL_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$")
LAYOUTS = (
    f"<dir>/<name>/{SKILL_FILE} (<dir>: {', '.join(SKILL_DIRS)}), "
    f"agents/<agent>/skills/<name>/{SKILL_FILE} or <name>/{SKILL_FILE}"
)
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)


class SkillUnavailable(Exception):
    """A skill cannot be used: bad spec, unknown repository or skill, unsafe path, oversize file."""


class OutsideRepository(SkillUnavailable):
    """A path whose real location (symlinks resolved) is outside the repository.

    Resolution reports it; listing skips the entry without a word, so a listing never tells whether a
    file outside the repository exists."""


@dataclass(frozen=True)
class SkillRef:
    """A parsed skill spec: either ``skill`` (a name) or ``path`` (a file in the repository)."""

    spec: str
    owner: str
    repo: str
    skill: str | None = None
    path: str | None = None


@dataclass(frozen=True)
class ResolvedSkill:
    spec: str
    name: str
    description: str | None
    body: str


@dataclass(frozen=True)
class ListedSkill:
    """One SKILL.md found by listing: ``skill`` when it reads and parses, else ``error`` says why.

    ``name`` is the skill's name (front matter ``name``, else its directory's name)."""

    path: str
    name: str
    skill: ResolvedSkill | None = None
    error: str | None = None


def layout_problem(relative: str) -> str | None:
    """Why the repository path ``relative`` (``/``-separated, no ``..``) is not a skill; None when it is."""
    parts = PurePosixPath(relative).parts
    if any(_is_git_dir(part) for part in parts):
        return "a path through '.git' is never a skill"
    if not parts or parts[-1] != SKILL_FILE:
        return f"only files named {SKILL_FILE} are skills"
    if len(parts) < 2 or not SKILL_NAME.match(parts[-2]):
        return f"a {SKILL_FILE} must be in its own directory, named like a skill"
    folder = "/".join(parts[:-2])
    agent = len(parts) == 5 and parts[0] == "agents" and parts[2] == "skills" and SKILL_NAME.match(parts[1])
    if folder == "" or folder in SKILL_DIRS or agent:
        return None
    return f"{relative} is not in an allowed layout: {LAYOUTS}"


def _is_git_dir(part: str) -> bool:
    """``.git`` in any case, also as Windows and macOS would read it (``.git.``, ``.git ``, ``git~1``)."""
    lowered = part.lower()
    return lowered.rstrip(". ") == ".git" or lowered == "git~1"


def lookup_paths(name: str) -> list[str]:
    """Where ``owner/repo:name`` is looked for, in order."""
    return [*(f"{folder}/{name}/{SKILL_FILE}" for folder in SKILL_DIRS), f"{name}/{SKILL_FILE}"]


def parse_skill_file(text: str) -> tuple[dict[str, Any], str]:
    """Split a SKILL.md into its YAML front matter (``{}`` when absent) and its body."""
    match = _FRONT_MATTER.match(text)
    if not match:
        return {}, text.strip()
    try:
        meta = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise SkillUnavailable(f"the front matter is not valid YAML: {exc}") from None
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise SkillUnavailable("the front matter must be a YAML mapping")
    return meta, text[match.end() :].strip()


def skill_from_text(ref: SkillRef, text: str, where: str) -> ResolvedSkill:
    """The resolved skill of a SKILL.md's text; its name defaults to the skill's directory name."""
    meta, body = parse_skill_file(text)
    if not body:
        raise SkillUnavailable(f"{ref.spec!r}: {where} has no instructions after its front matter")
    name = meta.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise SkillUnavailable(f"{ref.spec!r}: the front matter 'name' must be a non-empty string")
    fallback = ref.skill or PurePosixPath(where).parent.name or ref.repo
    description = meta.get("description")
    return ResolvedSkill(
        spec=ref.spec,
        name=(name or fallback).strip()[:200],
        description=description if isinstance(description, str) else None,
        body=body,
    )


def read_skill_file(base: Path, relative: str, ref: SkillRef) -> ResolvedSkill:
    """The one reader of a SKILL.md, for resolution and listing: ``relative`` inside the resolved checkout
    ``base``, in an allowed layout before and after every symlink (outside the repository:
    :class:`OutsideRepository`), a regular file of at most :data:`MAX_SKILL_BYTES`, UTF-8, with
    instructions after its front matter."""
    problem = layout_problem(relative)
    if problem is not None:
        raise SkillUnavailable(f"{ref.spec!r}: {problem}")
    real = _real(base.joinpath(*PurePosixPath(relative).parts))
    if real is None:
        raise SkillUnavailable(f"{ref.spec!r}: {relative} cannot be resolved (a symlink loop?)")
    if not real.is_relative_to(base):
        raise OutsideRepository(f"{ref.spec!r}: {relative} points outside the repository")
    target = real.relative_to(base).as_posix()
    if target != relative and layout_problem(target) is not None:
        raise SkillUnavailable(f"{ref.spec!r}: {relative} is a symlink to a file that is not a skill")
    raw = _read_regular(real, ref, relative)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SkillUnavailable(f"{ref.spec!r}: {relative} is not UTF-8 text") from None
    return skill_from_text(ref, text, relative)


def _read_regular(real: Path, ref: SkillRef, relative: str) -> bytes:
    """At most :data:`MAX_SKILL_BYTES` of the regular file ``real`` (no last symlink, never a FIFO/device)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(real, flags)
    except FileNotFoundError:
        raise SkillUnavailable(f"{ref.spec!r}: {relative} does not exist") from None
    except OSError:
        raise SkillUnavailable(f"{ref.spec!r}: {relative} is not a regular file") from None
    with contextlib.closing(os.fdopen(fd, "rb")) as file:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise SkillUnavailable(f"{ref.spec!r}: {relative} is not a regular file")
        if info.st_size > MAX_SKILL_BYTES:
            raise SkillUnavailable(
                f"{ref.spec!r}: {relative} is {info.st_size} bytes; a SKILL.md may be at most "
                f"{MAX_SKILL_BYTES} bytes"
            )
        return file.read(MAX_SKILL_BYTES + 1)[:MAX_SKILL_BYTES]


def _real(path: Path) -> Path | None:
    """``path`` with every symlink resolved; None for a loop (RuntimeError before Python 3.13)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):
        return None


def _present(base: Path, relative: str) -> bool:
    file = base.joinpath(*PurePosixPath(relative).parts)
    return file.exists() or file.is_symlink()


def read_skill(root: Path, ref: SkillRef) -> ResolvedSkill:
    """Find and read the skill inside the checked-out repository ``root``."""
    base = root.resolve()
    names = [ref.path] if ref.path is not None else lookup_paths(str(ref.skill))
    for relative in names:
        if _present(base, relative):
            return read_skill_file(base, relative, ref)
    if ref.path is not None:
        raise SkillUnavailable(f"{ref.spec!r}: {ref.path} does not exist in {ref.owner}/{ref.repo}")
    raise SkillUnavailable(
        f"{ref.spec!r}: no skill {ref.skill!r} in {ref.owner}/{ref.repo} (looked for {', '.join(names)})"
    )


def list_skills(root: Path, owner: str, repo: str, *, limit: int = MAX_LISTED_SKILLS) -> list[ListedSkill]:
    """Every ``<dir>/<name>/SKILL.md`` of the checkout ``root`` (``<dir>`` in :data:`SKILL_DIRS` order, names
    sorted), at most ``limit``. Entries are hostile: a skills directory or skill whose real path leaves the
    repository is skipped silently (:class:`OutsideRepository`), a name the spec syntax cannot address is
    skipped, and an unreadable or unparsable file is listed with its ``error``."""
    base = root.resolve()
    found: list[ListedSkill] = []
    for folder in SKILL_DIRS:
        directory = _real(base.joinpath(*PurePosixPath(folder).parts))
        if directory is None or not directory.is_relative_to(base) or not directory.is_dir():
            continue
        for name in _entry_names(directory):
            relative = f"{folder}/{name}/{SKILL_FILE}"
            if not SKILL_NAME.match(name) or not _present(base, relative):
                continue
            if len(found) >= limit:
                return found
            ref = SkillRef(f"{owner}/{repo}:{relative}", owner, repo, path=relative)
            try:
                skill = read_skill_file(base, relative, ref)
            except OutsideRepository:
                continue
            except SkillUnavailable as exc:
                found.append(ListedSkill(relative, name, error=str(exc)))
            except OSError as exc:
                found.append(
                    ListedSkill(relative, name, error=f"{relative} cannot be read ({type(exc).__name__})")
                )
            else:
                found.append(ListedSkill(relative, skill.name, skill=skill))
    return found


def _entry_names(directory: Path) -> list[str]:
    """Up to :data:`MAX_DIR_ENTRIES` entry names of ``directory``, sorted (an unreadable one has none)."""
    try:
        with os.scandir(directory) as entries:
            return sorted(entry.name for entry in itertools.islice(entries, MAX_DIR_ENTRIES))
    except OSError:
        return []
