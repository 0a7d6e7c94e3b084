"""What every command gets from the CLI edge: resolved settings, never read from the environment later."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported lazily: client-only commands should not pay for SQLAlchemy/Alembic
    from sqlalchemy.ext.asyncio import AsyncEngine

    from store.crypto import SecretBox


@dataclass
class CliContext:
    data_dir: Path
    database_url: str
    env: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_args(
        cls, database: str | None, data_dir: str | None, env: dict[str, str] | None = None
    ) -> CliContext:
        env = dict(os.environ if env is None else env)
        ddir = Path(data_dir or env.get("FACTORY_DATA_DIR") or "./.factory").resolve()
        url = database or env.get("FACTORY_DATABASE_URL") or f"sqlite+aiosqlite:///{ddir / 'factory.db'}"
        return cls(data_dir=ddir, database_url=url, env=env)

    def secret_box(self) -> SecretBox:
        from store.crypto import SecretBox, load_or_create_key_file

        setting = self.env.get("FACTORY_SECRET_KEY")
        if setting:
            return SecretBox.from_setting(setting)
        return SecretBox.from_setting(load_or_create_key_file(self.data_dir))

    @asynccontextmanager
    async def engine(self, *, migrate_schema: bool = True) -> AsyncIterator[AsyncEngine]:
        from store.db import create_engine, migrate

        engine = create_engine(self.database_url)
        try:
            if migrate_schema:
                await migrate(engine)
            yield engine
        finally:
            await engine.dispose()

    def api_url(self, flag: str | None) -> str:
        return (flag or self.env.get("FACTORY_API_URL") or "http://127.0.0.1:8080").rstrip("/")

    def api_key(self) -> str | None:
        return self.env.get("FACTORY_API_KEY")


def use_color(stream: object = None) -> bool:
    stream = stream or sys.stdout
    return bool(getattr(stream, "isatty", lambda: False)()) and "NO_COLOR" not in os.environ
