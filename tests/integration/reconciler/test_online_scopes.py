"""Online check FC044 (docs/management.md, "Team secrets"): a webhook's ``secretName`` must be a ``webhook``
secret, and whatever runs reference (environments' ``secrets`` and ``mcpServers``, MCP ``secret:NAME``
values of agents and automations) must be ``run`` secrets; each problem at its file:line. Real stores,
SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from reconciler import online
from reconciler.loader import load
from reconciler.service import reconcile
from reconciler.specs import FactoryDefinition
from store import secrets as secret_store
from store.clock import Clock
from store.crypto import SecretBox
from store.models import Environment
from store.teams import ensure_team

FILES = {
    "factory.yaml": (
        "name: shop\n"
        "agents:\n"
        "  triage:\n"
        "    mcp_servers:\n"
        "      gh:\n"
        "        url: https://gh.example/mcp\n"
        "        headers:\n"
        "          TOKEN: secret:alerts-token\n"
        "          OK: secret:repo-token\n"
    ),
    "webhooks/alerts.yaml": "secretName: alerts-token\n",
    "environments/repo.yaml": (
        "# the workspace\nsecrets:\n  - repo-token\n  - alerts-token\n  - not-created-yet\n"
        "mcpServers:\n  local:\n    command: local-mcp\n    env:\n      KEY: secret:alerts-token\n"
    ),
    "automations/a/automation.md": (
        "---\nconfig:\n  mcp_servers:\n    x:\n      url: https://x.example\n      headers:\n"
        "        Authorization: secret:alerts-token\n---\nPrompt.\n"
    ),
}
VALUES = {"alerts-token": "alerts-value-123", "repo-token": "repo-value-456"}


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def definition_of(root: Path) -> FactoryDefinition:
    result = load(root)
    assert result.ok and result.definition is not None, result.diagnostics
    return result.definition


async def seed(
    sessions: async_sessionmaker[AsyncSession], box: SecretBox, clock: Clock, **scopes: str
) -> str:
    async with sessions() as session, session.begin():
        team = await ensure_team(session)
        for name, scope in scopes.items():
            await secret_store.create(session, box, clock, team.id, name, VALUES[name], scope=scope)
        return team.id


async def test_run_references_to_a_webhook_secret_point_at_their_lines(
    sessions: async_sessionmaker[AsyncSession], box: SecretBox, clock: Clock, tmp_path: Path
) -> None:
    root = write(tmp_path, FILES)
    team_id = await seed(sessions, box, clock, **{"alerts-token": "webhook", "repo-token": "run"})
    async with sessions() as session:
        found = await online.check(session, box, team_id, definition_of(root), None)
    base = tmp_path.as_posix()
    assert [(d.rule, d.path, d.line, d.column) for d in found] == [
        ("FC044", f"{base}/automations/a/automation.md", 7, 9),
        ("FC044", f"{base}/environments/repo.yaml", 4, 5),
        ("FC044", f"{base}/environments/repo.yaml", 10, 7),
        ("FC044", f"{base}/factory.yaml", 8, 11),
    ]
    message = "team secret 'alerts-token' may not be used by runs (scope: webhook)"
    assert {d.message for d in found} == {message}
    assert all("--scope run" in (d.hint or "") for d in found)
    assert not any(value in str(d) for d in found for value in VALUES.values())


async def test_a_webhook_on_a_run_secret_is_refused_at_its_secret_name(
    sessions: async_sessionmaker[AsyncSession], box: SecretBox, clock: Clock, tmp_path: Path
) -> None:
    root = write(
        tmp_path, {"factory.yaml": "name: shop\n", "webhooks/ci.yaml": "# CI\nsecretName: repo-token\n"}
    )
    team_id = await seed(sessions, box, clock, **{"repo-token": "run"})
    async with sessions() as session:
        found = await online.check(session, box, team_id, definition_of(root), None)
    assert [(d.rule, d.path.rsplit("/", 1)[-1], d.line, d.column) for d in found] == [
        ("FC044", "ci.yaml", 2, 1)
    ]
    assert found[0].message == (
        "team secret 'repo-token' may not back a webhook (scope: run); use a webhook-scoped secret"
    )
    assert found[0].hint is not None and "factoryctl secrets set repo-token --scope webhook" in found[0].hint


async def test_apply_refuses_an_environment_that_hands_a_webhook_secret_to_runs(
    sessions: async_sessionmaker[AsyncSession], box: SecretBox, clock: Clock, tmp_path: Path
) -> None:
    files = {
        "factory.yaml": "name: shop\n",
        "webhooks/alerts.yaml": "secretName: alerts-token\n",
        "environments/repo.yaml": "secrets:\n  - alerts-token\n",
    }
    root = write(tmp_path / "tree", files)
    await seed(sessions, box, clock, **{"alerts-token": "webhook", "repo-token": "run"})
    refused = await reconcile(sessions, box, clock, team="default", root=root, revision=None)
    assert not refused.ok
    assert [(d.rule, d.path.rsplit("/", 1)[-1], d.line) for d in refused.diagnostics] == [
        ("FC044", "repo.yaml", 2)
    ]
    async with sessions() as session:
        assert (await session.execute(select(Environment))).first() is None  # nothing applied

    write(root, {"environments/repo.yaml": "secrets:\n  - repo-token\n"})  # its own run secret
    applied = await reconcile(sessions, box, clock, team="default", root=root, revision=None)
    assert applied.ok, applied.diagnostics
