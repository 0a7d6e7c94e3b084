"""The worker's side of a run's definitions (docs/workers.md, "Runners and skills"): runners it cannot
honour, harness types it does not offer, skills written as files, and the config keys only definitions
set (api/runs/config.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from api.runs.config import resolve_config, validate_config
from factoryctl.worker import HarnessUnavailable, InvalidClaim, RunnerUnavailable
from factoryctl.worker.harness import CommandHarness, EchoHarness, harness_for
from factoryctl.worker.job import Job
from factoryctl.worker.limits import Limits
from factoryctl.worker.runner import check_runner, runner_notes
from factoryctl.worker.workspace import create_workspace


def job(**claim: object) -> Job:
    return Job.from_claim({"run_id": "run_1", "prompt": "go", **claim})


def test_a_macos_runner_is_refused_saying_this_worker_runs_linux_only() -> None:
    mac = job(runner={"name": "mac", "setup_commands": [], "platform": {"os": "macos", "arch": "aarch64"}})
    with pytest.raises(RunnerUnavailable, match="Linux only") as caught:
        check_runner(mac)
    assert caught.value.error_code == "runner_unavailable"
    gone = job(runner={"name": "gpu", "error": "runner 'gpu' does not exist in the run's factory"})
    with pytest.raises(RunnerUnavailable, match="'gpu'"):
        check_runner(gone)
    check_runner(job(runner={"name": "box", "setup_commands": ["true"], "platform": {"os": "linux"}}))


def test_runner_notes_say_what_is_not_applied() -> None:
    runner = {
        "name": "box",
        "platform": {"docker_image": "ubuntu:24.04"},
        "instance_shape": {"vcpus": 2, "memory_gb": 8},
    }
    limits = Limits().for_runner(runner)  # the worker's 4 GiB is lower than the shape's 8 GB
    notes = runner_notes(runner, limits)
    assert "docker image 'ubuntu:24.04' is not used" in notes[0]
    assert "memory 8 GB; the run's memory limit is 4 GiB" in notes[1]
    assert "2 vCPUs is not enforced" in notes[2]
    assert runner_notes({"name": "plain"}, limits) == []


@pytest.mark.parametrize("kind", ["claude", "codex", "gemini"])
def test_harnesses_this_worker_does_not_offer_are_harness_unavailable(kind: str) -> None:
    with pytest.raises(HarnessUnavailable, match=f"'{kind}'.*it offers echo, command ") as caught:
        harness_for({"harness": {"type": kind}}, "echo", "agent")
    assert caught.value.error_code == "harness_unavailable"


def test_oz_is_the_workers_default_harness() -> None:
    assert isinstance(harness_for({"harness": {"type": "oz"}}, "echo", None), EchoHarness)
    assert isinstance(harness_for({"harness": {"type": "oz"}}, "command", "true"), CommandHarness)


def test_skills_are_written_under_the_workspace_and_named_in_the_environment(tmp_path: Path) -> None:
    skills = [
        {"name": "check", "skill_name": "check", "description": "x", "body": "Shared.", "front_matter": {}},
        {"name": "a/check", "skill_name": "check", "description": "Own: it wins", "body": "Own.\n",
         "front_matter": {"name": "check", "allowed-tools": ["Read"]}},
    ]  # fmt: skip
    run = job(skills=skills, run_secrets={"DEPLOY_KEY": "value-1234"})
    path = create_workspace(tmp_path, run)
    text = (path / ".factory" / "skills" / "check" / "SKILL.md").read_text()
    assert text == '---\nname: "check"\nallowed-tools: ["Read"]\ndescription: "Own: it wins"\n---\n\nOwn.\n'
    env = CommandHarness("true", env={}).environment(run, path)
    assert env["FACTORY_SKILLS_DIR"] == str(path / ".factory" / "skills")
    assert env["DEPLOY_KEY"] == "value-1234" and "value-1234" in run.secret_values()
    assert "FACTORY_SKILLS_DIR" not in CommandHarness("true", env={}).environment(job(), path)


@pytest.mark.parametrize("name", ["..", "a/b", ".hidden", "", "x" * 300])
def test_a_skill_name_that_is_not_a_plain_segment_is_refused(name: str) -> None:
    with pytest.raises(InvalidClaim, match="plain directory name"):
        job(skills=[{"name": name, "skill_name": name, "body": "x"}])


def test_definition_keys_come_from_definitions_never_from_a_request() -> None:
    agent = {
        "runner": "box",
        "secrets": ["A"],
        "skills": ["s"],
        "harness": {"type": "claude", "auth": {"source": "managedSecret", "secret_name": "K"}},
    }
    automation = {"harness": {"reasoning_level": "high"}, "secrets": ["B"]}
    request = {"runner": "evil", "secrets": ["C"], "skills": ["x"]}
    resolved = resolve_config(request, automation, agent, None)
    assert resolved["runner"] == "box" and resolved["secrets"] == ["B"] and resolved["skills"] == ["s"]
    assert resolved["harness"] == {
        "type": "claude",
        "auth": {"source": "managedSecret", "secret_name": "K"},
        "reasoning_level": "high",
    }
    other = resolve_config({"harness": {"type": "command"}}, automation, agent, None)
    assert other["harness"] == {"type": "command"}  # another type: the inherited auth is dropped
    assert [e["field"] for e in validate_config(request)] == [
        "config.runner",
        "config.secrets",
        "config.skills[0]",  # a request's skills are skill specs (the SDK's list): a bare name is refused
    ]
    assert validate_config({"harness": {"type": "oz"}}) == []
    assert validate_config({"harness": {"type": "claude"}}) == []  # a preset: issue 26
    assert validate_config({"harness": {"type": "cursor"}})[0]["message"].startswith(
        "must be one of oz, echo"
    )
