"""Fixtures for self-hosted worker tests: ``store`` reads and writes the test database the way the
tests need it (:class:`worker_support.Store`)."""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine
from worker_support import Store


@pytest.fixture
def store(engine: AsyncEngine) -> Store:
    return Store(engine)
