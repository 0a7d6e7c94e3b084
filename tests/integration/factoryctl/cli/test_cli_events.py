"""``factoryctl events`` as real subprocesses against the real server (docs/cli.md, "events";
docs/events.md, "Team stream"): one line per event until Ctrl-C (exit 0, with the cursor to resume from),
factory names resolved to UIDs, ``--format json``, and usage errors and refusals by their exit codes.

Watchers start ``--after`` the server's "now" (the position frame a live stream opens with), so they see
exactly what the test does next whenever their connection opens.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading

import sse_support
from cli_runner import cli, spawn
from live_servers import LiveServer, unique

from factoryctl.client import FactoryClient


def now_cursor(live: LiveServer) -> str:
    return sse_support.now_cursor(live.url, live.admin_key)


class Lines:
    """A process's stdout lines, read by a thread so a test can wait for them with a timeout."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc, self._queue = proc, queue.Queue[str]()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout or ():
            self._queue.put(line)

    def __enter__(self) -> Lines:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:  # the test failed before its Ctrl-C
            self.proc.kill()
            self.proc.wait()

    def take(self, count: int, timeout: float = 15) -> list[str]:
        return [self._queue.get(timeout=timeout).rstrip("\n") for _ in range(count)]

    def interrupt(self) -> tuple[int, str]:
        """Ctrl-C; the exit code and stderr."""
        self.proc.send_signal(signal.SIGINT)
        code = self.proc.wait(timeout=15)
        assert self.proc.stderr is not None
        return code, self.proc.stderr.read()


def test_events_prints_one_line_per_event_until_ctrl_c(live: LiveServer, api: FactoryClient) -> None:
    name = unique("cli-events")
    factory_uid = api.factories.create(name, worker_host=unique("host")).uid
    now = now_cursor(live)
    with (
        Lines(spawn(live, "events", "--factory", name, "--after", now)) as by_name,
        Lines(spawn(live, "events", "--state", "cancelled", "--format", "json", "--after", now)) as as_json,
    ):
        other = api.runs.create("no factory").run_id
        run_id = api.factories.dispatch(factory_uid, "go").run_id
        api.runs.followup(run_id, "and also")
        for rid in (other, run_id):
            api.runs.cancel(rid)

        lines = by_name.take(3)
        assert [line.split("  ", 2)[1] for line in lines] == [run_id] * 3
        assert lines[0].endswith("[QUEUED]") and lines[1].endswith("[follow-up queued] and also")
        assert lines[2].endswith("[CANCELLED]")
        code, err = by_name.interrupt()
        assert code == 0 and err.startswith("stopped; resume with --after ")

        cancelled = [json.loads(line) for line in as_json.take(2)]
        assert [(e["run_id"], e["data"]["state"]) for e in cancelled] == [
            (other, "CANCELLED"),
            (run_id, "CANCELLED"),
        ]
        assert cancelled[1]["factory_uid"] == factory_uid and cancelled[1]["cursor"]
        code, err = as_json.interrupt()
        assert code == 0 and err.strip() == f"stopped; resume with --after {cancelled[1]['cursor']}"


def test_usage_errors_and_refusals(live: LiveServer) -> None:
    missing = cli(live, "events", "--factory", unique("no-such-factory"))
    assert missing.returncode == 2 and "no factory is named" in missing.stderr
    both = cli(live, "events", "--state", "FAILED", "--logs")
    assert both.returncode == 2 and "--logs" in both.stderr
    refused = cli(live, "events", "--after", "not-a-cursor", "--format", "json")
    assert refused.returncode == 1
    assert json.loads(refused.stdout)["error_code"] == "invalid_request"
