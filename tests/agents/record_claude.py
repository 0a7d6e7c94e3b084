"""Re-record the Claude Code fixtures under ``tests/fixtures/agents/claude/`` from the real CLI.

Run from the repository root (needs ``node_modules/.bin/claude``, ``npm ci``)::

    .venv/bin/python tests/agents/record_claude.py [path/to/claude]

Each fixture is the CLI's stdout (``--output-format stream-json --verbose``) for one scripted model,
run through the ``claude`` preset's own invocation in a scratch workspace and agent home:

- ``tool_run.jsonl``: text + a ``Write`` call, a ``Bash`` call, then a final answer;
- ``resume.jsonl``: ``--resume`` of that session with one more answer (cost is the session's);
- ``api_error.jsonl``: the model endpoint answers 400 (an error ``result``, exit status 1).

The unit tests of the parser (``tests/unit/factoryctl/presets/test_claude.py``) read them.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from agents.anthropic_server import anthropic_app  # noqa: E402
from agents.scripted import Failure, Script, ScriptedServer, Text, ToolCall  # noqa: E402
from factoryctl.worker.job import Job  # noqa: E402
from factoryctl.worker.presets.base import Context  # noqa: E402
from factoryctl.worker.presets.claude import PRESET  # noqa: E402

FIXTURES = TESTS / "fixtures" / "agents" / "claude"
OUTPUT_FILE = "out/hello.txt"


def run_claude(
    executable: str, server_url: str, workspace: Path, home: Path, prompt: str, resume: str | None = None
) -> subprocess.CompletedProcess[str]:
    """One CLI run with the preset's invocation (its files written into ``home``), against the server."""
    job = Job(run_id="run_record", prompt=prompt)
    env = {"ANTHROPIC_BASE_URL": server_url, "ANTHROPIC_API_KEY": "sk-ant-api-scripted"}
    invocation = PRESET.invocation(
        job, executable, Context(workspace=workspace, home=home, resume=resume, env=env)
    )
    for name, text in invocation.files.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    return subprocess.run(
        invocation.argv,
        input=invocation.stdin,
        cwd=workspace,
        env={"PATH": "/usr/bin:/bin", **invocation.env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def record(executable: str) -> None:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        workspace, home = Path(scratch) / "ws", Path(scratch) / "home"
        (workspace / "out").mkdir(parents=True)
        home.mkdir()
        script = Script(
            [
                [
                    Text("I will write the file."),
                    ToolCall(
                        "Write", {"file_path": str(workspace / OUTPUT_FILE), "content": "hello from claude\n"}
                    ),
                ],
                ToolCall("Bash", {"command": "echo shell-ran && ls out && false", "description": "list"}),
                Text("All done: wrote hello.txt."),
            ]
        )
        with ScriptedServer(anthropic_app(script)) as server:
            first = run_claude(executable, server.url, workspace, home, "Write hello.txt into out/.")
            _keep("tool_run.jsonl", first.stdout, workspace)
            session = next(line for line in first.stdout.splitlines() if '"init"' in line)
            session_id = session.split('"session_id":"', 1)[1].split('"', 1)[0]
            script.extend([Text("Resumed: I wrote out/hello.txt before.")])
            again = run_claude(executable, server.url, workspace, home, "What did you write?", session_id)
            _keep("resume.jsonl", again.stdout, workspace)
            script.extend([Failure(400, "scripted: the model refused this request", times=10)])
            failed = run_claude(executable, server.url, workspace, home, "Fail, please.")
            _keep("api_error.jsonl", failed.stdout, workspace)


def _keep(name: str, stdout: str, workspace: Path) -> None:
    # The scratch paths are replaced by stable ones so a re-recording diffs cleanly.
    text = stdout.replace(str(workspace.parent), "/tmp/record")
    (FIXTURES / name).write_text(text)
    print(f"{name}: {len(text.splitlines())} lines")


def main(argv: Sequence[str]) -> None:
    record(argv[0] if argv else str(TESTS.parent / "node_modules" / ".bin" / "claude"))


if __name__ == "__main__":
    main(sys.argv[1:])
