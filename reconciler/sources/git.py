"""A git branch, polled: a bare mirror in the data dir, trees read at the branch head, no checkout.

Every git command runs through :mod:`safegit`: the URL and branch are checked when the source is made
(an option-like or remote-helper URL never reaches git), and the URL always follows ``--``.

Each new head commit is exported into ``<cache>/snapshots/<sha>`` — only what the loader reads:
``factory.yaml`` and the folder of every kind of :mod:`reconciler.registry` (the files of ``webhooks/``,
``environments/``, ..., and ``automations/<name>/*``) — and yielded once. Trees are listed one at a time
with ``git ls-tree`` and every entry name is checked, so a tree git itself would refuse to check out (a
name with ``/``, ``..``, a duplicate) cannot write outside the snapshot or crash the loop. Symlinks in the
commit are exported as inert symlinks that the loader reports and never follows
(``Snapshot.follow_symlinks`` is False);
files over the loader's limit are exported as sparse files of the same size, so the loader refuses them
by size without git reading them.

Failures (docs/reconcile.md, "A failing revision" and "The loop's health"):

- fetching fails (unreachable repository, deleted branch): :class:`reconciler.SourceError` is raised out
  of :meth:`GitSource.snapshots`; the loop's error boundary reports it and iterates again after a backoff,
  and the head is then handed out again, so the factory's conditions recover together with the source;
- a commit cannot be exported (a malformed tree, git failing to read an object): it is yielded with
  ``problem`` set and becomes a failed reconcile of that revision; later commits still apply.

A revision that failed is not yielded again until the branch moves or a reconcile is forced; one whose
processing raised (the consumer failed mid-way) is yielded again. Force-pushes are followed (``+``
refspec).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import re
import shutil
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from pathlib import Path

import safegit
from reconciler import SourceError, forge, registry
from reconciler.loader import MAX_FILE_BYTES
from reconciler.sources import Snapshot

DEFINITION_ROOTS = registry.ROOTS  # the factory's files and every kind's folder
GIT_TIMEOUT_SECONDS = 120.0
SYMLINK_PLACEHOLDER = "symlink-not-followed"  # what an exported symlink points at: nothing
_KEEP_SNAPSHOTS = 3
_COMMIT_FORMAT = "%H%x00%s%x00%an%x00%ae%x00%cI"  # NUL-separated: a subject may hold anything else
_SUBJECT_CHARS = 300
_OID = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")


@dataclass(frozen=True)
class _TreeEntry:
    mode: str
    kind: str  # blob | tree | commit (a submodule)
    oid: str
    size: int  # -1 for trees and submodules
    name: str


def _valid_name(name: str) -> bool:
    """What git accepts as one path component of a checkout (``git fsck`` refuses the rest)."""
    return name not in ("", ".", "..") and "/" not in name and "\0" not in name


def _exported(path: str) -> bool:
    """Whether a tree's entries are written out: the definition roots and, below a kind's folder, as deep
    as its files lie (``automations/<name>``, ``agents/<name>/skills/<skill>``; :data:`registry.DEPTH`)."""
    parts = path.split("/")
    return len(parts) == 1 or len(parts) - 1 <= registry.DEPTH.get(parts[0], 0)


class GitSource:
    def __init__(
        self,
        url: str,
        branch: str,
        cache_dir: Path,
        *,
        poll_interval: float = 30.0,
        git_timeout: float = GIT_TIMEOUT_SECONDS,
    ) -> None:
        """Raises :class:`safegit.UnsafeLocation` for a URL or branch git must not be given."""
        safegit.check_location(url, safegit.GIT_SOURCE)
        safegit.check_branch(branch)
        self.url = url
        self.shown = safegit.display_url(url)
        self.branch = branch
        self.poll_interval = poll_interval
        self.git_timeout = git_timeout
        key = hashlib.sha256(url.encode()).hexdigest()[:16]
        self.mirror = cache_dir / "git" / key / "mirror.git"
        self.snapshot_dir = cache_dir / "git" / key / "snapshots"
        self.force = asyncio.Event()
        self.last_error: str | None = None
        self._last: str | None = None  # the head whose snapshot was handed out and processed
        self._unwell = False  # the last fetch failed: hand the head out again once it works

    # --- blocking git work (run in a thread) ---------------------------------------------------

    def _git(self, *args: str, stdin: bytes | None = None) -> bytes:
        return safegit.run(list(args), cwd=self.mirror, timeout=self.git_timeout, stdin=stdin)

    def _ensure_mirror(self) -> None:
        if (self.mirror / "HEAD").exists():
            return
        self.mirror.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        try:
            safegit.init_bare(self.mirror, timeout=self.git_timeout)
        except safegit.GitFailed as exc:
            raise SourceError(f"cannot create git mirror at {self.mirror}: {exc.detail}") from exc

    def fetch(self) -> str:
        """Fetch the branch and return its head commit SHA."""
        self._ensure_mirror()
        ref = f"refs/heads/{self.branch}"
        try:
            safegit.fetch(
                self.mirror, self.url, [f"+{ref}:{ref}"], policy=safegit.GIT_SOURCE, timeout=self.git_timeout
            )
        except safegit.GitFailed as exc:
            detail = exc.detail
            if "couldn't find remote ref" in detail.lower() or "no such ref" in detail.lower():
                raise SourceError(f"branch {self.branch!r} does not exist in {self.shown}") from exc
            raise SourceError(f"cannot fetch {self.shown}: {detail}") from exc
        try:
            sha = self._git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").decode().strip()
        except safegit.GitFailed as exc:
            raise SourceError(f"branch {self.branch!r} has no commits in {self.shown}") from exc
        if not _OID.match(sha):
            raise SourceError(f"branch {self.branch!r} in {self.shown}: unexpected commit name {sha[:80]!r}")
        return sha

    def export(self, sha: str) -> Path:
        """Write the definition files of commit ``sha`` into a snapshot directory (no checkout).

        Raises :class:`SourceError` for a tree git would refuse to check out and
        :class:`safegit.GitFailed` when git cannot read the commit's objects.
        """
        if not _OID.match(sha):
            raise SourceError(f"not a commit name: {sha[:80]!r}")
        dest = self.snapshot_dir / sha
        if dest.is_dir():
            return dest
        tmp = self.snapshot_dir / f".{sha}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(mode=0o700, parents=True)
        try:
            blobs: list[tuple[Path, _TreeEntry]] = []
            self._walk(sha, "", tmp, sha, blobs)
            self._write_blobs(blobs)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        tmp.rename(dest)
        self._prune(keep=sha)
        return dest

    def _ls_tree(self, treeish: str) -> list[_TreeEntry]:
        entries = []
        for record in self._git("ls-tree", "-z", "-l", treeish).split(b"\0"):
            if not record:
                continue
            meta, _, name = record.partition(b"\t")
            mode, kind, oid, size = meta.decode("ascii").split()
            entries.append(_TreeEntry(mode, kind, oid, -1 if size == "-" else int(size), os.fsdecode(name)))
        return entries

    def _walk(
        self, treeish: str, rel: str, into: Path, sha: str, blobs: list[tuple[Path, _TreeEntry]]
    ) -> None:
        where = f"'{rel}/'" if rel else "the root"
        seen: set[str] = set()
        for entry in self._ls_tree(treeish):
            if not _valid_name(entry.name) or entry.name in seen:
                problem = "appears twice" if entry.name in seen else "is not a valid file name"
                raise SourceError(
                    f"commit {sha[:12]}: tree entry {entry.name!r} in {where} {problem}"
                    " (git itself refuses to check this tree out)"
                )
            seen.add(entry.name)
            path = f"{rel}/{entry.name}" if rel else entry.name
            if not rel and entry.name not in DEFINITION_ROOTS:
                continue
            target = into / entry.name
            if entry.kind == "tree":
                target.mkdir(mode=0o700)
                if _exported(path):
                    self._walk(entry.oid, path, target, sha, blobs)
            elif entry.kind == "blob":
                blobs.append((target, entry))
            # "commit" entries are submodules: not definitions, not exported

    def _write_blobs(self, blobs: list[tuple[Path, _TreeEntry]]) -> None:
        wanted: list[tuple[Path, _TreeEntry]] = []
        for target, entry in blobs:
            if entry.mode == "120000":
                os.symlink(SYMLINK_PLACEHOLDER, target)  # reported by the loader, never followed
            elif entry.size > MAX_FILE_BYTES:
                with _create(target) as handle:
                    handle.truncate(entry.size)  # sparse: the loader refuses it by size, unread
            else:
                wanted.append((target, entry))
        if not wanted:
            return
        out = self._git("cat-file", "--batch", stdin="".join(f"{e.oid}\n" for _, e in wanted).encode())
        position = 0
        for target, entry in wanted:
            header_end = out.index(b"\n", position)
            header = out[position:header_end].split()
            if len(header) != 3 or header[1] != b"blob":
                raise SourceError(f"git object {entry.oid} is not a readable blob")
            start = header_end + 1
            end = start + int(header[2])
            with _create(target) as handle:
                handle.write(out[start:end])
            position = end + 1

    def commit_info(self, sha: str) -> dict[str, str | None]:
        """What the console and the API show of commit ``sha``: SHA, subject, author, commit time and the
        remote it came from, credentials hidden (docs/reconcile.md, "Sync status")."""
        raw = self._git("show", "-s", "--no-color", "--encoding=UTF-8", f"--format={_COMMIT_FORMAT}", sha)
        fields = raw.decode("utf-8", "replace").rstrip("\n").split("\0")
        if len(fields) != 5:
            raise SourceError(f"commit {sha[:12]}: unexpected metadata from git")
        full, subject, author, email, committed = fields
        return {
            "sha": full,
            "subject": subject[:_SUBJECT_CHARS],
            "author": author[:_SUBJECT_CHARS],
            "author_email": email[:_SUBJECT_CHARS],
            "committed_at": committed,
            "remote": self.shown,
            "url": forge.commit_url(self.url, full),
        }

    def _prune(self, keep: str) -> None:
        snaps = sorted(
            (p for p in self.snapshot_dir.iterdir() if p.is_dir() and not p.name.startswith(".")),
            key=lambda p: p.stat().st_mtime,
        )
        for old in snaps[:-_KEEP_SNAPSHOTS]:
            if old.name != keep:
                shutil.rmtree(old, ignore_errors=True)

    def _snapshot(self, sha: str, forced: bool) -> Snapshot:
        try:
            root = self.export(sha)
        except (SourceError, safegit.GitFailed) as exc:
            detail = exc.detail if isinstance(exc, safegit.GitFailed) else str(exc)
            problem = (
                detail if detail.startswith("commit ") else f"commit {sha[:12]} cannot be read: {detail}"
            )
            return Snapshot(
                self.snapshot_dir / sha, sha, forced=forced, follow_symlinks=False, problem=problem
            )
        try:
            commit = self.commit_info(sha)
        except (SourceError, safegit.GitError):
            commit = None  # the tree was readable: apply it, without the commit's description
        return Snapshot(root, sha, forced=forced, follow_symlinks=False, commit=commit)

    # --- the polling loop -----------------------------------------------------------------------

    async def snapshots(self, stop: asyncio.Event) -> AsyncGenerator[Snapshot, None]:
        """Snapshots of new heads; raises :class:`SourceError` when the branch cannot be fetched."""
        while not stop.is_set():
            forced = self.force.is_set()
            self.force.clear()
            try:
                sha = await asyncio.to_thread(self.fetch)
            except SourceError as exc:
                # Once the fetch works again the head is handed out whatever it is (a forced reconcile
                # asked for meanwhile included), so the factory's conditions follow the source.
                self.last_error, self._unwell = str(exc), True
                raise
            self.last_error = None
            if sha != self._last or forced or self._unwell:
                snapshot = await asyncio.to_thread(self._snapshot, sha, forced)
                yield snapshot
                self._last, self._unwell = sha, False
            await self._wait(stop)

    async def _wait(self, stop: asyncio.Event) -> None:
        waits = {asyncio.create_task(stop.wait()), asyncio.create_task(self.force.wait())}
        try:
            await asyncio.wait(waits, timeout=self.poll_interval, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()


def _create(path: Path) -> io.BufferedWriter:
    """A new file (0600: the data dir is private), never through a symlink, never over another file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    return os.fdopen(fd, "wb")
