"""Counting the SQL a block of code sends, for tests that assert "no N+1", "no statement per request" or
"one read per interval". Importable as ``import sql_support`` (``tests/`` is on ``sys.path``, as for
``builders``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine


@contextmanager
def statements(*engines: AsyncEngine) -> Iterator[list[str]]:
    """Every SQL statement the engines send while the block runs, in order (a
    ``before_cursor_execute`` listener on each engine)."""
    sent: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        sent.append(statement)

    for engine in engines:
        event.listen(engine.sync_engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        for engine in engines:
            event.remove(engine.sync_engine, "before_cursor_execute", record)
