"""Which repository locations, refs and branch names git may be given (docs/operations.md, "Git URLs").

Pure checks, run before git does and at validation time, so a bad value is refused with a readable
message instead of being interpreted by git:

- a value starting with ``-`` would be read as an option (``--upload-pack=CMD`` runs CMD);
- ``<transport>::<address>`` makes git run a remote helper (``ext::sh -c …`` runs a shell command,
  ``fd::`` talks to inherited file descriptors): refused for every transport name;
- ``scheme://`` URLs must use an allowed transport; ``ssh`` hosts and users may not start with ``-``;
- a location without ``://`` is classified the way git does it: scp-like ``[user@]host:path`` (a ``:``
  before any ``/``) is ssh, anything else is a local path (transport ``file``).

Which transports a caller accepts is its :class:`Policy`; the policies of this project's three callers
are defined here, next to each other, because the callers (the git source, the skills resolver and the
worker's environments) cannot import one another.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from safegit.errors import UnsafeLocation

TRANSPORTS = ("https", "http", "ssh", "git", "file")
_SSH_ALIASES = {"ssh": "ssh", "git+ssh": "ssh", "ssh+git": "ssh"}
_HELPER = re.compile(r"^([A-Za-z0-9][A-Za-z0-9+.-]*)::")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*$")
_BAD_REF_PART = re.compile(r"(^|/)\.|\.\.|@\{|\.lock(/|$)|//|/$|\.$")
_BAD_REF_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
_FILTER = re.compile(r"^(blob:none|blob:limit=[0-9]{1,12}[kmg]?|tree:[0-9]{1,3})$")


@dataclass(frozen=True)
class Policy:
    """The transports one caller accepts (a subset of :data:`TRANSPORTS`); ``what`` names the value."""

    what: str
    transports: frozenset[str]

    def protocol_config(self) -> list[str]:
        """git ``-c`` options that allow exactly these transports (``protocol.allow=never`` otherwise)."""
        out = ["-c", "protocol.allow=never"]
        for transport in sorted(self.transports):
            out += ["-c", f"protocol.{transport}.allow=always"]
        return out


# Every caller accepts the same five transports; the reasons differ (docs/operations.md, "Git URLs"):
# the definitions source and the skills template are the operator's own command line, and local
# paths are how a host-local mirror is followed; environment repositories are written by whoever may
# write definitions or environments, and a local path there is read on the worker's machine.
GIT_SOURCE = Policy("git source URL", frozenset(TRANSPORTS))
SKILLS_SOURCE = Policy("skills source", frozenset(TRANSPORTS))
ENVIRONMENT_REPOS = Policy("repository URL", frozenset(TRANSPORTS))
NO_TRANSPORT = Policy("repository", frozenset())  # plumbing on a repository already on disk


def transport_of(location: str) -> str:
    """The transport git would use for ``location`` (one of :data:`TRANSPORTS`); raises
    :class:`UnsafeLocation` for anything git would read as an option or hand to a remote helper."""
    _plain(location, "location")
    helper = _HELPER.match(location)
    if helper:
        raise UnsafeLocation(f"remote helper syntax '{helper.group(1)}::' is not allowed")
    if "://" in location:
        scheme, _, rest = location.partition("://")
        if not _SCHEME.match(scheme) or scheme not in (*TRANSPORTS, *_SSH_ALIASES):
            raise UnsafeLocation(f"transport '{scheme}' is not allowed; use {_listed(TRANSPORTS)}")
        if scheme == "file":
            return "file"
        user, _, host = rest.split("/", 1)[0].rpartition("@")
        if not host:
            raise UnsafeLocation(f"'{scheme}://' URL has no host")
        if host.startswith("-") or user.startswith("-"):
            raise UnsafeLocation("the host and user of a URL must not start with '-'")
        return _SSH_ALIASES.get(scheme, scheme)
    colon, slash = location.find(":"), location.find("/")
    if colon == -1 or (slash != -1 and slash < colon):
        return "file"
    user, _, host = location[:colon].rpartition("@")
    if not host:
        raise UnsafeLocation("scp-like location 'user@host:path' has no host")
    if host.startswith("-") or user.startswith("-"):
        raise UnsafeLocation("the host and user of an ssh location must not start with '-'")
    return "ssh"


def check_location(location: str, policy: Policy) -> str:
    """``location``'s transport when ``policy`` allows it; else :class:`UnsafeLocation`."""
    try:
        transport = transport_of(location)
    except UnsafeLocation as exc:
        raise UnsafeLocation(f"{policy.what} {display_url(location)!r}: {exc}") from None
    if transport not in policy.transports:
        allowed = _listed(sorted(policy.transports)) if policy.transports else "none"
        raise UnsafeLocation(
            f"{policy.what} {display_url(location)!r}: transport '{transport}' is not allowed here"
            f" (allowed: {allowed})"
        )
    return transport


def check_ref(ref: str) -> str:
    """A ref to check out (branch, tag or commit); refused when git could read it as an option."""
    _plain(ref, "ref")
    return ref


def check_filter(spec: str) -> str:
    """A partial-clone ``--filter`` spec (``blob:none``, ``blob:limit=<n>[kmg]``, ``tree:<depth>``)."""
    if not _FILTER.match(spec):
        raise UnsafeLocation(f"filter {spec!r} is not one of blob:none, blob:limit=<n>[kmg] or tree:<depth>")
    return spec


def repository_problems(repos: object) -> list[tuple[int, str, str]]:
    """``(index, key, why)`` for every ``url`` or ``ref`` of an environment's ``repos`` list that git must
    not be given; the same rule for definitions (FC011) and the environments API (a 422)."""
    found: list[tuple[int, str, str]] = []
    for index, repo in enumerate(repos if isinstance(repos, list) else []):
        if not isinstance(repo, dict):
            continue
        for key in ("url", "ref"):
            value = repo.get(key)
            if not isinstance(value, str):
                continue
            try:
                if key == "url":
                    check_location(value, ENVIRONMENT_REPOS)
                else:
                    check_ref(value)
            except UnsafeLocation as exc:
                found.append((index, key, str(exc)))
    return found


def check_branch(name: str) -> str:
    """A branch name as ``git check-ref-format --branch`` would accept it (it is put in a refspec)."""
    _plain(name, "branch")
    if _BAD_REF_CHARS.search(name) or _BAD_REF_PART.search(name) or name == "@":
        raise UnsafeLocation(f"branch {name!r} is not a valid branch name")
    return name


def display_url(url: str) -> str:
    """``url`` with any credentials (``https://user:token@host/...``) replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc or not parts.scheme:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


def _plain(value: str, what: str) -> None:
    if not value or value != value.strip():
        raise UnsafeLocation(f"the {what} must not be empty or start or end with white space")
    if any(ord(c) < 0x20 or c == "\x7f" for c in value):
        raise UnsafeLocation(f"the {what} must not contain control characters")
    if value.startswith("-"):
        raise UnsafeLocation(f"the {what} must not start with '-' (git would read it as an option)")


def _listed(names: Iterable[str]) -> str:
    items = list(names)
    return ", ".join(items[:-1]) + f" or {items[-1]}" if len(items) > 1 else "".join(items)
