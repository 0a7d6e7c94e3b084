"""Online checks against real stores (SQLite, and PostgreSQL when configured)."""

from __future__ import annotations

import base64
from pathlib import Path

from reconciler import online
from reconciler.loader import load
from reconciler.online import standard_webhooks_secret_ok
from reconciler.specs import FactoryDefinition
from store import secrets as secret_store
from store.teams import ensure_team

UID_A = "wh_0123456789abcdefghjkmnpqrs"
UID_B = "wh_zyxwvtsrqpnmkjhgfedcba9876"
WHSEC = "whsec_" + base64.b64encode(b"k" * 32).decode()


def make_factory(root: Path) -> FactoryDefinition:
    files = {
        "factory.yaml": "name: shop\n",
        "webhooks/bearer.yaml": "secretName: bearer-secret\n",
        "webhooks/cron.yaml": "# cron\nauthMode: url_token\nsecretName: cron-token\n",
        "webhooks/svix.yaml": "authMode: signature\nsignatureScheme: svix\nsecretName: svix-secret\n",
        "webhooks/stripe.yaml": "authMode: signature\nsignatureScheme: stripe\nsecretName: stripe-secret\n",
        "automations/a/automation.md": (
            "---\ntriggers:\n  - provider: webhook\n    event: received\n    filter:\n"
            f"      webhook_ids:\n        - {UID_A}\n        - {UID_B}\n---\nPrompt.\n"
        ),
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    result = load(root)
    assert result.ok, result.diagnostics
    assert result.definition is not None
    return result.definition


async def seed(sessions, box, clock, values: dict[str, str]) -> str:  # type: ignore[no-untyped-def]
    async with sessions() as session:
        team = await ensure_team(session)
        for name, value in values.items():
            await secret_store.create(session, box, clock, team.id, name, value)
        await session.commit()
        return team.id


GOOD = {
    "bearer-secret": "b" * 20,
    "cron-token": "abc-DEF_1.2~x",
    "svix-secret": WHSEC,
    "stripe-secret": "whsec_stripe",
}


async def test_all_good(sessions, box, clock, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    definition = make_factory(tmp_path)
    team_id = await seed(sessions, box, clock, GOOD)
    async with sessions() as session:
        found = await online.check(session, box, team_id, definition, {UID_A: "bearer", UID_B: "cron"})
    assert found == []


async def test_missing_secret_points_at_secret_name(sessions, box, clock, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    definition = make_factory(tmp_path)
    team_id = await seed(sessions, box, clock, {k: v for k, v in GOOD.items() if k != "cron-token"})
    async with sessions() as session:
        found = await online.check(session, box, team_id, definition, None)
    assert [(d.rule, d.path, d.line, d.column) for d in found] == [
        ("FC040", f"{tmp_path.as_posix()}/webhooks/cron.yaml", 3, 1)
    ]
    assert found[0].message == "team secret 'cron-token' does not exist"
    assert found[0].hint == "create it first: factoryctl secrets create cron-token --generate"


async def test_url_token_secret_must_be_url_safe(sessions, box, clock, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    definition = make_factory(tmp_path)
    team_id = await seed(sessions, box, clock, {**GOOD, "cron-token": "has/slash and space"})
    async with sessions() as session:
        found = await online.check(session, box, team_id, definition, None)
    assert [(d.rule, d.line) for d in found] == [("FC041", 3)]
    assert "has/slash" not in found[0].message  # never echo a secret value
    assert "not URL-safe" in found[0].message


async def test_standard_webhooks_secret_must_decode(sessions, box, clock, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    definition = make_factory(tmp_path)
    team_id = await seed(sessions, box, clock, {**GOOD, "svix-secret": "whsec_not*base64"})
    async with sessions() as session:
        found = await online.check(session, box, team_id, definition, None)
    assert [(d.rule, d.path.rsplit("/", 1)[-1], d.line) for d in found] == [("FC042", "svix.yaml", 3)]


async def test_unknown_webhook_uid(sessions, box, clock, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    definition = make_factory(tmp_path)
    team_id = await seed(sessions, box, clock, GOOD)
    async with sessions() as session:
        found = await online.check(session, box, team_id, definition, {UID_A: "bearer"})
    assert [(d.rule, d.path.rsplit("/", 2)[-2], d.line, d.column) for d in found] == [("FC043", "a", 8, 11)]
    assert found[0].message == f"webhook UID '{UID_B}' does not exist in factory 'shop'"
    assert found[0].hint == f"webhooks of this factory: bearer ({UID_A})"
    async with sessions() as session:
        never_applied = await online.check(session, box, team_id, definition, {})
    assert [d.rule for d in never_applied] == ["FC043", "FC043"]
    assert never_applied[0].hint == "this factory has no webhooks in the store yet"


async def test_secrets_of_another_team_do_not_count(sessions, box, clock, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    definition = make_factory(tmp_path)
    await seed(sessions, box, clock, GOOD)
    async with sessions() as session:
        other = await ensure_team(session, "other")
        await session.commit()
        found = await online.check(session, box, other.id, definition, None)
    assert sorted(d.rule for d in found) == ["FC040"] * 4


def test_standard_webhooks_secret_shape() -> None:
    assert standard_webhooks_secret_ok(WHSEC)
    assert standard_webhooks_secret_ok(WHSEC.rstrip("="))  # padding is optional
    assert not standard_webhooks_secret_ok(WHSEC.removeprefix("whsec_"))
    assert not standard_webhooks_secret_ok("whsec_" + base64.b64encode(b"k" * 23).decode())
    assert not standard_webhooks_secret_ok("whsec_" + base64.b64encode(b"k" * 65).decode())
    assert standard_webhooks_secret_ok("whsec_" + base64.b64encode(b"k" * 64).decode())
