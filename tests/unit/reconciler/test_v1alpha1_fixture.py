"""``tests/fixtures/v1alpha1-factory`` uses every key, kind and trigger (provider, event and filter key)
that the official example factories use, written here: it validates with no error, and each thing
factoryctl cannot do yet is one warning that names it (docs/definitions.md, "What factoryctl does with
each key")."""

from __future__ import annotations

from pathlib import Path

from reconciler import rules
from reconciler.loader import load

ROOT = Path(__file__).resolve().parents[2] / "fixtures" / "v1alpha1-factory"


def loaded():  # type: ignore[no-untyped-def]
    result = load(ROOT)
    assert result.ok and result.definition is not None, [str(d) for d in result.diagnostics]
    return result.definition


def test_the_full_tree_has_no_error_and_one_warning_per_unsupported_key() -> None:
    found = rules.check(loaded())
    assert [str(d) for d in found if d.severity == "error"] == []
    warnings = sorted((d.rule, Path(d.path).relative_to(ROOT).as_posix(), d.line) for d in found)
    assert warnings == [
        ("FC091", "agents/builder/agent.md", 6),  # harness claude: not offered by factoryctl's workers
        ("FC091", "agents/reviewer/agent.md", 5),  # harness codex
        ("FC091", "benchmarks/review/suite.yaml", 1),
        ("FC091", "factory.yaml", 7),  # credentialStrategy
        ("FC091", "factory.yaml", 14),  # cloudProviders
        ("FC091", "runners/linux-arm.yaml", 5),  # dockerImage
        ("FC091", "runners/linux.yaml", 4),  # instanceShape
        ("FC091", "runners/linux.yaml", 11),  # dockerImage
        ("FC091", "runners/macos.yaml", 2),  # macOS
        ("FC091", "scorers/review-quality/scorer.md", 2),
        ("FC092", "automations/linear-session/automation.md", 3),
        ("FC092", "automations/slack-dm/automation.md", 3),
        ("FC092", "automations/slack-mention/automation.md", 3),
        ("FC092", "automations/slack-reaction/automation.md", 3),
        ("FC092", "factory.yaml", 18),  # integration slack
        ("FC092", "factory.yaml", 19),  # integration linear
    ]


def test_agents_inherit_their_defaults_and_automations_default_to_the_foreman() -> None:
    definition = loaded()
    agents = {a.name: a for a in definition.agents}
    assert definition.foreman == "foreman"
    assert agents["builder"].config == {
        "model_id": "opus",
        "harness": {
            "type": "claude",
            "auth": {"source": "managedSecret", "secret_name": "ANTHROPIC_API_KEY"},
        },
        "runner": "linux-arm",
        "worker_host": "build-box",
        "secrets": ["SHARED_TOKEN"],
        "base_prompt": "Implement the issue and open a pull request.",
        "skills": ["conventions", "builder/testing"],
    }
    assert agents["reviewer"].config["harness"] == {
        "type": "codex",
        "reasoning_level": "high",
        "auth": {"source": "managedSecret", "secret_name": "OPENAI_API_KEY"},
    }
    assert (agents["ios"].config["harness"], agents["ios"].config["runner"]) == ({"type": "oz"}, "macos")
    automations = {a.name: a for a in definition.automations}
    assert automations["weekly"].agent == "foreman" and automations["pr-opened"].agent == "reviewer"


def test_every_trigger_is_stored_canonical() -> None:
    automations = {a.name: a for a in loaded().automations}
    stored = {name: a.fields()["triggers"] for name, a in automations.items()}
    assert stored["mentions"] == [
        {
            "provider": "github",
            "event": "issue_mentioned",
            "filter": {
                "repos": {"in": ["acme/api"], "not_in": []},
                "mentioned": {"in": ["full-bot"], "not_in": []},
                "labels": {"in": [], "not_in": ["wontfix"]},
            },
        }
    ]
    assert stored["push-docs"][0]["filter"]["paths"] == {"in": ["src/**", "docs/**/*.md"], "not_in": []}
    assert stored["weekly"] == [
        {
            "provider": "schedule",
            "event": "cron_fired",
            "filter": {},
            "schedule": {"name": "weekly-audit", "cron": "0 9 * * 1"},
        }
    ]
    assert stored["slack-dm"] == [{"provider": "slack", "event": "message_dm", "filter": {}}]
    events = sorted(t["event"] for triggers in stored.values() for t in triggers)
    assert len(events) == 16 and len(set(events)) == 16
    schedules = [s for s in loaded().schedules if s.inline_of]
    assert [(s.name, s.cron, s.timezone) for s in schedules] == [("weekly:weekly-audit", "0 9 * * 1", "UTC")]


def test_a_github_filter_the_payload_cannot_prove_is_a_warning(tmp_path: Path) -> None:
    for rel in ("factory.yaml", "agents/foreman/agent.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((ROOT / rel).read_text())
    (tmp_path / "automations/a").mkdir(parents=True)
    (tmp_path / "automations/a/automation.md").write_text(
        "---\ntriggers:\n  - provider: github\n    event: pull_request_opened\n"
        "    filter:\n      paths: [src/**]\n---\nReview.\n"
    )
    result = load(tmp_path)
    assert result.definition is not None
    [found] = [d for d in rules.check(result.definition) if d.path.endswith("automation.md")]
    assert (found.rule, found.severity, found.line) == ("FC091", "warning", 6)
    assert "pull_request_opened payload does not carry paths" in found.message
