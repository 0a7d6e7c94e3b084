"""Safe git: the one runner every git command of this project goes through, and the URL checks it uses.

The git definitions source (``reconciler.sources.git``), the skills resolver (``api.runs.skills``) and the
worker's environments (``factoryctl.worker.environment``) cannot import one another, so what they share
lives here, in a bottom-layer package that imports nothing of this project (docs/operations.md, "Git URLs").

Exception tree::

    GitError
    ├── UnsafeLocation    a URL, path, ref or branch refused before git runs (also a ValueError)
    └── GitFailed         git ran and exited non-zero (``detail``: its most useful stderr line)
        ├── GitTimeout    git outlived its deadline and was killed with its process group
        └── GitTooLarge   what git wrote grew past the caller's byte limit; git was killed the same way
"""

from __future__ import annotations

from safegit.errors import GitError, GitFailed, GitTimeout, GitTooLarge, UnsafeLocation, redact_credentials
from safegit.locations import (
    ENVIRONMENT_REPOS,
    GIT_SOURCE,
    NO_TRANSPORT,
    SKILLS_SOURCE,
    TRANSPORTS,
    Policy,
    check_branch,
    check_filter,
    check_location,
    check_ref,
    display_url,
    repository_problems,
    transport_of,
)
from safegit.runner import DEFAULT_TIMEOUT, checkout, clone, fetch, init_bare, reset_hard, run, tree_bytes

__all__ = [
    "DEFAULT_TIMEOUT",
    "ENVIRONMENT_REPOS",
    "GIT_SOURCE",
    "NO_TRANSPORT",
    "SKILLS_SOURCE",
    "TRANSPORTS",
    "GitError",
    "GitFailed",
    "GitTimeout",
    "GitTooLarge",
    "Policy",
    "UnsafeLocation",
    "check_branch",
    "check_filter",
    "check_location",
    "check_ref",
    "checkout",
    "clone",
    "display_url",
    "fetch",
    "init_bare",
    "redact_credentials",
    "repository_problems",
    "reset_hard",
    "run",
    "transport_of",
    "tree_bytes",
]
