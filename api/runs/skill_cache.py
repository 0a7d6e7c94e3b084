"""The cache of cloned skill repositories, ``<data-dir>/skills-cache/<hash>`` (docs/agent-config.md, "Skill
repositories and the clone cache").

What one skill spec may cost is bounded:

- a clone is shallow (``--depth 1``), partial (``--filter=blob:none``: a server that supports it sends no file
  contents up front) and sparse (only :data:`api.runs.skill_files.SPARSE_PATTERNS`, i.e. the SKILL.md files
  of the allowed layouts, are checked out, so only their contents are fetched); it is made in a temporary
  directory, aborted as soon as it grows past ``clone_max_bytes`` and renamed into place only when complete;
- the cache holds at most ``max_entries`` repositories and ``max_bytes`` bytes: after every clone or refresh
  the least recently used entries (directory mtime, touched on every use) are removed;
- a repository that cannot be cloned is not tried again for ``failure_seconds`` (per process): the same
  error is answered from memory;
- a clone is fetched again at most every ``refresh_seconds``; a failed refresh keeps the last good checkout
  (and is not retried before the next window).

Threads of one process serialise per repository on striped locks; processes sharing a data directory
(``serve --processes N``) only ever see complete entries (rename into place, rename out before removal).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import safegit
from api.runs.skill_files import SPARSE_PATTERNS, SkillUnavailable

log = logging.getLogger(__name__)

GIT_TIMEOUT_SECONDS = 120.0
# ``refresh=true`` fetches at most this often per repository: a caller cannot make the server fetch in a loop.
MIN_FORCED_REFRESH_SECONDS = 5.0
MAX_REMEMBERED_FAILURES = 1024
_STRIPES = 64


@dataclass(frozen=True)
class CacheLimits:
    """Bounds of the clone cache; the defaults are documented in docs/agent-config.md."""

    max_bytes: int = 512 * 1024 * 1024
    max_entries: int = 64
    clone_max_bytes: int = 64 * 1024 * 1024
    failure_seconds: float = 60.0

    @property
    def repository_bytes(self) -> int:
        """What one cached repository may hold: its own cap, never more than the whole cache."""
        return min(self.clone_max_bytes, self.max_bytes)


class CloneCache:
    """Cached sparse clones of remote skill repositories, keyed by the hash of their URL."""

    def __init__(
        self,
        directory: Path,
        *,
        limits: CacheLimits,
        refresh_seconds: float,
        monotonic: Callable[[], float],
    ) -> None:
        self.directory = directory
        self.limits = limits
        self.refresh_seconds = refresh_seconds
        self.monotonic = monotonic
        self._fetched: dict[str, float] = {}
        self._failed: dict[str, tuple[float, str]] = {}
        self._stripes = [threading.RLock() for _ in range(_STRIPES)]
        self._guard = threading.Lock()
        self._last_use_ns = 0

    @contextlib.contextmanager
    def checkout(self, url: str, key: str, *, refresh: bool = False) -> Iterator[Path]:
        """The checkout of ``url`` (named ``key`` in errors), held for the ``with`` block: neither refreshed
        nor evicted by this process meanwhile. Raises :class:`SkillUnavailable`."""
        digest = hashlib.sha256(url.encode()).hexdigest()[:24]
        with self._stripe(digest):
            dest = self._ensure(url, key, digest, refresh)
            self._touch(dest)
            yield dest

    def _touch(self, dest: Path) -> None:
        """Mark ``dest`` used now: the least recently used is evicted first. The time is set explicitly and
        strictly increases within the process (a file system may keep mtimes in 4 ms steps)."""
        with self._guard:
            self._last_use_ns = max(time.time_ns(), self._last_use_ns + 1)
            stamp = self._last_use_ns
        with contextlib.suppress(OSError):
            os.utime(dest, ns=(stamp, stamp))

    def _stripe(self, digest: str) -> threading.RLock:
        return self._stripes[int(digest[:8], 16) % _STRIPES]

    def _ensure(self, url: str, key: str, digest: str, refresh: bool) -> Path:
        dest = self.directory / digest
        now = self.monotonic()
        if (dest / ".git").is_dir():
            last = self._fetched.get(digest)
            window = MIN_FORCED_REFRESH_SECONDS if refresh else self.refresh_seconds
            if last is None or now - last >= window:
                self._fetched[digest] = now
                self._refresh(dest, url, key, digest)
            return dest
        with self._guard:
            failed = self._failed.get(digest)
        if failed is not None and now < failed[0]:
            raise SkillUnavailable(failed[1])
        try:
            self._clone(url, dest)
        except (safegit.GitError, OSError) as exc:  # OSError: the cache directory itself (disk full...)
            message = f"unknown repository {key}: cannot fetch {_shown(url, key)} ({_detail(exc)})"
            self._remember_failure(digest, now, message)
            raise SkillUnavailable(message) from None
        if not (dest / ".git").is_dir():
            raise SkillUnavailable(f"repository {key} cannot be cached (another process removed it?)")
        self._fetched[digest] = now
        with self._guard:
            self._failed.pop(digest, None)
        self._evict(keep=digest)
        return dest

    def _clone(self, url: str, dest: Path) -> None:
        """A complete sparse clone at ``dest``, or nothing (another process may have made it meanwhile)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".clone-", dir=self.directory))
        target = scratch / "repo"
        cap = self.limits.repository_bytes
        try:
            safegit.clone(
                url,
                target,
                policy=safegit.SKILLS_SOURCE,
                depth=1,
                filter="blob:none",
                no_checkout=True,
                no_local=True,
                max_bytes=cap,
                timeout=GIT_TIMEOUT_SECONDS,
            )
            patterns = "".join(f"{pattern}\n" for pattern in SPARSE_PATTERNS).encode()
            sparse = ["sparse-checkout", "set", "--no-cone", "--stdin"]
            safegit.run(sparse, cwd=target, stdin=patterns, timeout=GIT_TIMEOUT_SECONDS)
            self._git(["checkout", "--quiet"], target, cap)  # fetches the SKILL.md contents only
            with contextlib.suppress(OSError):  # ENOTEMPTY/EEXIST: another process cloned it first
                os.rename(target, dest)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _refresh(self, dest: Path, url: str, key: str, digest: str) -> None:
        """Fetch the remote's HEAD again into the checkout; a repository that grew past the cap is dropped."""
        cap = self.limits.repository_bytes
        try:
            self._git(["fetch", "--quiet", "--no-tags", "--depth", "1", "origin"], dest, cap)
            self._git(["reset", "--quiet", "--hard", "FETCH_HEAD", "--"], dest, cap)
        except safegit.GitTooLarge as exc:
            self._remove(digest)
            message = f"unknown repository {key}: cannot fetch {_shown(url, key)} ({_detail(exc)})"
            self._remember_failure(digest, self.monotonic(), message)
            raise SkillUnavailable(message) from None
        except safegit.GitError as exc:  # keep serving the last good checkout
            log.warning("skills: refreshing %s failed, the cached checkout is kept: %s", key, _detail(exc))
        self._evict(keep=digest)

    def _git(self, args: list[str], repo: Path, cap: int) -> None:
        """git in a cached clone, allowed to reach the skills source (lazy fetch of SKILL.md contents)."""
        safegit.run(
            args,
            cwd=repo,
            policy=safegit.SKILLS_SOURCE,
            timeout=GIT_TIMEOUT_SECONDS,
            watch=repo,
            max_bytes=cap,
        )

    def _remember_failure(self, digest: str, now: float, message: str) -> None:
        with self._guard:
            for old in [d for d, (until, _) in self._failed.items() if until <= now]:
                del self._failed[old]
            while len(self._failed) >= MAX_REMEMBERED_FAILURES:
                del self._failed[next(iter(self._failed))]
            self._failed[digest] = (now + self.limits.failure_seconds, message)

    def _evict(self, *, keep: str) -> None:
        """Remove least recently used entries until the cache is within its entry and byte limits."""
        found: list[tuple[int, str, int]] = []
        with contextlib.suppress(OSError), os.scandir(self.directory) as entries:
            for entry in entries:
                if entry.name.startswith(".") or not entry.is_dir(follow_symlinks=False):
                    self._sweep(entry)
                    continue
                with contextlib.suppress(OSError):
                    found.append((entry.stat(follow_symlinks=False).st_mtime_ns, entry.name, 0))
        sized = [(mtime, name, safegit.tree_bytes(self.directory / name)) for mtime, name, _ in found]
        count, total = len(sized), sum(size for _, _, size in sized)
        for _mtime, name, size in sorted(sized):
            if count <= self.limits.max_entries and total <= self.limits.max_bytes:
                return
            if name == keep or not self._stripe(name).acquire(blocking=False):
                continue  # in use here; the next eviction gets another chance
            try:
                self._remove(name)
            finally:
                self._stripe(name).release()
            count, total = count - 1, total - size

    def _remove(self, digest: str) -> None:
        """Take an entry out of the cache at once (rename), then delete it."""
        self._fetched.pop(digest, None)
        doomed = self.directory / f".evicted-{digest}-{os.getpid()}-{threading.get_ident()}"
        try:
            os.rename(self.directory / digest, doomed)
        except OSError:
            return
        shutil.rmtree(doomed, ignore_errors=True)

    def _sweep(self, entry: os.DirEntry[str]) -> None:
        """Delete a scratch or evicted directory left by a process that died (older than a git deadline)."""
        with contextlib.suppress(OSError):
            if time.time() - entry.stat(follow_symlinks=False).st_mtime > 2 * GIT_TIMEOUT_SECONDS:
                shutil.rmtree(entry.path, ignore_errors=True)


def _shown(url: str, key: str) -> str:
    """The URL for an error message, or only the repository's name when the URL carries credentials."""
    return url if "@" not in url.split("://", 1)[-1].split("/", 1)[0] else f"repository {key}"


def _detail(exc: Exception) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or type(exc).__name__
    return exc.detail if isinstance(exc, safegit.GitFailed) else str(exc)
