"""Run the real Gemini CLI through the ``gemini`` preset's own invocation, as the preset harness would
(its files written into the agent home, its environment, the prompt on stdin, in the workspace), against
a scripted Gemini API (:mod:`agents.gemini_server`). Used by the e2e test and by ``record_gemini.py``."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from factoryctl.worker.job import Job
from factoryctl.worker.presets.base import Context
from factoryctl.worker.presets.gemini import PRESET

REPOSITORY = Path(__file__).resolve().parents[2]
SCRATCH_INSTALL = Path("/tmp/agents-try/node_modules/.bin/gemini")
API_KEY = "scripted-gemini-key"


def find_gemini() -> str | None:
    """The pinned CLI (``node_modules/.bin/gemini`` after ``npm ci``), else one on PATH."""
    for candidate in (REPOSITORY / "node_modules" / ".bin" / "gemini", SCRATCH_INSTALL):
        if candidate.exists():
            return str(candidate)
    return shutil.which("gemini")


def run_gemini(
    executable: str,
    server_url: str,
    workspace: Path,
    home: Path,
    job: Job,
    resume: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """One CLI run; ``env`` adds to the run's environment (the model endpoint and key by default), which
    the CLI's process gets beneath the invocation's own variables, as under the preset harness."""
    run_env = {"GOOGLE_GEMINI_BASE_URL": server_url, "GEMINI_API_KEY": API_KEY, **(env or {})}
    invocation = PRESET.invocation(
        job, executable, Context(workspace=workspace, home=home, resume=resume, env=run_env)
    )
    for name, text in invocation.files.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    node_dir = str(Path(os.path.realpath(shutil.which("node") or "/usr/bin/node")).parent)
    return subprocess.run(
        invocation.argv,
        input=invocation.stdin,
        cwd=workspace,
        env={"PATH": f"{node_dir}:/usr/bin:/bin", **run_env, **invocation.env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
