"""Sandbox cost: a trivial command and a one-tool-call Claude Code run, sandboxed vs not, same run.

    .venv/bin/python bench/sandbox.py [--runs 30] [--agent-runs 5] [--no-agent]

Part (a), start-up, each round one of each, interleaved (a noisy neighbour slows all alike):

- **host**: ``true`` started as the worker starts a run's process with ``--sandbox none``
  (``factoryctl.worker.sandbox.start_process`` with no sandbox), waited for;
- **bwrap**: the same inside bubblewrap, with no network (the sandbox alone);
- **bwrap + relay**: as a run gets it under its default network policy: the run's egress proxy started
  (``factoryctl.worker.egress_run.run_network``), ``true`` started through the relay, then the proxy
  stopped and its directory removed;

and the pieces of the relay's cost, timed on the host: the system Python started as the relay starts it
(``python3 -I -S -c pass``) against a plain ``python3 -c pass``, and the proxy's set-up and tear-down
alone (``run_network`` with no process).

Part (b), one scripted Claude Code run (a Bash tool call that writes ``note.txt``, then a final answer,
from the scripted Anthropic server on loopback) through the real preset harness
(``factoryctl.worker.presets.harness.PresetHarness.run``), in a fresh workspace each time: inside
``run_network`` and the sandbox as the worker does it (``factoryctl/worker/execution.py``) vs with no
sandbox (``--sandbox none``). Skipped, saying so, without the pinned CLI (``npm ci``).

Printed: medians (and minimums), the milliseconds the sandbox adds per run and the ratio, against the
issue's target of under 50 ms per run. Results: docs/benchmarks.md, "Sandbox".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(1, str(Path(__file__).resolve().parents[1] / "tests"))  # agents: scripted model servers

from agents.anthropic_server import anthropic_app
from agents.scripted import Script, ScriptedServer, Text, ToolCall

from factoryctl.worker.egress_run import run_network
from factoryctl.worker.job import Job
from factoryctl.worker.presets.base import AgentEvent
from factoryctl.worker.presets.harness import PresetHarness
from factoryctl.worker.presets.registry import AgentCliProblem, find_cli, load_presets
from factoryctl.worker.sandbox import Sandbox, start_process

REPO = Path(__file__).resolve().parents[1]
TARGET_MS = 50.0
JOB = Job(run_id="run_bench", prompt="")  # no environment: the default network, an empty allowlist


async def ignore_events(events: Sequence[AgentEvent]) -> None:
    return None


async def ignore_line(stream: str, text: str) -> None:
    return None


async def started(workspace: Path, sandbox: Sandbox | None) -> None:
    proc = await start_process(["true"], cwd=workspace, env={"PATH": "/usr/bin:/bin"}, sandbox=sandbox)
    if await proc.wait() != 0:
        raise SystemExit(f"`true` exited {proc.returncode} (sandbox: {sandbox})")


async def networked(workspace: Path, sandbox: Sandbox, run: bool = True) -> None:
    network = run_network(
        JOB, sandbox, preset=None, base_env={}, on_event=ignore_events, on_output=ignore_line
    )
    async with network as confined:
        if run:
            await started(workspace, confined)


def interpreter(*flags: str) -> Callable[[Path], Awaitable[None]]:
    async def once(workspace: Path) -> None:
        proc = await asyncio.create_subprocess_exec("/usr/bin/python3", *flags, "-c", "pass")
        await proc.wait()

    return once


async def timed(step: Callable[[], Awaitable[None]]) -> float:
    start = time.perf_counter()
    await step()
    return time.perf_counter() - start


async def start_up(runs: int) -> dict[str, list[float]]:
    sandbox = Sandbox()
    if not sandbox.available():
        raise SystemExit(f"bubblewrap does not work here: {sandbox.problem()}")
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as scratch:
        ws = Path(scratch)
        steps: dict[str, Callable[[], Awaitable[None]]] = {
            "host: true": lambda: started(ws, None),
            "bwrap: true": lambda: started(ws, sandbox),
            "bwrap + relay: true": lambda: networked(ws, sandbox),
            "python3 -c pass": lambda: interpreter()(ws),
            "python3 -I -S -c pass": lambda: interpreter("-I", "-S")(ws),
            "proxy set-up + tear-down": lambda: networked(ws, sandbox, run=False),
        }
        for step in steps.values():  # warm the page cache; not counted
            await step()
        samples: dict[str, list[float]] = {name: [] for name in steps}
        for _ in range(runs):
            for name, step in steps.items():
                samples[name].append(await timed(step))
    return samples


async def agent_run(harness: PresetHarness, sandbox: Sandbox | None, script: Script, root: Path) -> float:
    """Seconds for one scripted one-tool-call run: in ``sandbox``, with the run's network, or on the host."""
    workspace = Path(tempfile.mkdtemp(prefix="run-", dir=root))
    job = Job(
        run_id="run_bench", prompt="Write ok into note.txt.", agent_config={"harness": {"type": "claude"}}
    )
    script.extend([ToolCall("Bash", {"command": "echo ok > note.txt"}), Text("Done.")])
    start = time.perf_counter()
    if sandbox is None:
        harness.sandbox = None
        outcome = await harness.run(job, workspace, cancel=asyncio.Event())
    else:
        network = run_network(
            job, sandbox, preset="claude", base_env=harness.env, on_event=ignore_events, on_output=ignore_line
        )
        async with network as confined:
            harness.sandbox = confined
            outcome = await harness.run(job, workspace, cancel=asyncio.Event())
    elapsed = time.perf_counter() - start
    if outcome.state != "SUCCEEDED" or (workspace / "note.txt").read_text() != "ok\n":
        raise SystemExit(f"the scripted run did not succeed (sandbox: {sandbox}): {outcome}")
    return elapsed


async def agent(runs: int) -> dict[str, list[float]] | None:
    pinned = REPO / "node_modules" / ".bin" / "claude"
    env = {"PATH": f"{pinned.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    try:
        cli = find_cli(load_presets(("claude",))["claude"], str(pinned) if pinned.exists() else None, env=env)
    except AgentCliProblem as exc:
        print(f"(b) skipped: {exc}")
        return None
    script = Script([])
    with ScriptedServer(anthropic_app(script)) as model, tempfile.TemporaryDirectory() as scratch:
        base = {**env, "ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "sk-ant-api-scripted"}
        harness = PresetHarness(cli.preset, cli.executable, env=base, read_only=cli.install_dirs)
        sandbox = Sandbox()
        kinds: dict[str, Sandbox | None] = {"--sandbox none": None, "sandboxed (bwrap + relay)": sandbox}
        for kind in kinds.values():  # warm-up; not counted
            await agent_run(harness, kind, script, Path(scratch))
        samples: dict[str, list[float]] = {name: [] for name in kinds}
        for _ in range(runs):
            for name, kind in kinds.items():
                samples[name].append(await agent_run(harness, kind, script, Path(scratch)))
    return samples


def report(title: str, samples: dict[str, list[float]], base: str, measured: Sequence[str]) -> None:
    print(f"\n{title}")
    print(f"{'':<28} {'median':>9} {'min':>9}")
    for name, values in samples.items():
        print(f"{name:<28} {statistics.median(values) * 1000:>6.1f} ms {min(values) * 1000:>6.1f} ms")
    reference = statistics.median(samples[base])
    for name in measured:
        median = statistics.median(samples[name])
        added = (median - reference) * 1000
        verdict = "met" if added < TARGET_MS else "NOT met"
        print(
            f"{name} adds {added:.1f} ms per run over {base} ({median / reference:.2f}x); "
            f"target < {TARGET_MS:.0f} ms: {verdict}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="start-up rounds (default 30)")
    parser.add_argument("--agent-runs", type=int, default=5, help="scripted agent rounds (default 5)")
    parser.add_argument("--no-agent", action="store_true", help="part (a) only")
    args = parser.parse_args()
    bwrap = subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout.strip()
    python = sys.version.split()[0]
    print(f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, Python {python}, {bwrap}")
    print(f"load average {os.getloadavg()[0]:.2f}; rounds interleaved")
    samples = asyncio.run(start_up(args.runs))
    report(
        f"(a) start-up, median of {args.runs}",
        samples,
        "host: true",
        ["bwrap: true", "bwrap + relay: true"],
    )
    if not args.no_agent:
        ran = asyncio.run(agent(args.agent_runs))
        if ran is not None:
            report(
                f"(b) one-tool-call Claude Code run, median of {args.agent_runs}",
                ran,
                "--sandbox none",
                ["sandboxed (bwrap + relay)"],
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
