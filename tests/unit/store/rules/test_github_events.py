"""GitHub deliveries as trigger events (store/rules/github_events.py), read from the real payloads of
@octokit/webhooks-examples (installed by `npm ci`): every mapped delivery gives the documented event names
and facts, every fact key is a filter key of its event, and facts a payload cannot carry stay absent so a
filter on them fails closed."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import pytest

from store.rules.github_events import UNPROVABLE, github_events, mentions
from store.rules.triggers import CATALOGUE, evaluate, normalize_filter

EXAMPLES = (
    Path(__file__).resolve().parents[4] / "node_modules/@octokit/webhooks-examples/api.github.com/index.json"
)


@functools.cache
def _examples() -> dict[str, list[dict[str, Any]]]:
    if not EXAMPLES.is_file():
        pytest.fail(f"{EXAMPLES} is missing: run `npm ci` at the repository root (package-lock.json pins it)")
    return {entry["name"]: entry["examples"] for entry in json.loads(EXAMPLES.read_text())}


def example(header: str, action: str | None = None, **where: Any) -> dict[str, Any]:
    """A deep copy of the first real payload of ``header`` with ``action`` (and top-level ``where``)."""
    for payload in _examples()[header]:
        if payload.get("action") == action and all(payload.get(k) == v for k, v in where.items()):
            return copy.deepcopy(payload)
    raise AssertionError(f"no {header}/{action} example in @octokit/webhooks-examples")


def only(header: str, payload: dict[str, Any]) -> tuple[str, dict[str, tuple[Any, ...]]]:
    events = github_events(header, payload)
    assert len(events) == 1, events
    return events[0].event, dict(events[0].facts)


CASES = [
    ("issues", "opened", "issue_created",
     {"repos": ("codertocat/hello-world",), "labels": ("bug",), "assignees": ("codertocat",),
      "authors": ("codertocat",)}),
    ("issues", "labeled", "issue_labeled", {"labels": ("bug",), "authors": ("codertocat",)}),
    ("issues", "assigned", "issue_assigned", {"assignees": ("codertocat",), "labels": ("bug",)}),
    ("pull_request", "opened", "pull_request_opened",
     {"repos": ("codertocat/hello-world",), "base_branches": ("master",), "pr_numbers": (2,),
      "assignees": (), "authors": ("codertocat",), "labels": ()}),
    ("pull_request", "closed", "pull_request_closed", {"pr_numbers": (2,), "labels": ("bug",)}),
    ("pull_request", "labeled", "pull_request_labeled", {"labels": ("bug",), "base_branches": ("master",)}),
    ("pull_request", "assigned", "pull_request_assigned", {"assignees": ("codertocat",), "labels": ("bug",)}),
    ("pull_request", "ready_for_review", "pull_request_ready", {"pr_numbers": (2,)}),
    ("pull_request", "reopened", "pull_request_reopened", {"pr_numbers": (2,)}),
    ("pull_request", "synchronize", "pull_request_synchronized", {"authors": ("codertocat",)}),
    ("pull_request", "review_requested", "pull_request_review_requested",
     {"reviewers": ("octocat",), "reviewer_teams": ()}),
    ("pull_request_review", "submitted", "pull_request_review_submitted",
     {"review_states": ("commented",), "mentioned": (), "labels": ()}),
    ("check_suite", "completed", "check_suite_completed",
     {"conclusions": ("success",), "branches": ("changes",)}),
    ("check_suite", "rerequested", "check_suite_rerequested", {"repos": ("codertocat/hello-world",)}),
    ("check_run", "rerequested", "check_run_rerequested", {"repos": ("github/hello-world",)}),
    ("workflow_run", "completed", "workflow_run_completed",
     {"conclusions": (), "branches": ("main",),
      "workflows": ("Manually triggered workflow", ".github/workflows/syntax.yml")}),
]  # fmt: skip


@pytest.mark.parametrize(("header", "action", "name", "facts"), CASES, ids=[c[2] for c in CASES])
def test_real_payloads_give_the_documented_event_and_facts(
    header: str, action: str, name: str, facts: dict[str, tuple[Any, ...]]
) -> None:
    event, got = only(header, example(header, action))
    assert event == name
    assert {k: got[k] for k in facts} == facts


def test_every_fact_is_a_filter_key_of_its_event_and_unprovable_keys_stay_absent() -> None:
    produced = set()
    for header, payloads in _examples().items():
        for payload in payloads:
            for event in github_events(header, payload):
                produced.add(event.event)
                keys = CATALOGUE["github"][event.event]
                assert set(event.facts) <= set(keys), (header, event)
                assert not set(event.facts) & UNPROVABLE.get(event.event, frozenset()), event
                assert event.facts["repos"] == (event.repo,)
    for name, unprovable in UNPROVABLE.items():
        assert unprovable <= set(CATALOGUE["github"][name])
    unmapped = set(CATALOGUE["github"]) - produced
    # The examples hold no merged pull request and no comment that mentions anyone: see the tests below.
    assert unmapped == {"pull_request_merged", "issue_mentioned", "pull_request_mentioned"}


def test_closed_and_merged_pull_request() -> None:
    payload = example("pull_request", "closed")
    payload["pull_request"]["merged"] = True
    assert only("pull_request", payload)[0] == "pull_request_merged"


def test_labeled_events_carry_the_label_just_added_and_assigned_events_the_assignee() -> None:
    payload = example("issues", "labeled")
    payload["issue"]["labels"].append({"name": "Factory-Ready"})
    assert only("issues", payload)[1]["labels"] == ("bug",)
    payload = example("pull_request", "assigned")
    payload["assignee"] = {"login": "Warp-Factory"}
    assert only("pull_request", payload)[1]["assignees"] == ("warp-factory",)


def test_comments_that_mention_someone_are_mention_events() -> None:
    plain = example("issue_comment", "created")
    assert github_events("issue_comment", plain) == []
    plain["comment"]["body"] = "@Warp-Factory please fix, cc @acme/Reviewers"
    event, facts = only("issue_comment", plain)
    assert (event, facts["mentioned"], facts["labels"]) == (
        "issue_mentioned",
        ("warp-factory", "acme/reviewers"),
        ("bug",),
    )
    plain["issue"]["pull_request"] = {"url": "https://api.github.com/repos/Codertocat/Hello-World/pulls/1"}
    assert only("issue_comment", plain)[0] == "pull_request_mentioned"
    review_comment = example("pull_request_review_comment", "created")
    assert github_events("pull_request_review_comment", review_comment) == []
    review_comment["comment"]["body"] = "@warp-factory address this"
    assert only("pull_request_review_comment", review_comment) == (
        "pull_request_mentioned",
        {"repos": ("codertocat/hello-world",), "mentioned": ("warp-factory",), "labels": ()},
    )
    edited = example("issue_comment", "edited")
    edited["comment"]["body"] = "@warp-factory"
    assert github_events("issue_comment", edited) == []


def test_an_opened_issue_that_mentions_someone_is_also_a_mention() -> None:
    payload = example("issues", "opened")
    payload["issue"]["body"] = "@warp-factory can you take this?"
    assert [e.event for e in github_events("issues", payload)] == ["issue_created", "issue_mentioned"]


def test_mentions_skip_code_quotes_and_email_addresses() -> None:
    text = "hi @One and @org/Team-x\n> @quoted\n`@inline` a@b.com\n```\n@fenced\n```\n@two."
    assert mentions(text) == ["one", "org/team-x", "two"]
    assert mentions(None) == []


def test_push_to_a_branch_and_a_tag() -> None:
    event, facts = only("push", example("push", ref="refs/heads/master"))
    assert (event, facts["branches"], facts["paths"]) == ("push", ("master",), ("README.md",))
    assert only("push", example("push", ref="refs/tags/simple-tag"))[1]["branches"] == ()


def test_push_paths_cover_every_commit() -> None:
    payload = example("push", ref="refs/heads/master")
    second = copy.deepcopy(payload["commits"][0])
    second.update(added=["api/new.py"], modified=["README.md"], removed=["docs/old.md"])
    payload["commits"].append(second)
    assert only("push", payload)[1]["paths"] == ("README.md", "api/new.py", "docs/old.md")


def test_review_requested_for_a_team_gives_slug_and_org_slug() -> None:
    payload = example("pull_request", "review_requested")
    del payload["requested_reviewer"]
    payload["requested_team"] = {"slug": "Reviewers", "name": "Reviewers"}
    facts = only("pull_request", payload)[1]
    assert facts["reviewer_teams"] == ("reviewers", "octocoders/reviewers")  # the payload's organization
    assert facts["reviewers"] == ()


def test_workflow_run_facts_from_a_real_successful_run() -> None:
    payload = next(
        p
        for p in _examples()["workflow_run"]
        if p["action"] == "completed" and p["workflow_run"]["conclusion"]
    )
    facts = only("workflow_run", copy.deepcopy(payload))[1]
    assert facts["conclusions"] == ("success",)
    assert facts["authors"] == ("codertocat",)
    assert ".github/workflows/test.yml" in facts["workflows"]


@pytest.mark.parametrize(
    ("header", "action"),
    [("issues", "edited"), ("pull_request", "unlabeled"), ("check_run", "completed"),
     ("check_suite", "requested"), ("workflow_run", "requested"), ("star", "created"),
     ("issue_comment", "deleted")],
)  # fmt: skip
def test_other_deliveries_are_no_trigger_event(header: str, action: str) -> None:
    assert github_events(header, example(header, action)) == []


def test_a_payload_without_a_repository_is_no_event() -> None:
    payload = example("issues", "opened")
    del payload["repository"]
    assert github_events("issues", payload) == []


def test_filters_from_the_docs_against_real_payloads() -> None:
    labeled = github_events("issues", example("issues", "labeled"))[0]
    flt = normalize_filter(
        "github", "issue_labeled", {"repos": ["Codertocat/Hello-World"], "labels": ["BUG"]}
    )
    assert evaluate(flt, labeled.facts).matched
    flt = normalize_filter("github", "issue_labeled", {"labels": ["factory-ready"]})
    assert evaluate(flt, labeled.facts).reason == "labels: none of ['bug'] in ['factory-ready']"

    opened = github_events("pull_request", example("pull_request", "opened"))[0]
    flt = normalize_filter(
        "github",
        "pull_request_opened",
        {"base_branches": ["refs/heads/master"], "labels": {"not_in": ["wip"]}},
    )
    assert evaluate(flt, opened.facts).matched
    flt = normalize_filter("github", "pull_request_opened", {"paths": ["**"]})
    verdict = evaluate(flt, opened.facts)
    assert not verdict.matched and verdict.reason is not None and "does not carry paths" in verdict.reason

    push = github_events("push", example("push", ref="refs/heads/master"))[0]
    assert evaluate(
        normalize_filter("github", "push", {"paths": ["*.md"], "branches": ["master"]}), push.facts
    ).matched
    assert not evaluate(normalize_filter("github", "push", {"paths": ["api/**"]}), push.facts).matched
    assert not evaluate(
        normalize_filter("github", "push", {"paths": {"not_in": ["README.*"]}}), push.facts
    ).matched
