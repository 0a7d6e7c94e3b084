"""Skill resolution: ``owner/repo:skill-name`` or ``owner/repo:path/to/SKILL.md`` → body
(docs/agent-config.md, "Skills").

Repositories come from the server's ``--skills-source`` template (``{owner}`` and ``{repo}`` are
substituted): a local directory is read in place (a bare repository is cloned like a URL); a git
URL is cloned through :mod:`safegit` into ``<data_dir>/skills-cache/<hash>`` and fetched again at most
every ``refresh_seconds``. Every location is checked first (:data:`safegit.SKILLS_SOURCE`: no ``-``
prefix, no ``<transport>::`` remote helper, an allowed transport); the template itself is checked when
the server starts (:func:`check_source_template`). A factory's own definitions repository also serves
its ``owner/repo`` (see :meth:`SkillResolver.resolve`'s ``repos``).

Everything is refused with one exception type, :class:`SkillUnavailable`, which run creation
maps to a 422: an unresolvable skill is the caller's mistake, never a failed run. Paths from a
spec are untrusted: absolute paths, ``..`` and symlinks leading out of the repository are refused,
and a SKILL.md over :data:`MAX_SKILL_BYTES` is never read.

Listing (``GET /api/v1/agent``, docs/api.md "Agents (skills)") goes through the same checkout and the
same reader (:func:`read_skill_file`): :meth:`SkillResolver.list_repository` finds every
``<dir>/<name>/SKILL.md`` under :data:`SKILL_DIRS`, at most :data:`MAX_LISTED_SKILLS` per repository.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

import safegit

MAX_SKILL_BYTES = 256 * 1024
SKILL_FILE = "SKILL.md"
SKILL_DIRS = ("skills", ".agents/skills", ".claude/skills")
GIT_TIMEOUT_SECONDS = 120.0
# ``refresh=true`` fetches at most this often per repository: a caller cannot make the server fetch in a loop.
MIN_FORCED_REFRESH_SECONDS = 5.0
MAX_LISTED_SKILLS = 100  # SKILL.md files listed per repository (docs/api.md, "Agents (skills)")
MAX_DIR_ENTRIES = 1000  # entries read from one skills directory while listing
_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")
_SKILL_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$")
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


def parse_repository(text: str) -> tuple[str, str]:
    """``owner/repo`` → ``(owner, repo)``, with the rules of a skill spec's repository part."""
    owner, slash, repo = text.partition("/")
    if not slash:
        raise SkillUnavailable(f"{text!r}: must be 'owner/repo'")
    problem = _repository_problem(owner, repo)
    if problem is not None:
        raise SkillUnavailable(f"{text!r}: {problem}")
    return owner, repo


def _repository_problem(owner: str, repo: str) -> str | None:
    for what, value in (("owner", owner), ("repository", repo)):
        if not _PART.match(value):
            return f"invalid {what} name {value!r}"
    return None


def parse_skill_spec(spec: str) -> SkillRef:
    """Split ``owner/repo:target``; a target with ``/`` or ending in ``.md`` is a path."""
    repo_part, sep, target = spec.strip().partition(":")
    owner, slash, repo = repo_part.partition("/")
    if not sep or not slash or not target:
        raise SkillUnavailable(f"{spec!r}: must be 'owner/repo:skill-name' or 'owner/repo:path/to/SKILL.md'")
    problem = _repository_problem(owner, repo)
    if problem is not None:
        raise SkillUnavailable(f"{spec!r}: {problem}")
    if "/" in target or "\\" in target or target.lower().endswith(".md"):
        return SkillRef(spec, owner, repo, path=_safe_relative(target, spec))
    if not _SKILL_NAME.match(target):
        raise SkillUnavailable(f"{spec!r}: invalid skill name {target!r}")
    return SkillRef(spec, owner, repo, skill=target)


def _safe_relative(path: str, spec: str) -> str:
    if "\\" in path or "\0" in path:
        raise SkillUnavailable(f"{spec!r}: the path must use '/' and contain no NUL")
    pure = PurePosixPath(path)
    if pure.is_absolute():
        raise SkillUnavailable(f"{spec!r}: the path must be relative to the repository, not absolute")
    if ".." in pure.parts:
        raise SkillUnavailable(f"{spec!r}: the path must not contain '..'")
    return str(pure)


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
    ``base``, confined to it after every symlink (:class:`OutsideRepository`), a regular file of at most
    :data:`MAX_SKILL_BYTES`, UTF-8, with instructions after its front matter."""
    real = _real(base.joinpath(*PurePosixPath(relative).parts))
    if real is None:
        raise SkillUnavailable(f"{ref.spec!r}: {relative} cannot be resolved (a symlink loop?)")
    if not real.is_relative_to(base):
        raise OutsideRepository(f"{ref.spec!r}: {relative} points outside the repository")
    if not real.is_file():
        raise SkillUnavailable(f"{ref.spec!r}: {relative} is not a file")
    size = real.stat().st_size
    if size > MAX_SKILL_BYTES:
        raise SkillUnavailable(
            f"{ref.spec!r}: {relative} is {size} bytes; a SKILL.md may be at most {MAX_SKILL_BYTES} bytes"
        )
    try:
        text = real.read_bytes()[: MAX_SKILL_BYTES + 1].decode("utf-8")
    except UnicodeDecodeError:
        raise SkillUnavailable(f"{ref.spec!r}: {relative} is not UTF-8 text") from None
    return skill_from_text(ref, text, relative)


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
    names = [ref.path] if ref.path is not None else [f"{d}/{ref.skill}/{SKILL_FILE}" for d in SKILL_DIRS]
    for relative in names:
        if _present(base, relative):
            return read_skill_file(base, relative, ref)
    if ref.path is not None:
        raise SkillUnavailable(f"{ref.spec!r}: {ref.path} does not exist in {ref.owner}/{ref.repo}")
    looked = ", ".join(f"{d}/{ref.skill}/{SKILL_FILE}" for d in SKILL_DIRS)
    raise SkillUnavailable(
        f"{ref.spec!r}: no skill {ref.skill!r} in {ref.owner}/{ref.repo} (looked for {looked})"
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
            if not _SKILL_NAME.match(name) or not _present(base, relative):
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


def is_remote(location: str) -> bool:
    """A git URL (``scheme://`` or scp-like ``user@host:path``) rather than a local path."""
    try:
        return "://" in location or safegit.transport_of(location) != "file"
    except safegit.UnsafeLocation:
        return True  # not a path to read in place; the clone refuses it


def check_source_template(template: str) -> None:
    """Refuse a ``--skills-source`` template git must not be given (raises :class:`safegit.UnsafeLocation`,
    a ValueError): checked with sample names at start, and each substituted location again when used."""
    safegit.check_location(
        template.replace("{owner}", "owner").replace("{repo}", "repo"), safegit.SKILLS_SOURCE
    )


class SkillResolver:
    """Resolves skill specs against a source template; clones of remote repositories are cached.

    Blocking (git and file I/O): call :meth:`resolve` through ``asyncio.to_thread``.
    """

    def __init__(
        self,
        source_template: str | None,
        cache_dir: Path,
        *,
        refresh_seconds: float = 60.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.template = source_template
        self.cache_dir = cache_dir
        self.refresh_seconds = refresh_seconds
        self.monotonic = monotonic
        self._fetched: dict[str, float] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def resolve(self, spec: str, *, repos: Mapping[str, str] | None = None) -> ResolvedSkill:
        """``repos`` maps ``owner/repo`` to a location that wins over the template (factory repos)."""
        ref = parse_skill_spec(spec)
        try:
            location = self.location(ref.owner, ref.repo, repos)
        except SkillUnavailable as exc:
            raise SkillUnavailable(f"{spec!r}: {exc}") from None
        return read_skill(self.checkout(location, f"{ref.owner}/{ref.repo}"), ref)

    def list_repository(
        self,
        owner: str,
        repo: str,
        *,
        repos: Mapping[str, str] | None = None,
        refresh: bool = False,
        limit: int = MAX_LISTED_SKILLS,
    ) -> list[ListedSkill]:
        """The skills of ``owner/repo`` (:func:`list_skills`); ``refresh`` fetches a cached clone even inside
        the refresh window (but not twice within :data:`MIN_FORCED_REFRESH_SECONDS`). Raises
        :class:`SkillUnavailable` when the repository cannot be checked out."""
        parse_repository(f"{owner}/{repo}")
        location = self.location(owner, repo, repos)
        return list_skills(
            self.checkout(location, f"{owner}/{repo}", refresh=refresh), owner, repo, limit=limit
        )

    def location(self, owner: str, repo: str, repos: Mapping[str, str] | None = None) -> str:
        """Where ``owner/repo`` is read from: a factory repository (``repos``), else the source template."""
        key = f"{owner}/{repo}"
        location = (repos or {}).get(key)
        if location is not None:
            return location
        if not self.template:
            raise SkillUnavailable(
                "no skills source is configured (serve --skills-source) and "
                f"{key} is not a factory repository"
            )
        return self.template.replace("{owner}", owner).replace("{repo}", repo)

    def checkout(self, location: str, key: str, *, refresh: bool = False) -> Path:
        """A directory holding the repository's files: a local working tree or a cached clone."""
        try:
            safegit.check_location(location, safegit.SKILLS_SOURCE)
        except safegit.UnsafeLocation as exc:
            raise SkillUnavailable(f"repository {key} cannot be used: {exc}") from None
        if not is_remote(location):
            path = Path(location)
            if not path.is_dir():
                raise SkillUnavailable(f"unknown repository {key}: {location} does not exist")
            if not _is_bare(path):
                return path
        return self._cached_clone(location, key, refresh=refresh)

    def _cached_clone(self, url: str, key: str, *, refresh: bool = False) -> Path:
        digest = hashlib.sha256(url.encode()).hexdigest()[:24]
        dest = self.cache_dir / digest
        with self._guard:
            lock = self._locks.setdefault(digest, threading.Lock())
        with lock:
            now = self.monotonic()
            last = self._fetched.get(digest)
            try:
                if (dest / ".git").is_dir():
                    window = MIN_FORCED_REFRESH_SECONDS if refresh else self.refresh_seconds
                    if last is None or now - last >= window:
                        safegit.fetch(
                            dest, url, policy=safegit.SKILLS_SOURCE, depth=1, timeout=GIT_TIMEOUT_SECONDS
                        )
                        safegit.reset_hard(dest, "FETCH_HEAD", timeout=GIT_TIMEOUT_SECONDS)
                        self._fetched[digest] = now
                    return dest
                self.cache_dir.mkdir(parents=True, exist_ok=True)
                safegit.clone(
                    url,
                    dest,
                    policy=safegit.SKILLS_SOURCE,
                    depth=1,
                    cwd=self.cache_dir,
                    timeout=GIT_TIMEOUT_SECONDS,
                )
                self._fetched[digest] = now
                return dest
            except safegit.GitError as exc:
                shown = url if "@" not in url.split("://", 1)[-1].split("/", 1)[0] else f"repository {key}"
                detail = exc.detail if isinstance(exc, safegit.GitFailed) else str(exc)
                if dest.is_dir() and (dest / ".git").is_dir() and last is not None:
                    return dest  # a failed refresh keeps serving the last good checkout
                raise SkillUnavailable(f"unknown repository {key}: cannot fetch {shown} ({detail})") from None


def _is_bare(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir() and not (path / ".git").exists()


def factory_repositories(sources: Mapping[str, str]) -> dict[str, str]:
    """``owner/repo`` → location for factory definition sources (a git URL, maybe ``@branch``, or a path).

    The last two path components of the location name the repository, so a factory followed from
    ``https://git.example/acme/factory.git`` serves skills as ``acme/factory:...``.
    """
    out: dict[str, str] = {}
    for source in sources.values():
        location = source
        if is_remote(source) and "@" in source.rsplit("/", 1)[-1]:
            location = source.rsplit("@", 1)[0]
        parts = [p for p in re.split(r"[/:]", location.rstrip("/")) if p]
        if len(parts) >= 2:
            owner, repo = parts[-2], parts[-1].removesuffix(".git")
            out.setdefault(f"{owner}/{repo}", location)
    return out
