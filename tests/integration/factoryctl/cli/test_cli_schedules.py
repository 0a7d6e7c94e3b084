"""``factoryctl schedules`` and ``runs list --schedule-id`` as a real subprocess against the real server.

The server is the real app on a real socket (``live_servers.LiveServer``, on SQLite); every command is a
fresh ``python -m factoryctl.cli`` process with only ``FACTORY_API_KEY`` and ``--server`` set, so what is
tested is what a person or a script gets: stdout, stderr and the exit code (docs/cli.md, "schedules").
Schedules are created through the API (the typed client), definition-managed ones with
``builders.schedule`` as an apply leaves them.
"""

from __future__ import annotations

import json
import re

from cli_runner import cli, ok
from live_servers import LiveServer, definition_schedule, unique

from factoryctl.client import FactoryClient, ScheduledAgent

HEADERS = ["NAME", "ID", "CRON", "TZ", "ENABLED", "NEXT RUN", "LAST RUN", "MANAGED BY"]


def table(stdout: str) -> list[list[str]]:
    """The plain table (stdout is not a terminal): columns apart by two spaces or more."""
    return [re.split(r"\s{2,}", line.strip()) for line in stdout.splitlines()]


def test_list_prints_one_row_per_schedule_and_json_is_the_api_answer(
    live: LiveServer, api: FactoryClient
) -> None:
    active = api.schedules.create(unique("active"), "0 6 * * *", prompt="p", timezone="Europe/Berlin")
    paused = api.schedules.create(unique("paused"), "30 9 * * MON", prompt="p", enabled=False)
    from_file = definition_schedule(live, unique("from-file"), managed_by="definitions")

    header, *rows = table(ok(cli(live, "schedules", "list")))
    assert header == HEADERS
    by_id = {row[1]: row for row in rows}
    assert all(len(row) == len(HEADERS) for row in rows)
    next_run = active.history.next_run
    assert next_run is not None
    assert by_id[active.id][:5] == [active.name, active.id, "0 6 * * *", "Europe/Berlin", "yes"]
    assert by_id[active.id][5] == active.raw["history"]["next_run"]  # as the server wrote it
    assert by_id[active.id][6:] == ["-", "api"]
    assert by_id[paused.id][2:] == ["30 9 * * MON", "UTC", "no", "-", "-", "api"]
    assert by_id[from_file][-1] == "definitions"

    as_json = json.loads(ok(cli(live, "schedules", "list", "--format", "json")))
    assert as_json == {"schedules": [s.raw for s in api.schedules.list()]}


def test_get_by_id_or_by_a_unique_name(live: LiveServer, api: FactoryClient) -> None:
    item = api.schedules.create(
        unique("nightly"), "0 6 * * *", prompt="line one\nline two", metadata={"k": "v"}
    )
    by_id = ok(cli(live, "schedules", "get", item.id))
    assert ok(cli(live, "schedules", "get", item.name)) == by_id
    lines = by_id.splitlines()
    assert lines[0].split() == ["id:", item.id] and ["name:", item.name] == lines[1].split()
    assert 'metadata:         {"k": "v"}' in lines
    assert lines[-3:] == ["prompt:", "  line one", "  line two"]
    assert json.loads(ok(cli(live, "schedules", "get", item.name, "--format", "json"))) == item.raw


def test_pause_and_resume_print_the_new_state(live: LiveServer, api: FactoryClient) -> None:
    item = api.schedules.create(unique("toggle"), "0 6 * * *", prompt="p")
    assert ok(cli(live, "schedules", "pause", item.name)) == f"{item.id} ({item.name}) paused\n"
    assert api.schedules.get(item.id).enabled is False
    assert ok(cli(live, "schedules", "pause", item.id)) == f"{item.id} ({item.name}) paused\n"  # idempotent

    resumed = ok(cli(live, "schedules", "resume", item.id))
    now = api.schedules.get(item.id)
    assert resumed == f"{item.id} ({item.name}) enabled, next run {now.raw['history']['next_run']}\n"
    paused = json.loads(ok(cli(live, "schedules", "pause", item.id, "--format", "json")))
    assert (paused["id"], paused["enabled"], paused["history"]["next_run"]) == (item.id, False, None)


def test_run_now_prints_the_run_id_and_runs_list_finds_it_by_schedule(
    live: LiveServer, api: FactoryClient
) -> None:
    item = api.schedules.create(unique("now"), "0 6 * * *", prompt="Run me.")
    run_id = ok(cli(live, "schedules", "run-now", item.name)).strip()
    assert re.fullmatch(r"run_\w+", run_id)
    started = json.loads(ok(cli(live, "schedules", "run-now", item.id, "--format", "json")))
    assert set(started) == {"run_id", "task_id", "state", "at_capacity"}

    listed = json.loads(ok(cli(live, "runs", "list", "--schedule-id", item.id, "--format", "json")))
    assert {r["run_id"] for r in listed["runs"]} == {run_id, started["run_id"]}
    assert {r["source"] for r in listed["runs"]} == {"SCHEDULED_AGENT"}
    assert all(r["schedule"]["schedule_id"] == item.id for r in listed["runs"])
    text = ok(cli(live, "runs", "list", "--schedule-id", item.id)).splitlines()
    assert len(text) == 3 and all("SCHEDULED_AGENT" in line for line in text[1:])


def test_a_definition_managed_schedule_refuses_pause_with_the_file_and_exit_1(live: LiveServer) -> None:
    name = unique("from-file")
    schedule_id = definition_schedule(live, name, managed_by="definitions")
    done = cli(live, "schedules", "pause", name)
    assert (done.returncode, done.stdout) == (1, ""), done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"error: schedule '{name}' is defined in schedules/{name}.yaml")
    assert line.endswith(" (conflict)")

    as_json = cli(live, "schedules", "pause", schedule_id, "--format", "json")
    assert as_json.returncode == 1 and as_json.stderr == done.stderr
    problem = json.loads(as_json.stdout)
    assert (problem["status"], problem["error_code"]) == (409, "conflict")
    assert f"schedules/{name}.yaml" in problem["detail"]
    assert ok(cli(live, "schedules", "run-now", schedule_id)).startswith("run_")  # allowed: edits nothing


def test_a_shared_name_is_a_usage_error_and_an_unknown_one_is_the_servers_404(
    live: LiveServer, api: FactoryClient
) -> None:
    name = unique("twin")
    first = api.schedules.create(name, "0 6 * * *", prompt="p")
    second = api.schedules.create(name, "0 7 * * *", prompt="p")
    done = cli(live, "schedules", "pause", name, "--format", "json")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == f"error: 2 schedules are named '{name}' ({first.id}, {second.id}): give its ID\n"
    assert api.schedules.get(first.id).enabled and api.schedules.get(second.id).enabled  # nothing sent

    missing = cli(live, "schedules", "get", "no-such-schedule", "--format", "json")
    assert missing.returncode == 1
    assert json.loads(missing.stdout)["error_code"] == "resource_not_found"
    assert missing.stderr == "error: schedule no-such-schedule does not exist (resource_not_found)\n"


def test_create_and_delete(live: LiveServer, api: FactoryClient) -> None:
    name = unique("made")
    flags = ["--name", name, "--cron", "0 6 * * 1-5", "--timezone", "Europe/Berlin", "--prompt", "Write it."]
    flags += ["--model", "m-1", "--metadata", "team=ops", "--disabled", "--format", "json"]
    created = json.loads(ok(cli(live, "schedules", "create", *flags)))
    item = ScheduledAgent.from_json(created)
    assert (item.name, item.cron_schedule, item.timezone, item.enabled) == (
        name,
        "0 6 * * 1-5",
        "Europe/Berlin",
        False,
    )
    assert item.agent_config.get("model_id") == "m-1" and item.metadata == {"team": "ops"}
    assert api.schedules.get(item.id) == item

    bad = cli(live, "schedules", "create", "--name", name, "--cron", "61 * * * *", "--prompt", "p")
    assert bad.returncode == 1 and bad.stderr.startswith("error: ") and "  - cron" in bad.stderr

    assert ok(cli(live, "schedules", "delete", name)) == f"deleted schedule {item.id}\n"
    gone = cli(live, "schedules", "get", item.id)
    assert gone.returncode == 1 and gone.stderr.endswith("(resource_not_found)\n")
