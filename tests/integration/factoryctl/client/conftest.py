"""Fixtures for client tests: ``live`` is the real app on a real socket (see :mod:`live_servers`).

One server per module and database kind (SQLite, and PostgreSQL when ``FACTORY_TEST_POSTGRES_URL`` is
set): starting the app costs more than most tests, so tests share it and keep to their own objects
(names made unique with :func:`live_servers.unique`).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_servers import LiveServer

from store.crypto import SecretBox

TEST_SECRET_KEY = "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18="


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def live(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    sqlite_template: Path,
    pg_template: object,
) -> Iterator[LiveServer]:
    data_dir = tmp_path_factory.mktemp("live")
    if request.param == "sqlite":
        shutil.copyfile(sqlite_template, data_dir / "factory.db")
        url = f"sqlite+aiosqlite:///{data_dir / 'factory.db'}"
    elif pg_template is None:
        pytest.skip("FACTORY_TEST_POSTGRES_URL not set")
    else:
        url = pg_template.new_database()  # type: ignore[attr-defined]
    server = LiveServer(url, data_dir, SecretBox.from_setting(TEST_SECRET_KEY))
    server.start()
    try:
        yield server
    finally:
        server.stop()
        if request.param == "postgres":
            pg_template.drop(url)  # type: ignore[attr-defined]
