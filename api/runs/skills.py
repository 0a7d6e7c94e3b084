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
"""

from __future__ import annotations

import hashlib
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
_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")
_SKILL_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}$")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)


class SkillUnavailable(Exception):
    """A skill cannot be used: bad spec, unknown repository or skill, unsafe path, oversize file."""


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


def parse_skill_spec(spec: str) -> SkillRef:
    """Split ``owner/repo:target``; a target with ``/`` or ending in ``.md`` is a path."""
    repo_part, sep, target = spec.strip().partition(":")
    owner, slash, repo = repo_part.partition("/")
    if not sep or not slash or not target:
        raise SkillUnavailable(f"{spec!r}: must be 'owner/repo:skill-name' or 'owner/repo:path/to/SKILL.md'")
    for what, value in (("owner", owner), ("repository", repo)):
        if not _PART.match(value):
            raise SkillUnavailable(f"{spec!r}: invalid {what} name {value!r}")
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


def read_skill(root: Path, ref: SkillRef) -> ResolvedSkill:
    """Find and read the skill inside the checked-out repository ``root``."""
    base = root.resolve()
    names = [ref.path] if ref.path is not None else [f"{d}/{ref.skill}/{SKILL_FILE}" for d in SKILL_DIRS]
    for relative in names:
        file = base.joinpath(*PurePosixPath(relative).parts)
        if not file.exists() and not file.is_symlink():
            continue
        real = file.resolve()
        if not real.is_relative_to(base):
            raise SkillUnavailable(f"{ref.spec!r}: {relative} points outside the repository")
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
    if ref.path is not None:
        raise SkillUnavailable(f"{ref.spec!r}: {ref.path} does not exist in {ref.owner}/{ref.repo}")
    looked = ", ".join(f"{d}/{ref.skill}/{SKILL_FILE}" for d in SKILL_DIRS)
    raise SkillUnavailable(
        f"{ref.spec!r}: no skill {ref.skill!r} in {ref.owner}/{ref.repo} (looked for {looked})"
    )


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
        key = f"{ref.owner}/{ref.repo}"
        location = (repos or {}).get(key)
        if location is None:
            if not self.template:
                raise SkillUnavailable(
                    f"{spec!r}: no skills source is configured (serve --skills-source) and "
                    f"{key} is not a factory repository"
                )
            location = self.template.replace("{owner}", ref.owner).replace("{repo}", ref.repo)
        return read_skill(self.checkout(location, key), ref)

    def checkout(self, location: str, key: str) -> Path:
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
        return self._cached_clone(location, key)

    def _cached_clone(self, url: str, key: str) -> Path:
        digest = hashlib.sha256(url.encode()).hexdigest()[:24]
        dest = self.cache_dir / digest
        with self._guard:
            lock = self._locks.setdefault(digest, threading.Lock())
        with lock:
            now = self.monotonic()
            last = self._fetched.get(digest)
            try:
                if (dest / ".git").is_dir():
                    if last is None or now - last >= self.refresh_seconds:
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
