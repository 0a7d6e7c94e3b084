"""``factoryctl deliveries replay`` as a real subprocess against the real server (docs/cli.md, "deliveries
replay"; docs/management.md, "Replaying a delivery").

The server is the real app on a real socket (``live_servers.LiveServer``, on SQLite); each command is a
fresh ``python -m factoryctl.cli`` process with only ``FACTORY_API_KEY`` and ``--server`` set, so what is
tested is stdout, stderr and the exit code a person or a script gets.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from cli_runner import cli
from live_servers import LiveServer, unique

from factoryctl.client import FactoryClient


@pytest.fixture
def hook(live: LiveServer) -> tuple[str, str]:
    """A factory and a token webhook with one accepted delivery ``evt/1`` that started nothing."""
    with FactoryClient(live.url, live.admin_key) as api:
        factory = api.factories.create(unique("shop"))
        created = api.webhooks.create(factory.uid, unique("orders"))
    assert created.secret
    assert live.deliver(created, {"action": "opened"}, secret=created.secret, delivery_id="evt/1").is_success
    return factory.uid, created.uid


def test_replay_prints_the_runs_and_json_is_the_api_answer(live: LiveServer, hook: tuple[str, str]) -> None:
    fa, wid = hook
    automation = live.add_automation(fa, wid, {"action": "opened"})

    done = cli(live, "deliveries", "replay", fa, wid, "evt/1")
    assert done.returncode == 0, done.stderr
    summary, header, row = done.stdout.splitlines()
    assert re.fullmatch(r"replayed evt/1 as evt/1/replay/[0-9a-z]{26}: 1 run\(s\) started", summary)
    assert re.split(r"\s{2,}", header.strip()) == ["RUN ID", "AUTOMATION"]
    run_id, shown = re.split(r"\s{2,}", row.strip())
    assert run_id.startswith("run_") and shown == automation

    as_json = cli(
        live, "deliveries", "replay", fa, wid, "evt/1", "--automation-id", automation, "--format", "json"
    )
    assert as_json.returncode == 0, as_json.stderr
    body = json.loads(as_json.stdout)
    assert (
        body["replay_of"] == "evt/1" and body["automation_id"] == automation and body["status"] == "Replayed"
    )
    assert [r["automation_id"] for r in body["runs"]] == [automation] and body["runs"][0]["run_id"] != run_id

    listed = cli(live, "deliveries", "list", fa, wid, "--status", "Replayed", "--format", "json")
    replays = [d["delivery_id"] for d in json.loads(listed.stdout)["deliveries"]]
    assert len(replays) == 2 and replays[0] == body["delivery_id"]  # newest first


def test_replay_that_matches_nothing_and_refusals(live: LiveServer, hook: tuple[str, str]) -> None:
    fa, wid = hook
    done = cli(live, "deliveries", "replay", fa, wid, "evt/1")
    assert done.returncode == 0, done.stderr
    assert (
        done.stdout.strip().endswith(": 0 run(s) started") and "no enabled automation matched" in done.stderr
    )

    missing = cli(live, "deliveries", "replay", fa, wid, "nope", "--format", "json")
    assert missing.returncode == 1 and json.loads(missing.stdout)["status"] == 404
    assert "error: webhook" in missing.stderr and "(resource_not_found)" in missing.stderr
    bad = cli(live, "deliveries", "replay", fa, wid, "evt/1", "--automation-id", "au_nope")
    assert bad.returncode == 1 and "  - automation_id: automation au_nope is not" in bad.stderr
    member = cli(live, "deliveries", "replay", fa, wid, "evt/1", key=live.member_key)
    assert member.returncode == 1 and "(not_authorized)" in member.stderr
    usage = cli(live, "deliveries", "replay", fa, wid)
    assert usage.returncode == 2 and usage.stdout == ""
    unreachable = subprocess.run(
        [
            sys.executable,
            "-m",
            "factoryctl.cli",
            "deliveries",
            "replay",
            fa,
            wid,
            "evt/1",
            "--server",
            "http://127.0.0.1:9",
        ],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("FACTORY_")}
        | {"FACTORY_API_KEY": "fk_x", "FACTORY_CONTEXT": "none"},
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert unreachable.returncode == 3 and "(connection_failed)" in unreachable.stderr
