"""The trigger policy (store/rules/triggers.py): every provider/event/key of the catalogue accepts a value
of its kind, unknown and camelCase keys are refused with a hint, matchers normalize to canonical
{in, not_in}, conflicts are found in canonical form, schedule triggers need exactly one schedule source,
evaluation ANDs keys and fails closed, and inline cron descriptors (store/rules/cron.py)."""

from __future__ import annotations

from typing import Any

import pytest

from store.rules.cron import CronError, expression_for_trigger
from store.rules.triggers import (
    CATALOGUE,
    CONNECTED,
    FF_INVALID_EVENT,
    FF_INVALID_FILTER,
    FF_INVALID_TRIGGER,
    FF_UNKNOWN_FIELD,
    Kind,
    TriggerError,
    check_trigger,
    evaluate,
    normalize_filter,
    path_matches,
    unconnected_problem,
)

SAMPLE: dict[Kind, Any] = {
    Kind.LOGIN: "octocat", Kind.TEAM: "acme/reviewers", Kind.LABEL: "bug", Kind.EXACT_LABEL: "Bug",
    Kind.REPO: "acme/api", Kind.BRANCH: "main", Kind.PATH: "api/**", Kind.PR_NUMBER: 42,
    Kind.CONCLUSION: "failure", Kind.REVIEW_STATE: "approved", Kind.WORD: "merge", Kind.KEYWORD: "deploy",
    Kind.EMOJI: "ticket", Kind.NAME: "intake", Kind.PROJECT_KEY: "PAY", Kind.ID: "abc123", Kind.TEXT: "x",
}  # fmt: skip
PAIRS = [(p, e) for p, events in CATALOGUE.items() for e in events]
KEYS = [(p, e, k) for p, e in PAIRS for k, spec in CATALOGUE[p][e].items() if spec.kind is not Kind.EXTERNAL]


def trig(provider: str, event: str, flt: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    trigger: dict[str, Any] = {"provider": provider, "event": event, **extra}
    if flt is not None:
        trigger["filter"] = flt
    if (
        (provider, event) == ("schedule", "cron_fired")
        and "schedule" not in extra
        and "schedule_ids" not in (flt or {})
    ):
        trigger["schedule"] = {"cron": "@daily"}
    return trigger


def problems(trigger: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    return [(p.path, p.code) for p in check_trigger(trigger)]


def test_the_catalogue_has_the_published_providers_and_events() -> None:
    assert {p: len(e) for p, e in CATALOGUE.items()} == {
        "github": 20, "gitlab": 2, "linear": 6, "jira": 4, "slack": 7, "schedule": 1, "webhook": 1,
        "factory": 1,
    }  # fmt: skip
    assert CONNECTED == {"webhook", "schedule", "github"}
    assert unconnected_problem("slack") is not None and unconnected_problem("github") is None


@pytest.mark.parametrize(("provider", "event", "key"), KEYS, ids=[f"{p}.{e}.{k}" for p, e, k in KEYS])
def test_every_catalogue_key_accepts_a_value_of_its_kind(provider: str, event: str, key: str) -> None:
    spec = CATALOGUE[provider][event][key]
    value = SAMPLE[spec.kind]
    assert problems(trig(provider, event, {key: [value]})) == []
    other = {Kind.CONCLUSION: "success", Kind.REVIEW_STATE: "commented", Kind.PR_NUMBER: 43}.get(
        spec.kind, f"z{value}"
    )
    both = {key: {"in": [value], "not_in": [other]}}
    assert problems(trig(provider, event, both)) == (
        [(("filter", key, "not_in"), FF_INVALID_FILTER)] if spec.in_only else []
    )
    assert normalize_filter(provider, event, {key: [value]})[key]["in"]
    wrong = "nope" if spec.kind is Kind.PR_NUMBER else 7
    assert problems(trig(provider, event, {key: [wrong]})) == [(("filter", key, 0), FF_INVALID_FILTER)]


@pytest.mark.parametrize(("provider", "event"), PAIRS, ids=[f"{p}.{e}" for p, e in PAIRS])
def test_unknown_filter_keys_are_refused_with_the_valid_ones(provider: str, event: str) -> None:
    [problem] = check_trigger(trig(provider, event, {"colour": ["red"]}))
    assert (problem.path, problem.code) == (("filter", "colour"), FF_UNKNOWN_FIELD)
    assert all(k in problem.message for k in CATALOGUE[provider][event])


def test_the_official_examples_filters_are_valid() -> None:
    examples = [
        trig("github", "issue_labeled", {"repos": ["acme/payments-service"], "labels": ["factory-ready"]}),
        trig("github", "pull_request_opened",
             {"repos": ["acme/api-service"], "base_branches": ["main"], "labels": {"not_in": ["wip"]}}),
        trig("github", "workflow_run_completed",
             {"repos": ["acme/api-service"], "branches": ["main"], "conclusions": ["failure"]}),
        trig("github", "push", {"repos": ["acme/api-service"], "branches": ["main"], "paths": ["api/**"]}),
        trig("github", "issue_mentioned", {"repos": ["acme/webapp"], "mentioned": ["warp-factory"],
                                           "labels": ["factory:Acme"]}),
        trig("github", "pull_request_assigned", {"assignees": ["warp-factory"], "labels": ["factory:Acme"]}),
        trig("github", "pull_request_merged", {"repos": ["acme/ios-app"], "labels": ["factory:Acme"]}),
        trig("slack", "reaction_added", {"channels": ["your-intake-channel"], "emojis": ["ticket"]}),
        trig("slack", "app_mention"), trig("slack", "message_dm"), trig("linear", "agent_session_created"),
        trig("schedule", "cron_fired", schedule={"name": "weekly-dependency-audit", "cron": "0 9 * * 1"}),
        trig("webhook", "received", {"webhook_ids": ["WEBHOOK_UID"], "payload": {"status": ["failed"]}}),
        trig("linear", "issue_labeled", {"teams": ["Payments"], "projects": ["Q3"], "states": ["Todo"]}),
        trig("slack", "message_posted", {"channels": ["#triage"], "users": ["@ana"], "keywords": ["deploy"]}),
    ]  # fmt: skip
    for trigger in examples:
        assert check_trigger(trigger) == [], trigger


def test_camel_case_keys_are_refused_with_the_snake_case_spelling() -> None:
    [problem] = check_trigger(trig("github", "pull_request_opened", {"baseBranches": ["main"]}))
    assert problem.code == FF_UNKNOWN_FIELD and "write base_branches" in problem.message
    [problem] = check_trigger(trig("github", "push", {"labels": ["x"]}))
    assert "other github events take it" in problem.message


def test_trigger_level_errors() -> None:
    assert problems({"provider": "gh", "event": "x", "when": 1}) == [
        (("when",), FF_UNKNOWN_FIELD), (("provider",), FF_INVALID_TRIGGER)
    ]  # fmt: skip
    [problem] = check_trigger({"provider": "github", "event": "issues.opened"})
    assert (
        problem.code == FF_INVALID_EVENT
        and "separate keys" in problem.message
        and "issue_created" in problem.message
    )
    assert problems({"event": "push"}) == [(("provider",), FF_INVALID_TRIGGER)]
    assert problems({"provider": "github"}) == [(("event",), FF_INVALID_EVENT)]
    assert problems({"provider": "github", "event": "push", "filter": ["x"]}) == [
        (("filter",), FF_INVALID_FILTER)
    ]


@pytest.mark.parametrize(
    ("matcher", "path"),
    [
        ("bug", ()), ([], ()), ({}, ()), ({"in": []}, ("in",)), ({"in": "bug"}, ("in",)),
        ({"in": ["a"], "any": ["b"]}, ("any",)), ({"in": ["a", None]}, ("in", 1)), (["a", ""], (1,)),
    ],
)  # fmt: skip
def test_malformed_matchers(matcher: Any, path: tuple[str | int, ...]) -> None:
    found = problems(trig("github", "issue_labeled", {"labels": matcher}))
    assert len(found) == 1 and found[0][0] == ("filter", "labels", *path)


@pytest.mark.parametrize(
    ("provider", "event", "key", "included", "excluded"),
    [
        ("github", "issue_labeled", "labels", "Bug", "bug"),
        ("github", "issue_labeled", "repos", "Acme/API", "acme/api"),
        ("github", "issue_labeled", "authors", "@Octocat", "octocat"),
        ("github", "push", "branches", "refs/heads/main", "main"),
        ("github", "pull_request_opened", "pr_numbers", 7, 7),
        ("slack", "reaction_added", "emojis", ":+1::skin-tone-3:", "+1"),
        ("slack", "reaction_added", "channels", "#Intake", "intake"),
        ("slack", "message_posted", "keywords", "Deploy", "deploy"),
        ("jira", "issue_created", "project_keys", "pay", "PAY"),
    ],
)  # fmt: skip
def test_in_and_not_in_conflict_in_canonical_form(
    provider: str, event: str, key: str, included: Any, excluded: Any
) -> None:
    found = problems(trig(provider, event, {key: {"in": [included], "not_in": [excluded]}}))
    assert found == [(("filter", key, "not_in", 0), FF_INVALID_FILTER)]


def test_jira_labels_are_case_sensitive_so_they_do_not_conflict() -> None:
    assert problems(trig("jira", "issue_labeled", {"labels": {"in": ["Bug"], "not_in": ["bug"]}})) == []
    assert normalize_filter("jira", "issue_labeled", {"labels": ["Bug"]}) == {
        "labels": {"in": ["Bug"], "not_in": []}
    }


def test_value_rules() -> None:
    assert problems(trig("github", "pull_request_opened", {"pr_numbers": [True, 0, "3"]})) == [
        (("filter", "pr_numbers", i), FF_INVALID_FILTER) for i in range(3)
    ]  # fmt: skip
    assert problems(trig("github", "push", {"repos": ["acme"], "paths": ["/api/**"]})) == [
        (("filter", "repos", 0), FF_INVALID_FILTER), (("filter", "paths", 0), FF_INVALID_FILTER)
    ]  # fmt: skip
    [problem] = check_trigger(trig("github", "check_suite_completed", {"conclusions": ["failed"]}))
    assert "timed_out" in problem.message
    assert problems(trig("slack", "message_posted", {"users": ["ana"], "user_ids": ["U1"]})) == [
        (("filter", "users"), FF_INVALID_FILTER)
    ]  # fmt: skip


def test_schedule_triggers_need_exactly_one_schedule_source() -> None:
    cron = {"provider": "schedule", "event": "cron_fired"}
    assert problems(cron) == [((), FF_INVALID_TRIGGER)]
    assert problems({**cron, "filter": {"schedule_ids": ["sched_abc123"]}}) == []
    assert problems({**cron, "schedule": {"cron": "@every 1h"}}) == []
    assert problems({**cron, "schedule": {"cron": "0 3 * * *"}, "filter": {"schedule_ids": ["s"]}}) == [
        (("schedule",), FF_INVALID_TRIGGER)
    ]  # fmt: skip
    assert problems({**cron, "filter": {"schedule_ids": {"in": ["a"], "not_in": ["b"]}}}) == [
        (("filter", "schedule_ids", "not_in"), FF_INVALID_FILTER)
    ]  # fmt: skip
    assert problems({**cron, "schedule": {"cron": "CRON_TZ=UTC 0 3 * * *", "name": "", "tz": "UTC"}}) == [
        (("schedule", "tz"), FF_UNKNOWN_FIELD), (("schedule", "name"), FF_INVALID_TRIGGER),
        (("schedule", "cron"), FF_INVALID_TRIGGER),
    ]  # fmt: skip
    assert problems({**cron, "schedule": "0 3 * * *"}) == [(("schedule",), FF_INVALID_TRIGGER)]
    assert problems({**cron, "schedule": {"name": "x"}}) == [(("schedule", "cron"), FF_INVALID_TRIGGER)]
    assert problems({"provider": "github", "event": "push", "schedule": {"cron": "@daily"}}) == [
        (("schedule",), FF_INVALID_TRIGGER)
    ]  # fmt: skip


def test_normalize_gives_canonical_in_and_not_in() -> None:
    flt = {
        "repos": ["Acme/API", "acme/api"],
        "base_branches": ["refs/heads/main"],
        "labels": {"not_in": ["WIP"]},
    }
    assert normalize_filter("github", "pull_request_opened", flt) == {
        "repos": {"in": ["acme/api"], "not_in": []},
        "base_branches": {"in": ["main"], "not_in": []},
        "labels": {"in": [], "not_in": ["wip"]},
    }
    assert normalize_filter("webhook", "received", {"webhook_ids": ["W"], "payload": {"a": 1}}) == {}
    assert normalize_filter("schedule", "cron_fired", None) == {}
    with pytest.raises(TriggerError) as raised:
        normalize_filter("github", "push", {"labels": ["x"]})
    assert raised.value.problems[0].path == ("filter", "labels")


def test_evaluate_ands_keys_and_names_the_first_failure() -> None:
    flt = normalize_filter("github", "issue_labeled", {"repos": ["acme/api"], "labels": ["docs"]})
    assert evaluate(flt, {"repos": ["acme/api"], "labels": ["docs", "bug"]}).matched
    verdict = evaluate(flt, {"repos": ["acme/api"], "labels": ["bug"]})
    assert (verdict.matched, verdict.reason) == (False, "labels: none of ['bug'] in ['docs']")
    assert (
        evaluate(flt, {"repos": ["acme/web"], "labels": ["docs"]}).reason
        == "repos: none of ['acme/web'] in ['acme/api']"
    )
    assert evaluate({}, {}).matched  # no filter matches everything
    excluded = normalize_filter("github", "pull_request_opened", {"labels": {"not_in": ["wip"]}})
    assert evaluate(excluded, {"labels": []}).matched
    assert evaluate(excluded, {"labels": ["wip", "bug"]}).reason == "labels: 'wip' matches not_in 'wip'"
    assert not evaluate(excluded, {}).matched  # unknown facts fail closed, even for not_in


def test_keywords_are_case_insensitive_substrings() -> None:
    flt = normalize_filter("slack", "message_posted", {"keywords": ["Deploy"]})
    assert evaluate(flt, {"keywords": ["Please DEPLOYING now"]}).matched
    assert not evaluate(flt, {"keywords": ["ship it"]}).matched


@pytest.mark.parametrize(
    ("pattern", "path", "matched"),
    [
        ("api/**", "api/v1/users.py", True), ("api/**", "api/x", True), ("api/**", "api", False),
        ("api/**", "web/api/x", False), ("*.md", "README.md", True), ("*.md", "docs/a.md", False),
        ("**/*.md", "docs/a.md", True), ("**/*.md", "a.md", True),
        ("docs/**/index.md", "docs/index.md", True),
        ("docs/**/index.md", "docs/a/b/index.md", True), ("src/?.py", "src/a.py", True),
        ("src/?.py", "src/ab.py", False), ("src/*", "src/a/b.py", False), ("a+b(c).txt", "a+b(c).txt", True),
        ("**", "anything/at/all", True),
    ],
)  # fmt: skip
def test_path_globs(pattern: str, path: str, matched: bool) -> None:
    assert path_matches(pattern, path) is matched


@pytest.mark.parametrize(
    ("text", "expression"),
    [
        ("@hourly", "0 * * * *"), ("@daily", "0 0 * * *"), ("@midnight", "0 0 * * *"),
        ("@weekly", "0 0 * * 0"),
        ("@monthly", "0 0 1 * *"), ("@yearly", "0 0 1 1 *"), ("@annually", "0 0 1 1 *"),
        ("@every 15m", "*/15 * * * *"), ("@every 1m", "* * * * *"), ("@every 60m", "0 * * * *"),
        ("@every 1h", "0 * * * *"), ("@every 2h", "0 */2 * * *"), ("@every 24h", "0 0 * * *"),
        ("@every 1h0m", "0 * * * *"), (" 0  9 * * 1-5 ", "0 9 * * 1-5"),
    ],
)  # fmt: skip
def test_cron_descriptors(text: str, expression: str) -> None:
    assert expression_for_trigger(text) == expression


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("@every 7m", "intervals that work"), ("@every 5h", "intervals that work"),
        ("@every 90m", "intervals that work"), ("@every 30s", "intervals that work"),
        ("@every 1d", "24h"), ("@every", "duration"), ("@reboot", "unknown descriptor"),
        ("CRON_TZ=Europe/Berlin 0 3 * * *", "UTC"), ("TZ=UTC 0 3 * * *", "UTC"),
        ("0 0 3 * * *", "seconds"), ("0 3 * *", "4 fields"),
    ],
)  # fmt: skip
def test_cron_descriptors_that_are_refused(text: str, words: str) -> None:
    with pytest.raises(CronError, match=words):
        expression_for_trigger(text)
