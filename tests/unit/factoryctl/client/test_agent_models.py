"""Reading the SDK's ``/agent`` shapes (schedules, environments, agents) and building their requests.

Pure: answers are parsed from JSON literals shaped like the wire (schemas/openapi.yaml), requests are
the :class:`RequestSpec` each endpoint builds. The real server answers the same calls in
``tests/integration/factoryctl/client/test_schedules_client.py``.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import httpx
import pytest

from factoryctl.client import (
    AgentSkill,
    APIResponseValidationError,
    CloudEnvironment,
    Run,
    ScheduledAgent,
)
from factoryctl.client._transport import RequestSpec, parse_answer
from factoryctl.client.agent_resources import (
    create_schedule,
    delete_schedule,
    get_schedule,
    list_agents,
    list_environments,
    list_schedules,
    pause_schedule,
    resume_schedule,
    run_schedule_now,
    update_schedule,
)
from factoryctl.client.resources import list_runs

ITEM: dict[str, Any] = {
    "id": "sch_01hx0000000000000000000000",
    "name": "nightly-report",
    "cron_schedule": "0 6 * * *",
    "timezone": "Europe/Berlin",
    "prompt": "Write the report.",
    "enabled": True,
    "agent_config": {"model_id": "m-1"},
    "metadata": {"team": "ops"},
    "history": {"last_ran": "2025-03-01T05:00:00Z", "next_run": "2025-03-02T05:00:00+00:00"},
    "last_spawn_error": None,
    "scope": {"type": "Team", "uid": "tm_1"},
    "created_by": {"type": "service_account", "uid": "key_1", "display_name": "ci"},
    "created_at": "2025-02-01T00:00:00Z",
    "updated_at": "2025-02-02T00:00:00Z",
    "managed_by": "definitions",
    "factory_uid": "fa_1",
    "definition_path": "schedules/nightly-report.yaml",
    "automation": "nightly-report",
    "a_member_from_a_newer_server": {"ignored": True},
}


def answer(spec: RequestSpec[Any], body: object, status: int = 200) -> Any:
    request = httpx.Request(spec.method, "http://api.test" + spec.path)
    return parse_answer(spec, httpx.Response(status, json=body, request=request))


def test_a_schedule_reads_every_member_and_ignores_unknown_ones() -> None:
    item = answer(get_schedule(ITEM["id"]), ITEM)
    assert isinstance(item, ScheduledAgent)
    assert (item.id, item.name, item.cron_schedule, item.timezone) == (
        ITEM["id"],
        "nightly-report",
        "0 6 * * *",
        "Europe/Berlin",
    )
    assert item.history.next_run == dt.datetime(2025, 3, 2, 5, tzinfo=dt.UTC)
    assert item.history.last_ran is not None and item.history.last_ran.tzinfo is not None
    assert item.scope is not None and (item.scope.type, item.scope.uid) == ("Team", "tm_1")
    assert item.created_by is not None and item.created_by.display_name == "ci"
    assert (item.managed_by, item.definition_path, item.automation) == (
        "definitions",
        "schedules/nightly-report.yaml",
        "nightly-report",
    )
    assert item.agent_config == {"model_id": "m-1"} and item.metadata == {"team": "ops"}
    assert item.raw["a_member_from_a_newer_server"] == {"ignored": True}


def test_a_minimal_schedule_takes_defaults_and_a_null_history_reads_as_empty() -> None:
    minimal = {"id": "sch_x", "name": "n", "cron_schedule": "* * * * *", "history": None, "created_by": None}
    item = answer(get_schedule("sch_x"), minimal)
    assert (item.history.last_ran, item.history.next_run) == (None, None)
    assert (item.enabled, item.prompt, item.timezone, item.created_by) == (True, "", "UTC", None)
    assert answer(get_schedule("sch_x"), {**minimal, "history": {"next_run": None}}).history.next_run is None


@pytest.mark.parametrize(
    "broken",
    [
        {k: v for k, v in ITEM.items() if k != "id"},
        {**ITEM, "enabled": "yes"},
        {**ITEM, "history": {"next_run": 12}},
    ],
)
def test_a_schedule_without_identity_or_with_wrong_types_is_an_invalid_answer(broken: dict[str, Any]) -> None:
    with pytest.raises(APIResponseValidationError):
        answer(get_schedule("sch_x"), broken)


def test_lists_are_read_from_their_key() -> None:
    items = answer(list_schedules(), {"schedules": [ITEM, {**ITEM, "id": "sch_2", "enabled": False}]})
    assert [(s.id, s.enabled) for s in items] == [(ITEM["id"], True), ("sch_2", False)]
    assert answer(list_schedules(), {"schedules": []}) == []
    with pytest.raises(APIResponseValidationError, match="'schedules' list"):
        answer(list_schedules(), {"items": []})


def test_environments_in_the_sdk_shape() -> None:
    body = {
        "environments": [
            {
                "uid": "env_1",
                "config": {
                    "name": "example-repo",
                    "description": "the example",
                    "github_repos": [{"owner": "acme", "repo": "widgets"}],
                    "setup_commands": ["make deps"],
                    "docker_image": "python:3.12",
                    "repos": [{"url": "https://***@git.example/t.git", "ref": None, "path": "tools"}],
                },
                "last_updated": "2025-02-02T00:00:00Z",
                "setup_failed": False,
                "last_task_created": {"id": "run_1", "state": "SUCCEEDED", "title": "t"},
                "scope": {"type": "Team", "uid": "tm_1"},
            },
            {"uid": "env_2", "config": {}, "setup_failed": True, "last_task_run_timestamp": None},
        ]
    }
    first, second = answer(list_environments(), body)
    assert isinstance(first, CloudEnvironment)
    assert first.config.name == "example-repo" and first.config.docker_image == "python:3.12"
    assert [(r.owner, r.repo) for r in first.config.github_repos] == [("acme", "widgets")]
    assert first.config.setup_commands == ["make deps"]
    assert [(r.url, r.ref, r.path) for r in first.config.repos] == [
        ("https://***@git.example/t.git", None, "tools")
    ]
    assert first.last_task_created is not None and first.last_task_created.state == "SUCCEEDED"
    assert (second.uid, second.setup_failed, second.config.github_repos, second.last_task_run_timestamp) == (
        "env_2",
        True,
        [],
        None,
    )


def test_agents_with_their_variants() -> None:
    variant = {
        "id": "acme/widgets:.agents/skills/triage/SKILL.md",
        "base_prompt": "Triage.",
        "description": "Triage issues",
        "environments": [{"name": "example-repo", "uid": "env_1"}],
        "source": {"owner": "acme", "name": "widgets", "skill_path": ".agents/skills/triage/SKILL.md"},
        "last_run_timestamp": "2025-02-02T00:00:00Z",
    }
    broken = {**variant, "id": "acme/widgets:bad/SKILL.md", "error": "no front matter"}
    [agent] = answer(list_agents(), {"agents": [{"name": "triage", "variants": [variant, broken]}]})
    assert isinstance(agent, AgentSkill) and agent.name == "triage"
    good, bad = agent.variants
    assert good.source is not None and good.source.skill_path == ".agents/skills/triage/SKILL.md"
    assert [(e.name, e.uid) for e in good.environments] == [("example-repo", "env_1")]
    assert good.error is None and bad.error == "no front matter"
    assert good.last_run_timestamp == dt.datetime(2025, 2, 2, tzinfo=dt.UTC)


def test_a_run_names_the_schedule_that_started_it() -> None:
    schedule = {"schedule_id": "sch_1", "schedule_name": "nightly", "cron_schedule": "0 6 * * *"}
    run = Run.from_json(
        {"run_id": "run_1", "state": "QUEUED", "source": "SCHEDULED_AGENT", "schedule": schedule}
    )
    assert run.schedule is not None and (run.schedule.schedule_id, run.schedule.schedule_name) == (
        "sch_1",
        "nightly",
    )
    assert Run.from_json({"run_id": "run_2", "state": "QUEUED", "schedule": None}).schedule is None


def body(spec: RequestSpec[Any]) -> Any:
    return json.loads(json.dumps(spec.json))


def test_schedule_requests() -> None:
    sid = "sch_a/b"  # path segments are percent-encoded
    created = create_schedule("n", "0 6 * * *", prompt="p", timezone="Europe/Berlin", enabled=False)
    assert (created.method, created.path, created.safe_to_repeat) == (
        "POST",
        "/api/v1/agent/schedules",
        False,
    )
    assert body(created) == {
        "name": "n",
        "cron_schedule": "0 6 * * *",
        "prompt": "p",
        "timezone": "Europe/Berlin",
        "enabled": False,
    }
    updated = update_schedule(sid, name="n", cron_schedule="* * * * *", enabled=True, metadata={"k": "v"})
    assert (updated.method, updated.path, updated.safe_to_repeat) == (
        "PUT",
        "/api/v1/agent/schedules/sch_a%2Fb",
        True,
    )
    assert body(updated) == {
        "name": "n",
        "cron_schedule": "* * * * *",
        "enabled": True,
        "metadata": {"k": "v"},
    }
    calls = {
        "pause": pause_schedule(sid),
        "resume": resume_schedule(sid),
        "run": run_schedule_now(sid),
    }
    assert {k: (s.method, s.path) for k, s in calls.items()} == {
        k: ("POST", f"/api/v1/agent/schedules/sch_a%2Fb/{k}") for k in calls
    }
    # pause/resume set absolute state (retried); "run now" starts a run each time (not repeated)
    assert [s.safe_to_repeat for s in calls.values()] == [True, True, False]
    assert (delete_schedule(sid).method, delete_schedule(sid).safe_to_repeat) == ("DELETE", False)
    started = answer(
        calls["run"], {"run_id": "run_1", "task_id": "run_1", "state": "QUEUED", "at_capacity": False}
    )
    assert (started.run_id, started.at_capacity) == ("run_1", False)


def test_agent_and_run_list_queries() -> None:
    spec = list_agents(repo="acme/widgets", sort_by="last_run", include_malformed_skills=True, refresh=False)
    assert (spec.path, list(spec.params)) == (
        "/api/v1/agent",
        [
            ("repo", "acme/widgets"),
            ("sort_by", "last_run"),
            ("include_malformed_skills", "true"),
            ("refresh", "false"),
        ],
    )
    assert list(list_agents().params) == []
    assert (list_environments().path, list(list_environments().params)) == ("/api/v1/agent/environments", [])
    assert list(list_environments(sort_by="name").params) == [("sort_by", "name")]
    assert ("schedule_id", "sch_1") in list_runs(schedule_id="sch_1").params
