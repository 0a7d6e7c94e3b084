"""Skill resolution: ``owner/repo:skill-name`` or ``owner/repo:path/to/SKILL.md`` → body
(docs/agent-config.md, "Skills").

A spec is checked completely before any repository is touched (:func:`parse_skill_spec`): its repository
part, and a path must name a ``SKILL.md`` in an allowed layout, never through ``.git``
(:func:`api.runs.skill_files.layout_problem`), so a refused spec costs no clone. Repositories come from the
server's ``--skills-source`` template (``{owner}`` and ``{repo}`` are substituted; shared read-only by every
team) or from the team's own factory definitions repositories (:meth:`SkillResolver.resolve`'s ``repos``):
a local directory is read in place (a bare repository is cloned like a URL); a git URL is cloned through
:mod:`safegit` into the bounded cache of :mod:`api.runs.skill_cache`. Every location is checked first
(:data:`safegit.SKILLS_SOURCE`: no ``-`` prefix, no ``<transport>::`` remote helper, an allowed
transport); the template itself is checked when the server starts (:func:`check_source_template`).

Everything is refused with one exception type, :class:`SkillUnavailable`, which run creation maps to a
422: an unresolvable skill is the caller's mistake, never a failed run. Files are read by the one reader,
:func:`api.runs.skill_files.read_skill_file`, for resolution and for listing (``GET /api/v1/agent``,
docs/api.md "Agents (skills)").
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import TypeVar

import safegit
from api.context import ServerSettings
from api.runs.skill_cache import GIT_TIMEOUT_SECONDS, MIN_FORCED_REFRESH_SECONDS, CacheLimits, CloneCache
from api.runs.skill_files import (
    MAX_DIR_ENTRIES,
    MAX_LISTED_SKILLS,
    MAX_SKILL_BYTES,
    SKILL_DIRS,
    SKILL_FILE,
    SKILL_NAME,
    ListedSkill,
    OutsideRepository,
    ResolvedSkill,
    SkillRef,
    SkillUnavailable,
    layout_problem,
    list_skills,
    parse_skill_file,
    read_skill,
    read_skill_file,
    skill_from_text,
)

__all__ = [
    "GIT_TIMEOUT_SECONDS",
    "MAX_DIR_ENTRIES",
    "MAX_LISTED_SKILLS",
    "MAX_SKILL_BYTES",
    "MIN_FORCED_REFRESH_SECONDS",
    "SKILL_DIRS",
    "SKILL_FILE",
    "CacheLimits",
    "ListedSkill",
    "OutsideRepository",
    "ResolvedSkill",
    "SkillRef",
    "SkillResolver",
    "SkillUnavailable",
    "check_source_template",
    "factory_repositories",
    "is_remote",
    "list_skills",
    "parse_repository",
    "parse_skill_file",
    "parse_skill_spec",
    "read_skill",
    "read_skill_file",
    "skill_from_text",
]

T = TypeVar("T")
_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")


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
    """Split ``owner/repo:target``; a target with ``/`` or ending in ``.md`` is a path, which must name a
    ``SKILL.md`` in an allowed layout (checked here, before any repository is read or cloned)."""
    repo_part, sep, target = spec.strip().partition(":")
    owner, slash, repo = repo_part.partition("/")
    if not sep or not slash or not target:
        raise SkillUnavailable(f"{spec!r}: must be 'owner/repo:skill-name' or 'owner/repo:path/to/SKILL.md'")
    problem = _repository_problem(owner, repo)
    if problem is not None:
        raise SkillUnavailable(f"{spec!r}: {problem}")
    if "/" in target or "\\" in target or target.lower().endswith(".md"):
        path = _safe_relative(target, spec)
        problem = layout_problem(path)
        if problem is not None:
            raise SkillUnavailable(f"{spec!r}: {problem}")
        return SkillRef(spec, owner, repo, path=path)
    if not SKILL_NAME.match(target):
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
        limits: CacheLimits | None = None,
    ) -> None:
        self.template = source_template
        self.cache = CloneCache(
            cache_dir, limits=limits or CacheLimits(), refresh_seconds=refresh_seconds, monotonic=monotonic
        )

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> SkillResolver:
        """The resolver of a server: its template, ``<data-dir>/skills-cache`` and its cache limits."""
        limits = CacheLimits(
            max_bytes=settings.skills_cache_max_bytes,
            max_entries=settings.skills_cache_max_entries,
            clone_max_bytes=settings.skills_clone_max_bytes,
            failure_seconds=settings.skills_failure_seconds,
        )
        return cls(settings.skills_source, settings.data_dir / "skills-cache", limits=limits)

    def resolve(self, spec: str, *, repos: Mapping[str, str] | None = None) -> ResolvedSkill:
        """``repos`` maps ``owner/repo`` to a location that wins over the template (factory repos)."""
        ref = parse_skill_spec(spec)  # a refused spec never reaches a repository
        try:
            location = self.location(ref.owner, ref.repo, repos)
        except SkillUnavailable as exc:
            raise SkillUnavailable(f"{spec!r}: {exc}") from None
        return self._with_checkout(location, f"{ref.owner}/{ref.repo}", lambda root: read_skill(root, ref))

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
        return self._with_checkout(
            location,
            f"{owner}/{repo}",
            lambda root: list_skills(root, owner, repo, limit=limit),
            refresh=refresh,
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

    def _with_checkout(
        self, location: str, key: str, read: Callable[[Path], T], *, refresh: bool = False
    ) -> T:
        """``read`` applied to the repository's files: a local working tree, or a cached clone held
        (not refreshed or evicted by this process) while it reads."""
        try:
            safegit.check_location(location, safegit.SKILLS_SOURCE)
        except safegit.UnsafeLocation as exc:
            raise SkillUnavailable(f"repository {key} cannot be used: {exc}") from None
        if not is_remote(location):
            path = Path(location)
            if not path.is_dir():
                raise SkillUnavailable(f"unknown repository {key}: {location} does not exist")
            if not _is_bare(path):
                return read(path)
        with self.cache.checkout(location, key, refresh=refresh) as root:
            return read(root)


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
