"""Re-record the Gemini CLI fixtures under ``tests/fixtures/agents/gemini/`` from the real CLI.

Run from the repository root (needs ``node_modules/.bin/gemini``, ``npm ci``)::

    .venv/bin/python tests/agents/record_gemini.py [path/to/gemini]

Each fixture is the CLI's stdout (``--output-format stream-json``) for one scripted model, run through
the ``gemini`` preset's own invocation in a scratch workspace and agent home:

- ``tool_run.jsonl``: text + a ``write_file`` call, a ``run_shell_command`` call, a ``read_file`` call of
  a missing file (an error result), then a final answer in two text parts;
- ``resume.jsonl``: ``--resume`` of that session with one more answer;
- ``api_error.jsonl``: the model endpoint answers 400 (an error ``result``, a non-zero exit status).

The unit tests of the parser (``tests/unit/factoryctl/presets/test_gemini.py``) read them.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from agents.gemini_cli import find_gemini, run_gemini  # noqa: E402
from agents.gemini_server import gemini_app, shell, write_file  # noqa: E402
from agents.scripted import Failure, Script, ScriptedServer, Text, ToolCall  # noqa: E402
from factoryctl.worker.job import Job  # noqa: E402

FIXTURES = TESTS / "fixtures" / "agents" / "gemini"
MODEL = "gemini-2.5-flash"


def record(executable: str) -> None:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        workspace, home = Path(scratch) / "ws", Path(scratch) / "home"
        workspace.mkdir()
        home.mkdir()
        script = Script(
            [
                [Text("I will write the file."), write_file(str(workspace / "out" / "hello.txt"), "hello\n")],
                shell("echo shell-ran && ls out"),
                ToolCall("read_file", {"file_path": str(workspace / "missing.txt")}),
                [Text("All done: "), Text("wrote out/hello.txt.")],
            ]
        )
        job = Job(run_id="run_record", prompt="Write hello.txt into out/.", model_id=MODEL)
        with ScriptedServer(gemini_app(script)) as server:
            first = run_gemini(executable, server.url, workspace, home, job)
            _keep("tool_run.jsonl", first.stdout, workspace, first.returncode)
            init = json.loads(first.stdout.splitlines()[0])
            script.extend([Text("Resumed: I wrote out/hello.txt before.")])
            again = Job(run_id="run_record", prompt="What did you write?", model_id=MODEL)
            resumed = run_gemini(executable, server.url, workspace, home, again, init["session_id"])
            _keep("resume.jsonl", resumed.stdout, workspace, resumed.returncode)
            script.extend([Failure(400, "scripted: the model refused this request", times=20)])
            failing = Job(run_id="run_record", prompt="Fail, please.", model_id=MODEL)
            failed = run_gemini(executable, server.url, workspace, home, failing)
            _keep("api_error.jsonl", failed.stdout, workspace, failed.returncode)
            print("requests:", *server.recorder.paths(), sep="\n  ")


def _keep(name: str, stdout: str, workspace: Path, status: int) -> None:
    # The scratch paths are replaced by stable ones so a re-recording diffs cleanly.
    text = stdout.replace(str(workspace.parent), "/tmp/record")
    (FIXTURES / name).write_text(text)
    print(f"{name}: {len(text.splitlines())} lines, exit status {status}")


def main(argv: Sequence[str]) -> None:
    executable = argv[0] if argv else find_gemini()
    if executable is None:
        raise SystemExit("no gemini CLI: run npm ci")
    record(executable)


if __name__ == "__main__":
    main(sys.argv[1:])
