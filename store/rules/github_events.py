"""GitHub webhook deliveries as trigger events: which ``github`` trigger events one delivery is, and the
facts its filters are matched against (pure; the payload is the decoded JSON body).

=====================================  ==================================  ==================================
``X-GitHub-Event`` / ``action``         trigger event                       facts
=====================================  ==================================  ==================================
issues / opened                         issue_created                       repos, labels, assignees, authors
issues / labeled                        issue_labeled                       labels = the label just added;
                                                                            assignees, authors
issues / assigned                       issue_assigned                      assignees = the user just
                                                                            assigned; labels
issues / opened, issue_comment /        issue_mentioned (when the text      repos, mentioned, labels
created on an issue                     @mentions someone)
pull_request / opened, reopened,        pull_request_opened, _reopened,     repos, base_branches, pr_numbers,
synchronize, ready_for_review           _synchronized, _ready               assignees, authors, labels
pull_request / closed                   pull_request_merged if merged,      as above
                                        else pull_request_closed
pull_request / labeled                  pull_request_labeled                as above; labels = the label just
                                                                            added
pull_request / assigned                 pull_request_assigned               repos, assignees = the user just
                                                                            assigned, labels
pull_request / opened, issue_comment /  pull_request_mentioned (when the    repos, mentioned, labels
created on a pull request,              text @mentions someone)
pull_request_review_comment / created
pull_request / review_requested         pull_request_review_requested       repos, reviewers, reviewer_teams
                                                                            (slug and org/slug)
pull_request_review / submitted         pull_request_review_submitted       repos, mentioned, labels,
                                                                            review_states
push                                    push                                repos, branches (none for a tag),
                                                                            paths (added, modified, removed
                                                                            of every listed commit)
check_suite / completed                 check_suite_completed               repos, conclusions, branches
check_run / rerequested                 check_run_rerequested               repos
check_suite / rerequested               check_suite_rerequested             repos
workflow_run / completed                workflow_run_completed              repos, conclusions, branches,
                                                                            workflows (name and file path),
                                                                            authors (the run's actor)
=====================================  ==================================  ==================================

Every other delivery is no trigger event. Facts are canonical (:func:`store.rules.triggers.canonical`):
logins, labels and repositories in lower case, branches without ``refs/heads/``.

Facts a payload cannot carry are left out (:data:`UNPROVABLE`), so a filter on them fails closed: GitHub
sends no file list with pull request events (``paths``), no labels with check suites and workflow runs,
and no login for a check suite's author. Validation warns about such filters. A push lists at most 20
commits, so ``paths`` of a larger push are those of its first 20 commits.

Mentions are ``@login`` and ``@org/team`` in the issue or pull request body (when opened), the comment
(when created) or the review body (when submitted); mentions inside code (fenced blocks and inline code)
and quoted lines (``> ``) do not count, nor do e-mail addresses.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from store.rules.triggers import Kind, Value, canonical

_PR_EVENTS: Final = MappingProxyType({
    "opened": "pull_request_opened",
    "reopened": "pull_request_reopened",
    "synchronize": "pull_request_synchronized",
    "ready_for_review": "pull_request_ready",
    "labeled": "pull_request_labeled",
})  # fmt: skip

# Filter keys a trigger event accepts but whose facts GitHub's payload does not carry.
UNPROVABLE: Final[Mapping[str, frozenset[str]]] = MappingProxyType({
    **{event: frozenset({"paths"}) for event in (
        "pull_request_opened", "pull_request_closed", "pull_request_merged", "pull_request_labeled",
        "pull_request_ready", "pull_request_reopened", "pull_request_synchronized")},
    "check_suite_completed": frozenset({"labels", "authors"}),
    "workflow_run_completed": frozenset({"labels"}),
})  # fmt: skip

_CODE = re.compile(r"```.*?(?:```|\Z)|~~~.*?(?:~~~|\Z)|`[^`\n]*`", re.DOTALL)
_QUOTE = re.compile(r"^[ \t]*>.*$", re.MULTILINE)
_MENTION = re.compile(r"(?<![\w@/.`-])@([A-Za-z0-9](?:[A-Za-z0-9-]{0,38})(?:/[A-Za-z0-9_.-]+)?)(?![\w@-])")


@dataclass(frozen=True)
class GitHubEvent:
    """One trigger event a delivery is: its name, ``owner/name`` and the facts filters are matched on."""

    event: str
    repo: str
    facts: Mapping[str, tuple[Value, ...]] = field(default_factory=dict)


def github_events(event: str, payload: Mapping[str, Any]) -> list[GitHubEvent]:
    """The trigger events of one delivery (``event`` is the ``X-GitHub-Event`` header); [] for others."""
    repo = _repo(payload)
    if repo is None:
        return []
    action = payload.get("action")
    found: list[tuple[str, dict[str, Iterable[Value]]]] = []
    facts: dict[str, Iterable[Value]]
    if event == "issues":
        found = _issue(payload, action)
    elif event == "pull_request":
        found = _pull_request(payload, action)
    elif event == "issue_comment" and action == "created":
        issue = _dict(payload.get("issue"))
        name = "pull_request_mentioned" if "pull_request" in issue else "issue_mentioned"
        found = _mention(name, _dict(payload.get("comment")).get("body"), issue)
    elif event == "pull_request_review_comment" and action == "created":
        body = _dict(payload.get("comment")).get("body")
        found = _mention("pull_request_mentioned", body, _dict(payload.get("pull_request")))
    elif event == "pull_request_review" and action == "submitted":
        review = _dict(payload.get("review"))
        facts = {
            "mentioned": mentions(review.get("body")),
            "labels": _labels(_dict(payload.get("pull_request"))),
            "review_states": _strings(Kind.REVIEW_STATE, [review.get("state")]),
        }
        found = [("pull_request_review_submitted", facts)]
    elif event == "push":
        found = [("push", _push(payload))]
    elif event in ("check_suite", "check_run") and action == "rerequested":
        found = [(f"{event}_rerequested", {})]
    elif event == "check_suite" and action == "completed":
        suite = _dict(payload.get("check_suite"))
        facts = {
            "conclusions": _strings(Kind.CONCLUSION, [suite.get("conclusion")]),
            "branches": _strings(Kind.BRANCH, [suite.get("head_branch")]),
        }
        found = [("check_suite_completed", facts)]
    elif event == "workflow_run" and action == "completed":
        found = [("workflow_run_completed", _workflow_run(payload))]
    return [
        GitHubEvent(
            name, repo, MappingProxyType({"repos": (repo,), **{k: tuple(v) for k, v in facts.items()}})
        )
        for name, facts in found
    ]


def mentions(text: object) -> list[str]:
    """The ``@login`` and ``@org/team`` mentions of a Markdown text, lower case, in order, once each."""
    if not isinstance(text, str):
        return []
    prose = _QUOTE.sub("", _CODE.sub("", text))
    return list(dict.fromkeys(m.lower() for m in _MENTION.findall(prose)))


def _issue(payload: Mapping[str, Any], action: object) -> list[tuple[str, dict[str, Iterable[Value]]]]:
    issue = _dict(payload.get("issue"))
    facts: dict[str, Iterable[Value]] = {
        "labels": _labels(issue),
        "assignees": _logins(issue.get("assignees")),
        "authors": _logins([issue.get("user")]),
    }
    if action == "opened":
        return [("issue_created", facts), *_mention("issue_mentioned", issue.get("body"), issue)]
    if action == "labeled":
        return [("issue_labeled", facts | {"labels": _label_added(payload)})]
    if action == "assigned":
        facts = {"assignees": _logins([payload.get("assignee")]), "labels": facts["labels"]}
        return [("issue_assigned", facts)]
    return []


def _pull_request(payload: Mapping[str, Any], action: object) -> list[tuple[str, dict[str, Iterable[Value]]]]:
    pr = _dict(payload.get("pull_request"))
    number = pr.get("number", payload.get("number"))
    facts: dict[str, Iterable[Value]] = {
        "base_branches": _strings(Kind.BRANCH, [_dict(pr.get("base")).get("ref")]),
        "pr_numbers": [number] if isinstance(number, int) and not isinstance(number, bool) else [],
        "assignees": _logins(pr.get("assignees")),
        "authors": _logins([pr.get("user")]),
        "labels": _labels(pr),
    }
    if action == "closed":
        return [("pull_request_merged" if pr.get("merged") is True else "pull_request_closed", facts)]
    if action == "labeled":
        return [("pull_request_labeled", facts | {"labels": _label_added(payload)})]
    if action == "assigned":
        facts = {"assignees": _logins([payload.get("assignee")]), "labels": facts["labels"]}
        return [("pull_request_assigned", facts)]
    if action == "review_requested":
        team = _dict(payload.get("requested_team")).get("slug")
        org = _dict(payload.get("organization")).get("login") or _repo_owner(payload)
        teams = [team, f"{org}/{team}"] if isinstance(team, str) and isinstance(org, str) else [team]
        facts = {
            "reviewers": _logins([payload.get("requested_reviewer")]),
            "reviewer_teams": _strings(Kind.TEAM, teams),
        }
        return [("pull_request_review_requested", facts)]
    if not isinstance(action, str) or action not in _PR_EVENTS:
        return []
    found = [(_PR_EVENTS[action], facts)]
    if action == "opened":
        found += _mention("pull_request_mentioned", pr.get("body"), pr)
    return found


def _mention(
    name: str, text: object, subject: Mapping[str, Any]
) -> list[tuple[str, dict[str, Iterable[Value]]]]:
    mentioned = mentions(text)
    return [(name, {"mentioned": mentioned, "labels": _labels(subject)})] if mentioned else []


def _push(payload: Mapping[str, Any]) -> dict[str, Iterable[Value]]:
    ref = payload.get("ref")
    branches = [ref] if isinstance(ref, str) and ref.startswith("refs/heads/") else []
    paths: dict[str, None] = {}
    commits = payload.get("commits")
    for commit in commits if isinstance(commits, list) else []:
        for key in ("added", "modified", "removed"):
            files = _dict(commit).get(key)
            paths.update(
                dict.fromkeys(f for f in (files if isinstance(files, list) else []) if isinstance(f, str))
            )
    return {"branches": _strings(Kind.BRANCH, branches), "paths": list(paths)}


def _workflow_run(payload: Mapping[str, Any]) -> dict[str, Iterable[Value]]:
    run, workflow = _dict(payload.get("workflow_run")), _dict(payload.get("workflow"))
    names = [run.get("name"), run.get("path"), workflow.get("name"), workflow.get("path")]
    return {
        "conclusions": _strings(Kind.CONCLUSION, [run.get("conclusion")]),
        "branches": _strings(Kind.BRANCH, [run.get("head_branch")]),
        "workflows": _strings(Kind.TEXT, names),
        "authors": _logins([run.get("actor")]),
    }


def _dict(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _repo(payload: Mapping[str, Any]) -> str | None:
    name = _dict(payload.get("repository")).get("full_name")
    return str(canonical(Kind.REPO, name)) if isinstance(name, str) and "/" in name else None


def _repo_owner(payload: Mapping[str, Any]) -> object:
    return _dict(_dict(payload.get("repository")).get("owner")).get("login")


def _strings(kind: Kind, values: Iterable[object]) -> list[Value]:
    """Canonical, de-duplicated, without empty or non-string values."""
    out = (canonical(kind, v) for v in values if isinstance(v, str) and v.strip())
    return list(dict.fromkeys(out))


def _logins(users: object) -> list[Value]:
    items = users if isinstance(users, list) else []
    return _strings(Kind.LOGIN, (_dict(u).get("login") for u in items))


def _labels(subject: Mapping[str, Any]) -> list[Value]:
    labels = subject.get("labels")
    return _strings(Kind.LABEL, (_dict(x).get("name") for x in (labels if isinstance(labels, list) else [])))


def _label_added(payload: Mapping[str, Any]) -> list[Value]:
    return _strings(Kind.LABEL, [_dict(payload.get("label")).get("name")])


__all__ = ["UNPROVABLE", "GitHubEvent", "github_events", "mentions"]
