"""The CLI context file: how ``serve`` (and ``make run``) tell later commands which server, API key file
and data directory to use, so ``factoryctl runs list`` works in a new terminal with nothing exported.

``serve`` writes ``<data-dir>/context.json``; when the data directory lies below the working directory
but is not its ``.factory/`` (the demo's ``.factory/demo``), it also writes ``.factory/context.json`` in
the working directory, which is where commands look: from the working directory upward, the nearest
``.factory/context.json``. ``--context PATH`` (or ``FACTORY_CONTEXT``) names one instead; ``none``
turns the lookup off. A context only fills in what flags and ``FACTORY_*`` variables leave unset
(docs/cli.md, "CLI context"). It never holds a key itself, only the path of the key file.
"""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONTEXT_FILE = "context.json"
LOCAL_DIR = ".factory"  # the directory a context is looked for in, from the working directory upward
DISABLED = "none"  # --context none / FACTORY_CONTEXT=none: no lookup
VERSION = 1


class ContextError(Exception):
    """A context file that was named or found but cannot be used (exit 2: usage)."""


@dataclass(frozen=True)
class ContextFile:
    path: Path  # where it was read from
    server: str | None
    key_file: Path | None
    data_dir: Path | None

    def defaults(self) -> dict[str, str]:
        """The ``FACTORY_*`` settings it supplies; the CLI edge applies them only where unset."""
        out = {}
        if self.data_dir is not None:
            out["FACTORY_DATA_DIR"] = str(self.data_dir)
        if self.server:
            out["FACTORY_API_URL"] = self.server
        if self.key_file is not None:
            out["FACTORY_API_KEY_FILE"] = str(self.key_file)
        return out


def find(start: Path, named: str | None) -> ContextFile | None:
    """The context ``named`` (a file, or a directory holding ``context.json``), else the nearest
    ``.factory/context.json`` from ``start`` upward, else None."""
    if named == DISABLED:
        return None
    if named:
        path = Path(named).expanduser()
        path = path / CONTEXT_FILE if path.is_dir() else path
        if not path.is_file():
            raise ContextError(f"context file {path} does not exist")
        return read(path)
    for directory in (start, *start.parents):
        candidate = directory / LOCAL_DIR / CONTEXT_FILE
        if candidate.is_file():
            return read(candidate)
    return None


def read(path: Path) -> ContextFile:
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ContextError(f"cannot read context file {path}: {exc} (fix or delete it)") from exc
    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise ContextError(f"context file {path} is not a version {VERSION} context (fix or delete it)")

    def text(key: str) -> str | None:
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            raise ContextError(f"context file {path}: {key} must be a string")
        return value or None

    def place(key: str) -> Path | None:
        value = text(key)
        return None if value is None else (path.parent / value).resolve()  # relative to the file

    return ContextFile(path, text("server"), place("key_file"), place("data_dir"))


def server_url(host: str, port: int) -> str:
    """The URL a local command reaches a server listening on ``host:port`` with: a wildcard address
    (``0.0.0.0``, ``::``) is reached on loopback."""
    try:
        address = ipaddress.ip_address(host.strip("[]")) if host else None
    except ValueError:  # a host name
        return f"http://{host}:{port}"
    if address is None or address.is_unspecified:
        address = ipaddress.ip_address("::1" if address and address.version == 6 else "127.0.0.1")
    shown = f"[{address}]" if address.version == 6 else str(address)
    return f"http://{shown}:{port}"


def write(data_dir: Path, server: str, key_file: Path, cwd: Path) -> list[Path]:
    """Write the context of a server (see the module docstring); returns the files written."""
    data_dir, cwd = data_dir.resolve(), cwd.resolve()
    body = {
        "version": VERSION,
        "server": server,
        "key_file": str(key_file.resolve()),
        "data_dir": str(data_dir),
    }
    targets = [data_dir / CONTEXT_FILE]
    local = cwd / LOCAL_DIR
    if data_dir != local and data_dir.is_relative_to(cwd):
        targets.append(local / CONTEXT_FILE)
    for target in targets:
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".{target.name}.{os.getpid()}")
        temporary.write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
        temporary.replace(target)
    return targets
