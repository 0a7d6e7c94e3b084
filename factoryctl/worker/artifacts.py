"""What a run leaves behind: files under ``$FACTORY_OUTPUTS`` and links declared in ``artifacts.jsonl``.

After the harness ends (whatever the outcome, unless the lease was lost) the worker collects, from the
run's workspace (docs/workers.md, "Artifacts"):

- every regular file under ``.factory/outputs/`` (``FACTORY_OUTPUTS``), as a ``FILE`` artifact: its path
  relative to that directory, its MIME type guessed from the extension, its bytes. Symlinks are never
  followed (a link to a host file must not leave the sandbox through an upload), and the caps hold: at
  most :data:`MAX_FILES` files, :data:`MAX_FILE_BYTES` each, :data:`MAX_TOTAL_BYTES` in all; whatever
  is skipped gets one log line saying why;
- each line of ``.factory/artifacts.jsonl`` (``FACTORY_ARTIFACTS_FILE``), a JSON object declaring a
  ``PULL_REQUEST`` ``{url, branch}`` or an ``EXTERNAL_REFERENCE`` ``{url, reference_type?, title?}``; a
  line that is not one, or whose URL is not ``http(s)://host...``, is skipped with a log line. The server
  checks the same rules again: nothing here is trusted by it.

Collection is plain file reading; the channel uploads the result before it reports the run's state, so
a finished run already lists its artifacts.
"""

from __future__ import annotations

import json
import mimetypes
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Final
from urllib.parse import urlsplit

OUTPUTS_DIR: Final = ".factory/outputs"
ARTIFACTS_FILE: Final = ".factory/artifacts.jsonl"
MAX_FILES: Final = 50
MAX_FILE_BYTES: Final = 10 * 1024 * 1024
MAX_TOTAL_BYTES: Final = 50 * 1024 * 1024
MAX_DECLARED: Final = 50
MAX_LINE_BYTES: Final = 8 * 1024  # one line of artifacts.jsonl
MAX_URL_CHARS: Final = 2048
MAX_TEXT_CHARS: Final = 300  # a branch, a reference type, a title
MAX_PATH_CHARS: Final = 500
PULL_REQUEST: Final = "PULL_REQUEST"
EXTERNAL_REFERENCE: Final = "EXTERNAL_REFERENCE"
DEFAULT_MIME: Final = "application/octet-stream"


@dataclass(frozen=True)
class Limits:
    """The caps on what one run uploads (the server's are the same)."""

    files: int = MAX_FILES
    file_bytes: int = MAX_FILE_BYTES
    total_bytes: int = MAX_TOTAL_BYTES
    declared: int = MAX_DECLARED


@dataclass(frozen=True)
class FileArtifact:
    """One output file: ``filepath`` relative to ``FACTORY_OUTPUTS`` (``/``-separated)."""

    filepath: str
    mime_type: str
    data: bytes

    @property
    def filename(self) -> str:
        return PurePosixPath(self.filepath).name


@dataclass(frozen=True)
class Declared:
    """One declared link: the JSON the server takes, ``{type, url, branch | reference_type, title}``."""

    fields: dict[str, str]


@dataclass
class Collected:
    files: list[FileArtifact] = field(default_factory=list)
    declared: list[Declared] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # ``system`` log lines: what was skipped and why

    def __bool__(self) -> bool:
        return bool(self.files or self.declared)


def outputs_dir(workspace: Path) -> Path:
    return workspace.joinpath(*OUTPUTS_DIR.split("/"))


def artifacts_file(workspace: Path) -> Path:
    return workspace.joinpath(*ARTIFACTS_FILE.split("/"))


def valid_url(value: object) -> bool:
    """An absolute ``http``/``https`` URL with a host, no whitespace or control characters."""
    if not isinstance(value, str) or not value or len(value) > MAX_URL_CHARS:
        return False
    if any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return False
    try:
        parts = urlsplit(value)
        host = parts.hostname
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(host)


def collect(workspace: Path, limits: Limits = Limits()) -> Collected:
    """The run's artifacts as found in ``workspace`` now (see the module docstring)."""
    out = Collected()
    _collect_files(outputs_dir(workspace), out, limits)
    _collect_declared(artifacts_file(workspace), out, limits)
    return out


def _collect_files(root: Path, out: Collected, limits: Limits) -> None:
    try:
        info = os.lstat(root)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        out.notes.append(f"artifacts: {OUTPUTS_DIR} is not a directory; no file was collected")
        return
    real_root = os.path.realpath(root)
    total = 0
    for path in _walk(root, out):
        relative = path.relative_to(root).as_posix()
        if len(relative) > MAX_PATH_CHARS:
            out.notes.append(f"artifacts: skipped a file whose path is over {MAX_PATH_CHARS} characters")
            continue
        if len(out.files) >= limits.files:
            out.notes.append(f"artifacts: skipped {relative}: at most {limits.files} files are kept")
            continue
        data = _read_confined(path, real_root, limits.file_bytes)
        if data is None:
            out.notes.append(f"artifacts: skipped {relative}: not a regular file inside {OUTPUTS_DIR}")
            continue
        if len(data) > limits.file_bytes:
            out.notes.append(f"artifacts: skipped {relative}: over {limits.file_bytes} bytes")
            continue
        if total + len(data) > limits.total_bytes:
            out.notes.append(
                f"artifacts: skipped {relative}: the run's files would exceed {limits.total_bytes} bytes"
            )
            continue
        total += len(data)
        out.files.append(FileArtifact(relative, mime_type(relative), data))


def _walk(root: Path, out: Collected) -> list[Path]:
    """Regular files under ``root`` in path order; symlinks (to files or directories) are noted, never
    followed."""
    found: list[Path] = []
    for current, dirs, files in os.walk(root, followlinks=False):
        here = Path(current)
        for name in sorted(dirs):
            if os.path.islink(here / name):
                out.notes.append(
                    f"artifacts: skipped {(here / name).relative_to(root).as_posix()}: a symlink"
                )
        for name in sorted(files):
            path = here / name
            if os.path.islink(path):
                out.notes.append(f"artifacts: skipped {path.relative_to(root).as_posix()}: a symlink")
                continue
            found.append(path)
    return sorted(found)


def _read_confined(path: Path, real_root: str, max_bytes: int) -> bytes | None:
    """The file's bytes, or None when it is not a regular file under ``real_root`` (checked on the open
    descriptor, and the last component never followed)."""
    if not os.path.realpath(path).startswith(real_root + os.sep):
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            return None
        return handle.read(max_bytes + 1)


def mime_type(path: str) -> str:
    guessed, _ = mimetypes.guess_type(path, strict=False)
    return guessed or DEFAULT_MIME


def _collect_declared(path: Path, out: Collected, limits: Limits) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return
    except OSError:
        out.notes.append(f"artifacts: {ARTIFACTS_FILE} is not a readable regular file (a symlink?)")
        return
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            out.notes.append(f"artifacts: {ARTIFACTS_FILE} is not a regular file")
            return
        raw = handle.read(limits.declared * MAX_LINE_BYTES + 1)
    seen: set[tuple[str, str]] = set()
    for number, line in enumerate(raw.splitlines()[: limits.declared * 4], start=1):
        if not line.strip():
            continue
        declared, why = parse_declared(line)
        if declared is None:
            out.notes.append(f"artifacts: {ARTIFACTS_FILE} line {number} skipped: {why}")
            continue
        key = (declared.fields["type"], declared.fields["url"])
        if key in seen:
            continue
        if len(out.declared) >= limits.declared:
            out.notes.append(
                f"artifacts: {ARTIFACTS_FILE} line {number} skipped: at most {limits.declared} links"
            )
            continue
        seen.add(key)
        out.declared.append(declared)


def parse_declared(line: bytes) -> tuple[Declared | None, str]:
    """One line of ``artifacts.jsonl``: the declared artifact, or None and why not."""
    if len(line) > MAX_LINE_BYTES:
        return None, f"over {MAX_LINE_BYTES} bytes"
    try:
        item: Any = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None, "not JSON"
    if not isinstance(item, dict):
        return None, "not a JSON object"
    kind = item.get("type")
    if kind not in (PULL_REQUEST, EXTERNAL_REFERENCE):
        return None, f"type must be {PULL_REQUEST} or {EXTERNAL_REFERENCE}"
    if not valid_url(item.get("url")):
        return None, "url must be an http:// or https:// URL with a host"
    fields = {"type": kind, "url": item["url"]}
    names = ("branch",) if kind == PULL_REQUEST else ("reference_type", "title")
    for name in names:
        value = item.get(name)
        if value is None and name != "branch":
            continue
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_TEXT_CHARS:
            return None, f"{name} must be a non-empty string of at most {MAX_TEXT_CHARS} characters"
        fields[name] = value
    return Declared(fields), ""


__all__ = [
    "ARTIFACTS_FILE",
    "OUTPUTS_DIR",
    "Collected",
    "Declared",
    "FileArtifact",
    "Limits",
    "artifacts_file",
    "collect",
    "mime_type",
    "outputs_dir",
    "parse_declared",
    "valid_url",
]
