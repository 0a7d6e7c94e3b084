"""An agent CLI's session files between attempts: packed after an attempt, restored before a follow-up
(docs/agents.md, "Sessions and follow-ups").

Each attempt gets a fresh agent home, so the CLI's session files (where they live:
:meth:`~factoryctl.worker.presets.base.Preset.session_paths`) would die with it; the preset harness packs
them into a ``tar.gz`` the server keeps encrypted, and a follow-up's worker (any worker) unpacks it into its
new agent home and renames what the CLI files under a workspace-derived name
(:meth:`~factoryctl.worker.presets.base.Preset.session_moves`).

Both directions are confined: packing takes regular files and directories only (symlinks, devices and
sockets are left out, nothing outside the listed paths is read); unpacking refuses the whole archive at the
first member that is absolute, climbs out with ``..``, or is anything but a regular file or a directory, and
writes with ``O_NOFOLLOW | O_EXCL`` under the home, within a size budget (a crafted archive cannot expand
into the worker's disk).

Besides the CLI's files the archive carries the worker's own note, :data:`STATE_NAME` (JSON): what the
parser must know about the session to read the next attempt's output — the usage totals a CLI that reports
running totals (Codex) had reached (:class:`RunningUsage`; docs/agents.md, "Usage on a resumed thread").
It is written by the worker after the CLI ended, so the agent cannot set it, and taken out of the home
(:func:`take_state`) before the next attempt's CLI starts.
"""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Final, Protocol, runtime_checkable

MAX_ARCHIVE_BYTES: Final = 4 * 1024 * 1024  # compressed: the server's cap
MAX_UNPACKED_BYTES: Final = 64 * 1024 * 1024
MAX_MEMBERS: Final = 10_000
STATE_NAME: Final = ".factoryctl-session.json"  # the worker's note in the archive, at the home's top
MAX_STATE_BYTES: Final = 64 * 1024


class SessionStateError(ValueError):
    """A session archive this worker will not unpack, or session files it cannot pack."""


@runtime_checkable
class RunningUsage(Protocol):
    """A parser whose CLI reports usage as running totals of the whole session (Codex): it reports only
    what the attempt adds, given the totals the previous attempt reached."""

    def carry_usage(self, totals: Mapping[str, Any]) -> None:
        """The totals :meth:`usage_totals` gave at the end of the previous attempt."""

    def usage_totals(self) -> dict[str, Any] | None:
        """The session's totals as far as usage was reported (JSON), or None."""


def state_of(parser: object) -> dict[str, Any]:
    """The note to save with the session files after an attempt parsed by ``parser``."""
    totals = parser.usage_totals() if isinstance(parser, RunningUsage) else None
    return {"usage_totals": totals} if totals is not None else {}


def carry_state(parser: object, state: Mapping[str, Any]) -> None:
    """Give ``parser`` what the previous attempt's note (:func:`take_state`) says about the session."""
    totals = state.get("usage_totals")
    if isinstance(parser, RunningUsage) and isinstance(totals, Mapping):
        parser.carry_usage(totals)


def pack(
    home: Path,
    paths: Sequence[str],
    *,
    state: Mapping[str, Any] | None = None,
    limit: int = MAX_ARCHIVE_BYTES,
) -> bytes | None:
    """The session files under ``home`` at ``paths`` as a ``tar.gz`` (names relative to ``home``), with
    ``state`` as :data:`STATE_NAME` when given; None when there are no session files. Over ``limit``
    compressed: :class:`SessionStateError`."""
    members: list[tuple[str, Path]] = []
    for relative in paths:
        start = home.joinpath(*_parts(relative))
        members.extend(_walk(home, start))
    files = [m for m in members if m[1].is_file()]
    if not files:
        return None
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, path in members:
            info = archive.gettarinfo(str(path), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if info.isreg():
                with path.open("rb") as handle:
                    archive.addfile(info, handle)
            else:
                archive.addfile(info)
            if buffer.tell() > limit:
                raise SessionStateError(f"the session files exceed {limit} bytes compressed")
        if state:
            note = json.dumps(dict(state), sort_keys=True).encode()
            info = tarfile.TarInfo(STATE_NAME)
            info.size, info.mode = len(note), 0o600
            archive.addfile(info, io.BytesIO(note))
    data = buffer.getvalue()
    if len(data) > limit:
        raise SessionStateError(f"the session files exceed {limit} bytes compressed")
    return data


def _walk(home: Path, start: Path) -> list[tuple[str, Path]]:
    """Directories and regular files from ``start`` down (not following links), sorted, named relative
    to ``home``; anything else is left out."""
    found: list[tuple[str, Path]] = []
    try:
        mode = start.lstat().st_mode
    except FileNotFoundError:
        return found
    name = start.relative_to(home).as_posix()
    if stat.S_ISREG(mode):
        return [(name, start)]
    if not stat.S_ISDIR(mode):
        return found
    found.append((name, start))
    for child in sorted(start.iterdir()):
        found.extend(_walk(home, child))
    return found


def unpack(data: bytes, home: Path, *, limit: int = MAX_UNPACKED_BYTES) -> list[str]:
    """Write the archive's files under ``home`` (an existing directory); the files written, relative.
    Refuses (:class:`SessionStateError`) an archive that is not a ``tar.gz``, a member that is absolute,
    has ``..``, is a link or a device, or more than ``limit`` bytes in all."""
    written: list[str] = []
    total = 0
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
            for count, member in enumerate(archive):
                if count >= MAX_MEMBERS:
                    raise SessionStateError(f"the session state has more than {MAX_MEMBERS} entries")
                parts = _parts(member.name)
                if member.isdir():
                    _directory(home, parts)
                    continue
                if not member.isreg():
                    raise SessionStateError(f"the session state holds {member.name!r}, not a regular file")
                total += member.size
                if total > limit:
                    raise SessionStateError(f"the session state unpacks to more than {limit} bytes")
                source = archive.extractfile(member)
                if source is None:
                    raise SessionStateError(f"cannot read {member.name!r} from the session state")
                parent = _directory(home, parts[:-1])
                fd = os.open(parent / parts[-1], os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as target:
                    while chunk := source.read(1024 * 1024):
                        target.write(chunk)
                written.append("/".join(parts))
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise SessionStateError(f"the session state cannot be unpacked: {exc}") from exc
    return written


def take_state(home: Path) -> dict[str, Any]:
    """The worker's note :func:`unpack` restored into ``home`` (removed from it, so the CLI never sees
    it); ``{}`` when there is none or it is not a small JSON object (an archive from before the note)."""
    path = home / STATE_NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return {}
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return {}
    with os.fdopen(fd, "rb") as handle:
        raw = handle.read(MAX_STATE_BYTES + 1)
    path.unlink()
    try:
        note = json.loads(raw) if len(raw) <= MAX_STATE_BYTES else None
    except ValueError:
        note = None
    return note if isinstance(note, dict) else {}


def move(home: Path, moves: Mapping[str, str]) -> None:
    """Rename restored files within ``home`` (both names relative and confined)."""
    for old, new in moves.items():
        source = home.joinpath(*_parts(old))
        target_parts = _parts(new)
        parent = _directory(home, target_parts[:-1])
        target = parent / target_parts[-1]
        if os.path.lexists(target):
            raise SessionStateError(f"cannot restore {new!r}: it exists")
        if not stat.S_ISREG(source.lstat().st_mode):
            raise SessionStateError(f"cannot restore {old!r}: not a regular file")
        os.rename(source, target)


def _parts(name: str) -> list[str]:
    """A member name's parts; refuses an absolute name, ``..``, or an empty one."""
    path = PurePosixPath(name)
    parts = [p for p in path.parts if p != "."]
    if path.is_absolute() or not parts or ".." in parts or "\x00" in name:
        raise SessionStateError(f"the session state holds an unsafe path: {name!r}")
    return parts


def _directory(home: Path, parts: Sequence[str]) -> Path:
    """``home/parts`` as a real directory (created mode 0700), no component a link."""
    current = home
    for part in parts:
        current = current / part
        try:
            mode = current.lstat().st_mode
        except FileNotFoundError:
            current.mkdir(mode=0o700)
            continue
        if not stat.S_ISDIR(mode):
            raise SessionStateError(f"the session state needs {part!r} to be a directory")
    return current


__all__ = [
    "MAX_ARCHIVE_BYTES",
    "STATE_NAME",
    "RunningUsage",
    "SessionStateError",
    "carry_state",
    "move",
    "pack",
    "state_of",
    "take_state",
    "unpack",
]
