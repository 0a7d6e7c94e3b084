"""GitOps sync status through a real ``factoryctl serve`` following a real git repository, on SQLite and
PostgreSQL (docs/reconcile.md, "Sync status", "Self-heal", "Who manages a factory")."""

from __future__ import annotations

import json
import os
import pty
import subprocess
from pathlib import Path
from typing import Any

import git
import pytest
from serve_support import CLI, Served, clean_env, run_cli, serving, wait_for

pytestmark = pytest.mark.slow
KEY = "bXlfdGVzdF9rZXlfMzJfYnl0ZXNfbG9uZ19fX19fX18="
ENV = {"FACTORY_SECRET_KEY": KEY, "NO_COLOR": "1"}


def write_tree(root: Path, *, description: str = "from git", extra: bool = False) -> None:
    (root / "webhooks").mkdir(parents=True, exist_ok=True)
    (root / "factory.yaml").write_text(f"name: synced\ndescription: {description}\n")
    (root / "webhooks" / "alerts.yaml").write_text("secretName: hooks\n")
    if extra:
        (root / "webhooks" / "extra.yaml").write_text("secretName: hooks\n")


def the_factory(server: Served) -> dict[str, Any] | None:
    for f in server.get("/api/v1/factory")["factories"]:
        if f["name"] == "synced":
            return dict(server.get(f"/api/v1/factory/{f['uid']}"))
    return None


def apply_on_a_terminal(store: tuple[str | Path, ...], tree: Path) -> tuple[int, str]:
    """``factoryctl apply TREE`` with a terminal as stdin (it would ask for ``yes``), answering ``yes``."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*CLI, *map(str, store), "apply", str(tree)],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=clean_env(ENV),
    )
    os.close(slave)
    os.write(master, b"yes\n")
    out, _ = proc.communicate(timeout=120)
    os.close(master)
    return proc.returncode, out.decode()


def hooks(factory: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {w["name"]: w for w in factory["webhooks"]}


def test_drift_is_reported_and_self_healed_and_foreign_applies_refused(tmp_path: Path, db_url: str) -> None:
    data = tmp_path / "data"
    store = ("--data-dir", data, "--database", db_url)
    created = run_cli(*store, "secrets", "create", "hooks", "--generate", env=ENV, timeout=60)
    assert created.returncode == 0, created.stderr
    src = tmp_path / "src"
    repo = git.Repo.init(src, initial_branch="main")
    write_tree(src)
    repo.git.add(A=True)
    ada = git.Actor("Ada Lovelace", "ada@example.com")
    sha = repo.index.commit("Add the alerts webhook", author=ada, committer=ada).hexsha

    args = ("--git", src, "--branch", "main", "--poll-interval", "0.3")
    with serving(data, *args, database=db_url, env=ENV) as server:
        factory = wait_for(
            lambda: (f := the_factory(server)) and f["sync"]["status"] == "Synced" and f, what="first sync"
        )
        assert factory["last_applied_revision"] == sha and factory["sync"]["revision"] == sha
        commit = factory["applied_commit"]
        assert (commit["sha"], commit["subject"], commit["author"]) == (
            sha,
            "Add the alerts webhook",
            "Ada Lovelace",
        )
        assert commit["url"] is None  # a local repository is no forge
        assert factory["manager"]["kind"] == "git" and factory["manager"]["location"] == f"{src}@main"
        uid, alerts = factory["uid"], hooks(factory)["alerts"]

        # An API change to a definitions-managed object: drift, then the source is applied again.
        status, _ = server.request(
            "PATCH", f"/api/v1/factory/{uid}/webhooks/{alerts['uid']}", {"enabled": False}
        )
        assert status == 200
        healed = wait_for(
            lambda: (f := the_factory(server)) and (f["sync"].get("last_heal") or {}).get("drift") and f,
            what="self-heal",
        )
        assert healed["sync"]["last_heal"]["drift"] == [
            {
                "action": "update",
                "kind": "webhook",
                "name": "alerts",
                "uid": alerts["uid"],
                "fields": ["enabled"],
            }
        ]
        assert hooks(healed)["alerts"]["enabled"] is True and healed["sync"]["status"] == "Synced"
        logged = [json.loads(line) for line in server.log.read_text().splitlines() if '"out of sync"' in line]
        assert logged and logged[0]["drift"][0]["name"] == "alerts" and logged[0]["self_heal"] is True

        # The CLI shows the same, by name.
        http = {"FACTORY_API_KEY": server.key}
        shown = run_cli("factories", "get", "synced", "--server", server.url, env=ENV | http, timeout=60)
        assert shown.returncode == 0, shown.stderr
        lines = shown.stdout.splitlines()
        assert any(line.startswith(f"Sync:       Synced (compared {sha[:12]} at 20") for line in lines), lines
        assert (
            f"Commit:     {sha[:12]} Add the alerts webhook (Ada Lovelace, {commit['committed_at']})" in lines
        )
        assert f"Manager:    serve following git {src}@main" in lines
        assert lines[-1].endswith(": ~ webhook alerts: enabled") and lines[-1].startswith("Last self-heal: ")
        listed = run_cli("factories", "list", "--server", server.url, env=ENV | http, timeout=60)
        assert listed.returncode == 0, listed.stderr
        assert listed.stdout.splitlines()[1].split() == [
            "synced",
            uid,
            "definitions",
            "True",
            "Synced",
            sha[:12],
        ]

        # Another directory applied by hand: refused, naming the serve; forced, then reverted.
        other = tmp_path / "other"
        write_tree(other, description="by hand", extra=True)
        refused = run_cli(*store, "apply", other, "--auto-approve", env=ENV, timeout=60)
        assert refused.returncode == 1
        assert f"managed by serve following git {src}@main" in refused.stderr and "--force" in refused.stderr
        assert set(hooks(the_factory(server) or {})) == {"alerts"}
        planned = run_cli(*store, "plan", other, env=ENV, timeout=60)
        assert planned.returncode == 0 and "+ webhook extra" in planned.stdout
        assert (
            f"note: serve following git {src}@main manages this factory; apply needs --force"
            in planned.stderr
        )
        code, shown_on_tty = apply_on_a_terminal(store, other)
        assert code == 1 and "Only 'yes' will be accepted" not in shown_on_tty
        assert f"error: serve following git {src}@main manages this factory; pass --force" in shown_on_tty

        forced = run_cli(*store, "apply", other, "--auto-approve", "--force", env=ENV, timeout=60)
        assert forced.returncode == 0, forced.stderr
        reverted = wait_for(
            lambda: (
                (f := the_factory(server))
                and f["description"] == "from git"
                and set(hooks(f)) == {"alerts"}
                and f["sync"]["status"] == "Synced"
                and f
            ),
            what="the forced apply reverted",
        )
        assert reverted["last_applied_revision"] == sha
        assert {(d["kind"], d["name"]) for d in reverted["sync"]["last_heal"]["drift"]} == {
            ("factory", "synced"),
            ("webhook", "extra"),
        }

    # A stopped serve releases its claim: applying by hand is accepted at once.
    after = run_cli(*store, "apply", other, "--auto-approve", env=ENV, timeout=60)
    assert after.returncode == 0, after.stderr
