"""Automation triggers (v1alpha1): which provider/event pairs exist, which filter keys each takes, what a
filter means once normalized, and whether an event's facts satisfy it (pure, no I/O).

A trigger is ``{provider, event, filter?, schedule?}``. ``filter`` maps snake_case keys to a matcher: a
bare list (``[a, b]`` is ``{in: [a, b]}``) or ``{in: [...], not_in: [...]}``. Keys combine with AND, an
absent key matches everything, ``in`` matches when any fact value is listed and ``not_in`` when none is.
Values are compared in canonical form (:func:`canonical`): logins, labels (except Jira's), repositories,
team slugs, keywords and channel/user names case-insensitively; branches with or without ``refs/heads/``;
emoji names without colons or skin tone. A value both in ``in`` and ``not_in`` (after canonicalisation) is
an error, as is an empty list: the filter could never match.

``paths`` values are globs over repository paths: ``*`` and ``?`` stay inside one path segment, ``**``
spans segments (``api/**``, ``**/*.md``); patterns are anchored at the repository root. ``keywords``
match message text as case-insensitive substrings; every other key compares whole values.

Facts (:func:`evaluate`) map a filter key to the event's values, already canonical. A key missing from the
facts means the event cannot say (GitHub sends no file list with a pull request); a filter on it fails
closed rather than guessing. An empty list means the event has none (an issue without labels).

Slack and Linear filters may name things (``channels``, ``users``, ``teams``, ``projects``, ``states``)
instead of giving IDs; each name key is the alternative to one ID key and a filter uses one of the two.
Only :data:`CONNECTED` providers deliver events to factoryctl; the others validate and apply, and their
automations never fire. ``webhook/received`` keys are listed here but their values (``webhook_ids``,
``webhooks``, the ``payload`` pattern) are validated by the automation rules and
:mod:`store.rules.payload_filter`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Final, cast

from store.rules.cron import CronError, expression_for_trigger

FF_INVALID_TRIGGER: Final = "FF_INVALID_TRIGGER"
FF_INVALID_EVENT: Final = "FF_INVALID_EVENT"
FF_INVALID_FILTER: Final = "FF_INVALID_FILTER"
FF_UNKNOWN_FIELD: Final = "FF_UNKNOWN_FIELD"

Path = tuple[str | int, ...]
Value = str | int


class Kind(StrEnum):
    """How a filter key's values are checked and put in canonical form."""

    LOGIN = "login"  # GitHub user or bot login; '@' dropped, case-insensitive
    TEAM = "team"  # GitHub team slug, 'org/slug' or 'slug'; case-insensitive
    LABEL = "label"  # case-insensitive
    EXACT_LABEL = "exact_label"  # Jira labels are case-sensitive
    REPO = "repo"  # owner/name (GitLab: group/.../project); case-insensitive
    BRANCH = "branch"  # 'refs/heads/' dropped
    PATH = "path"  # glob pattern (see the module docstring)
    PR_NUMBER = "pr_number"  # positive integer
    CONCLUSION = "conclusion"  # a GitHub check or workflow conclusion
    REVIEW_STATE = "review_state"  # a GitHub review state
    WORD = "word"  # other case-insensitive words: GitLab actions
    KEYWORD = "keyword"  # substring of message text, case-insensitive
    EMOJI = "emoji"  # Slack emoji name; colons and skin tone dropped
    NAME = "name"  # a Slack/Linear display name; '#'/'@' dropped, case-insensitive
    PROJECT_KEY = "project_key"  # Jira project key, upper case
    ID = "id"  # an opaque identifier, compared exactly
    TEXT = "text"  # any other string, compared exactly
    EXTERNAL = "external"  # validated elsewhere (webhook triggers)


@dataclass(frozen=True)
class FilterKey:
    """One filter key of one event."""

    name: str
    kind: Kind
    in_only: bool = False  # ``not_in`` refused (schedule_ids)
    name_for: str | None = None  # a name key: the ID key it is the alternative to


@dataclass(frozen=True)
class TriggerProblem:
    """A definition error; ``path`` is relative to the trigger, e.g. ``("filter", "labels", "not_in", 1)``."""

    path: Path
    message: str
    code: str


@dataclass(frozen=True)
class FilterVerdict:
    """Whether facts satisfy a filter, and if not, the first failing condition in words."""

    matched: bool
    reason: str | None = None


class TriggerError(ValueError):
    """A trigger that :func:`normalize_filter` cannot normalize; ``problems`` say why."""

    def __init__(self, problems: Sequence[TriggerProblem]) -> None:
        super().__init__("; ".join(p.message for p in problems))
        self.problems = tuple(problems)


def _keys(*specs: str | FilterKey) -> Mapping[str, FilterKey]:
    keys = [s if isinstance(s, FilterKey) else FilterKey(s, _DEFAULT_KINDS[s]) for s in specs]
    return MappingProxyType({k.name: k for k in keys})


_NAMED_KINDS: Final[Mapping[str, Kind]] = {
    "repos": Kind.REPO, "branches": Kind.BRANCH, "base_branches": Kind.BRANCH, "paths": Kind.PATH,
    "pr_numbers": Kind.PR_NUMBER, "assignees": Kind.LOGIN, "authors": Kind.LOGIN, "labels": Kind.LABEL,
    "mentioned": Kind.LOGIN, "reviewers": Kind.LOGIN, "reviewer_teams": Kind.TEAM,
    "review_states": Kind.REVIEW_STATE, "conclusions": Kind.CONCLUSION, "workflows": Kind.TEXT,
    "actions": Kind.WORD, "stages": Kind.TEXT, "keywords": Kind.KEYWORD, "emojis": Kind.EMOJI,
    "project_keys": Kind.PROJECT_KEY, "webhook_ids": Kind.EXTERNAL, "webhooks": Kind.EXTERNAL,
    "payload": Kind.EXTERNAL,
}  # fmt: skip
_ID_KEYS = ("team_ids", "project_ids", "state_ids", "assignee_ids", "mentioned_user_ids", "creator_ids",
            "issue_ids", "status_ids", "channel_ids", "user_ids", "item_user_ids")  # fmt: skip
_DEFAULT_KINDS: Final[Mapping[str, Kind]] = {**_NAMED_KINDS, **dict.fromkeys(_ID_KEYS, Kind.ID)}

_PR = ("repos", "base_branches", "pr_numbers", "paths", "assignees", "authors", "labels")
_LINEAR_ISSUE = ("team_ids", "project_ids", "labels", "state_ids", "assignee_ids", "mentioned_user_ids",
                 "creator_ids")  # fmt: skip
_LINEAR_NAMES = (FilterKey("teams", Kind.NAME, name_for="team_ids"),
                 FilterKey("projects", Kind.NAME, name_for="project_ids"),
                 FilterKey("states", Kind.NAME, name_for="state_ids"))  # fmt: skip
_SLACK_NAMES = (FilterKey("channels", Kind.NAME, name_for="channel_ids"),
                FilterKey("users", Kind.NAME, name_for="user_ids"))  # fmt: skip
_SLACK_MESSAGE = ("channel_ids", "user_ids", "keywords", *_SLACK_NAMES)
_JIRA_LABELS = FilterKey("labels", Kind.EXACT_LABEL)

CATALOGUE: Final[Mapping[str, Mapping[str, Mapping[str, FilterKey]]]] = MappingProxyType({
    "github": MappingProxyType({
        "issue_created": _keys("repos", "labels", "assignees", "authors"),
        "issue_labeled": _keys("repos", "labels", "assignees", "authors"),
        "issue_assigned": _keys("repos", "assignees", "labels"),
        "issue_mentioned": _keys("repos", "mentioned", "labels"),
        **{event: _keys(*_PR) for event in (
            "pull_request_opened", "pull_request_closed", "pull_request_merged", "pull_request_labeled",
            "pull_request_ready", "pull_request_reopened", "pull_request_synchronized")},
        "pull_request_assigned": _keys("repos", "assignees", "labels"),
        "pull_request_mentioned": _keys("repos", "mentioned", "labels"),
        "pull_request_review_requested": _keys("repos", "reviewers", "reviewer_teams"),
        "pull_request_review_submitted": _keys("repos", "mentioned", "labels", "review_states"),
        "push": _keys("repos", "branches", "paths"),
        "check_suite_completed": _keys("repos", "conclusions", "branches", "labels", "authors"),
        "check_run_rerequested": _keys("repos"),
        "check_suite_rerequested": _keys("repos"),
        "workflow_run_completed": _keys("repos", "conclusions", "branches", "workflows", "labels", "authors"),
    }),
    "gitlab": MappingProxyType({
        "merge_request": _keys("repos", "actions", "base_branches"),
        "bot_mentioned": _keys("repos", FilterKey("mentioned", Kind.TEXT)),  # seeded by the server: no effect
    }),
    "linear": MappingProxyType({
        **{event: _keys(*_LINEAR_ISSUE, *_LINEAR_NAMES) for event in (
            "issue_created", "issue_labeled", "issue_assigned", "issue_state_changed")},
        "comment_created": _keys("team_ids", "project_ids", "labels", "state_ids", "issue_ids",
                                 "mentioned_user_ids", "creator_ids", *_LINEAR_NAMES),
        "agent_session_created": _keys("team_ids", "creator_ids", "keywords", _LINEAR_NAMES[0]),
    }),
    "jira": MappingProxyType({
        "issue_created": _keys("project_keys", _JIRA_LABELS),
        "issue_labeled": _keys("project_keys", _JIRA_LABELS),
        "status_changed": _keys("project_keys", "status_ids"),
        "agent_session_created": _keys("project_keys", _JIRA_LABELS, "keywords"),
    }),
    "slack": MappingProxyType({
        **{event: _keys(*_SLACK_MESSAGE) for event in (
            "app_mention", "message_posted", "message_dm", "message_im", "message_mpim")},
        "member_joined_channel": _keys("channel_ids", "user_ids", *_SLACK_NAMES),
        "reaction_added": _keys(*_SLACK_MESSAGE, "emojis", "item_user_ids"),
    }),
    "schedule": MappingProxyType({
        "cron_fired": _keys(FilterKey("schedule_ids", Kind.ID, in_only=True)),
    }),
    "webhook": MappingProxyType({"received": _keys("webhook_ids", "webhooks", "payload")}),
    "factory": MappingProxyType({"work_item_stage_changed": _keys("stages")}),
})  # fmt: skip

# Providers whose events factoryctl receives; triggers of the others are accepted and never fire.
CONNECTED: Final[frozenset[str]] = frozenset({"webhook", "schedule", "github"})

CONCLUSIONS: Final = ("success", "failure", "neutral", "cancelled", "skipped", "timed_out",
                      "action_required", "stale", "startup_failure")  # fmt: skip
REVIEW_STATES: Final = ("approved", "changes_requested", "commented", "dismissed")
_TRIGGER_KEYS: Final = ("provider", "event", "filter", "schedule")
_SKIN_TONE = re.compile(r"::skin-tone-\d$")
_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")


def canonical(kind: Kind, value: Value) -> Value:
    """The form ``value`` is compared in (for a value of the right type; see :func:`check_trigger`)."""
    if isinstance(value, int):
        return value
    text = value.strip()
    if kind in (Kind.LOGIN, Kind.NAME):
        return text.lstrip("@#").lower()
    if kind in (Kind.TEAM, Kind.LABEL, Kind.REPO, Kind.CONCLUSION, Kind.REVIEW_STATE, Kind.WORD):
        return text.lower()
    if kind is Kind.KEYWORD:
        return text.casefold()
    if kind is Kind.BRANCH:
        return text.removeprefix("refs/heads/")
    if kind is Kind.EMOJI:
        return _SKIN_TONE.sub("", text.strip(":")).strip(":").lower()
    if kind is Kind.PROJECT_KEY:
        return text.upper()
    return text


def _value_problem(kind: Kind, value: object) -> str | None:
    """Why ``value`` cannot be a value of ``kind``, or None."""
    if kind is Kind.PR_NUMBER:
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{value!r} is not a pull request number: pr_numbers takes integers such as 42"
        return None if value > 0 else f"{value} is not a pull request number (they start at 1)"
    if not isinstance(value, str):
        hint = (
            f" (quote it: '{value}')"
            if isinstance(value, int | float) and not isinstance(value, bool)
            else ""
        )
        return f"{value!r} is not a string{hint}"
    text = canonical(kind, value)
    assert isinstance(text, str)
    if not text:
        return "an empty value never matches"
    if kind is Kind.REPO and (text.count("/") < 1 or "" in text.split("/") or " " in text):
        return f"'{value}' is not a repository: write owner/name, e.g. acme/payments-service"
    if kind is Kind.PATH and text.startswith("/"):
        return f"'{value}' starts with '/': paths are relative to the repository root ('{text.lstrip('/')}')"
    if kind is Kind.CONCLUSION and text not in CONCLUSIONS:
        return f"'{value}' is not a conclusion: use one of {', '.join(CONCLUSIONS)}"
    if kind is Kind.REVIEW_STATE and text not in REVIEW_STATES:
        return f"'{value}' is not a review state: use one of {', '.join(REVIEW_STATES)}"
    return None


def check_trigger(trigger: Mapping[str, object]) -> list[TriggerProblem]:
    """Every problem of one trigger, in file order; an empty list means it is valid."""
    if not isinstance(trigger, Mapping):
        return [TriggerProblem((), "a trigger is a mapping with provider and event", FF_INVALID_TRIGGER)]
    problems = [
        TriggerProblem(
            (key,), f"unknown trigger key '{key}': use {', '.join(_TRIGGER_KEYS)}", FF_UNKNOWN_FIELD
        )
        for key in trigger
        if key not in _TRIGGER_KEYS
    ]
    provider, event = trigger.get("provider"), trigger.get("event")
    if not isinstance(provider, str) or provider not in CATALOGUE:
        shown = "missing" if provider is None else f"'{provider}' is not a provider"
        message = f"provider {shown}: use one of {', '.join(CATALOGUE)}"
        return [*problems, TriggerProblem(("provider",), message, FF_INVALID_TRIGGER)]
    events = CATALOGUE[provider]
    if not isinstance(event, str) or event not in events:
        shown = "is missing" if event is None else f"'{event}' is not a {provider} event"
        hint = " (provider and event are separate keys)" if isinstance(event, str) and "." in event else ""
        message = f"event {shown}{hint}: use one of {', '.join(events)}"
        return [*problems, TriggerProblem(("event",), message, FF_INVALID_EVENT)]
    problems += _check_schedule(provider, event, trigger)
    flt = trigger.get("filter")
    if flt is None:
        return problems
    if not isinstance(flt, Mapping):
        return [*problems, TriggerProblem(("filter",), "filter must be a mapping of keys", FF_INVALID_FILTER)]
    return problems + [
        TriggerProblem(("filter", *path), message, code)
        for path, message, code in _check_filter(provider, event, flt)
    ]


def _check_schedule(provider: str, event: str, trigger: Mapping[str, object]) -> list[TriggerProblem]:
    schedule = trigger.get("schedule")
    flt = trigger.get("filter")
    has_ids = isinstance(flt, Mapping) and "schedule_ids" in flt
    if (provider, event) != ("schedule", "cron_fired"):
        if "schedule" in trigger:
            message = "schedule is only valid on a schedule/cron_fired trigger"
            return [TriggerProblem(("schedule",), message, FF_INVALID_TRIGGER)]
        return []
    if "schedule" in trigger and has_ids:
        message = "declare either an inline schedule or filter.schedule_ids, not both"
        return [TriggerProblem(("schedule",), message, FF_INVALID_TRIGGER)]
    if "schedule" not in trigger:
        if has_ids:
            return []
        message = "a schedule/cron_fired trigger needs an inline schedule (cron) or filter.schedule_ids"
        return [TriggerProblem((), message, FF_INVALID_TRIGGER)]
    if not isinstance(schedule, Mapping):
        return [TriggerProblem(("schedule",), "schedule must be a mapping with cron and an optional name",
                               FF_INVALID_TRIGGER)]  # fmt: skip
    problems = [
        TriggerProblem(("schedule", key), f"unknown schedule key '{key}': use cron, name", FF_UNKNOWN_FIELD)
        for key in schedule
        if key not in ("cron", "name")
    ]
    name = schedule.get("name")
    if "name" in schedule and (not isinstance(name, str) or not name.strip()):
        problems.append(
            TriggerProblem(("schedule", "name"), "name must be a non-empty string", FF_INVALID_TRIGGER)
        )
    cron = schedule.get("cron")
    if not isinstance(cron, str):
        message = (
            "cron is required: a five-field expression such as '0 9 * * 1-5' or a descriptor like @daily"
        )
        problems.append(TriggerProblem(("schedule", "cron"), message, FF_INVALID_TRIGGER))
    else:
        try:
            expression_for_trigger(cron)
        except CronError as error:
            problems.append(TriggerProblem(("schedule", "cron"), error.message, FF_INVALID_TRIGGER))
    return problems


def _check_filter(provider: str, event: str, flt: Mapping[object, object]) -> list[tuple[Path, str, str]]:
    keys = CATALOGUE[provider][event]
    problems: list[tuple[Path, str, str]] = []
    for key, matcher in flt.items():
        spec = keys.get(key) if isinstance(key, str) else None
        if spec is None or not isinstance(key, str):
            problems.append(((str(key),), _unknown_key(provider, event, key), FF_UNKNOWN_FIELD))
            continue
        if spec.name_for is not None and spec.name_for in flt:
            message = f"use {spec.name} (names) or {spec.name_for} (IDs), not both"
            problems.append(((key,), message, FF_INVALID_FILTER))
        if spec.kind is not Kind.EXTERNAL:
            problems += [
                ((key, *path), message, code) for path, message, code in _check_matcher(spec, matcher)
            ]
    return problems


def _unknown_key(provider: str, event: str, key: object) -> str:
    keys = CATALOGUE[provider][event]
    valid = ", ".join(keys)
    if isinstance(key, str):
        snake = _CAMEL.sub(r"_\1", key).lower()
        if snake != key and snake in keys:
            return f"filter keys are snake_case: write {snake}, not {key}"
        if any(key in ks for ks in CATALOGUE[provider].values()):
            return (
                f"{key} is not a filter of {provider}/{event} (other {provider} events take it): use {valid}"
            )
    return f"unknown filter key {str(key)!r} for {provider}/{event}: use {valid}"


def _check_matcher(spec: FilterKey, matcher: object) -> list[tuple[Path, str, str]]:
    key = spec.name
    if isinstance(matcher, str | int) and not isinstance(matcher, bool):
        return [((), f"{key} takes a list: write [{matcher}]", FF_INVALID_FILTER)]
    if isinstance(matcher, Sequence):
        parts: Mapping[object, object] = {"in": matcher}
        prefix: dict[object, Path] = {"in": ()}
    elif isinstance(matcher, Mapping):
        parts, prefix = matcher, {"in": ("in",), "not_in": ("not_in",)}
    else:
        return [((), f"{key} takes a list or an {{in, not_in}} mapping", FF_INVALID_FILTER)]
    problems: list[tuple[Path, str, str]] = []
    seen: dict[str, dict[Value, int]] = {}
    for part, values in parts.items():
        if part not in ("in", "not_in"):
            problems.append(
                ((str(part),), f"unknown matcher key '{part}' in {key}: use in, not_in", FF_UNKNOWN_FIELD)
            )
            continue
        assert isinstance(part, str)
        where = prefix[part]
        if part == "not_in" and spec.in_only:
            problems.append((where, f"{key} supports only in: excluding one would match every other",
                             FF_INVALID_FILTER))  # fmt: skip
            continue
        if isinstance(values, str) or not isinstance(values, Sequence):
            problems.append((where, f"{key}.{part} takes a list", FF_INVALID_FILTER))
            continue
        if not values:
            problems.append((where, f"{key}.{part} is empty: omit it to match everything", FF_INVALID_FILTER))
            continue
        seen[part] = {}
        for index, value in enumerate(values):
            problem = _value_problem(spec.kind, value)
            if problem is not None:
                problems.append(((*where, index), f"{key}: {problem}", FF_INVALID_FILTER))
            else:
                assert isinstance(value, str | int)
                seen[part].setdefault(canonical(spec.kind, value), index)
    if not parts:
        problems.append(((), f"{key} needs in or not_in", FF_INVALID_FILTER))
    for value, index in seen.get("not_in", {}).items():
        if value in seen.get("in", {}):
            message = f"{key}: {value!r} is in both in and not_in, so the filter could never match"
            problems.append(((*prefix["not_in"], index), message, FF_INVALID_FILTER))
    return problems


def normalize_filter(
    provider: str, event: str, flt: Mapping[str, object] | None
) -> dict[str, dict[str, list[Value]]]:
    """``{key: {"in": [...], "not_in": [...]}}`` with canonical values, de-duplicated in order.

    Raises :class:`TriggerError` for a filter :func:`check_trigger` refuses. Keys validated elsewhere
    (``webhook/received``) are left out.
    """
    problems = check_trigger({"provider": provider, "event": event, "filter": flt or {}})
    problems = [p for p in problems if p.path]  # () is a cron_fired trigger without schedule: fine here
    if problems:
        raise TriggerError(problems)
    keys = CATALOGUE[provider][event]
    normalized: dict[str, dict[str, list[Value]]] = {}
    for key, matcher in (flt or {}).items():
        spec = keys[key]
        if spec.kind is Kind.EXTERNAL:
            continue
        checked = matcher if isinstance(matcher, Mapping) else {"in": matcher}
        parts = cast("Mapping[str, Sequence[Value]]", checked)
        normalized[key] = {
            part: list(dict.fromkeys(canonical(spec.kind, v) for v in parts.get(part, ())))
            for part in ("in", "not_in")
        }
    return normalized


def evaluate(
    normalized: Mapping[str, Mapping[str, Sequence[Value]]], facts: Mapping[str, Sequence[Value]]
) -> FilterVerdict:
    """Whether an event's canonical ``facts`` satisfy a :func:`normalize_filter` result (keys in order)."""
    for key, parts in normalized.items():
        wanted, unwanted = list(parts.get("in", ())), list(parts.get("not_in", ()))
        if not wanted and not unwanted:
            continue
        if key not in facts:
            return FilterVerdict(False, f"{key}: this event does not carry {key}, so the filter cannot match")
        have = list(facts[key])
        if wanted and not any(_matches(key, w, h) for w in wanted for h in have):
            return FilterVerdict(False, f"{key}: none of {have} in {wanted}")
        for h in have:
            hit = next((u for u in unwanted if _matches(key, u, h)), None)
            if hit is not None:
                return FilterVerdict(False, f"{key}: {h!r} matches not_in {hit!r}")
    return FilterVerdict(True)


def _matches(key: str, wanted: Value, fact: Value) -> bool:
    if key == "paths" and isinstance(wanted, str) and isinstance(fact, str):
        return path_matches(wanted, fact)
    if key == "keywords" and isinstance(wanted, str) and isinstance(fact, str):
        return wanted in fact.casefold()
    return wanted == fact


def path_matches(pattern: str, path: str) -> bool:
    """Whether a repository path matches a glob (``*``, ``?`` within a segment, ``**`` across)."""
    return _glob(pattern).fullmatch(path.removeprefix("./")) is not None


@functools.lru_cache(maxsize=512)
def _glob(pattern: str) -> re.Pattern[str]:
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out), re.DOTALL)


def unconnected_problem(provider: str) -> str | None:
    """A warning for a trigger whose provider factoryctl does not receive, or None."""
    if provider in CONNECTED or provider not in CATALOGUE:
        return None
    return f"{provider} is not connected to factoryctl: this trigger is accepted but never fires"


__all__ = [
    "CATALOGUE",
    "CONCLUSIONS",
    "CONNECTED",
    "FF_INVALID_EVENT",
    "FF_INVALID_FILTER",
    "FF_INVALID_TRIGGER",
    "FF_UNKNOWN_FIELD",
    "REVIEW_STATES",
    "FilterKey",
    "FilterVerdict",
    "Kind",
    "TriggerError",
    "TriggerProblem",
    "canonical",
    "check_trigger",
    "evaluate",
    "normalize_filter",
    "path_matches",
    "unconnected_problem",
]
