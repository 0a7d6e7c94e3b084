"""``factoryctl factories list|get``: factories with their GitOps status, over HTTP.

What the API's factory answer says, for a person at a terminal: Ready, the sync status (``Synced``,
``OutOfSync`` with the drift object by object, ``Unknown``), the applied commit and the ``serve`` that
manages the factory (docs/reconcile.md, "Sync status", "Who manages a factory"). Client, exit codes and
error output come from :mod:`factoryctl.commands._http` (docs/cli.md). A factory is named by its name or
its UID (:mod:`factoryctl.client.names`). ``--format json`` prints the API's JSON unchanged.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from factoryctl.commands._http import common_options, handler
from factoryctl.commands._output import fields, print_json, table

if TYPE_CHECKING:  # the client (httpx) is imported when a verb runs, not for --help
    from factoryctl.client import FactoryClient

HEADERS = ("NAME", "UID", "MANAGED BY", "READY", "SYNC", "REVISION")
_ACTION = {"create": "+", "update": "~", "delete": "-", "replace": "-/+"}


def register(sub: Any) -> None:  # argparse subparsers
    parser = sub.add_parser("factories", help="list factories and show one's sync status (HTTP API)")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    common = common_options()
    lst = verbs.add_parser("list", parents=[common], help="every factory: Ready, sync status, revision")
    lst.set_defaults(handler=handler(_list))
    get = verbs.add_parser("get", parents=[common], help="one factory: sync status, drift, commit, manager")
    get.add_argument("factory", metavar="FACTORY", help="a factory's name or UID")
    get.set_defaults(handler=handler(_get))


def _ready(body: dict[str, Any]) -> str:
    for condition in body.get("conditions") or []:
        if condition.get("type") == "Ready":
            return str(condition.get("status"))
    return "-"


def _short(revision: str | None) -> str:
    """A commit SHA or a ``sha256:`` digest shortened to 12 hex characters, as git shows them."""
    if not revision:
        return "-"
    if revision.startswith("sha256:"):
        return revision[: len("sha256:") + 12]
    return revision[:12] if len(revision) >= 40 else revision


def _list(client: FactoryClient, args: argparse.Namespace) -> None:
    rows = [f.raw for f in client.factories.iter()]
    if args.format == "json":
        print_json({"factories": rows})
        return
    if not rows:
        print("No factories.")
        return
    table(
        HEADERS,
        [
            (
                f["name"],
                f["uid"],
                f.get("managed_by") or "-",
                _ready(f),
                (f.get("sync") or {}).get("status", "-"),
                _short(f.get("last_applied_revision")),
            )
            for f in rows
        ],
    )


def drift_line(item: dict[str, Any]) -> str:
    """One drift entry as a plan line: ``~ webhook alerts: enabled`` (field names only)."""
    what = f"{_ACTION.get(item.get('action', ''), '?')} {item.get('kind')} {item.get('name')}"
    names = ", ".join(item.get("fields") or [])
    return f"{what}: {names}" if names else what


def _commit(commit: dict[str, Any] | None) -> str | None:
    if not commit:
        return None
    text = f"{str(commit.get('sha', ''))[:12]} {commit.get('subject', '')}"
    return f"{text} ({commit.get('author', '?')}, {commit.get('committed_at', '')})"


def _get(client: FactoryClient, args: argparse.Namespace) -> None:
    from factoryctl.client.names import factory_uid

    body = client.factories.get(factory_uid(client, args.factory)).raw
    if args.format == "json":
        print_json(body)
        return
    sync = body.get("sync") or {}
    manager = body.get("manager")
    commit = body.get("applied_commit")
    status = sync.get("status")
    compared = f"compared {_short(sync.get('revision'))} at {sync.get('checked_at') or 'never'}"
    fields(
        [
            ("Factory", f"{body['name']} ({body['uid']})"),
            ("Managed by", body.get("managed_by")),
            ("Ready", _ready(body)),
            ("Sync", f"{status} ({compared})" if status else None),
            ("Note", sync.get("message")),
            ("Revision", body.get("last_applied_revision")),
            ("Commit", _commit(commit)),
            ("Commit URL", (commit or {}).get("url")),
            ("Manager", f"serve following {manager['kind']} {manager['location']}" if manager else None),
        ]
    )
    if sync.get("drift"):
        print("Drift:")
        for item in sync["drift"]:
            print(f"  {drift_line(item)}")
    heal = sync.get("last_heal")
    if heal:
        healed = "; ".join(drift_line(item) for item in heal.get("drift") or [])
        print(f"Last self-heal: {heal.get('at')}: {healed}")
