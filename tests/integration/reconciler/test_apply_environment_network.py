"""Apply stores an environment's network policy as written, shows a change of it in the plan, and refuses
a tree with a bad pattern before anything is written (FC012); real SQLite and PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import select

from reconciler.service import ReconcileOutcome, reconcile
from store import secrets as secret_store
from store.models import Environment
from store.teams import ensure_team

HOOK = {"authMode": "token", "secretName": "hook-secret"}


def tree(root: Path, environment: dict[str, Any]) -> Path:
    for rel, doc in (
        ("factory.yaml", {"name": "acme"}),
        ("webhooks/a.yaml", HOOK),
        ("environments/web.yaml", environment),
    ):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(yaml.safe_dump(doc))
    return root


async def apply(sessions: Any, box: Any, clock: Any, root: Path) -> ReconcileOutcome:
    return await reconcile(sessions, box, clock, team="default", root=root, revision=None)


async def specs(sessions: Any) -> list[dict[str, Any]]:
    async with sessions() as s:
        return [dict(e.spec) for e in (await s.execute(select(Environment))).scalars()]


async def test_a_policy_is_applied_changed_and_refused_when_malformed(sessions, box, clock, tmp_path) -> None:
    async with sessions() as s, s.begin():
        team = await ensure_team(s)
        await secret_store.create(s, box, clock, team.id, "hook-secret", "v1-secret-value")
    repos = [{"url": "https://github.com/acme/app.git"}]
    allowlist = {"mode": "allowlist", "allow": ["*.npmjs.org:443"]}
    root = tree(tmp_path / "f", {"repos": repos, "network": allowlist})
    assert (await apply(sessions, box, clock, root)).outcome == "succeeded"
    assert await specs(sessions) == [{"repos": repos, "network": allowlist}]

    tree(root, {"repos": repos, "network": {"mode": "none"}})
    result = await apply(sessions, box, clock, root)
    assert result.outcome == "succeeded"
    assert [(c.kind, c.action, c.name) for c in result.plan.changes] == [("environment", "update", "web")]
    assert await specs(sessions) == [{"repos": repos, "network": {"mode": "none"}}]

    tree(root, {"repos": repos, "network": {"mode": "allowlist", "allow": ["https://evil.example"]}})
    refused = await apply(sessions, box, clock, root)
    assert refused.outcome == "failed" and [d.rule for d in refused.diagnostics] == ["FC012"]
    assert (
        refused.diagnostics[0].path.endswith("environments/web.yaml") and refused.diagnostics[0].line == 3
    )  # safe_dump sorts: network.allow[0] is line 3
    assert await specs(sessions) == [{"repos": repos, "network": {"mode": "none"}}]  # nothing was written
