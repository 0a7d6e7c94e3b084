"""Shared by the CLI tests of this folder: one real server per test module and the one way to run a command.

The server is the real app on a real socket (``live_servers.LiveServer`` from the client tests, on a SQLite
copy of the migrated template); commands run through :mod:`cli_runner` as fresh ``python -m
factoryctl.cli`` processes. Importing this conftest puts this folder on ``sys.path`` (``cli_runner``), and
it puts the client tests' folder there too (``live_servers``).
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from factoryctl.client import FactoryClient
from store.crypto import SecretBox

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))
from live_servers import LiveServer

SECRET_KEY = "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18="


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, sqlite_template: Path) -> Iterator[LiveServer]:
    data_dir = tmp_path_factory.mktemp("cli")
    shutil.copyfile(sqlite_template, data_dir / "factory.db")
    server = LiveServer(
        f"sqlite+aiosqlite:///{data_dir / 'factory.db'}", data_dir, SecretBox.from_setting(SECRET_KEY)
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def api(live: LiveServer) -> Iterator[FactoryClient]:
    with FactoryClient(live.url, live.admin_key) as client:
        yield client
