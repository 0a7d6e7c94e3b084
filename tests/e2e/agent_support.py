"""What the agent CLI e2e modules (``test_agent_{claude,codex,gemini}.py``) share, so each holds only what
is its CLI's own.

Direct runs (:class:`Agent`): a run's workspace and agent home beside it, the scripted model server the
CLI talks to, and :meth:`Agent.invoke`, which starts the CLI exactly as a preset's invocation says (its
files written into the agent home, its environment, its stdin or ``/dev/null``, in the workspace) and
parses its stdout with the preset's own parser into a :class:`Ran`.

Through factoryctl (:func:`agent_stack`): ``factoryctl serve`` following a definition tree whose webhook
starts an automation, and a self-hosted ``factoryctl worker --sandbox none --harness NAME`` whose
environment points the CLI at the scripted model; :class:`Stack` delivers alerts, waits for a run's
attempts to end (the worker logs ``run ID: STATE`` at each), and reads its events from the run's stream.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from agents.scripted import ScriptedServer
from aiohttp import web
from serve_support import Served, run_cli, run_events, running, serving, stop, wait_for

from factoryctl.client import FactoryClient
from factoryctl.worker.job import Job
from factoryctl.worker.presets import base
from factoryctl.worker.presets.base import Context, Preset, Verdict

REPO = Path(__file__).resolve().parents[2]
FINISHED = frozenset({"SUCCEEDED", "FAILED", "ERROR", "CANCELLED", "BLOCKED"})
HOOK_SECRET = "alerts-token"  # the webhook's secret (webhooks/alerts.yaml)
HOOK_TOKEN = "agent-e2e-hook-token-0123456789"


def installed_cli(name: str, package: str) -> str:
    """The pinned CLI (``node_modules/.bin/NAME`` after ``npm ci``), else one on PATH; the test is skipped,
    saying so, when there is none."""
    pinned = REPO / "node_modules" / ".bin" / name
    found = str(pinned) if pinned.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"the {name} CLI is not installed: run `npm ci` (package.json pins {package})")
    return found


# --- direct runs of a CLI through a preset's invocation ----------------------------------------------------


@dataclass
class Ran:
    """One CLI run: its exit status, output, the preset parser's events and verdict, and the stdout lines
    the parser did not recognise as structured output."""

    code: int
    stdout: str
    stderr: str
    events: list[base.AgentEvent]
    verdict: Verdict | None
    plain: list[str]

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [dict(e.data) for e in self.events if e.kind == kind]


def parsed(preset: Preset, done: subprocess.CompletedProcess[str]) -> Ran:
    """``done``'s stdout read line by line by a fresh parser of ``preset``, as the preset harness reads it."""
    parser = preset.parser()
    events: list[base.AgentEvent] = []
    plain: list[str] = []
    for line in done.stdout.splitlines():
        if parser.is_structured(line):
            events += parser.feed(line)
        else:
            plain.append(line)
    return Ran(done.returncode, done.stdout, done.stderr, events, parser.verdict(), plain)


@dataclass
class Agent:
    """One run's workspace (with ``outputs/``), its agent home beside it, and the scripted model the CLI
    talks to. A module's subclass adds ``run``: its CLI's job, endpoint variables and options."""

    root: Path
    server: ScriptedServer
    cli: str

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def home(self) -> Path:
        return self.root / "workspace.home"

    def invoke(
        self,
        preset: Preset,
        job: Job,
        *,
        resume: str | None = None,
        env: Mapping[str, str] | None = None,
        process_env: Mapping[str, str] | None = None,
        edit: Callable[[list[str]], list[str]] | None = None,
    ) -> Ran:
        """Run ``preset``'s invocation for ``job``: ``env`` is what the preset reads (the run's endpoint and
        key variables), ``process_env`` what the process gets beneath the invocation's own variables
        (besides ``PATH``); ``edit`` changes the argv (an extra CLI option)."""
        context = Context(self.workspace, self.home, resume=resume, env=dict(env or {}))
        invocation = preset.invocation(job, self.cli, context)
        for name, text in invocation.files.items():
            path = self.home / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        argv = edit(invocation.argv) if edit is not None else invocation.argv
        base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(process_env or {})}
        done = subprocess.run(
            argv,
            cwd=self.workspace,
            env={**base_env, **invocation.env},
            input=invocation.stdin,
            stdin=subprocess.DEVNULL if invocation.stdin is None else None,
            capture_output=True,
            text=True,
            timeout=120,
        )
        return parsed(preset, done)


A = TypeVar("A", bound=Agent)


@contextlib.contextmanager
def scripted_agent(kind: type[A], root: Path, app: web.Application, cli: str) -> Iterator[A]:
    """``kind`` in ``root`` (its workspace, ``outputs/`` and agent home made) while ``app`` serves."""
    (root / "workspace" / "outputs").mkdir(parents=True)
    (root / "workspace.home").mkdir(mode=0o700)
    with ScriptedServer(app) as server:
        yield kind(root, server, cli)


# --- through factoryctl: serve, a self-hosted worker running the preset, a webhook automation -------------


def write_tree(repo: Path, files: Mapping[str, str]) -> None:
    """``files`` (the factory, its automation) with the foreman and the alerts webhook every tree has."""
    common = {
        "agents/foreman/agent.md": "---\nagentType: FOREMAN\n---\nYou coordinate.\n",
        "webhooks/alerts.yaml": f"secretName: {HOOK_SECRET}\n",
    }
    for name, text in {**common, **files}.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)


@dataclass
class Stack:
    """``factoryctl serve`` following the tree, a self-hosted worker whose environment points the CLI at
    the scripted model (``model``), and what a test waits on."""

    served: Served
    model: ScriptedServer
    worker_log: Path
    alive: list[subprocess.Popen[bytes]]
    hook: str
    workers: contextlib.ExitStack
    worker_args: tuple[str | Path, ...]
    worker_env: dict[str, str]
    seen: set[str] = field(default_factory=set)

    @property
    def logs(self) -> list[Path]:
        return [self.served.log, self.worker_log]

    def deliver(self, delivery: str) -> str:
        """POST an alert to the webhook; the id of the run it started."""
        resp = httpx.post(
            f"{self.served.url}/webhooks/w/{self.hook}",
            json={"alert": delivery},
            headers={"Authorization": f"Bearer {HOOK_TOKEN}", "X-Factory-Delivery-Id": delivery},
            timeout=10,
        )
        assert resp.status_code == 202, resp.text

        def started() -> str | None:
            fresh = {r["run_id"] for r in self.served.get("/api/v1/agent/runs")["runs"]} - self.seen
            return fresh.pop() if fresh else None

        run_id: str = wait_for(started, 30, f"the run of {delivery}", alive=self.alive, logs=self.logs)
        self.seen.add(run_id)
        return run_id

    def run(self, run_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self.served.get(f"/api/v1/agent/runs/{run_id}")
        return found

    def finished(self, run_id: str, attempts: int = 1) -> dict[str, Any]:
        """The run once its ``attempts``-th attempt ended (a follow-up's run is final again only then)."""

        def done() -> dict[str, Any] | None:
            messages = [
                json.loads(line).get("msg", "")
                for line in self.worker_log.read_text().splitlines()
                if line.startswith("{")  # the worker's log lines are JSON (docs/operations.md)
            ]
            ended = sum(
                1 for m in messages if m.startswith(f"run {run_id}: ") and m.split(": ", 1)[1] in FINISHED
            )
            run = self.run(run_id)
            return run if ended >= attempts and run["state"] in FINISHED else None

        return wait_for(done, 90, f"run {run_id} to finish", alive=self.alive, logs=self.logs)

    def events(self, run_id: str) -> list[dict[str, Any]]:
        """The run's events so far (``{kind, data}``), from its stream."""
        return run_events(self.served, run_id)

    def logs_of(self, run_id: str) -> list[str]:
        return [line["text"] for line in self.served.get(f"/api/v1/agent/runs/{run_id}/logs")["logs"]]

    def restart_worker(self, workspace_root: Path) -> None:
        """Stop the worker process and start another one (its own worker ID) with ``workspace_root``."""
        old = self.alive.pop()
        assert stop(old) == 0
        new = self.workers.enter_context(
            running(
                "worker", *self.worker_args, "--workspace-root", workspace_root,
                log=self.worker_log, env=self.worker_env,
            )
        )  # fmt: skip
        self.alive.append(new)


@contextlib.contextmanager
def agent_stack(
    tmp_path: Path,
    *,
    factory: str,
    files: Mapping[str, str],
    app: web.Application,
    harness: str,
    cli: str,
    host: str,
    model_env: Callable[[str], Mapping[str, str]],
    worker_args: Sequence[str | Path] = (),
) -> Iterator[Stack]:
    """Serve the tree ``files`` (factory ``factory``; its webhook's secret made first) and run a worker for
    ``host`` offering ``harness`` with ``cli`` and ``model_env(model URL)`` (the CLI's endpoint and key)
    in its environment, while ``app`` plays the model; yields once the tree is applied."""
    data, repo = tmp_path / "data", tmp_path / "repo"
    repo.mkdir()
    write_tree(repo, files)
    made = run_cli("--data-dir", data, "secrets", "create", HOOK_SECRET, "--scope", "webhook", "--from-stdin",
                   stdin=HOOK_TOKEN + "\n")  # fmt: skip
    assert made.returncode == 0, made.stderr
    with (
        ScriptedServer(app) as model,
        serving(data, "--repo", repo, log=tmp_path / "serve.log") as served,
    ):
        key = run_cli("--data-dir", data, "keys", "create", "--name", "box", "--role", "worker",
                      "--worker-host", host)  # fmt: skip
        assert key.returncode == 0, key.stderr
        worker_env = {"FACTORY_API_KEY": key.stdout.strip().splitlines()[-1], **model_env(model.url)}
        worker_log = tmp_path / "worker.log"
        args = ("--server", served.url, "--host-id", host, "--sandbox", "none", "--harness", harness,
                "--agent-cli", f"{harness}={cli}", *worker_args)  # fmt: skip
        with contextlib.ExitStack() as workers:
            worker = workers.enter_context(running("worker", *args, log=worker_log, env=worker_env))
            alive = [served.proc, worker]

            def hook_uid() -> str | None:
                with FactoryClient(served.url, served.key) as client:
                    page = client.factories.list(search=factory)
                    detail = client.factories.get(page.items[0].uid) if page.items else None
                if detail is None or not detail.webhooks or not detail.automations:
                    return None
                return str(detail.webhooks[0].uid)

            hook = wait_for(hook_uid, 30, "the tree to apply", alive=alive, logs=[served.log, worker_log])
            yield Stack(served, model, worker_log, alive, hook, workers, args, worker_env)
