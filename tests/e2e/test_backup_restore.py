"""The backup and restore drill (docs/deployment.md, "Backup and restore"), on SQLite and PostgreSQL.

A ``serve`` follows a factory directory (factory, webhook, automation), holds two team secrets, accepts a
delivery (which starts a run) and an API run. While it serves, the store is backed up as the docs say:
``factoryctl backup --to DIR`` on SQLite, ``pg_dump`` plus the key file on PostgreSQL. The backup is
restored into a new data directory and a new database, and the test shows that every row of the store's
definitions, secrets, deliveries and runs came back, that each secret decrypts with the restored key to
the value it was given, and that a ``serve`` on the restored store accepts a delivery signed with the
original webhook secret and lists the original runs.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_support import Served, run_cli, serving, wait_for
from sqlalchemy import select
from sqlalchemy.engine import make_url

from store.crypto import SecretBox
from store.db import create_engine, normalize_url
from store.models import Base, Secret, SecretVersion

pytestmark = pytest.mark.slow
SECRETS = {"hooks": "hook-token-0123456789abcdef", "deploy-token": "run-value-ABCDEFGHIJ-0123456789"}
# Every table that holds what a team would miss: definitions, secrets, keys, deliveries, runs and events.
COMPARED = (
    "teams",
    "api_keys",
    "secrets",
    "secret_versions",
    "factories",
    "webhooks",
    "automations",
    "automation_webhooks",
    "factory_objects",
    "environments",
    "schedules",
    "deliveries",
    "runs",
    "run_events",
)


def write_factory(root: Path) -> None:
    (root / "webhooks").mkdir(parents=True)
    (root / "automations" / "triage").mkdir(parents=True)
    (root / "factory.yaml").write_text("name: drill\ndescription: backup drill\n")
    (root / "webhooks" / "alerts.yaml").write_text("authMode: token\nsecretName: hooks\n")
    (root / "automations" / "triage" / "automation.md").write_text(
        "---\ntriggers:\n  - provider: webhook\n    event: received\n    filter:\n"
        "      webhooks: [alerts]\n---\nTriage the alert.\n"
    )


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, pg_template: Any) -> Iterator[str]:
    """``sqlite``, or the base URL of the PostgreSQL server the test creates its scratch databases on."""
    if request.param == "sqlite":
        yield "sqlite"
        return
    if pg_template is None:
        pytest.skip("FACTORY_TEST_POSTGRES_URL not set")
    yield pg_template.url_for(pg_template.base.database or "postgres")


def libpq(url: str) -> str:
    """A URL pg_dump, pg_restore and psql accept (no SQLAlchemy driver name)."""
    return make_url(normalize_url(url)).set(drivername="postgresql").render_as_string(hide_password=False)


def psql(base: str, sql: str) -> None:
    subprocess.run(["psql", libpq(base), "-v", "ON_ERROR_STOP=1", "-c", sql], check=True, capture_output=True)


@pytest.fixture
def databases(store: str) -> Iterator[list[str]]:
    """Scratch databases on PostgreSQL (the original and the restored), dropped afterwards."""
    made: list[str] = []
    yield made
    for name in made:
        psql(store, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def scratch(store: str, databases: list[str]) -> str:
    name = f"factory_drill_{uuid.uuid4().hex[:10]}"
    psql(store, f'CREATE DATABASE "{name}"')
    databases.append(name)
    return make_url(store).set(database=name).render_as_string(hide_password=False)


def cli(data: Path, database: str | None, *args: str, stdin: str | None = None) -> str:
    done = run_cli("--data-dir", data, *(["--database", database] if database else []), *args, stdin=stdin)
    assert done.returncode == 0, f"{args}: {done.stderr}"
    return done.stdout


# What a running serve keeps current on its factories (docs/reconcile.md, "Sync status", "Who manages a
# factory"): its claim is given back when it stops, after the copy was taken, and the next serve writes both.
RUNTIME = {"factories": ("sync", "manager")}


def rows(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the :data:`COMPARED` tables, in primary-key order (without :data:`RUNTIME` columns)."""

    async def read() -> dict[str, list[tuple[Any, ...]]]:
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                out = {}
                for name in COMPARED:
                    table = Base.metadata.tables[name]
                    columns = [c for c in table.columns if c.name not in RUNTIME.get(name, ())]
                    query = select(*columns).order_by(*table.primary_key.columns)
                    out[name] = [tuple(row) for row in (await conn.execute(query)).all()]
                return out
        finally:
            await engine.dispose()

    return asyncio.run(read())


def secret_values(url: str, key_file: Path) -> dict[str, str]:
    """Each team secret's current value, decrypted with the key in ``key_file``."""
    box = SecretBox.from_setting(key_file.read_text().strip())

    async def read() -> dict[str, str]:
        engine = create_engine(url)
        try:
            async with engine.connect() as conn:
                found = await conn.execute(
                    select(Secret.name, SecretVersion.ciphertext)
                    .join(SecretVersion, SecretVersion.secret_id == Secret.id)
                    .where(SecretVersion.version == Secret.current_version)
                )
                return {name: box.decrypt(token) for name, token in found.all()}
        finally:
            await engine.dispose()

    return asyncio.run(read())


def deliver(served: Served, delivery_id: str) -> int:
    detail = applied(served)
    assert detail is not None
    hook = detail["webhooks"][0]["uid"]
    headers = {"Authorization": f"Bearer {SECRETS['hooks']}", "X-Factory-Delivery-Id": delivery_id}
    url = f"{served.url}/webhooks/w/{hook}"
    return httpx.post(url, json={"severity": "high"}, headers=headers, timeout=10).status_code


def applied(served: Served) -> dict[str, Any] | None:
    listed = served.get("/api/v1/factory")["factories"]
    if not listed:
        return None
    detail: dict[str, Any] = served.get(f"/api/v1/factory/{listed[0]['uid']}")
    return detail if detail["webhooks"] and detail["automations"] else None


def run_ids(served: Served) -> list[str]:
    return sorted(run["run_id"] for run in served.get("/api/v1/agent/runs?limit=100")["runs"])


def test_backup_while_serving_restores_every_definition_run_delivery_and_secret(
    store: str, databases: list[str], tmp_path: Path
) -> None:
    repo, data, backup, restored = (tmp_path / n for n in ("factory", "data", "backup", "restored"))
    write_factory(repo)
    database = None if store == "sqlite" else scratch(store, databases)
    url = database or f"sqlite+aiosqlite:///{data / 'factory.db'}"
    for name, value in SECRETS.items():
        scope = "webhook" if name == "hooks" else "run"
        cli(data, database, "secrets", "create", name, "--scope", scope, "--from-stdin", stdin=value + "\n")

    with serving(data, "--repo", repo, database=database) as served:
        wait_for(lambda: applied(served), 30, "the factory applied", logs=[served.log])
        assert deliver(served, "alert-1") == 202
        status, made = served.post("/api/v1/agent/run", {"prompt": "summarise the alert"})
        assert status == 200, made
        wait_for(
            lambda: len(run_ids(served)) == 2, 30, "the delivery's run and the API run", logs=[served.log]
        )
        original_runs = run_ids(served)

        # Online: the server is still serving while its store is copied.
        if database is None:
            out = cli(data, None, "backup", "--to", str(backup))
            assert "copied secret.key" in out and "2 runs" in out and "1 deliveries" in out
        else:
            backup.mkdir(mode=0o700)
            dump = ["pg_dump", "--format=custom", f"--file={backup / 'factory.dump'}", libpq(database)]
            subprocess.run(dump, check=True, capture_output=True)
            for name in ("secret.key", "admin.key"):
                shutil.copy2(data / name, backup / name)
        assert httpx.get(f"{served.url}/healthz", timeout=5).status_code == 200

    before = rows(url)
    assert len(before["runs"]) == 2 and len(before["deliveries"]) == 1 and len(before["secrets"]) == 2

    # Restore into a new data directory and a new database.
    restored.mkdir(mode=0o700)
    for name in ("secret.key", "admin.key"):
        shutil.copy2(backup / name, restored / name)
    if database is None:
        shutil.copy2(backup / "factory.db", restored / "factory.db")
        restored_db, restored_url = None, f"sqlite+aiosqlite:///{restored / 'factory.db'}"
    else:
        restored_db = restored_url = scratch(store, databases)
        load = ["pg_restore", "--no-owner", "--exit-on-error", f"--dbname={libpq(restored_db)}"]
        subprocess.run([*load, str(backup / "factory.dump")], check=True, capture_output=True)

    assert rows(restored_url) == before
    assert secret_values(restored_url, restored / "secret.key") == SECRETS

    with serving(restored, database=restored_db) as again:
        assert run_ids(again) == original_runs
        detail = applied(again)
        assert detail is not None and detail["name"] == "drill"
        assert deliver(again, "alert-2") == 202  # the webhook secret decrypts with the restored key
        wait_for(
            lambda: len(run_ids(again)) == 3, 30, "the restored automation starting a run", logs=[again.log]
        )
