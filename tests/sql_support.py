"""Counting the SQL a block of code sends, for tests that assert "no N+1", "no statement per request" or
"one read per interval". Importable as ``import sql_support`` (``tests/`` is on ``sys.path``, as for
``builders``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy.ext.asyncio import AsyncEngine


@contextmanager
def statements(*engines: AsyncEngine | Engine) -> Iterator[list[str]]:
    """Every SQL statement the engines send while the block runs, in order (a
    ``before_cursor_execute`` listener on each engine)."""
    sent: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        sent.append(statement)

    targets = [e.sync_engine if isinstance(e, AsyncEngine) else e for e in engines]
    for target in targets:
        event.listen(target, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        for target in targets:
            event.remove(target, "before_cursor_execute", record)
