"""Shared fixtures: real databases (a fresh SQLite file, and PostgreSQL when configured).

``db_url`` is parametrised over ``sqlite`` and ``postgres``. PostgreSQL tests run when
``FACTORY_TEST_POSTGRES_URL`` is set (CI sets it) and are skipped otherwise. Each test gets its
own database, cloned from a template migrated once per session, so tests never see each other.

Store rows (teams, keys, secrets, factories, webhooks, automations, runs...) are written with the shared
builders of ``tests/builders.py`` rather than by hand: ``import builders`` works from every test directory,
as pytest puts this file's directory on ``sys.path`` when it imports it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from store.clock import SystemClock
from store.crypto import SecretBox
from store.db import create_engine, migrate, normalize_url, session_factory

PG_ENV = "FACTORY_TEST_POSTGRES_URL"
TEST_SECRET_KEY = "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18="

# A test runner started in the background by a non-interactive shell (`make test &`, some CI runners) has
# SIGINT and SIGQUIT ignored, and every process a test starts inherits that: the tests that press Ctrl-C
# on a child (`factoryctl events`) would then wait for an exit that never comes. Children get SIGINT as
# from a terminal instead (a Python handler here is reset to the default in the child at exec).
_IN_MAIN_THREAD = threading.current_thread() is threading.main_thread()
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN and _IN_MAIN_THREAD:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _run(coro: object) -> None:
    asyncio.run(coro)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("template") / "template.db"

    async def go() -> None:
        engine = create_engine(f"sqlite+aiosqlite:///{path}")
        await migrate(engine)
        await engine.dispose()

    _run(go())
    return path


class PgTemplate:
    """Creates per-test databases from a template migrated once."""

    def __init__(self, base_url: str) -> None:
        self.base = make_url(normalize_url(base_url))
        self.template = f"factory_tmpl_{uuid.uuid4().hex[:10]}"
        self.created: list[str] = []

    async def _exec(self, sql: str) -> None:
        import asyncpg

        conn = await asyncpg.connect(
            host=self.base.host or "127.0.0.1",
            port=self.base.port or 5432,
            user=self.base.username or "postgres",
            password=self.base.password,
            database=self.base.database or "test",
        )
        try:
            await conn.execute(sql)
        finally:
            await conn.close()

    def url_for(self, name: str) -> str:
        return self.base.set(database=name).render_as_string(hide_password=False)

    def setup(self) -> None:
        async def go() -> None:
            await self._exec(f'CREATE DATABASE "{self.template}"')
            engine = create_engine(self.url_for(self.template))
            await migrate(engine)
            await engine.dispose()

        _run(go())

    def new_database(self) -> str:
        name = f"factory_t_{uuid.uuid4().hex[:12]}"
        _run(self._exec(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"'))
        self.created.append(name)
        return self.url_for(name)

    def drop(self, name_or_url: str) -> None:
        name = make_url(name_or_url).database if "://" in name_or_url else name_or_url
        _run(self._exec(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))

    def teardown(self) -> None:
        for name in self.created:
            try:
                self.drop(name)
            except Exception:
                pass
        self.drop(self.template)


@pytest.fixture(scope="session")
def pg_template() -> Iterator[PgTemplate | None]:
    url = os.environ.get(PG_ENV)
    if not url:
        yield None
        return
    tmpl = PgTemplate(url)
    tmpl.setup()
    yield tmpl
    tmpl.teardown()


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(
    request: pytest.FixtureRequest, tmp_path: Path, sqlite_template: Path, pg_template: PgTemplate | None
) -> Iterator[str]:
    """URL of a fresh, migrated database (SQLite file, or PostgreSQL database)."""
    if request.param == "sqlite":
        path = tmp_path / "factory.db"
        shutil.copyfile(sqlite_template, path)
        yield f"sqlite+aiosqlite:///{path}"
        return
    if pg_template is None:
        pytest.skip(f"{PG_ENV} not set")
    url = pg_template.new_database()
    yield url
    pg_template.drop(url)


@pytest.fixture
def pg_url(pg_template: PgTemplate | None) -> Iterator[str]:
    """URL of a fresh, migrated PostgreSQL database, for tests that need PostgreSQL (several processes or
    replicas on one store, a database outage); skipped without one."""
    if pg_template is None:
        pytest.skip(f"{PG_ENV} not set")
    url = pg_template.new_database()
    yield url
    pg_template.drop(url)


@pytest.fixture
def sqlite_url(tmp_path: Path, sqlite_template: Path) -> str:
    path = tmp_path / "factory.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite+aiosqlite:///{path}"


@pytest.fixture
async def engine(db_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_engine(db_url)
    yield eng
    await eng.dispose()


@pytest.fixture
def sessions(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return session_factory(engine)


@pytest.fixture
def box() -> SecretBox:
    return SecretBox.from_setting(TEST_SECRET_KEY)


@pytest.fixture
def clock() -> SystemClock:
    return SystemClock()
