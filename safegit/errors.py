"""The exception tree of the :mod:`safegit` package (drawn in its docstring)."""

from __future__ import annotations

import re

_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s'\"]+@")


def redact_credentials(text: str) -> str:
    """``text`` with the ``user:password@`` of every ``scheme://`` URL replaced by ``***@``."""
    return _CREDENTIALS.sub(r"\1***@", text)


class GitError(Exception):
    """Base class of every error raised by :mod:`safegit`."""


class UnsafeLocation(GitError, ValueError):
    """A URL, path, ref or branch refused before git runs (an option, a remote helper, a transport)."""


class GitFailed(GitError):
    """git ran and failed; ``detail`` is the most useful line of its stderr, credentials redacted."""

    def __init__(self, command: str, returncode: int, stderr: str) -> None:
        self.command = command
        self.returncode = returncode
        self.stderr = redact_credentials(stderr)
        lines = [ln.strip() for ln in self.stderr.splitlines() if ln.strip()]
        useful = [ln for ln in lines if ln.lower().startswith(("fatal", "error"))] or lines
        self.detail = (useful[-1] if useful else f"git {command} failed")[:300]
        super().__init__(f"git {command} failed (exit {returncode}): {self.detail}")


class GitTooLarge(GitFailed):
    """What git wrote grew past the caller's byte limit; git was killed with every process it started."""

    def __init__(self, command: str, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        super().__init__(command, -9, f"fatal: the repository is larger than {max_bytes} bytes")


class GitTimeout(GitFailed):
    """git outlived its deadline and was killed (with every process it started)."""

    def __init__(self, command: str, timeout: float) -> None:
        super().__init__(command, -9, f"fatal: timed out after {timeout:g}s")
