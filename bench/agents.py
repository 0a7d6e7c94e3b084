"""Agent presets: a one-tool-call run from webhook delivery to SUCCEEDED vs the same CLI run by hand.

    .venv/bin/python bench/agents.py [--preset claude|codex|gemini|all] [--runs 5]

For each preset, against its scripted model server on loopback (a script of one reply with a text and one
shell tool call, then a final answer; no model provider is reached):

- **by hand** (the baseline): the preset's own invocation of the real CLI (argv, agent-home files, the
  environment the preset harness would give it, the prompt on stdin) as one ``subprocess.run`` in a fresh
  temporary workspace and agent home, timed from start to exit; the exit status must be 0 and the parsed
  verdict a success.
- **through factoryctl** (measured): ``factoryctl serve`` following a one-automation tree (webhook trigger,
  ``harness: {type: NAME}``, ``workerHost`` of a self-hosted worker) and ``factoryctl worker --sandbox none
  --harness NAME`` with the model endpoint in its environment, both real processes; timed from the webhook
  POST to the run's ``SUCCEEDED`` as seen by polling ``GET /api/v1/agent/runs/{id}`` every 10 ms over one
  kept-alive connection. The run's own server-stamped ``created_at``/``started_at``/``finished_at`` split
  that into pickup (queued to INPROGRESS) and execution on the worker.

Rounds are interleaved (one by hand, one delivery) after one uncounted warm-up of each, so a noisy neighbour
slows both alike. Printed per preset: both p50s, the difference (the harness's overhead per run) and the
ratio. The default is 5 rounds, a few minutes for all three presets.

This bench imports the test suite's helpers rather than copying them: the scripted model servers
(``tests/agents/``) and the e2e process helpers (``tests/e2e/serve_support.py``: ``serving``, ``running``,
``run_cli``). It needs the pinned CLIs (``npm ci``; a preset whose CLI is missing is skipped, saying so).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tests"))  # agents: scripted model servers
sys.path.insert(2, str(Path(__file__).resolve().parents[1] / "tests" / "e2e"))  # serve_support

import httpx
from agents import anthropic_server, gemini_server, openai_server
from agents.scripted import Script, ScriptedServer, Text, ToolCall
from aiohttp import web
from serve_support import Served, run_cli, running, serving, wait_for

from factoryctl.client import FactoryClient
from factoryctl.worker.job import Job
from factoryctl.worker.presets.base import Context
from factoryctl.worker.presets.harness import PresetHarness
from factoryctl.worker.presets.registry import PRESETS

REPO = Path(__file__).resolve().parents[1]
HOST = "bench-box"
HOOK_TOKEN = "bench-agents-hook-token-0123456789"
PROMPT = "An alert fired: write a note about it."
COMMAND = "echo ok > note.txt && echo wrote"
FINISHED = {"SUCCEEDED", "FAILED", "ERROR", "CANCELLED", "BLOCKED"}
POLL_SECONDS = 0.01
SCRATCH_BIN = Path("/tmp/agents-try/node_modules/.bin")  # a scratch install, used when npm ci has not run


@dataclass(frozen=True)
class Kind:
    """What differs between presets here: the model, the scripted provider and its shell tool, and the
    variables that point the CLI at the scripted server."""

    name: str
    model: str
    app: Callable[[Script], web.Application]
    shell: Callable[[str], ToolCall]
    endpoint: Callable[[str], dict[str, str]]

    def script_turns(self) -> list[Any]:
        return [[Text("Writing a note."), self.shell(COMMAND)], Text("Note written.")]


KINDS = {
    "claude": Kind(
        "claude",
        "claude-sonnet-4-5",
        anthropic_server.anthropic_app,
        lambda cmd: ToolCall("Bash", {"command": cmd}),
        lambda url: {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-ant-api-scripted"},
    ),
    "codex": Kind(
        "codex",
        "gpt-5.2-codex",
        openai_server.openai_app,
        openai_server.shell,
        lambda url: {"OPENAI_BASE_URL": f"{url}/v1", "OPENAI_API_KEY": "sk-scripted"},
    ),
    "gemini": Kind(
        "gemini",
        "gemini-2.5-flash",
        gemini_server.gemini_app,
        gemini_server.shell,
        lambda url: {"GOOGLE_GEMINI_BASE_URL": url, "GEMINI_API_KEY": "scripted-gemini-key"},
    ),
}


def find_cli(name: str) -> str | None:
    for candidate in (REPO / "node_modules" / ".bin" / name, SCRATCH_BIN / name):
        if candidate.exists():
            return str(candidate)
    return shutil.which(name)


# --- by hand: the preset's invocation as one subprocess ----------------------------------------------------


def by_hand(kind: Kind, cli: str, model: ScriptedServer, script: Script, root: Path) -> float:
    """Seconds for one CLI run exactly as the preset harness would start it, in a fresh workspace/home."""
    workspace, home = root / "workspace", root / "workspace.home"
    workspace.mkdir(parents=True)
    preset = PRESETS[kind.name]
    job = Job(
        run_id="run_bench",
        prompt=PROMPT,
        agent_config={"harness": {"type": kind.name, "model_id": kind.model}},
    )
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **kind.endpoint(model.url)}
    env = PresetHarness(preset, cli, env=base).environment(job, workspace, home)
    invocation = preset.invocation(job, cli, Context(workspace, home, env=env))
    script.extend(kind.script_turns())
    start = time.perf_counter()
    home.mkdir(mode=0o700)
    for name, text in invocation.files.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    done = subprocess.run(
        invocation.argv,
        cwd=workspace,
        env={**env, **invocation.env},
        input=invocation.stdin,
        stdin=subprocess.DEVNULL if invocation.stdin is None else None,
        capture_output=True,
        text=True,
        timeout=180,
    )
    elapsed = time.perf_counter() - start
    parser = preset.parser()
    for line in done.stdout.splitlines():
        if parser.is_structured(line):
            parser.feed(line)
    verdict = parser.verdict()
    if done.returncode != 0 or verdict is None or not verdict.ok:
        raise SystemExit(f"{kind.name} by hand: exit {done.returncode}, {verdict}\n{done.stderr[-2000:]}")
    if (workspace / "note.txt").read_text() != "ok\n":
        raise SystemExit(f"{kind.name} by hand: the tool call did not run")
    return elapsed


# --- through factoryctl: serve, a self-hosted worker, a webhook delivery ----------------------------------


def write_tree(repo: Path, kind: Kind) -> None:
    files = {
        "factory.yaml": (
            f"schemaVersion: v1alpha1\nname: bench-{kind.name}\n"
            "repositories:\n  - owner: acme\n    name: app\n"
            f"agentDefaults:\n  workerHost: {HOST}\n"
            f"  harness:\n    type: {kind.name}\n    model: {kind.model}\n"
        ),
        "agents/foreman/agent.md": "---\nagentType: FOREMAN\n---\nYou coordinate.\n",
        "webhooks/alerts.yaml": "secretName: alerts-token\n",
        "automations/alert/automation.md": (
            f"---\ntitle: Bench alert\nworkerHost: {HOST}\n"
            f"harness:\n  type: {kind.name}\n  model: {kind.model}\n"
            "triggers:\n  - provider: webhook\n    event: received\n    filter:\n      webhooks: [alerts]\n"
            f"---\n{PROMPT}\n"
        ),
    }
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)


@dataclass
class Stack:
    served: Served
    hook: str
    alive: list[subprocess.Popen[bytes]]
    logs: list[Path]
    http: httpx.Client
    seen: set[str]


@contextmanager
def stack(kind: Kind, cli: str, model: ScriptedServer, root: Path) -> Iterator[Stack]:
    data, repo = root / "data", root / "repo"
    repo.mkdir(parents=True)
    write_tree(repo, kind)
    database = f"sqlite+aiosqlite:///{root / 'factory.db'}"
    admin = ("--data-dir", data, "--database", database)
    made = run_cli(*admin, "secrets", "create", "alerts-token", "--scope", "webhook", "--from-stdin",
                   stdin=HOOK_TOKEN + "\n")  # fmt: skip
    if made.returncode != 0:
        raise SystemExit(made.stderr)
    with serving(data, "--repo", repo, database=database, log=root / "serve.log") as served:
        key = run_cli(*admin, "keys", "create", "--name", "box", "--role", "worker", "--worker-host", HOST)
        if key.returncode != 0:
            raise SystemExit(key.stderr)
        worker_env = {"FACTORY_API_KEY": key.stdout.strip().splitlines()[-1], **kind.endpoint(model.url)}
        worker_log = root / "worker.log"
        args = ("worker", "--server", served.url, "--host-id", HOST, "--sandbox", "none", "--harness",
                kind.name, "--agent-cli", f"{kind.name}={cli}", "--workspace-root", root / "ws")  # fmt: skip
        with running(*args, log=worker_log, env=worker_env) as worker:
            alive, logs = [served.proc, worker], [served.log, worker_log]

            def hook() -> str | None:
                with FactoryClient(served.url, served.key) as client:
                    page = client.factories.list(search=f"bench-{kind.name}")
                    detail = client.factories.get(page.items[0].uid) if page.items else None
                if detail is None or not detail.webhooks or not detail.automations:
                    return None
                return str(detail.webhooks[0].uid)

            uid = wait_for(hook, 60, "the tree to apply", alive=alive, logs=logs)
            headers = {"Authorization": f"Bearer {served.key}"}
            with httpx.Client(base_url=served.url, headers=headers, timeout=10) as http:
                yield Stack(served, uid, alive, logs, http, set())


def through_factoryctl(kind: Kind, st: Stack, script: Script, n: int) -> tuple[float, dict[str, Any]]:
    """Seconds from the webhook POST to the run's SUCCEEDED (polled), and the final run."""
    script.extend(kind.script_turns())
    delivery = f"bench-{kind.name}-{n}"
    start = time.perf_counter()
    sent = st.http.post(
        f"/webhooks/w/{st.hook}",
        json={"alert": delivery},
        headers={"Authorization": f"Bearer {HOOK_TOKEN}", "X-Factory-Delivery-Id": delivery},
    )
    if sent.status_code != 202:
        raise SystemExit(f"delivery: {sent.status_code} {sent.text}")
    deadline = start + 180
    run_id: str | None = None
    while True:
        if run_id is None:
            fresh = {r["run_id"] for r in st.http.get("/api/v1/agent/runs").json()["runs"]} - st.seen
            run_id = fresh.pop() if fresh else None
        if run_id is not None:
            run: dict[str, Any] = st.http.get(f"/api/v1/agent/runs/{run_id}").json()
            if run["state"] in FINISHED:
                elapsed = time.perf_counter() - start
                break
        if time.perf_counter() > deadline or any(p.poll() is not None for p in st.alive):
            tails = "".join(f"\n--- {log}:\n{log.read_text()[-3000:]}" for log in st.logs if log.exists())
            raise SystemExit(f"{kind.name}: delivery {delivery} did not finish{tails}")
        time.sleep(POLL_SECONDS)
    st.seen.add(run_id)
    if run["state"] != "SUCCEEDED":
        raise SystemExit(f"{kind.name}: run {run_id} ended {run['state']}: {run.get('status_message')}")
    return elapsed, run


def stamp(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def split(run: dict[str, Any]) -> tuple[float, float]:
    """(queued → INPROGRESS, INPROGRESS → finished) seconds by the server's own stamps."""
    created, started, finished = (stamp(run[k]) for k in ("created_at", "started_at", "finished_at"))
    return (started - created).total_seconds(), (finished - started).total_seconds()


# --- one preset, and the table ----------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    hand: list[float]
    full: list[float]
    pickup: list[float]
    execution: list[float]


def bench_preset(kind: Kind, cli: str, runs: int) -> Result:
    result = Result(kind.name, [], [], [], [])
    hand_script, full_script = Script([]), Script([])
    with (
        tempfile.TemporaryDirectory(prefix=f"bench-agents-{kind.name}-") as tmp,
        ScriptedServer(kind.app(hand_script)) as hand_model,
        ScriptedServer(kind.app(full_script)) as full_model,
        stack(kind, cli, full_model, Path(tmp) / "stack") as st,
    ):
        by_hand(kind, cli, hand_model, hand_script, Path(tmp) / "warm")  # warm-ups, not counted
        through_factoryctl(kind, st, full_script, 0)
        for n in range(1, runs + 1):
            result.hand.append(by_hand(kind, cli, hand_model, hand_script, Path(tmp) / f"hand-{n}"))
            elapsed, run = through_factoryctl(kind, st, full_script, n)
            result.full.append(elapsed)
            pickup, execution = split(run)
            result.pickup.append(pickup)
            result.execution.append(execution)
            print(
                f"  {kind.name} round {n}: by hand {result.hand[-1] * 1000:.0f} ms, "
                f"delivery → SUCCEEDED {elapsed * 1000:.0f} ms (pickup {pickup * 1000:.0f} ms, "
                f"on the worker {execution * 1000:.0f} ms)",
                flush=True,
            )
    return result


def ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=[*KINDS, "all"], default="all")
    parser.add_argument("--runs", type=int, default=5, help="measured rounds per preset (default 5)")
    args = parser.parse_args()
    names = list(KINDS) if args.preset == "all" else [args.preset]
    print(
        f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"load {os.getloadavg()[0]:.1f}; p50 of {args.runs} interleaved rounds per preset",
        flush=True,
    )
    results = []
    for name in names:
        cli = find_cli(name)
        if cli is None:
            print(f"  {name}: skipped, the CLI is not installed (npm ci)")
            continue
        results.append(bench_preset(KINDS[name], cli, args.runs))
    print(
        f"{'preset':<8} {'CLI by hand':>12} {'delivery→SUCCEEDED':>19} {'overhead':>9} {'ratio':>6}"
        f" {'pickup':>8} {'on worker':>10}"
    )
    for r in results:
        hand, full = ms(r.hand), ms(r.full)
        print(
            f"{r.name:<8} {hand:>9.0f} ms {full:>16.0f} ms {full - hand:>6.0f} ms {full / hand:>5.2f}x"
            f" {ms(r.pickup):>5.0f} ms {ms(r.execution):>7.0f} ms"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
