"""``config.skills`` through a real ``factoryctl serve --workers 1`` (docs/agent-config.md, "A list of
skills"): a run created over the API with three skill specs from a local skills repository runs its real
service-hosted worker's command harness in the sandbox; the first skill's body is in the prompt, the other
two are ``SKILL.md`` files under ``$FACTORY_SKILLS_DIR``, and the run shows ``skill_spec`` and ``skills``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import git
import pytest
from serve_support import Served, serving, wait_for

pytestmark = pytest.mark.slow
FINISHED = {"SUCCEEDED", "FAILED", "ERROR", "CANCELLED"}
SKILLS = ["acme/tools:triage", "acme/tools:.claude/skills/lint/SKILL.md", "acme/tools:deploy"]

# The agent's "CLI": prints what it finds under $FACTORY_SKILLS_DIR and the prompt's first line.
AGENT = """#!/bin/bash
set -eu
echo "prompt-first-line=$(head -n 1 "$FACTORY_PROMPT_FILE")"
echo "skills-dir=${FACTORY_SKILLS_DIR#$FACTORY_WORKSPACE/}"
echo "skill-dirs=$(ls "$FACTORY_SKILLS_DIR" | tr '\\n' ' ')"
for d in "$FACTORY_SKILLS_DIR"/*/; do
  echo "skill $(basename "$d"): $(grep -v -e '^---$' -e '^name:' -e '^description:' -e '^$' "$d/SKILL.md")"
done
"""


def skills_repository(root: Path) -> None:
    path = root / "acme" / "tools"
    files = {
        "skills/triage/SKILL.md": "---\nname: triage\n---\nYou triage alerts.\n",
        ".claude/skills/lint/SKILL.md": "---\nname: lint\ndescription: Lint rules\n---\nRun the linter.\n",
        "skills/deploy/SKILL.md": "Deploy with care.\n",
    }
    repo = git.Repo.init(path)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    repo.index.add(list(files))
    actor = git.Actor("t", "t@example.com")
    repo.index.commit("init", author=actor, committer=actor)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    skills_repository(tmp_path / "git")
    agent = tmp_path / "bin" / "agent.sh"
    agent.parent.mkdir()
    agent.write_text(AGENT)
    agent.chmod(0o755)
    args = (
        "--harness",
        "command",
        "--command",
        str(agent),
        "--sandbox-ro",
        agent.parent,
        "--skills-source",
        str(tmp_path / "git" / "{owner}" / "{repo}"),
    )
    with serving(tmp_path / "data", *args, workers=1) as server:
        yield server


def test_the_first_skill_is_the_prompt_and_the_others_are_files(served: Served) -> None:
    status, created = served.post(
        "/api/v1/agent/run", {"prompt": "An alert fired.", "config": {"skills": SKILLS}}
    )
    assert status == 200, created
    run_id = created["run_id"]

    def finished() -> dict[str, Any] | None:
        run: dict[str, Any] = served.get(f"/api/v1/agent/runs/{run_id}")
        return run if run["state"] in FINISHED else None

    run = wait_for(finished, 60, "the run to finish", alive=[served.proc], logs=[served.log])
    log = "\n".join(line["text"] for line in served.get(f"/api/v1/agent/runs/{run_id}/logs")["logs"])
    assert run["state"] == "SUCCEEDED", (run, log)
    lines = log.splitlines()
    assert "prompt-first-line=You triage alerts." in lines, log
    assert "skills-dir=.factory/skills" in lines, log
    assert "skill-dirs=deploy lint " in lines, log  # not triage: the primary skill is the prompt
    assert "skill lint: Run the linter." in lines, log
    assert "skill deploy: Deploy with care." in lines, log
    config = run["agent_config"]
    assert config["skills"] == SKILLS and config["skill_spec"] == SKILLS[0] and config["name"] == "triage"
