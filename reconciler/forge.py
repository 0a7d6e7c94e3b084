"""Links to a commit on a known forge (docs/reconcile.md, "Sync status").

The console links a git source's commit only when its remote is on GitHub, GitLab, Bitbucket or Codeberg.
The link is rebuilt from a parsed remote: the host must be one of those (no port but 443), the repository
path is split into segments that must each be plain names, and the result is always an ``https`` URL. So a
remote's own scheme, host or odd characters can never end up in an ``href``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

_SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,99}$")
_SHA = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")
_SCP = re.compile(r"^(?:[A-Za-z0-9._-]+@)?(?P<host>[A-Za-z0-9.-]+):(?P<path>[^/].*)$")


@dataclass(frozen=True)
class _Forge:
    commit_path: str  # appended to https://<host>/<repository path>
    max_depth: int  # segments of the repository path (GitLab groups nest)


_FORGES = {
    "github.com": _Forge("/commit/", 2),
    "gitlab.com": _Forge("/-/commit/", 20),
    "bitbucket.org": _Forge("/commits/", 2),
    "codeberg.org": _Forge("/commit/", 2),
}


@dataclass(frozen=True)
class Remote:
    """A repository on a known forge: its host and path segments (``owner``, ``name``; GitLab: groups)."""

    host: str
    segments: tuple[str, ...]

    def commit_url(self, sha: str) -> str | None:
        if not _SHA.match(sha):
            return None
        forge = _FORGES[self.host]
        return f"https://{self.host}/{'/'.join(self.segments)}{forge.commit_path}{sha}"


def parse_remote(remote: str) -> Remote | None:
    """``remote`` (an https, ssh or scp-like git URL) as a known forge's repository, else None."""
    remote = remote.strip()
    if "://" in remote:
        try:
            parts = urlsplit(remote)
            port = parts.port
        except ValueError:
            return None
        if parts.scheme not in ("https", "ssh", "git+ssh") or parts.query or parts.fragment:
            return None
        if port not in (None, 443 if parts.scheme == "https" else 22):
            return None
        host, path = (parts.hostname or ""), parts.path
    else:
        scp = _SCP.match(remote)
        if scp is None:
            return None
        host, path = scp["host"], scp["path"]
    host = host.lower()
    forge = _FORGES.get(host)
    if forge is None:
        return None
    path = path.strip("/")
    if path.endswith(".git"):
        path = path[: -len(".git")]
    segments = tuple(path.split("/"))
    if not 2 <= len(segments) <= forge.max_depth:
        return None
    if not all(_SEGMENT.match(s) and not s.endswith(".") for s in segments):
        return None
    return Remote(host, segments)


def commit_url(remote: str | None, sha: str | None) -> str | None:
    """The https URL of commit ``sha`` on ``remote``'s forge, or None when it is not a known forge."""
    if not remote or not sha:
        return None
    parsed = parse_remote(remote)
    return parsed.commit_url(sha) if parsed else None
