"""GitHub App deliveries (docs/ingress.md, "GitHub App deliveries"): real payloads from
``@octokit/webhooks-examples``, signed by ``@octokit/webhooks-methods`` ``sign()`` in a ``node`` process,
posted to the real app (ingress and management routes) on SQLite and PostgreSQL.

Automations with ``github`` triggers are mostly written straight into the store (a factory with
repositories, an automation with triggers JSON as an apply stores them); the last test applies a v1alpha1
tree through the reconciler first.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import builders
import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient
from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from api.app import create_app
from api.context import ServerSettings
from api.runs.config import automation_config
from reconciler.service import reconcile
from store import ids
from store.clock import ManualClock
from store.crypto import SecretBox
from store.models import Automation, Delivery, Factory, Run, RunAttachment

ROOT = Path(__file__).resolve().parents[4]
EXAMPLES = ROOT / "node_modules/@octokit/webhooks-examples/api.github.com/index.json"
NOW = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)
APP_SECRET = "gh-app-webhook-secret-1"
PROMPT = "Triage the labeled issue and propose a fix."
AGENTS = {"foreman": {}, "triager": {"model_id": "model-triage", "worker_host": "triage-host"}}
# Signs stdin's body with the secret in argv[1], as GitHub does, with the library GitHub's SDK uses.
_SIGN = (
    "import { sign } from '@octokit/webhooks-methods';"
    "let body = ''; process.stdin.setEncoding('utf8');"
    "process.stdin.on('data', (c) => { body += c; });"
    "process.stdin.on('end', async () => { process.stdout.write(await sign(process.argv[1], body)); });"
)


def example(event: str, action: str | None) -> dict[str, Any]:
    for group in json.loads(EXAMPLES.read_text()):
        if group["name"] == event:
            for found in group["examples"]:
                if action is None or found.get("action") == action:
                    return dict(found)
    raise AssertionError(f"no {event}/{action} example in @octokit/webhooks-examples")


def node_sign(secret: str, body: bytes) -> str:
    done = subprocess.run(
        ["node", "--input-type=module", "-e", _SIGN, secret],
        input=body,
        capture_output=True,
        cwd=ROOT,
        check=True,
        timeout=30,
    )
    return done.stdout.decode()


@dataclass
class GitHubApp:
    client: TestClient[Any, Any]
    sessions: async_sessionmaker[AsyncSession]
    keys: builders.RoleKeys
    factory_uid: str
    uid: str = ""

    def auth(self, key: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key or self.keys.admin}"}

    async def connect(self, secret_name: str = "github-app") -> ClientResponse:
        body = {"secret_name": secret_name}
        return await self.client.post("/api/v1/integrations/github", json=body, headers=self.auth())

    async def automation(self, name: str, triggers: list[dict[str, Any]], agent: str = "triager") -> str:
        async with self.sessions() as s, s.begin():
            row = Automation(
                uid=ids.new_id(ids.AUTOMATION),
                team_id=self.keys.team_id,
                factory_uid=self.factory_uid,
                name=name,
                enabled=True,
                agent=agent,
                title=f"{name} title",
                config={"model_id": "model-override"},
                prompt=PROMPT,
                triggers=triggers,
                created_at=NOW,
                updated_at=NOW,
            )
            s.add(row)
        return row.uid

    async def deliver(
        self,
        event: str,
        payload: dict[str, Any],
        *,
        delivery: str | None = None,
        secret: str = APP_SECRET,
        signature: str | None = None,
    ) -> ClientResponse:
        body = json.dumps(payload).encode()
        headers = {
            "Content-Type": "application/json",
            "X-GitHub-Event": event,
            "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
            "X-Hub-Signature-256": signature or node_sign(secret, body),
            "User-Agent": "GitHub-Hookshot/test",
        }
        return await self.client.post(f"/webhooks/github/{self.uid}", data=body, headers=headers)

    async def log(self) -> list[Delivery]:
        async with self.sessions() as s:
            stmt = select(Delivery).where(Delivery.webhook_uid == self.uid).order_by(Delivery.seq)
            return list((await s.execute(stmt)).scalars())

    async def runs(self) -> list[Run]:
        async with self.sessions() as s:
            stmt = select(Run).where(Run.webhook_uid == self.uid).order_by(Run.created_at, Run.run_id)
            return list((await s.execute(stmt)).scalars())


def labeled_trigger(labels: list[str]) -> dict[str, Any]:
    return {
        "provider": "github",
        "event": "issue_labeled",
        "filter": {"labels": {"in": labels, "not_in": []}},
    }


@pytest.fixture
async def gh(
    aiohttp_client: Any,
    engine: AsyncEngine,
    sessions: async_sessionmaker[AsyncSession],
    box: SecretBox,
    tmp_path: Path,
) -> GitHubApp:
    clock = ManualClock(NOW)
    async with sessions() as s, s.begin():
        keys = await builders.role_keys(s, clock)
        await builders.secret(s, box, clock, keys.team_id, "github-app", APP_SECRET)
        factory = await builders.factory(s, clock, keys.team_id, "gh-factory", agents=AGENTS)
        await s.execute(
            update(Factory)
            .where(Factory.uid == factory.uid)
            .values(repositories=[{"owner": "codertocat", "name": "hello-world"}])
        )
    app = create_app(
        ServerSettings(data_dir=tmp_path),
        engine,
        box,
        clock=clock,
        route_modules=("api.ops", "api.ingress.routes", "api.management.routes"),
    )
    found = GitHubApp(await aiohttp_client(app), sessions, keys, factory.uid)
    resp = await found.connect()
    assert resp.status == 201, await resp.text()
    found.uid = (await resp.json())["uid"]
    return found


async def test_connection_is_one_per_team_and_shows_its_url(gh: GitHubApp) -> None:
    assert gh.uid.startswith("gh_")
    again = await gh.connect()
    assert again.status == 409
    assert again.content_type == "application/problem+json"
    shown = await gh.client.get("/api/v1/integrations/github", headers=gh.auth(gh.keys.member))
    body = await shown.json()
    assert shown.status == 200
    assert body["uid"] == gh.uid and body["secret_name"] == "github-app"
    assert body["url"].endswith(f"/webhooks/github/{gh.uid}")
    other = await gh.client.get("/api/v1/integrations/github", headers=gh.auth(gh.keys.other_admin))
    assert other.status == 404
    member_connect = await gh.client.post(
        "/api/v1/integrations/github", json={"secret_name": "x"}, headers=gh.auth(gh.keys.member)
    )
    assert member_connect.status == 403


async def test_issue_labeled_starts_the_matching_automation_as_its_agent(gh: GitHubApp) -> None:
    automation = await gh.automation("triage-bugs", [labeled_trigger(["bug"])])
    payload = example("issues", "labeled")
    assert (
        payload["label"]["name"] == "bug" and payload["repository"]["full_name"] == "Codertocat/Hello-World"
    )
    delivery = str(uuid.uuid4())

    resp = await gh.deliver("issues", payload, delivery=delivery)

    assert resp.status == 202, await resp.text()
    assert await resp.json() == {"delivery_id": delivery}
    (run,) = await gh.runs()
    assert run.automation_id == automation and run.delivery_id == delivery
    assert run.prompt.startswith(PROMPT)
    assert "## GitHub delivery" in run.prompt and f'"{delivery}"' in run.prompt and '"issues"' in run.prompt
    assert "untrusted data" in run.prompt and "Codertocat" not in run.prompt  # the payload stays out
    expected = automation_config({"model_id": "model-override"}, "triager", AGENTS, None)
    assert run.agent_config == expected and run.worker_host == "triage-host"
    assert run.run_metadata == {"github_event": "issues", "github_delivery": delivery}
    assert run.creator_uid == gh.uid and run.factory_uid == gh.factory_uid
    async with gh.sessions() as s:
        (attachment,) = (
            await s.execute(select(RunAttachment).where(RunAttachment.run_id == run.run_id))
        ).scalars()
    assert json.loads(attachment.data) == payload
    (entry,) = await gh.log()
    assert (entry.status, entry.delivery_id, entry.detail) == ("Accepted", delivery, "GitHub event issues")

    duplicate = await gh.deliver("issues", payload, delivery=delivery)

    assert duplicate.status == 202 and await duplicate.json() == {"delivery_id": delivery}
    assert [d.status for d in await gh.log()] == ["Accepted", "Duplicate"]
    assert len(await gh.runs()) == 1


async def test_several_matching_triggers_start_one_run(gh: GitHubApp) -> None:
    await gh.automation("two-triggers", [labeled_trigger(["bug"]), labeled_trigger(["bug", "urgent"])])

    resp = await gh.deliver("issues", example("issues", "labeled"))

    assert resp.status == 202
    assert len(await gh.runs()) == 1


async def test_non_matching_label_and_foreign_repo_start_nothing_but_are_logged(gh: GitHubApp) -> None:
    await gh.automation("enhancements", [labeled_trigger(["enhancement"])])
    await gh.automation("bugs", [labeled_trigger(["bug"])])
    foreign = example("issues", "labeled")
    foreign["repository"] = dict(foreign["repository"], full_name="someone/else", name="else")
    foreign["repository"]["owner"] = dict(foreign["repository"]["owner"], login="someone")
    labeled_enhancement = example("issues", "labeled")
    labeled_enhancement["label"] = dict(labeled_enhancement["label"], name="wontfix")

    first = await gh.deliver("issues", labeled_enhancement)
    second = await gh.deliver("issues", foreign)

    assert (first.status, second.status) == (202, 202)
    assert [d.status for d in await gh.log()] == ["Accepted", "Accepted"]
    assert await gh.runs() == []


async def test_ping_is_accepted_and_starts_nothing(gh: GitHubApp) -> None:
    await gh.automation("bugs", [labeled_trigger(["bug"])])

    resp = await gh.deliver("ping", example("ping", None))

    assert resp.status == 202
    assert [(d.status, d.detail) for d in await gh.log()] == [("Accepted", "GitHub event ping")]
    assert await gh.runs() == []


async def test_bad_signature_is_401_and_logged_like_a_webhook_rejection(gh: GitHubApp) -> None:
    await gh.automation("bugs", [labeled_trigger(["bug"])])
    payload = example("issues", "labeled")
    delivery = str(uuid.uuid4())

    wrong_secret = await gh.deliver("issues", payload, delivery=delivery, secret="not-the-secret")
    garbage = await gh.deliver("issues", payload, signature="sha256=" + "0" * 64)

    assert (wrong_secret.status, garbage.status) == (401, 401)
    assert wrong_secret.content_type == "application/problem+json"
    log = await gh.log()
    assert [d.status for d in log] == ["Rejected (auth)", "Rejected (auth)"]
    assert log[0].delivery_id == delivery and log[0].payload is None and log[0].detail
    assert await gh.runs() == []


async def test_unknown_or_disconnected_connection_is_404(gh: GitHubApp) -> None:
    payload = example("ping", None)
    unknown = await gh.client.post(f"/webhooks/github/{ids.new_id(ids.GITHUB_CONNECTION)}", json=payload)
    assert unknown.status == 404
    gone = await gh.client.delete("/api/v1/integrations/github", headers=gh.auth())
    assert gone.status == 204

    resp = await gh.deliver("ping", payload)

    assert resp.status == 404
    assert (await gh.client.get("/api/v1/integrations/github", headers=gh.auth())).status == 404


async def test_replay_routes_a_logged_delivery_by_its_event_against_todays_automations(gh: GitHubApp) -> None:
    delivery = str(uuid.uuid4())
    assert (await gh.deliver("issues", example("issues", "labeled"), delivery=delivery)).status == 202
    assert await gh.runs() == []  # no automation yet
    automation = await gh.automation("bugs", [labeled_trigger(["bug"])])

    resp = await gh.client.post(
        f"/api/v1/integrations/github/deliveries/{delivery}/replay", headers=gh.auth()
    )

    body = await resp.json()
    assert resp.status == 201, body
    assert body["replay_of"] == delivery and body["event"] == "issues"
    assert body["delivery_id"].startswith(f"{delivery}/replay/")
    (run,) = await gh.runs()
    assert run.automation_id == automation and run.delivery_id == body["delivery_id"]
    assert body["runs"] == [{"run_id": run.run_id, "automation_id": automation}]
    listed = await gh.client.get("/api/v1/integrations/github/deliveries", headers=gh.auth(gh.keys.member))
    entries = (await listed.json())["deliveries"]
    assert [(e["status"], e["run_ids"]) for e in entries] == [("Replayed", [run.run_id]), ("Accepted", [])]


async def test_a_run_scoped_secret_cannot_verify_a_connection(gh: GitHubApp, box: SecretBox) -> None:
    async with gh.sessions() as s, s.begin():
        await builders.secret(s, box, ManualClock(NOW), gh.keys.other_team_id, "run-secret", "x", scope="run")
    resp = await gh.client.post(
        "/api/v1/integrations/github",
        json={"secret_name": "run-secret"},
        headers=gh.auth(gh.keys.other_admin),
    )
    assert resp.status == 422
    assert (await resp.json())["errors"][0]["field"] == "secret_name"


async def test_missing_github_headers_are_401_before_the_body_is_read(gh: GitHubApp) -> None:
    body = json.dumps(example("ping", None)).encode()
    signature = node_sign(APP_SECRET, body)

    no_event = await gh.client.post(
        f"/webhooks/github/{gh.uid}",
        data=body,
        headers={"X-GitHub-Delivery": "d-1", "X-Hub-Signature-256": signature},
    )
    no_delivery = await gh.client.post(
        f"/webhooks/github/{gh.uid}",
        data=body,
        headers={"X-GitHub-Event": "ping", "X-Hub-Signature-256": signature},
    )

    assert (no_event.status, no_delivery.status) == (401, 401)
    assert [(d.status, d.delivery_id, d.detail) for d in await gh.log()] == [
        ("Rejected (auth)", "d-1", "missing X-GitHub-Event header"),
        ("Rejected (auth)", "unknown", "missing X-GitHub-Delivery header"),
    ]


async def test_deliveries_fail_authentication_until_the_secret_exists(gh: GitHubApp) -> None:
    assert (await gh.client.delete("/api/v1/integrations/github", headers=gh.auth())).status == 204
    assert (await gh.connect("not-created-yet")).status == 201
    gh.uid = (await (await gh.client.get("/api/v1/integrations/github", headers=gh.auth())).json())["uid"]

    resp = await gh.deliver("ping", example("ping", None))

    assert resp.status == 401
    assert [(d.status, d.detail) for d in await gh.log()] == [
        ("Rejected (auth)", "signing secret not supplied yet")
    ]


async def test_an_applied_v1alpha1_automation_runs_as_its_agent(
    gh: GitHubApp, box: SecretBox, tmp_path: Path
) -> None:
    """The whole path: a v1alpha1 tree applied by the reconciler, then a signed ``issues.labeled``."""
    tree = {
        "factory.yaml": (
            "schemaVersion: v1alpha1\nname: v1\nrepositories:\n  - {owner: codertocat, name: hello-world}\n"
            "agentDefaults:\n  model: auto\n"
        ),
        "agents/lead/agent.md": "---\nagentType: FOREMAN\n---\nYou lead.\n",
        "agents/triager/agent.md": "---\nagentType: TRIAGE\nmodel: triage-model\n---\nYou triage issues.\n",
        "automations/bugs/automation.md": (
            "---\nagent: triager\ntriggers:\n  - provider: github\n    event: issue_labeled\n"
            "    filter:\n      repos: [Codertocat/Hello-World]\n      labels: [BUG]\n---\nTriage it.\n"
        ),
        "automations/docs/automation.md": (
            "---\ntriggers:\n  - provider: github\n    event: issue_labeled\n"
            "    filter: {labels: [docs]}\n---\nDocument it.\n"
        ),
    }
    for rel, text in tree.items():
        (tmp_path / "v1" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "v1" / rel).write_text(text)
    applied = await reconcile(
        gh.sessions, box, ManualClock(NOW), team="default", root=tmp_path / "v1", revision=None
    )
    assert applied.outcome == "succeeded", applied.errors_json()

    resp = await gh.deliver("issues", example("issues", "labeled"))

    assert resp.status == 202, await resp.text()
    (run,) = await gh.runs()  # the label is "bug": the docs automation does not match
    assert run.agent == "triager" and run.prompt.startswith("Triage it.")
    assert (run.agent_config["model_id"], run.agent_config["base_prompt"]) == (
        "triage-model",
        "You triage issues.",
    )


async def test_a_captured_delivery_resent_under_a_new_id_is_a_duplicate(gh: GitHubApp) -> None:
    """X-GitHub-Delivery is not signed: the signed body decides too (docs/ingress.md)."""
    await gh.automation("triage-bugs", [labeled_trigger(["bug"])])
    payload = example("issues", "labeled")
    first, replayed = str(uuid.uuid4()), str(uuid.uuid4())
    assert (await gh.deliver("issues", payload, delivery=first)).status == 202

    again = await gh.deliver("issues", payload, delivery=replayed)

    assert again.status == 202 and await again.json() == {"delivery_id": replayed}
    assert [(d.status, d.delivery_id) for d in await gh.log()] == [
        ("Accepted", first),
        ("Duplicate", replayed),
    ]
    assert len(await gh.runs()) == 1


async def test_the_connections_secret_shows_its_user_and_cannot_be_deleted(gh: GitHubApp) -> None:
    listed = await gh.client.get("/api/v1/secrets", headers=gh.auth())
    [secret] = [s for s in (await listed.json())["secrets"] if s["name"] == "github-app"]
    assert secret["used_by"] == ["GitHub App"]
    refused = await gh.client.delete("/api/v1/secrets/github-app", headers=gh.auth())
    assert refused.status == 409 and "disconnect the GitHub App" in (await refused.json())["detail"]
    gone = await gh.client.delete("/api/v1/integrations/github", headers=gh.auth())
    assert gone.status == 204
    assert (await gh.client.delete("/api/v1/secrets/github-app", headers=gh.auth())).status == 204


async def test_every_github_automation_gets_a_decision(gh: GitHubApp) -> None:
    """docs/ingress.md, "Decisions": matched, a filter miss (evaluate's words), an event none of its
    triggers is for, a disabled automation; the foreign repository and an unhandled event likewise."""
    bugs = await gh.automation("bugs", [labeled_trigger(["bug"])])
    docs = await gh.automation("docs", [labeled_trigger(["documentation"])])
    pushes = await gh.automation("pushes", [{"provider": "github", "event": "push"}])
    paused = await gh.automation("paused", [labeled_trigger(["bug"])])
    async with gh.sessions() as s, s.begin():
        await s.execute(update(Automation).where(Automation.uid == paused).values(enabled=False))
    foreign = example("issues", "labeled")
    foreign["repository"] = dict(foreign["repository"], full_name="someone/else", name="else")
    foreign["repository"]["owner"] = dict(foreign["repository"]["owner"], login="someone")

    assert (await gh.deliver("issues", example("issues", "labeled"), delivery="labeled")).status == 202
    assert (await gh.deliver("issues", foreign, delivery="foreign")).status == 202
    assert (await gh.deliver("ping", example("ping", None), delivery="ping")).status == 202

    listed = await gh.client.get("/api/v1/integrations/github/deliveries", headers=gh.auth(gh.keys.member))
    assert listed.status == 200, await listed.text()
    by_id = {d["delivery_id"]: d for d in (await listed.json())["deliveries"]}
    labeled = {d["automation_uid"]: d for d in by_id["labeled"]["decisions"]}
    [run] = await gh.runs()
    assert labeled[bugs]["matched"] and labeled[bugs]["run_id"] == run.run_id
    assert labeled[bugs]["run_state"] == "QUEUED"
    assert (labeled[docs]["reason"], labeled[docs]["failed_path"]) == (
        "labels: none of ['bug'] in ['documentation']",
        "labels",
    )
    assert labeled[pushes]["reason"] == "no github trigger for issue_labeled (its triggers are for push)"
    assert (labeled[paused]["enabled"], labeled[paused]["matched"]) == (False, False)
    assert labeled[paused]["reason"] == "the automation is disabled: it starts no runs until it is enabled"
    away = {d["automation_uid"]: d["reason"] for d in by_id["foreign"]["decisions"]}
    assert away[bugs] == "repository someone/else is not one of its factory's repositories"
    pinged = {d["automation_uid"]: d["reason"] for d in by_id["ping"]["decisions"]}
    assert (
        pinged[bugs] == "GitHub event 'ping' is not one that github triggers handle (or names no repository)"
    )
