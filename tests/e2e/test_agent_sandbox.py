"""Each agent CLI (Claude Code, Codex, Gemini CLI) on a service-hosted worker, inside the bubblewrap sandbox,
reaches its scripted model through the worker's egress proxy, and nothing else (issue 27; docs/workers.md,
"Network").

``factoryctl serve --workers 1 --harness NAME`` follows a tree whose webhook starts an automation run by
the preset; the model endpoint and key come from ``serve``'s environment through ``--agent-env``. The run
has no environment, so its claim's network is an empty allowlist: the model endpoint only. The scripted
model has the agent run one shell command that tries another server on the host's loopback and a name
that is not allowed; both are refused by the proxy (403), recorded as ``egress_refused`` events, and the
other server never sees a request. Nothing leaves loopback (``example.invalid`` is refused by name, before
any DNS).

Skipped, saying so, when a CLI is not installed (``npm ci``).
"""

from __future__ import annotations

import contextlib
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from agents import anthropic_server, gemini_server, openai_server
from agents.gemini_cli import API_KEY as GEMINI_KEY
from agents.gemini_cli import find_gemini
from agents.scripted import Script, ScriptedServer, Text, ToolCall
from aiohttp import web
from serve_support import Served, run_cli, run_events, serving, wait_for

from factoryctl.client import FactoryClient

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
FINISHED = frozenset({"SUCCEEDED", "FAILED", "ERROR", "CANCELLED", "BLOCKED"})
HOOK_SECRET = "alerts-token"  # the webhook's secret (webhooks/alerts.yaml)
HOOK_TOKEN = "sandbox-e2e-hook-token-0123456789"


def installed_cli(name: str, package: str) -> str:
    """The pinned CLI (``node_modules/.bin/NAME`` after ``npm ci``), else one on PATH, else a skip."""
    pinned = REPO / "node_modules" / ".bin" / name
    found = str(pinned) if pinned.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"the {name} CLI is not installed: run `npm ci` (package.json pins {package})")
    return found


@dataclass(frozen=True)
class Cli:
    """What differs per CLI: how it is found, its model, its scripted provider, the shell tool call, and
    the variables that point it at the model (given to ``serve``, passed on with ``--agent-env``)."""

    name: str
    model: str
    find: Callable[[], str]
    app: Callable[[Script], web.Application]
    shell: Callable[[str], ToolCall]
    env: Callable[[str], dict[str, str]]


def _gemini() -> str:
    found = find_gemini()
    if found is None:
        pytest.skip("the Gemini CLI is not installed: run `npm ci` (package.json pins @google/gemini-cli)")
    return found


CLIS = {
    "claude": Cli(
        "claude",
        "claude-sonnet-4-5",
        lambda: installed_cli("claude", "@anthropic-ai/claude-code"),
        anthropic_server.anthropic_app,
        lambda command: ToolCall("Bash", {"command": command}),
        lambda url: {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-ant-api-scripted"},
    ),
    "codex": Cli(
        "codex",
        "gpt-5.2-codex",
        lambda: installed_cli("codex", "@openai/codex 0.169.0"),
        openai_server.openai_app,
        openai_server.shell,
        lambda url: {"OPENAI_BASE_URL": f"{url}/v1", "OPENAI_API_KEY": "sk-worker-scripted"},
    ),
    "gemini": Cli(
        "gemini",
        "gemini-2.5-flash",
        _gemini,
        gemini_server.gemini_app,
        gemini_server.shell,
        lambda url: {"GOOGLE_GEMINI_BASE_URL": url, "GEMINI_API_KEY": GEMINI_KEY},
    ),
}


@contextlib.contextmanager
def bystander() -> Iterator[tuple[int, list[str]]]:
    """A plain HTTP server on the host's loopback that no run may reach: its port, and the paths asked."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"the host's secret")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], asked
    finally:
        server.shutdown()
        server.server_close()


def write_tree(repo: Path, cli: Cli) -> None:
    """A factory whose alerts webhook starts an automation run by ``cli``'s preset on a service-hosted
    worker (no ``workerHost``)."""
    files = {
        "agents/foreman/agent.md": "---\nagentType: FOREMAN\n---\nYou coordinate.\n",
        "webhooks/alerts.yaml": f"secretName: {HOOK_SECRET}\n",
        "factory.yaml": (
            f"schemaVersion: v1alpha1\nname: sandbox-{cli.name}\n"
            "repositories:\n  - owner: acme\n    name: app\n"
            "agentDefaults:\n  harness:\n    type: oz\n    model: default-model\n"
        ),
        "automations/alert/automation.md": (
            f"---\ntitle: Sandboxed alert\nharness:\n  type: {cli.name}\n  model: {cli.model}\n"
            "triggers:\n  - provider: webhook\n    event: received\n    filter:\n      webhooks: [alerts]\n"
            "---\nAn alert fired: look around.\n"
        ),
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)


def hook_of(served: Served, factory: str) -> str | None:
    with FactoryClient(served.url, served.key) as client:
        page = client.factories.list(search=factory)
        detail = client.factories.get(page.items[0].uid) if page.items else None
    if detail is None or not detail.webhooks or not detail.automations:
        return None
    return str(detail.webhooks[0].uid)


@pytest.mark.parametrize("name", sorted(CLIS))
def test_an_agent_cli_in_the_sandbox_reaches_its_model_and_nothing_else(name: str, tmp_path: Path) -> None:
    cli = CLIS[name]
    executable = cli.find()
    script = Script([])
    data, repo = tmp_path / "data", tmp_path / "repo"
    repo.mkdir()
    write_tree(repo, cli)
    made = run_cli("--data-dir", data, "secrets", "create", HOOK_SECRET, "--scope", "webhook", "--from-stdin",
                   stdin=HOOK_TOKEN + "\n")  # fmt: skip
    assert made.returncode == 0, made.stderr
    with (
        bystander() as (other, asked),
        ScriptedServer(cli.app(script)) as model,
    ):
        env = cli.env(model.url)
        passed = [arg for variable in env for arg in ("--agent-env", variable)]
        with serving(data, "--repo", repo, "--harness", name, "--agent-cli", f"{name}={executable}", *passed,
                     "--workspace-dir", tmp_path / "ws", workers=1, env=env,
                     log=tmp_path / "serve.log") as served:  # fmt: skip
            hook = wait_for(lambda: hook_of(served, f"sandbox-{name}"), 30, "the tree to apply",
                            alive=[served.proc], logs=[served.log])  # fmt: skip
            command = (
                f"curl -sS -m 20 http://127.0.0.1:{other}/secret; echo; "
                "curl -s -m 20 -o /dev/null -w 'connect=%{http_connect}' https://example.invalid/; echo"
            )
            script.extend([cli.shell(command), Text("Looked around.")])
            resp = httpx.post(
                f"{served.url}/webhooks/w/{hook}",
                json={"alert": "a"},
                headers={"Authorization": f"Bearer {HOOK_TOKEN}", "X-Factory-Delivery-Id": f"d-{name}"},
                timeout=10,
            )
            assert resp.status_code == 202, resp.text

            def finished() -> dict[str, Any] | None:
                runs = served.get("/api/v1/agent/runs")["runs"]
                done = [r for r in runs if r["state"] in FINISHED]
                return done[0] if done else None

            run = wait_for(finished, 120, "the run to finish", alive=[served.proc], logs=[served.log])
            run_id = run["run_id"]
            logs = [line["text"] for line in served.get(f"/api/v1/agent/runs/{run_id}/logs")["logs"]]
            assert run["state"] == "SUCCEEDED", (run["status_message"], logs[-40:])
            events = run_events(served, run_id)

    refused = [e["data"] for e in events if e["kind"] == "egress_refused"]
    assert refused == [
        {"host": "127.0.0.1", "port": other, "reason": "not on the network allowlist"},
        {"host": "example.invalid", "port": 443, "reason": "not on the network allowlist"},
    ]
    assert asked == []  # the host's other server was never reached
    [result] = [e["data"] for e in events if e["kind"] == "tool_result"]
    assert "refused: not on the network allowlist" in result["output"], result
    assert "connect=403" in result["output"], result
    assert f"network: refused 127.0.0.1:{other} (not on the network allowlist)" in logs, logs
    assert model.recorder.requests, "the model was never reached"
    assert model.recorder.unknown == []
