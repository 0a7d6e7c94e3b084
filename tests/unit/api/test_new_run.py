"""A new run as one value (api/runs/new_run.py): the caller decides it, :func:`build_run_row` derives the
rest of the QUEUED row from it (id, state, times, default title, worker host, indexed config columns)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest

from api.runs.new_run import Creator, NewAttachment, NewRun
from api.runs.records import build_run_row

NOW = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)


def new_run(**changes: Any) -> NewRun:
    return dataclasses.replace(
        NewRun(
            team_id="team_1",
            prompt="\n  first line  \nsecond line",
            title=None,
            agent_config={"name": "default", "model_id": "model-a", "worker_host": "host-a"},
            source="API",
            creator=Creator("service_account", "key_1", "key one"),
        ),
        **changes,
    )


def test_a_new_run_is_a_frozen_value_with_no_links_by_default() -> None:
    new = new_run()
    with pytest.raises(dataclasses.FrozenInstanceError):
        new.prompt = "changed"  # type: ignore[misc]
    assert new.attachments == () and new.metadata is None
    assert (new.factory_uid, new.automation_id, new.webhook_uid, new.delivery_id, new.schedule_id) == (
        None,
    ) * 5


def test_the_row_keeps_what_the_caller_decided_and_derives_the_rest() -> None:
    row = build_run_row(NOW, new_run(metadata={"ticket": "T-1"}, factory_uid="fac_1", parent_run_id="run_0"))
    assert row["run_id"].startswith("run_") and row["state"] == "QUEUED"
    assert row["created_at"] == row["updated_at"] == row["queued_at"] == NOW
    assert (row["team_id"], row["source"], row["factory_uid"], row["parent_run_id"]) == (
        "team_1",
        "API",
        "fac_1",
        "run_0",
    )
    assert (row["creator_type"], row["creator_uid"], row["creator_display_name"]) == (
        "service_account",
        "key_1",
        "key one",
    )
    assert row["title"] == "first line" and row["run_metadata"] == {"ticket": "T-1"}
    assert (row["config_name"], row["model_id"], row["worker_host"]) == ("default", "model-a", "host-a")
    assert row["schedule"] is None and row["attempt"] == 0


@pytest.mark.parametrize(
    ("worker_host", "stored"), [(None, "host-a"), ("host-b", "host-b"), ("warp", ""), ("", "")]
)
def test_a_worker_host_given_wins_over_the_configs(worker_host: str | None, stored: str) -> None:
    assert build_run_row(NOW, new_run(worker_host=worker_host))["worker_host"] == stored


def test_a_blank_title_defaults_to_the_prompt_then_the_skill() -> None:
    assert build_run_row(NOW, new_run(title="  Given  "))["title"] == "Given"
    assert build_run_row(NOW, new_run(title=" "))["title"] == "first line"
    skill_only = new_run(prompt="", agent_config={"skill_spec": "owner/repo:skill"})
    assert build_run_row(NOW, skill_only)["title"] == "owner/repo:skill"


def test_the_row_copies_the_callers_mappings() -> None:
    config: dict[str, Any] = {"name": "default"}
    snapshot = {"schedule_id": "sch_1"}
    row = build_run_row(
        NOW, new_run(agent_config=config, schedule=snapshot, attachments=(NewAttachment("a", "b", b""),))
    )
    config["name"], snapshot["schedule_id"] = "changed", "changed"
    assert row["agent_config"] == {"name": "default"} and row["schedule"] == {"schedule_id": "sch_1"}


def test_a_definition_starts_runs_as_a_service_account_named_after_it() -> None:
    assert Creator.for_definition("webhook", "wh_1", "github") == Creator(
        "service_account", "wh_1", "webhook github"
    )
    assert (
        Creator.for_definition("schedule", "sch_1", "x" * 300).display_name == ("schedule " + "x" * 300)[:200]
    )
