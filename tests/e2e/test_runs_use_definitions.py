"""Issue 25 item 4, "Runs use the definitions": a v1alpha1 tree with a runner, an agent with a team secret
and a skill, and a webhook automation run as that agent. ``factoryctl serve --workers 1`` follows the tree,
a delivery starts the run, and its real service-hosted worker runs the command harness in the sandbox:
the runner's setup command ran in the workspace first, the secret is an environment variable (its value
never in the log), the skill is a file under ``$FACTORY_SKILLS_DIR``. A macOS runner and a harness the
worker does not offer end their runs FAILED with a clear error code."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_support import Served, run_cli, serving, wait_for

from factoryctl.client import FactoryClient

pytestmark = pytest.mark.slow
FINISHED = {"SUCCEEDED", "FAILED", "ERROR", "CANCELLED"}
HOOK_TOKEN = "e2e-hook-token-0123456789"
RUN_SECRET = "s3cret-value-for-the-deploy-key-42"

# The agent's "CLI": prints evidence derived from the secret (never the secret), the skill file's second
# line (its first is the front matter's ---) and what the runner's setup command left in the workspace.
AGENT = """#!/bin/bash
set -eu
echo "secret-length=${#DEPLOY_KEY}"
echo "secret-sha256=$(printf %s "$DEPLOY_KEY" | sha256sum | cut -d' ' -f1)"
echo "skills-dir=${FACTORY_SKILLS_DIR#$FACTORY_WORKSPACE/}"
echo "skill-line=$(sed -n 2p "$FACTORY_SKILLS_DIR/triage-checklist/SKILL.md")"
grep -q 'Check the dashboard first' "$FACTORY_SKILLS_DIR/triage-checklist/SKILL.md" && echo skill-body-ok
echo "runner-file=$(cat runner-was-here.txt)"
echo "prompt-has-agent-prompt=$(grep -c 'You are the on-call helper' "$FACTORY_PROMPT_FILE")"
"""


def write_tree(repo: Path) -> None:
    files = {
        "factory.yaml": (
            "schemaVersion: v1alpha1\nname: defs-e2e\nrepositories:\n  - owner: acme\n    name: app\n"
            "agentDefaults:\n  harness:\n    type: command\n    model: test-model\n"
        ),
        "agents/foreman/agent.md": "---\nagentType: FOREMAN\n---\nYou coordinate.\n",
        "agents/oncall/agent.md": (
            "---\ndescription: On-call helper\nrunner: linux-box\nsecrets: [DEPLOY_KEY]\n---\n"
            "You are the on-call helper.\n"
        ),
        "agents/oncall/skills/triage-checklist/SKILL.md": (
            "---\nname: triage-checklist\ndescription: How to triage an alert\n---\n"
            "Check the dashboard first.\n"
        ),
        "agents/mac/agent.md": "---\nrunner: mac-box\n---\nYou run on a Mac.\n",
        "agents/claude/agent.md": "---\nharness:\n  type: claude\n---\nYou are Claude.\n",
        "runners/linux-box.yaml": (
            "description: a Linux box\nsetupCommands:\n"
            '  - echo "setup saw ${#DEPLOY_KEY}" > runner-was-here.txt\n'
            "instanceShape:\n  vcpus: 2\n  memoryGb: 4\n"
            "platform:\n  os: linux\n  linux:\n    dockerImage: ubuntu:24.04\n"
        ),
        "runners/mac-box.yaml": "setupCommands: [echo never]\nplatform:\n  os: macos\n  arch: aarch64\n",
        "webhooks/alerts.yaml": "secretName: alerts-token\n",
    }
    for agent, title in TITLES.items():
        files[f"automations/{agent}-alert/automation.md"] = (
            f"---\ntitle: {title}\nagent: {agent}\ntriggers:\n  - provider: webhook\n    event: received\n"
            f"    filter:\n      webhooks: [alerts]\n      payload:\n        target: [{agent}]\n"
            "---\nAn alert fired.\n"
        )
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    data, repo = tmp_path / "data", tmp_path / "repo"
    repo.mkdir()
    write_tree(repo)
    agent = tmp_path / "bin" / "agent.sh"
    agent.parent.mkdir()
    agent.write_text(AGENT)
    agent.chmod(0o755)
    for name, value, scope in (("alerts-token", HOOK_TOKEN, "webhook"), ("DEPLOY_KEY", RUN_SECRET, "run")):
        made = run_cli(
            "--data-dir",
            data,
            "secrets",
            "create",
            name,
            "--scope",
            scope,
            "--from-stdin",
            stdin=value + "\n",
        )
        assert made.returncode == 0, made.stderr
    args = ("--repo", repo, "--harness", "echo", "--command", str(agent), "--sandbox-ro", agent.parent)
    with serving(data, *args, workers=1) as server:
        yield server


TITLES = {"oncall": "Alert", "mac": "Mac", "claude": "Claude"}


def api(served: Served, path: str) -> Any:
    return served.get(f"/api/v1{path}")


def hook_uid(served: Served) -> str:
    with FactoryClient(served.url, served.key) as client:

        def applied() -> str | None:
            page = client.factories.list(search="defs-e2e")
            detail = client.factories.get(page.items[0].uid) if page.items else None
            ready = detail is not None and detail.webhooks and len(detail.automations) == len(TITLES)
            return detail.webhooks[0].uid if ready and detail is not None else None

        return wait_for(applied, 30, "the tree to apply", alive=[served.proc], logs=[served.log])


def deliver(served: Served, target: str) -> dict[str, Any]:
    """Deliver an alert for ``target``'s automation; its finished run."""
    post(served, target)

    def finished() -> dict[str, Any] | None:
        run = run_of(served, target)
        return run if run is not None and run["state"] in FINISHED else None

    return wait_for(finished, 60, f"the {target} run to finish", alive=[served.proc], logs=[served.log])


def run_of(served: Served, target: str) -> dict[str, Any] | None:
    runs = api(served, "/agent/runs")["runs"]
    found: dict[str, Any] | None = next((r for r in runs if r.get("title") == TITLES[target]), None)
    return found


def post(served: Served, target: str) -> None:
    """Deliver an alert for ``target``'s automation (its run is queued when this returns)."""
    resp = httpx.post(
        f"{served.url}/webhooks/w/{hook_uid(served)}",
        json={"target": target},
        headers={"Authorization": f"Bearer {HOOK_TOKEN}", "X-Factory-Delivery-Id": f"d-{target}"},
        timeout=10,
    )
    assert resp.status_code == 202, resp.text


def output(served: Served, run_id: str) -> str:
    return "\n".join(line["text"] for line in api(served, f"/agent/runs/{run_id}/logs")["logs"])


def test_a_webhook_run_uses_its_agents_runner_secret_and_skill(served: Served) -> None:
    run = deliver(served, "oncall")
    log = output(served, run["run_id"])
    assert run["state"] == "SUCCEEDED", (run, log)
    lines = log.splitlines()
    digest = hashlib.sha256(RUN_SECRET.encode()).hexdigest()
    assert f"secret-length={len(RUN_SECRET)}" in lines, log
    assert f"secret-sha256={digest}" in lines, log
    assert "skills-dir=.factory/skills" in lines, log
    assert 'skill-line=name: "triage-checklist"' in lines, log
    assert "skill-body-ok" in lines, log
    assert f"runner-file=setup saw {len(RUN_SECRET)}" in lines, log  # after the setup, with the secret
    assert "prompt-has-agent-prompt=1" in lines, log
    assert 'runner setup 1/1: echo "setup saw ${#DEPLOY_KEY}" > runner-was-here.txt' in lines, log
    assert any("docker image 'ubuntu:24.04' is not used" in line for line in lines), log
    # the shape's memory is the run's limit; its vCPUs cannot be enforced here (docs/workers.md, "Limits")
    assert any("instance shape memory 4 GB; the run's memory limit is 4 GiB" in line for line in lines), log
    assert any("instance shape 2 vCPUs is not enforced" in line for line in lines), log
    assert RUN_SECRET not in log + repr(run) + served.log.read_text()
    config = run["agent_config"]
    assert config["runner"] == "linux-box" and config["secrets"] == ["DEPLOY_KEY"], config
    assert config["skills"] == ["oncall/triage-checklist"], config
    assert config["harness"]["type"] == "command", config


def test_a_macos_runner_fails_clearly_and_an_unoffered_harness_waits(served: Served) -> None:
    post(served, "claude")  # queued first: a worker that does not offer claude passes it over
    mac = deliver(served, "mac")
    assert mac["state"] == "FAILED", mac
    assert mac["status_message"]["error_code"] == "runner_unavailable", mac
    assert "Linux only" in mac["status_message"]["message"], mac
    assert "never" not in output(served, mac["run_id"]).splitlines()
    claude = run_of(served, "claude")
    assert claude is not None and claude["state"] == "QUEUED", claude  # waits for a worker offering claude
