"""The git reconcile loop under faults, in the real app: a malformed commit, a source that cannot be read,
a source that raises something unexpected. The loop must survive each, record it on the factory, expose
its health through ``/readyz``, and apply the next good commit (docs/reconcile.md, "A failing revision" and
"The loop's health").

Repositories are real and built with git plumbing (``hash-object --literally``, ``commit-tree``), the
only way to write a tree git's porcelain refuses (an entry name containing ``/``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import builders
import pytest
from aiohttp.test_utils import TestClient
from gitobjects import AUTOMATION
from gitobjects import ObjectRepo as Repo
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.app import ROUTE_MODULES, create_app
from api.context import ServerSettings
from factoryctl.serve.reconcile import reconciler_lifecycle
from reconciler.sources.git import GitSource
from store.clock import SystemClock
from store.crypto import SecretBox

T = TypeVar("T")


async def until(check: Callable[[], Awaitable[T | None]], what: str, seconds: float = 30.0) -> T:
    """Poll ``check`` until it returns something truthy (and return it); fail after ``seconds``."""
    deadline = time.monotonic() + seconds
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not met within {seconds}s (last: {value!r})")
        await asyncio.sleep(0.05)


@dataclass
class Served:
    client: TestClient[Any, Any]
    headers: dict[str, str]

    async def factory(self) -> dict[str, Any] | None:
        resp = await self.client.get("/api/v1/factory", headers=self.headers)
        listed = (await resp.json())["factories"]
        if not listed:
            return None
        resp = await self.client.get(f"/api/v1/factory/{listed[0]['uid']}", headers=self.headers)
        body: dict[str, Any] = await resp.json()
        return body

    async def readyz(self) -> tuple[int, dict[str, Any]]:
        resp = await self.client.get("/readyz")
        return resp.status, await resp.json()


def ready(factory: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in factory["conditions"] if c["type"] == "Ready")


Serve = Callable[[GitSource], Awaitable[Served]]


@pytest.fixture
async def serve(
    aiohttp_client: Any, engine: AsyncEngine, box: SecretBox, sessions: async_sessionmaker[AsyncSession]
) -> AsyncIterator[Serve]:
    """``await serve(source)``: the real app following ``source`` (the reconciler lifecycle of ``serve``)."""
    async with sessions() as s, s.begin():
        team = await builders.team(s)
        key = await builders.api_key(s, SystemClock(), team.id, "admin")

    async def start(source: GitSource) -> Served:
        settings = ServerSettings(data_dir=source.mirror.parents[3])
        lifecycle = reconciler_lifecycle(source, f"{source.url}@{source.branch}", "default", allow_empty=True)
        app = create_app(settings, engine, box, lifecycles=[lifecycle], route_modules=ROUTE_MODULES)
        return Served(await aiohttp_client(app), {"Authorization": f"Bearer {key}"})

    yield start


async def test_a_malformed_commit_fails_its_revision_and_the_next_commit_applies(
    tmp_path: Path, serve: Serve
) -> None:
    repo = Repo(tmp_path / "src")
    first = repo.commit(repo.factory_tree("first"), "first")
    served = await serve(GitSource(str(repo.path), "main", tmp_path / "data", poll_interval=0.05))

    async def at(field: str, revision: str) -> dict[str, Any] | None:
        factory = await served.factory()
        return factory if factory and factory[field] == revision else None

    await until(lambda: at("last_applied_revision", first), "the first commit applied")

    # A root entry named "webhooks/x.yaml": GitPython raised ValueError here and the loop died silently.
    hook = repo.blob(b"secretName: hooks\n")
    bad = repo.commit(repo.factory_tree("bad", ("100644", "webhooks/x.yaml", hook)), "malformed")
    failed = await until(lambda: at("last_attempted_revision", bad), "the malformed commit recorded")
    condition = ready(failed)
    assert (condition["status"], condition["reason"]) == ("False", "RevisionUnreadable")
    assert "'webhooks/x.yaml' in the root is not a valid file name" in condition["message"]
    assert failed["last_applied_revision"] == first
    status, body = await served.readyz()
    assert (status, body["reconciler"]) == (200, "ok")  # a bad revision is not a broken loop

    good = repo.commit(repo.factory_tree("third"), "fixed")
    done = await until(lambda: at("last_applied_revision", good), "the commit after the malformed one")
    assert done["description"] == "third" and ready(done)["status"] == "True"


async def test_readyz_reports_a_source_that_cannot_be_read_and_the_factory_says_why(
    tmp_path: Path, serve: Serve
) -> None:
    repo = Repo(tmp_path / "src")
    first = repo.commit(repo.factory_tree("first"), "first")
    served = await serve(GitSource(str(repo.path), "main", tmp_path / "data", poll_interval=0.05))

    async def applied() -> dict[str, Any] | None:
        factory = await served.factory()
        return factory if factory and factory["last_applied_revision"] == first else None

    await until(applied, "the first commit applied")
    assert (await served.readyz())[0] == 200

    away = tmp_path / "moved"
    repo.path.rename(away)  # the repository becomes unreachable

    async def failing() -> dict[str, Any] | None:
        _, body = await served.readyz()
        return body if body.get("reconciler") == "failing" else None

    body = await until(failing, "/readyz reporting the failing source")
    # Still ready: ingress and the run API do not need the git host (docs/operations.md, "Readiness").
    assert (body["status"], body["database"]) == ("ready", "up")
    assert "cannot fetch" in body["reason"]
    factory = await served.factory()
    assert factory is not None
    assert (ready(factory)["status"], ready(factory)["reason"]) == ("False", "SourceUnavailable")
    assert "cannot fetch" in ready(factory)["message"]
    assert factory["last_applied_revision"] == first  # the last good state stays live

    away.rename(repo.path)  # reachable again: the head is reconciled again and the factory recovers

    async def recovered() -> dict[str, Any] | None:
        status, body = await served.readyz()
        factory = await served.factory()
        ok = status == 200 and body["reconciler"] == "ok"
        return factory if ok and factory and ready(factory)["status"] == "True" else None

    await until(recovered, "/readyz reconciler ok and Ready=True again")


async def test_an_unexpected_error_of_the_source_does_not_kill_the_loop(tmp_path: Path, serve: Serve) -> None:
    repo = Repo(tmp_path / "src")
    first = repo.commit(repo.factory_tree("first"), "first")
    source = GitSource(str(repo.path), "main", tmp_path / "data", poll_interval=0.05)
    source.snapshot_dir.parent.mkdir(parents=True)
    source.snapshot_dir.write_text("in the way\n")  # exporting raises an OSError, not a SourceError
    served = await serve(source)

    async def failing() -> dict[str, Any] | None:
        _, body = await served.readyz()
        return body if body.get("reconciler") == "failing" else None

    body = await until(failing, "/readyz reporting the failing loop")
    assert "snapshots" in body["reason"]

    source.snapshot_dir.unlink()

    async def applied() -> dict[str, Any] | None:
        factory = await served.factory()
        return factory if factory and factory["last_applied_revision"] == first else None

    await until(applied, "the commit applied once the fault is gone")
    assert await served.readyz() == (200, {"status": "ready", "database": "up", "reconciler": "ok"})


async def test_a_symlink_in_a_commit_is_reported_not_followed(tmp_path: Path, serve: Serve) -> None:
    secret = tmp_path / "outside.yaml"
    secret.write_text("TOP-SECRET-LINE: 1\n")
    repo = Repo(tmp_path / "src")
    first = repo.commit(repo.factory_tree("first"), "first")
    served = await serve(GitSource(str(repo.path), "main", tmp_path / "data", poll_interval=0.05))

    async def at(field: str, revision: str) -> dict[str, Any] | None:
        factory = await served.factory()
        return factory if factory and factory[field] == revision else None

    await until(lambda: at("last_applied_revision", first), "the first commit applied")
    webhooks = repo.tree(("120000", "x.yaml", repo.blob(str(secret).encode())))
    linked = repo.commit(repo.factory_tree("linked", ("40000", "webhooks", webhooks)), "symlink")
    failed = await until(lambda: at("last_attempted_revision", linked), "the symlinked revision recorded")
    condition = ready(failed)
    assert (condition["status"], condition["reason"]) == ("False", "DefinitionsInvalid")
    assert "webhooks/x.yaml" in condition["message"] and "symlink not followed" in condition["message"]
    assert "TOP-SECRET" not in repr(failed)


async def test_a_failing_reconcile_backs_off_even_with_a_reconcile_forced(
    tmp_path: Path, box: SecretBox
) -> None:
    """The store is not usable (never migrated): every reconcile raises. The loop keeps going, counts the
    failures and waits a doubling backoff between them — a pending forced reconcile must not turn it into a
    busy loop."""
    from reconciler.loop import LoopHealth, follow
    from reconciler.service import ReconcileOutcome, reconcile
    from reconciler.sources import Snapshot
    from reconciler.sources.local import DirectorySource
    from store.db import create_engine, session_factory

    root = tmp_path / "f"
    (root / "automations" / "triage").mkdir(parents=True)
    (root / "factory.yaml").write_text("name: f\n")
    (root / "automations" / "triage" / "automation.md").write_bytes(AUTOMATION)
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/unmigrated.db")
    sessions = session_factory(engine)
    source, stop, health = DirectorySource(root), asyncio.Event(), LoopHealth()

    async def apply(snapshot: Snapshot) -> ReconcileOutcome:
        return await reconcile(
            sessions, box, SystemClock(), team="default", root=snapshot.root, revision=None
        )

    source.force.set()  # as POST /factory/{uid}/reconcile would
    started = time.monotonic()
    task = asyncio.create_task(follow(source, apply, stop, health=health))
    try:

        async def failed_three_times() -> bool:
            assert not task.done(), task
            return health.failures >= 3

        await until(failed_three_times, "three failed reconciles")
        elapsed = time.monotonic() - started
        assert elapsed >= 1.4, f"3 attempts in {elapsed:.2f}s: no backoff"  # 0.5 s, then 1 s between them
        assert health.running and not health.healthy
        assert "OperationalError" in health.reason
    finally:
        stop.set()
        await task
        await engine.dispose()
    assert not health.running


class _Fatal(BaseException):
    """Escapes the loop's ``except Exception`` boundary, as a bug in the loop itself would."""


class DyingSource:
    """A definitions source whose iteration dies outright: the loop task ends."""

    def __init__(self) -> None:
        self.force = asyncio.Event()

    async def snapshots(self, stop: asyncio.Event) -> AsyncIterator[Any]:
        raise _Fatal("the source broke beyond repair")
        yield  # an async generator


async def test_a_dead_loop_makes_the_replica_unready(
    aiohttp_client: Any, engine: AsyncEngine, box: SecretBox, tmp_path: Path
) -> None:
    lifecycle = reconciler_lifecycle(DyingSource(), "broken", "default", allow_empty=True)
    app = create_app(ServerSettings(data_dir=tmp_path), engine, box, lifecycles=[lifecycle])
    client = await aiohttp_client(app)

    async def unready() -> dict[str, Any] | None:
        resp = await client.get("/readyz")
        body: dict[str, Any] = await resp.json()
        return body if resp.status == 503 else None

    body = await until(unready, "/readyz 503 once the loop died")
    assert (body["status"], body["database"], body["reconciler"]) == ("unavailable", "up", "stopped")
    assert "not running" in body["reason"]
