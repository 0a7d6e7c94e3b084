"""``factoryctl deliveries get`` shows why a delivery did what it did (docs/management.md, "Delivery log"),
as a subprocess against a real ``factoryctl serve`` following a factory directory: a filtered automation,
a disabled one and a matching one, with the reasons worded as Test filter words them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from serve_support import Served, run_cli, serving, wait_for

from factoryctl.client import FactoryClient

pytestmark = pytest.mark.slow
TOKEN = "e2e-decisions-token-0123456789"
TRIGGER = "triggers:\n  - provider: webhook\n    event: received\n    filter:\n      webhooks: [alerts]\n"
AUTOMATIONS = {
    "page-oncall": TRIGGER + "      payload:\n        severity: [critical]\n",
    "log-all": TRIGGER,
    "paused": "enabled: false\n" + TRIGGER,
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Path]]:
    data_dir = tmp_path_factory.mktemp("serve")
    repo = tmp_path_factory.mktemp("repo")
    (repo / "factory.yaml").write_text("name: decisions\n")
    (repo / "webhooks").mkdir()
    (repo / "webhooks" / "alerts.yaml").write_text("authMode: token\nsecretName: alerts-token\n")
    for name, front in AUTOMATIONS.items():
        (repo / "automations" / name).mkdir(parents=True)
        (repo / "automations" / name / "automation.md").write_text(f"---\n{front}---\nHandle the alert.\n")
    made = run_cli(
        "--data-dir", data_dir, "secrets", "create", "alerts-token", "--from-stdin", stdin=TOKEN + "\n"
    )
    assert made.returncode == 0, made.stderr
    with serving(data_dir, "--repo", repo) as server:
        yield server, repo


def cli(server: Served, *args: str) -> str:
    env = {
        "FACTORY_DATA_DIR": str(server.data_dir),
        "FACTORY_API_KEY": server.key,
        "FACTORY_API_URL": server.url,
    }
    done = run_cli(*args, env=env, timeout=60)
    assert done.returncode == 0, f"{args}: {done.stderr}"
    return done.stdout


def test_deliveries_get_prints_each_automations_decision(served: tuple[Served, Path]) -> None:
    server, _ = served
    with FactoryClient(server.url, server.key) as client:

        def applied() -> tuple[str, str, dict[str, str]] | None:
            page = client.factories.list(search="decisions")
            if not page.items:
                return None
            detail = client.factories.get(page.items[0].uid)
            names = {a.name: a.uid for a in detail.automations}
            return (
                (detail.uid, detail.webhooks[0].uid, names) if detail.webhooks and len(names) == 3 else None
            )

        factory, hook, uids = wait_for(applied, 30, "the definitions to apply")
    ingress = f"{server.url}/webhooks/w/{hook}"
    headers = {"Authorization": f"Bearer {TOKEN}", "X-Factory-Delivery-Id": "alert-low"}
    assert httpx.post(ingress, json={"severity": "low"}, headers=headers, timeout=10).status_code == 202

    text = cli(server, "deliveries", "get", factory, hook, "alert-low")
    lines = text.splitlines()
    start = lines.index("decisions:")  # one run was started (log-all): not "started nothing"
    decided = lines[start + 1 : start + 4]
    by_name = {name: next(line for line in decided if f"{name} ({uids[name]})" in line) for name in uids}
    assert by_name["log-all"].startswith("  matched ") and "(QUEUED)" in by_name["log-all"]
    assert by_name["page-oncall"] == (
        f"  not matched  page-oncall ({uids['page-oncall']}): severity: "
        'value "low" is not one of ["critical"]'
    )
    assert by_name["paused"] == (
        f"  not matched  paused ({uids['paused']}): the automation is disabled: it starts no runs until it is"
        " enabled"
    )
    as_json = json.loads(cli(server, "deliveries", "get", factory, hook, "alert-low", "--format", "json"))
    assert {d["automation_name"]: d["matched"] for d in as_json["decisions"]} == {
        "log-all": True,
        "page-oncall": False,
        "paused": False,
    }


def test_deliveries_get_says_started_nothing(served: tuple[Served, Path]) -> None:
    server, repo = served
    (repo / "automations" / "log-all" / "automation.md").write_text(
        f"---\nenabled: false\n{AUTOMATIONS['log-all']}---\nHandle the alert.\n"
    )
    with FactoryClient(server.url, server.key) as client:
        factory = client.factories.list(search="decisions").items[0].uid
        hook = client.factories.get(factory).webhooks[0].uid
        wait_for(
            lambda: all(
                not a.enabled for a in client.factories.get(factory).automations if a.name == "log-all"
            ),
            30,
            "log-all to be disabled",
        )
    ingress = f"{server.url}/webhooks/w/{hook}"
    headers = {"Authorization": f"Bearer {TOKEN}", "X-Factory-Delivery-Id": "not-an-object"}
    assert httpx.post(ingress, json=["a", "list"], headers=headers, timeout=10).status_code == 202
    lines = cli(server, "deliveries", "get", factory, hook, "not-an-object").splitlines()
    assert "decisions: started nothing" in lines
    assert any(
        "page-oncall" in line
        and line.endswith("payload is an array, not an object; only an empty filter matches it")
        for line in lines
    ), lines
    assert sum("the automation is disabled" in line for line in lines) == 2, lines
    # The log filters by outcome: the first delivery started a run, this one nothing.
    nothing = cli(server, "deliveries", "list", factory, hook, "--outcome", "no_runs", "--format", "json")
    started = cli(server, "deliveries", "list", factory, hook, "--outcome", "runs", "--format", "json")
    assert [d["delivery_id"] for d in json.loads(nothing)["deliveries"]] == ["not-an-object"]
    assert [d["delivery_id"] for d in json.loads(started)["deliveries"]] == ["alert-low"]
