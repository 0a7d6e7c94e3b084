"""``factoryctl schedules`` without a server: flags, addressing by name, and the text it prints.

The verbs against a real server, as a subprocess: ``tests/integration/factoryctl/cli/test_cli_schedules.py``.
"""

from __future__ import annotations

import argparse
import io
from typing import Any

import pytest

from factoryctl.cli import build_parser
from factoryctl.client import ScheduledAgent
from factoryctl.client.names import AmbiguousName
from factoryctl.commands import runs, schedules
from factoryctl.commands._http import UsageError

SID = "sch_01hx00000000000000000000aa"


def item(**members: Any) -> ScheduledAgent:
    base: dict[str, Any] = {
        "id": SID,
        "name": "nightly",
        "cron_schedule": "0 6 * * *",
        "timezone": "Europe/Berlin",
        "enabled": True,
        "history": {"last_ran": None, "next_run": "2025-03-02T05:00:00Z"},
        "managed_by": "api",
    }
    return ScheduledAgent.from_json({**base, **members})


def parse(*argv: str) -> argparse.Namespace:
    return build_parser(list(argv)).parse_args(list(argv))


def test_the_table_has_one_cell_per_column_and_dashes_for_nothing() -> None:
    rows = schedules.table_rows(
        [item(), item(id="sch_2", enabled=False, history=None, managed_by=None, timezone="UTC")]
    )
    assert rows == [
        ["nightly", SID, "0 6 * * *", "Europe/Berlin", "yes", "2025-03-02T05:00:00Z", "-", "api"],
        ["nightly", "sch_2", "0 6 * * *", "UTC", "no", "-", "-", "-"],
    ]
    assert all(len(row) == len(schedules.TABLE_HEADERS) for row in rows)


def test_get_shows_where_a_definition_lives_and_leaves_out_what_is_empty() -> None:
    shown = dict(
        schedules.schedule_fields(
            item(
                managed_by="definitions",
                definition_path="schedules/nightly.yaml",
                factory_uid="fa_1",
                last_spawn_error="automation nightly is gone",
                agent_config={"model_id": "m"},
            )
        )
    )
    assert shown["definition"] == "schedules/nightly.yaml" and shown["factory"] == "fa_1"
    assert shown["last spawn error"] == "automation nightly is gone"
    assert shown["config"] == '{"model_id": "m"}' and shown["metadata"] is None
    assert (shown["next run"], shown["last run"]) == ("2025-03-02T05:00:00Z", "-")
    assert dict(schedules.schedule_fields(item(enabled=False)))["enabled"] == "no (paused)"


def test_create_flags_become_the_request() -> None:
    args = parse(
        "schedules", "create", "--name", "n", "--cron", "0 6 * * *", "--prompt", "p",
        "--model", "m-1", "--metadata", "k=v", "--metadata", "e=", "--disabled", "--timezone", "UTC",
    )  # fmt: skip
    assert schedules.create_request(args) == {
        "name": "n",
        "cron_schedule": "0 6 * * *",
        "prompt": "p",
        "agent_config": {"model_id": "m-1"},
        "enabled": False,
        "metadata": {"k": "v", "e": ""},
        "timezone": "UTC",
    }
    skill_only = parse("schedules", "create", "--name", "n", "--cron", "* * * * *", "--skill", "a/b:s")
    request = schedules.create_request(skill_only)
    assert (request["prompt"], request["agent_config"], request["enabled"]) == (
        None,
        {"skill_spec": "a/b:s"},
        None,
    )
    several = parse(
        "schedules", "create", "--name", "n", "--cron", "* * * * *", "--skill", "a/b:s", "--skill", "a/b:t"
    )
    assert schedules.create_request(several)["agent_config"] == {"skills": ["a/b:s", "a/b:t"]}  # in order


def test_create_reads_the_prompt_from_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("from stdin\n"))
    args = parse("schedules", "create", "--name", "n", "--cron", "* * * * *", "--prompt", "-")
    assert schedules.create_request(args)["prompt"] == "from stdin\n"


@pytest.mark.parametrize(
    ("extra", "message"),
    [((), "give --prompt"), (("--prompt", "p", "--metadata", "novalue"), "KEY=VALUE")],
)
def test_create_input_mistakes_are_usage_errors(extra: tuple[str, ...], message: str) -> None:
    args = parse("schedules", "create", "--name", "n", "--cron", "* * * * *", *extra)
    with pytest.raises(UsageError, match=message):
        schedules.create_request(args)


class Listing:
    """Stands in for ``client.schedules``: answers ``list()`` and counts the calls."""

    def __init__(self, *items: ScheduledAgent) -> None:
        self.items, self.calls = list(items), 0

    def list(self) -> list[ScheduledAgent]:
        self.calls += 1
        return self.items


def resolve(listing: Listing, ref: str) -> str:
    client: Any = argparse.Namespace(schedules=listing)
    return schedules.resolve(client, ref)


def test_an_id_is_used_as_is_without_a_lookup() -> None:
    listing = Listing(item(name=SID))  # even a schedule named like an ID does not shadow it
    assert resolve(listing, SID) == SID and listing.calls == 0


def test_a_name_one_schedule_has_stands_for_its_id() -> None:
    listing = Listing(item(), item(id="sch_other", name="weekly"))
    assert resolve(listing, "weekly") == "sch_other" and listing.calls == 1


def test_a_name_nobody_has_is_sent_as_an_id_so_the_server_answers_404() -> None:
    assert resolve(Listing(item()), "sch_typo") == "sch_typo"


def test_a_shared_name_is_a_usage_error_listing_the_ids() -> None:
    shared = rf"2 schedules are named 'nightly' \({SID}, sch_b\): give its ID"
    with pytest.raises(AmbiguousName, match=shared):
        resolve(Listing(item(), item(id="sch_b"), item(id="sch_c", name="other")), "nightly")


def test_every_verb_is_registered_and_takes_the_common_flags() -> None:
    for verb in ("get", "pause", "resume", "run-now", "delete"):
        args = parse("schedules", verb, "nightly", "--format", "json", "--server", "http://x")
        assert (args.schedule, args.format, args.server) == ("nightly", "json", "http://x")
        assert callable(args.handler)
    assert parse("schedules", "list").format == "text"
    with pytest.raises(SystemExit):
        parse("schedules", "pause")  # SCHEDULE is required


def test_runs_list_filters_by_schedule() -> None:
    args = parse("runs", "list", "--schedule-id", SID)
    assert runs._list_filters(args)["schedule_id"] == SID
    assert runs._list_filters(parse("runs", "list"))["schedule_id"] is None
