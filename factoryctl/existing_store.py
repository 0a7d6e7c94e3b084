"""Read-only commands (``plan``, ``secrets list``, ``keys list``...) must never create a store.

Opening a SQLite URL creates the file, and migrating it makes an empty store that answers "no secrets":
a command run in the wrong directory then looked fine while it read nothing. So these commands check
first and fail with the data directory they looked in (docs/cli.md, "CLI context"; exit 1).
"""

from __future__ import annotations

import sys
from pathlib import Path

from factoryctl.context import CliContext

EXIT_NO_STORE = 1


def missing_store(ctx: CliContext) -> str | None:
    """Why there is no store to read (a SQLite file that does not exist), or None when there is one.
    A server database (PostgreSQL) is taken as existing: the server reports what is wrong with it."""
    from sqlalchemy.engine import make_url

    url = make_url(ctx.database_url)
    if not url.get_backend_name().startswith("sqlite") or not url.database or url.database == ":memory:":
        return None
    path = Path(url.database).resolve()
    if path.is_file():
        return None
    where = (
        f"in {ctx.data_dir} ({path.name} does not exist there)"
        if path.parent == ctx.data_dir
        else f"at {path} (the file does not exist)"
    )
    return (
        f"no store {where}; run this where 'factoryctl serve' or 'make run' ran (their CLI context names "
        "the store), or give --data-dir, --database or --context"
    )


def require_store(ctx: CliContext) -> bool:
    """Print the error and return False when there is no store (see :func:`missing_store`)."""
    problem = missing_store(ctx)
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
    return problem is None
