"""``factoryctl migrate``: the legacy-to-v1alpha1 rewrite (reconciler.migrate) and its command.

The pure plan is tested over file texts; the command runs for real, in a subprocess, on copies of
trees in a temporary directory (``example-factory/`` among them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from reconciler import migrate
from reconciler.yamlmarks import parse_yaml, split_front_matter

REPO = Path(__file__).resolve().parents[3]

LEGACY = {
    "factory.yaml": """\
# Leading comment: who owns this factory.
name: demo
description: >-
  Folded text
  on two lines.
workerHost: host-7
agents:
  foreman:
    model_id: gpt-5
    base_prompt: |
      Foreman prompt.

      Second paragraph.
  coder:
    name: coder-runs
    model_id: claude-sonnet-4
    environment_id: backend
    worker_host: other-host
    skill_spec: acme/skills:review
    mcp_servers:
      docs: {url: "https://mcp.example.com/docs", headers: {X-Key: "secret:DOCS_KEY"}}
      gh: {warp_id: github}
    base_prompt: Coder prompt without a newline.
  tester:
    model_id: gpt-5
    harness: {type: echo}
""",
    "environments/backend.yaml": """\
repos:
  - url: https://github.com/acme/backend.git
  - url: git@github.com:acme/infra.git
  - url: https://gitlab.com/acme/elsewhere.git
  - url: https://github.com/Acme/Backend
""",
    "automations/deploy/automation.md": """\
---
# Deploys on every push.
title: Deploy
agent: coder
config:
  model_id: o3
  environment_id: backend
  mcp_servers:
    gh: {warp_id: github}
triggers:
  - provider: webhook
    event: received
    filter:
      # by name
      webhooks: [hooks]
---
Deploy it.
""",
    "automations/plain/automation.md": "---\ntitle: Plain\n---\nNothing to change.\n",
}


def front(text: str) -> tuple[dict[str, Any], str]:
    split = split_front_matter(text, "x.md")
    assert isinstance(split, tuple)
    parsed = parse_yaml(split[0], "x.md")
    assert not parsed.diagnostics
    return parsed.data, split[2]


def yaml_of(text: str) -> Any:
    parsed = parse_yaml(text, "x.yaml")
    assert not parsed.diagnostics
    return parsed.data


def written(plan: migrate.Plan) -> dict[str, str]:
    return {w.path: w.text for w in plan.writes}


def leaves(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from leaves(item)
    else:
        yield value


def test_the_factory_file_gains_v1alpha1_keys_and_keeps_its_comment_and_folded_text() -> None:
    out = written(migrate.plan(LEGACY))
    text = out["factory.yaml"]
    assert text.startswith("# Leading comment: who owns this factory.\nschemaVersion: v1alpha1\nname: demo\n")
    assert "description: >-\n  Folded text\n  on two lines.\n" in text
    assert yaml_of(text) == {
        "schemaVersion": "v1alpha1",
        "name": "demo",
        "description": "Folded text on two lines.",
        "repositories": [
            {"owner": "acme", "name": "backend"},
            {"owner": "acme", "name": "infra"},
        ],
        "agentDefaults": {"model": "gpt-5", "workerHost": "host-7"},
    }


def test_each_agent_gets_a_file_with_the_mapped_keys_and_its_prompt_as_the_body() -> None:
    out = written(migrate.plan(LEGACY))
    foreman, foreman_body = front(out["agents/foreman/agent.md"])
    assert foreman == {"agentType": "FOREMAN"}  # its model is agentDefaults'
    assert foreman_body == "Foreman prompt.\n\nSecond paragraph.\n"
    coder, coder_body = front(out["agents/coder/agent.md"])
    assert coder == {
        "agentType": "CUSTOM",
        "runName": "coder-runs",
        "model": "claude-sonnet-4",
        "environmentId": "backend",
        "workerHost": "other-host",
        "skillSpec": "acme/skills:review",
        "mcpServers": {
            "docs": {"url": "https://mcp.example.com/docs", "headers": {"X-Key": "secret:DOCS_KEY"}},
            "gh": {"warpId": "github"},
        },
    }
    assert coder_body == "Coder prompt without a newline.\n"
    tester, tester_body = front(out["agents/tester/agent.md"])
    assert tester == {"agentType": "CUSTOM", "harness": {"type": "echo", "model": "gpt-5"}}
    assert tester_body == ""


def test_an_automation_config_becomes_top_level_keys_in_place_keeping_the_rest_as_written() -> None:
    plan = migrate.plan(LEGACY)
    out = written(plan)
    assert "automations/plain/automation.md" not in out  # nothing legacy in it: untouched
    text = out["automations/deploy/automation.md"]
    assert text.startswith("---\n# Deploys on every push.\ntitle: Deploy\nagent: coder\nmodel: o3\n")
    assert "      # by name\n      webhooks: [hooks]\n" in text
    data, body = front(text)
    assert data == {
        "title": "Deploy",
        "agent": "coder",
        "model": "o3",
        "environmentId": "backend",
        "mcpServers": {"gh": {"warpId": "github"}},
        "triggers": [{"provider": "webhook", "event": "received", "filter": {"webhooks": ["hooks"]}}],
    }
    assert body == "Deploy it.\n"


def test_nothing_is_lost_every_legacy_value_appears_in_the_output() -> None:
    """Every key and value of the legacy agents and configs (agent names as paths), renamed keys aside."""
    out = "\n".join(f"{path}\n{text}" for path, text in written(migrate.plan(LEGACY)).items())
    renamed = {*migrate.CONFIG_KEYS, "base_prompt", "warp_id"}
    legacy = yaml_of(LEGACY["factory.yaml"])
    deploy, _ = front(LEGACY["automations/deploy/automation.md"])
    values = [*leaves(legacy["agents"]), *leaves(deploy["config"]), legacy["workerHost"]]
    for value in values:
        if value not in renamed:
            assert str(value).strip() in out, value
    assert len(values) > 30


def test_the_foreman_exists_even_when_unlisted_and_the_default_model_is_the_most_common() -> None:
    agents = "agents:\n  a: {model_id: m1}\n  b: {model_id: m2}\n  c: {model_id: m2}\n"
    files = {"factory.yaml": f"name: demo\n{agents}"}
    out = written(migrate.plan(files, [{"owner": "acme", "name": "x"}]))
    assert out["agents/foreman/agent.md"] == "---\nagentType: FOREMAN\n---\n"
    assert yaml_of(out["factory.yaml"])["agentDefaults"] == {"model": "m2"}
    assert front(out["agents/a/agent.md"])[0] == {"agentType": "CUSTOM", "model": "m1"}
    assert front(out["agents/b/agent.md"])[0] == {"agentType": "CUSTOM"}


def test_no_model_anywhere_defaults_to_auto_and_a_service_hosted_worker_host_is_left_out() -> None:
    files = {"factory.yaml": "name: demo\nworkerHost: warp\n"}
    out = written(migrate.plan(files, [{"owner": "acme", "name": "x"}]))
    assert yaml_of(out["factory.yaml"])["agentDefaults"] == {"model": "auto"}


def test_repositories_given_come_first_and_duplicates_of_environment_ones_are_dropped() -> None:
    given = [migrate.parse_repository("acme/infra"), migrate.parse_repository("acme/tools")]
    repos = yaml_of(written(migrate.plan(LEGACY, given))["factory.yaml"])["repositories"]
    assert repos == [
        {"owner": "acme", "name": "infra"},
        {"owner": "acme", "name": "tools"},
        {"owner": "acme", "name": "backend"},
    ]


def test_no_repository_anywhere_asks_for_one() -> None:
    with pytest.raises(migrate.RepositoriesNeeded, match="--repository owner/name"):
        migrate.plan({"factory.yaml": "name: demo\n"})
    with pytest.raises(ValueError, match="owner/name"):
        migrate.parse_repository("https://github.com/acme/x")


def test_a_migrated_tree_plans_nothing_and_is_not_pending() -> None:
    files = dict(LEGACY)
    assert migrate.pending(files) == ["factory.yaml", "automations/deploy/automation.md"]
    files.update(written(migrate.plan(files)))
    assert migrate.pending(files) == []
    assert migrate.plan(files).done


def test_an_interrupted_run_is_finished_by_the_next_one() -> None:
    """Agent files written, factory.yaml not yet: the second run rewrites only what is left."""
    out = written(migrate.plan(LEGACY))
    files = {**LEGACY, **{p: t for p, t in out.items() if p.startswith("agents/")}}
    again = written(migrate.plan(files))
    assert sorted(again) == ["automations/deploy/automation.md", "factory.yaml"]


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"factory.yaml": "name: d\nagents:\n  a: {model: x}\n"}, "agents.a: unknown key.s. model"),
        ({"factory.yaml": "schemaVersion: v2\nname: d\n"}, "unknown schemaVersion 'v2'"),
        ({"factory.yaml": "schemaVersion: v1alpha1\nname: d\nagents: {}\n"}, "legacy key.s. agents"),
        (
            {"factory.yaml": "name: d\n", "agents/foreman/agent.md": "---\nagentType: MAIN\n---\n"},
            "agents/foreman/agent.md: already exists",
        ),
        (
            {
                "factory.yaml": "schemaVersion: v1alpha1\nname: d\n",
                "automations/a/automation.md": "---\nmodel: x\nconfig: {model_id: y}\n---\nGo.\n",
            },
            "both set model",
        ),
        ({"factory.yaml": "name: [unclosed\n"}, "factory.yaml:2:1: YAML syntax error"),
    ],
)
def test_what_cannot_be_migrated_safely_is_refused(files: Mapping[str, str], message: str) -> None:
    with pytest.raises(migrate.MigrationError, match=message):
        migrate.plan(files, [{"owner": "acme", "name": "x"}])


def test_an_automation_base_prompt_opens_its_prompt_with_a_note() -> None:
    files = {
        "factory.yaml": "schemaVersion: v1alpha1\nname: d\n",
        "automations/a/automation.md": "---\nconfig:\n  base_prompt: Be brief.\n---\nGo.\n",
    }
    plan = migrate.plan(files)
    assert written(plan)["automations/a/automation.md"] == "---\n---\nBe brief.\n\nGo.\n"
    assert "config.base_prompt now opens the prompt" in plan.notes[0]


def test_front_matter_the_text_editor_cannot_follow_is_rewritten_whole_with_its_leading_comment() -> None:
    files = {
        "factory.yaml": "schemaVersion: v1alpha1\nname: d\n",
        "automations/a/automation.md": "---\n# Why.\n{title: T, config: {model_id: m}}\n---\nGo.\n",
    }
    text = written(migrate.plan(files))["automations/a/automation.md"]
    assert text == "---\n# Why.\ntitle: T\nmodel: m\n---\nGo.\n"


# -- the command -----------------------------------------------------------------------------------


def factoryctl(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FACTORY_", "GITHUB_"))}
    return subprocess.run(
        [sys.executable, "-m", "factoryctl.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def write_tree(root: Path, files: Mapping[str, str]) -> Path:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def test_the_command_migrates_a_legacy_tree_once(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "legacy", LEGACY)
    before = snapshot(root)

    check = factoryctl("migrate", str(root), "--check")
    dry = factoryctl("migrate", str(root), "--dry-run")
    assert snapshot(root) == before
    assert (check.returncode, dry.returncode) == (1, 0), check.stderr + dry.stderr
    assert check.stdout.splitlines() == [
        "legacy format: factory.yaml",
        "legacy format: automations/deploy/automation.md",
        f"{root} needs migration: factoryctl migrate {root}",
    ]
    assert "would write factory.yaml" in dry.stdout.splitlines()

    done = factoryctl("migrate", str(root))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "write agents/foreman/agent.md (new)",
        "write agents/coder/agent.md (new)",
        "write agents/tester/agent.md (new)",
        "write automations/deploy/automation.md",
        "write factory.yaml",
        f"migrated {root} to v1alpha1: 5 files written",
    ]
    after = snapshot(root)
    planned = {path: text.encode() for path, text in written(migrate.plan(LEGACY)).items()}
    assert after == {**before, **planned}  # what the plan says, nothing else
    again = factoryctl("migrate", str(root))
    assert (again.returncode, again.stdout) == (0, f"{root} is already v1alpha1: nothing to do\n")
    assert snapshot(root) == after
    assert factoryctl("migrate", str(root), "--check").returncode == 0


def test_the_command_leaves_example_factory_as_it_is(tmp_path: Path) -> None:
    """example-factory ships in v1alpha1: a copy migrates to itself."""
    root = tmp_path / "example"
    shutil.copytree(REPO / "example-factory", root)
    before = snapshot(root)
    check = factoryctl("migrate", str(root), "--check")
    assert (check.returncode, check.stdout) == (0, f"{root} is v1alpha1\n")
    done = factoryctl("migrate", str(root))
    assert (done.returncode, done.stdout) == (0, f"{root} is already v1alpha1: nothing to do\n")
    assert snapshot(root) == before


def test_the_command_exits_2_without_a_repository_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "factory.yaml").write_text("name: d\n")
    done = factoryctl("migrate", str(tmp_path))
    assert done.returncode == 2
    assert "--repository owner/name" in done.stderr
    assert snapshot(tmp_path) == {"factory.yaml": b"name: d\n"}
    assert factoryctl("migrate", str(tmp_path), "--repository", "acme/x").returncode == 0


# -- the loader reads the migrated tree as the same factory --------------------------------------


def migrated_copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target)
    files = {p.relative_to(target).as_posix(): p.read_text() for p in target.rglob("*") if p.is_file()}
    for write in migrate.plan(files).writes:
        (target / write.path).parent.mkdir(parents=True, exist_ok=True)
        (target / write.path).write_text(write.text)
    return target


def same_config(old: Mapping[str, Any], new: Mapping[str, Any], inherited: Mapping[str, Any]) -> None:
    """``new`` holds every key of ``old`` with its value; anything more is what the tree's defaults give
    (``inherited``) or the oz harness the ``model`` shorthand means."""
    for key, value in old.items():
        if key == "base_prompt":
            assert new[key] == value.strip()
        else:
            assert new[key] == value, key
    for key in set(new) - set(old):
        if key == "harness":
            assert new[key] == {"type": "oz"}
        else:
            assert new[key] == inherited[key], key


def test_the_loader_reads_a_migrated_tree_as_the_same_agents_and_automations(tmp_path: Path) -> None:
    from reconciler.loader import load

    environment = (
        LEGACY["environments/backend.yaml"] + "mcpServers:\n  github: {url: 'https://mcp.example.com/gh'}\n"
    )
    extra = {"webhooks/hooks.yaml": "secretName: hooks-secret\n", "environments/backend.yaml": environment}
    source = write_tree(tmp_path / "source", {**LEGACY, **extra})
    before = load(source)
    after = load(migrated_copy(source, tmp_path / "migrated"))
    assert before.ok and after.ok, after.diagnostics
    assert not after.diagnostics  # not even a deprecation warning
    assert before.definition is not None and after.definition is not None
    factory = yaml_of((tmp_path / "migrated" / "factory.yaml").read_text())
    defaults = factory["agentDefaults"]
    inherited = {"model_id": defaults["model"], "worker_host": defaults.get("workerHost")}
    old_agents = {a.name: a for a in before.definition.agents}
    new_agents = {a.name: a for a in after.definition.agents}
    assert old_agents.keys() == new_agents.keys()
    for name, old in old_agents.items():
        new = new_agents[name]
        assert (new.agent_type, new.prompt) == (old.agent_type, old.prompt.strip())
        same_config(old.config, new.config, inherited)
    old_automations = {a.name: a for a in before.definition.automations}
    new_automations = {a.name: a for a in after.definition.automations}
    assert old_automations.keys() == new_automations.keys()
    for name, old_automation in old_automations.items():
        new_automation = new_automations[name]
        assert (new_automation.agent, new_automation.prompt) == (old_automation.agent, old_automation.prompt)
        assert new_automation.triggers == old_automation.triggers
        same_config(old_automation.config, new_automation.config, {})
