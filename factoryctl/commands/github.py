"""``factoryctl github connect|show|disconnect``: the team's GitHub App connection over the HTTP API
(docs/management.md, "GitHub App connection").

Built on the typed client; client settings, exit codes and error output come from
:mod:`factoryctl.commands._http` (docs/cli.md). ``--format json`` prints the API's JSON object unchanged
(``disconnect`` prints ``{"uid", "deleted": true}``); text output is ``key: value`` lines, the URL to
paste into the App's webhook settings among them.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from factoryctl.commands._http import common_options, handler
from factoryctl.commands._output import fields, print_json

if TYPE_CHECKING:  # the client (httpx) is imported when a verb runs, not for --help
    from factoryctl.client import FactoryClient
    from factoryctl.client.github_resources import GitHubConnection

HELP = "connect, show and disconnect the team's GitHub App (HTTP API)"


def register(sub: Any) -> None:  # argparse subparsers
    common = common_options()
    github = sub.add_parser("github", help=HELP)
    verbs = github.add_subparsers(dest="verb", metavar="VERB", required=True)
    connect = verbs.add_parser("connect", parents=[common], help="connect the App; prints its webhook URL")
    connect.add_argument(
        "--secret-name", required=True, metavar="NAME", help="team secret holding the App's webhook secret"
    )
    connect.set_defaults(handler=handler(_connect))
    show = verbs.add_parser("show", parents=[common], help="show the connection and its webhook URL")
    show.set_defaults(handler=handler(_show))
    disconnect = verbs.add_parser("disconnect", parents=[common], help="remove it (deliveries then 404)")
    disconnect.set_defaults(handler=handler(_disconnect))


def _print(connection: GitHubConnection, args: argparse.Namespace) -> None:
    if args.format == "json":
        print_json(connection.raw)
        return
    created = connection.raw.get("created_at")
    fields(
        [
            ("uid", connection.uid),
            ("webhook URL", connection.url),
            ("secret name", connection.secret_name),
            ("created", created if isinstance(created, str) else ""),
        ]
    )


def _connect(client: FactoryClient, args: argparse.Namespace) -> None:
    _print(client.github.connect(args.secret_name), args)


def _show(client: FactoryClient, args: argparse.Namespace) -> None:
    _print(client.github.get(), args)


def _disconnect(client: FactoryClient, args: argparse.Namespace) -> None:
    uid = client.github.get().uid
    client.github.disconnect()
    if args.format == "json":
        print_json({"uid": uid, "deleted": True})
    else:
        print(f"disconnected GitHub App {uid}")
