"""Fixtures for worker tests: runs inserted through the store, the real app. Keys per role come from
the parent conftest (``make_key``, ``worker_key``...).

``new_run(worker_host="", prompt=..., team="default", clock=None, agent_config=None,
attachments=())`` queues a run with :func:`builders.run` (:func:`api.runs.records.create_run`) and
returns its id.
``worker_app(lifecycles=(), clock=None, **settings)`` builds the app with the run and worker routes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.app import Lifecycle, create_app
from api.context import ServerSettings
from store.clock import Clock
from store.crypto import SecretBox
from store.models import Run

ROUTES = ("api.ops", "api.runs.routes", "api.claims.routes")
NewRun = Callable[..., Awaitable[str]]
MakeKey = Callable[..., Awaitable[str]]  # the parent conftest's ``make_key``


@pytest.fixture
def new_run(seed_run: Callable[..., Awaitable[str]]) -> NewRun:
    """The parent conftest's ``seed_run`` with the worker tests' defaults: a service-hosted run (no
    worker host) with prompt ``"do the thing"``."""

    async def make(*, worker_host: str | None = "", prompt: str = "do the thing", **options: Any) -> str:
        return await seed_run(worker_host=worker_host, prompt=prompt, **options)

    return make


@pytest.fixture
def worker_app(engine: AsyncEngine, box: SecretBox, tmp_path: Path) -> Callable[..., web.Application]:
    def build(
        lifecycles: Sequence[Lifecycle] = (), clock: Clock | None = None, **settings: Any
    ) -> web.Application:
        return create_app(
            # Not tmp_path itself: service-hosted workspaces under tmp_path must stay outside it.
            ServerSettings(data_dir=tmp_path / "data", **settings),
            engine,
            box,
            clock=clock,
            lifecycles=lifecycles,
            route_modules=ROUTES,
        )

    return build


@pytest.fixture
def get_run(sessions: async_sessionmaker[AsyncSession]) -> Callable[[str], Awaitable[Run]]:
    async def get(run_id: str) -> Run:
        async with sessions() as s:
            run = await s.get(Run, run_id)
            assert run is not None
            return run

    return get


async def wait_for_state(
    get: Callable[[str], Awaitable[Run]], run_id: str, states: set[str], within: float = 15.0
) -> Run:
    """Poll until the run is in one of ``states``; fails with the last state seen."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        run = await get(run_id)
        if run.state in states:
            return run
        if loop.time() > deadline:
            raise AssertionError(f"run {run_id} is {run.state} after {within}s; wanted {states}")
        await asyncio.sleep(0.05)


@pytest.fixture
def wait_state(get_run: Callable[[str], Awaitable[Run]]) -> Callable[..., Awaitable[Run]]:
    """``await wait_state(run_id, {"SUCCEEDED"}, within=15)`` -> the run once in one of the states."""

    async def wait(run_id: str, states: set[str], within: float = 15.0) -> Run:
        return await wait_for_state(get_run, run_id, states, within)

    return wait
