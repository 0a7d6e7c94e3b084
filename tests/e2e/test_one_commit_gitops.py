"""One commit adds a webhook, an automation that names it and a schedule; one apply makes all three live.

The issue's "done when": a real git repository followed by ``factoryctl serve --git``, real deliveries
through ingress, the schedule seen through the API and started through the CLI (``schedules run-now``);
a broken schedule in the next commit is refused with file:line and applies nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import git
import httpx
import pytest
from serve_support import Served, run_cli, serving, wait_for

pytestmark = pytest.mark.slow
KEY = "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18="
ENV = {"FACTORY_SECRET_KEY": KEY, "NO_COLOR": "1"}
TOKEN = "one-commit-token-0123456789"

AUTOMATION = """---
title: Deploy follow-up
triggers:
  - provider: webhook
    event: received
    filter:
      webhooks: [deploys]
      payload:
        status: failed
---
A deploy failed: find the cause in the log excerpt and suggest a fix.
"""


def cli(data: Path, *args: str, stdin: str | None = None, server: Served | None = None) -> Any:
    env = dict(ENV)
    if server is not None:
        env |= {"FACTORY_API_KEY": server.key, "FACTORY_API_URL": server.url}
    return run_cli("--data-dir", data, *args, env=env, timeout=60, stdin=stdin)


def commit(repo: git.Repo, message: str) -> str:
    repo.git.add(A=True)
    repo.index.commit(message, author=git.Actor("t", "t@example.com"))
    return str(repo.head.commit.hexsha)


def factory_at(server: Served, revision: str) -> dict[str, Any] | None:
    for f in server.get("/api/v1/factory")["factories"]:
        if f["name"] == "deploys" and f.get("last_applied_revision") == revision:
            return dict(server.get(f"/api/v1/factory/{f['uid']}"))
    return None


def test_webhook_automation_and_schedule_in_one_commit(tmp_path: Path) -> None:
    data = tmp_path / "data"
    created = cli(data, "secrets", "create", "deploy-token", "--from-stdin", stdin=TOKEN)
    assert created.returncode == 0, created.stderr
    src = tmp_path / "src"
    repo = git.Repo.init(src, initial_branch="main")
    (src / "webhooks").mkdir(parents=True)
    (src / "automations" / "deploy-failed").mkdir(parents=True)
    (src / "schedules").mkdir()
    (src / "factory.yaml").write_text("name: deploys\n")
    (src / "webhooks" / "deploys.yaml").write_text("secretName: deploy-token\n")
    (src / "automations" / "deploy-failed" / "automation.md").write_text(AUTOMATION)
    (src / "schedules" / "hourly-review.yaml").write_text(
        'cron: "0 * * * *"\ntimezone: Europe/Berlin\nautomation: deploy-failed\n'
    )
    first = commit(repo, "a webhook, its automation and a schedule")

    with serving(data, "--git", src, "--branch", "main", "--poll-interval", "0.3", env=ENV) as server:
        factory = wait_for(lambda: factory_at(server, first))
        (hook,) = factory["webhooks"]
        (automation,) = factory["automations"]
        trigger = automation["triggers"][0]["filter"]
        assert trigger["webhooks"] == ["deploys"] and trigger["resolved_webhook_ids"] == [hook["uid"]]

        # The webhook routes into the automation that names it.
        ingress = f"{server.url}/webhooks/w/{hook['uid']}"
        headers = {"Authorization": f"Bearer {TOKEN}", "X-Factory-Delivery-Id": "deploy-1"}
        answer = httpx.post(ingress, json={"status": "failed", "service": "api"}, headers=headers)
        assert answer.status_code == 202, answer.text
        runs = server.get(f"/api/v1/agent/runs?source=CUSTOM_WEBHOOK&factory_uid={factory['uid']}")["runs"]
        assert [r["automation_id"] for r in runs] == [automation["uid"]]

        # The schedule is live: listed with its next fire time, and it starts a run when asked.
        (schedule,) = server.get("/api/v1/agent/schedules")["schedules"]
        assert schedule["name"] == "hourly-review" and schedule["managed_by"] == "definitions"
        assert schedule["enabled"] is True and schedule["history"]["next_run"] is not None
        assert schedule["prompt"].startswith("A deploy failed")
        now = cli(data, "schedules", "run-now", schedule["id"], "--format", "json", server=server)
        assert now.returncode == 0, now.stdout + now.stderr
        run = server.get(f"/api/v1/agent/runs/{json.loads(now.stdout)['run_id']}")
        assert run["source"] == "SCHEDULED_AGENT" and run["schedule"]["schedule_id"] == schedule["id"]
        assert run["automation_id"] == automation["uid"]
        listed = server.get(f"/api/v1/agent/runs?schedule_id={schedule['id']}")["runs"]
        assert [r["run_id"] for r in listed] == [run["run_id"]]

        # Pausing a definition-managed schedule over the API is refused: the file owns it.
        paused = cli(data, "schedules", "pause", schedule["id"], server=server)
        assert paused.returncode == 1 and "schedules/hourly-review.yaml" in paused.stdout + paused.stderr

        # A broken cron in the next commit: refused with file:line, nothing applied.
        (src / "schedules" / "hourly-review.yaml").write_text(
            'cron: "0 25 * * *"\nautomation: deploy-failed\n'
        )
        bad = commit(repo, "broken cron")
        failed = wait_for(
            lambda: (f := factory_at(server, first)) and f["last_attempted_revision"] == bad and f
        )
        ready = next(c for c in failed["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "False" and "schedules/hourly-review.yaml:1" in ready["message"]
        assert "hour" in ready["message"]
        (kept,) = server.get("/api/v1/agent/schedules")["schedules"]
        assert kept["cron_schedule"] == "0 * * * *"


def test_validate_reports_each_bad_reference_with_file_and_line(tmp_path: Path) -> None:
    root = tmp_path / "f"
    (root / "automations" / "a").mkdir(parents=True)
    (root / "schedules").mkdir()
    (root / "factory.yaml").write_text("name: f\n")
    (root / "automations" / "a" / "automation.md").write_text(
        "---\ntriggers:\n  - provider: webhook\n    event: received\n    filter:\n"
        "      webhooks: [nope]\n---\nDo it.\n"
    )
    (root / "schedules" / "zone.yaml").write_text('cron: "0 9 * * *"\ntimezone: Mars/Olympus\nprompt: x\n')
    (root / "schedules" / "missing.yaml").write_text('cron: "0 9 * * *"\nautomation: gone\n')
    (root / "schedules" / "cron.yaml").write_text('cron: "61 9 * * *"\nprompt: x\n')
    proc = run_cli("validate", root, "--format", "json", env=ENV, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = json.loads(proc.stdout)["factories"][0]["errors"]
    where = {(Path(e["path"]).as_posix().split("/f/", 1)[-1], e["line"]) for e in errors}
    assert {
        ("automations/a/automation.md", 6),
        ("schedules/zone.yaml", 2),
        ("schedules/missing.yaml", 2),
        ("schedules/cron.yaml", 1),
    } <= where, errors
    messages = " | ".join(e["message"] for e in errors)
    assert "minute" in messages and "Mars/Olympus" in messages and "'gone'" in messages
