"""Artifacts end to end (issue 26, item 4): ``factoryctl serve`` and a self-hosted ``factoryctl worker
--sandbox none --harness command`` (real processes) run a command that writes a file into
``$FACTORY_OUTPUTS``, a symlink to a host file beside it, and a pull request line into
``$FACTORY_ARTIFACTS_FILE``; the SUCCEEDED run lists the file and the pull request, and the file downloads
with the same bytes, as an attachment."""

from __future__ import annotations

import contextlib
from pathlib import Path

import httpx
from serve_support import run_cli, running, serving, wait_for

HOST = "artifact-box"
PR_URL = "https://github.com/acme/app/pull/42"
SCRIPT = r"""
set -e
mkdir -p "$FACTORY_OUTPUTS/reports"
printf 'report for %s\n' "$FACTORY_RUN_ID" > "$FACTORY_OUTPUTS/reports/summary.md"
head -c 3000 /dev/urandom > "$FACTORY_OUTPUTS/noise.bin"
ln -s {secret} "$FACTORY_OUTPUTS/stolen.txt"
printf '%s\n' '{{"type": "PULL_REQUEST", "url": "{pr}", "branch": "fix/flaky"}}' >> "$FACTORY_ARTIFACTS_FILE"
printf '%s\n' '{{"type": "EXTERNAL_REFERENCE", "url": "javascript:alert(1)"}}' >> "$FACTORY_ARTIFACTS_FILE"
cp "$FACTORY_OUTPUTS/noise.bin" "$FACTORY_WORKSPACE/../noise-copy-$FACTORY_RUN_ID.bin"
echo done
"""


def test_a_command_run_lists_and_serves_its_artifacts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    secret = tmp_path / "host-secret.txt"
    secret.write_text("host only\n")
    script = tmp_path / "agent.sh"
    script.write_text(SCRIPT.format(secret=secret, pr=PR_URL))
    workspaces = tmp_path / "ws"
    with serving(data, log=tmp_path / "serve.log") as served:
        key = run_cli(
            "--data-dir", data, "keys", "create", "--name", "box", "--role", "worker", "--worker-host", HOST
        )
        assert key.returncode == 0, key.stderr
        env = {"FACTORY_API_KEY": key.stdout.strip().splitlines()[-1]}
        args = ("--server", served.url, "--host-id", HOST, "--sandbox", "none", "--harness", "command",
                "--command", f"bash {script}", "--workspace-root", workspaces)  # fmt: skip
        worker_log = tmp_path / "worker.log"
        with contextlib.ExitStack() as stack:
            worker = stack.enter_context(running("worker", *args, log=worker_log, env=env))
            status, created = served.post(
                "/api/v1/agent/run", {"prompt": "write a report", "config": {"worker_host": HOST}}
            )
            assert status == 200, created
            run_id = created["run_id"]

            def finished() -> dict | None:
                run = served.get(f"/api/v1/agent/runs/{run_id}")
                return run if run["state"] in ("SUCCEEDED", "FAILED", "ERROR", "CANCELLED") else None

            run = wait_for(
                finished, 60, "the run to finish", alive=[served.proc, worker], logs=[served.log, worker_log]
            )
        assert run["state"] == "SUCCEEDED", run
        kinds = sorted(
            (a["artifact_type"], a["data"].get("filepath") or a["data"].get("url")) for a in run["artifacts"]
        )
        assert kinds == [("FILE", "noise.bin"), ("FILE", "reports/summary.md"), ("PULL_REQUEST", PR_URL)]
        logs = [line["text"] for line in served.get(f"/api/v1/agent/runs/{run_id}/logs")["logs"]]
        assert any("stolen.txt: a symlink" in line for line in logs), logs
        assert any("line 2 skipped: url must be" in line for line in logs), logs

        files = {a["data"]["filepath"]: a["data"] for a in run["artifacts"] if a["artifact_type"] == "FILE"}
        expected = {
            "reports/summary.md": f"report for {run_id}\n".encode(),
            "noise.bin": (workspaces / f"noise-copy-{run_id}.bin").read_bytes(),
        }
        for path, content in expected.items():
            meta = files[path]
            assert meta["size_bytes"] == len(content)
            resp = httpx.get(
                f"{served.url}/api/v1/agent/runs/{run_id}/artifacts/{meta['artifact_uid']}",
                headers={"Authorization": f"Bearer {served.key}"},
                timeout=10,
            )
            assert resp.status_code == 200 and resp.content == content
            assert resp.headers["content-disposition"].startswith("attachment;")
            assert resp.headers["x-content-type-options"] == "nosniff"
        assert files["reports/summary.md"]["mime_type"] == "text/markdown"
