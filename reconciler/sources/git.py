"""A git branch, polled: a bare mirror in the data dir, trees read at the branch head, no checkout.

Each new head commit is exported (only the definition paths) into ``<cache>/snapshots/<sha>`` and
yielded once. A revision that failed to apply is not yielded again until the branch moves or a
reconcile is forced. Force-pushes are followed (``+`` refspec); a deleted branch or an unreachable
repository is reported as :class:`reconciler.SourceError` and polled again later.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import git

from reconciler import SourceError
from reconciler.sources import Snapshot

log = logging.getLogger("factoryctl.reconciler")
DEFINITION_ROOTS = ("factory.yaml", "factory.yml", "webhooks", "automations", "environments")
_KEEP_SNAPSHOTS = 3


def _short(text: str) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    useful = [ln for ln in lines if ln.lower().startswith(("fatal", "error", "stderr"))] or lines
    return (useful[-1] if useful else "git failed")[:300]


class GitSource:
    def __init__(self, url: str, branch: str, cache_dir: Path, *, poll_interval: float = 30.0) -> None:
        self.url = url
        self.branch = branch
        self.poll_interval = poll_interval
        key = hashlib.sha256(url.encode()).hexdigest()[:16]
        self.mirror = cache_dir / "git" / key / "mirror.git"
        self.snapshot_dir = cache_dir / "git" / key / "snapshots"
        self.force = asyncio.Event()
        self.last_error: str | None = None

    # --- blocking git work (run in a thread) ---------------------------------------------------

    def _repo(self) -> git.Repo:
        if (self.mirror / "HEAD").exists():
            return git.Repo(self.mirror)
        self.mirror.parent.mkdir(parents=True, exist_ok=True)
        try:
            return git.Repo.init(self.mirror, bare=True)
        except git.GitError as exc:  # pragma: no cover - disk problems
            raise SourceError(f"cannot create git mirror at {self.mirror}: {exc}") from exc

    def fetch(self) -> str:
        """Fetch the branch and return its head commit SHA."""
        repo = self._repo()
        ref = f"refs/heads/{self.branch}"
        try:
            repo.git.fetch("--no-tags", self.url, f"+{ref}:{ref}")
        except git.GitCommandError as exc:
            detail = _short(exc.stderr or str(exc))
            if "couldn't find remote ref" in detail.lower() or "no such ref" in detail.lower():
                raise SourceError(f"branch {self.branch!r} does not exist in {self.url}") from exc
            raise SourceError(f"cannot fetch {self.url}: {detail}") from exc
        try:
            return str(repo.commit(ref).hexsha)
        except (git.BadName, ValueError) as exc:
            raise SourceError(f"branch {self.branch!r} has no commits in {self.url}") from exc

    def export(self, sha: str) -> Path:
        """Write the definition files of commit ``sha`` into a snapshot directory (no checkout)."""
        dest = self.snapshot_dir / sha
        if dest.exists():
            return dest
        tmp = self.snapshot_dir / f".{sha}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        repo = self._repo()
        tree = repo.commit(sha).tree
        for item in tree.traverse():
            if not isinstance(item, git.Blob):
                continue
            path = str(item.path)
            if path.split("/", 1)[0] not in DEFINITION_ROOTS:
                continue
            if item.mode == 0o120000:  # symlinks in the repository are not followed
                continue
            target = tmp / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(item.data_stream.read())
        tmp.rename(dest)
        self._prune(keep=sha)
        return dest

    def _prune(self, keep: str) -> None:
        snaps = sorted(
            (p for p in self.snapshot_dir.iterdir() if p.is_dir() and not p.name.startswith(".")),
            key=lambda p: p.stat().st_mtime,
        )
        for old in snaps[:-_KEEP_SNAPSHOTS]:
            if old.name != keep:
                shutil.rmtree(old, ignore_errors=True)

    # --- the polling loop -----------------------------------------------------------------------

    async def snapshots(self, stop: asyncio.Event) -> AsyncIterator[Snapshot]:
        last: str | None = None
        while not stop.is_set():
            forced = self.force.is_set()
            self.force.clear()
            try:
                sha = await asyncio.to_thread(self.fetch)
                self.last_error = None
                if sha != last or forced:
                    root = await asyncio.to_thread(self.export, sha)
                    last = sha
                    yield Snapshot(root, sha, forced=forced)
            except SourceError as exc:
                if str(exc) != self.last_error:
                    log.error('{"msg": "git source error", "error": "%s"}', str(exc).replace('"', "'"))
                self.last_error = str(exc)
            await self._wait(stop)

    async def _wait(self, stop: asyncio.Event) -> None:
        waits = {asyncio.create_task(stop.wait()), asyncio.create_task(self.force.wait())}
        try:
            await asyncio.wait(waits, timeout=self.poll_interval, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
