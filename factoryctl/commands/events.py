"""``factoryctl events``: follow the team's run events live (docs/events.md, "Team stream"; docs/cli.md).

One line per event on stdout until interrupted; Ctrl-C ends it with exit 0 and the cursor to resume from
(``--after``). The stream itself never ends: the typed client reconnects with ``Last-Event-ID`` when a
connection drops or a replica shuts down (:mod:`factoryctl.client.events`).

``--factory`` takes a UID (``fa_...``, sent as is) or a factory's name, looked up among the team's factories
(names are unique in a team); a name no factory has is a usage error (exit 2): a filter that matches nothing
would wait forever in silence. Client, exit codes and error output come from
:mod:`factoryctl.commands._http`. ``--format json`` prints each event's JSON as the server sent it, one per
line (``cursor`` included).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from factoryctl.commands._http import UsageError, common_options, handler
from factoryctl.commands.runs import state_text, truncated_text
from store.rules.vocabulary import RUN_STATES

if TYPE_CHECKING:  # the client (httpx) is imported when the verb runs, not for --help
    from factoryctl.client import FactoryClient, TeamStreamEvent

HELP = "follow the team's run events live (HTTP API)"


def register(sub: Any) -> None:  # argparse subparsers
    parser = sub.add_parser("events", parents=[common_options()], help=HELP)
    parser.add_argument(
        "--factory",
        action="append",
        default=[],
        metavar="NAME_OR_UID",
        help="only events of this factory's runs (repeatable)",
    )
    parser.add_argument(
        "--state",
        action="append",
        default=[],
        type=str.upper,
        choices=RUN_STATES,
        help="only state changes into this state (repeatable; follow-ups and log lines are left out)",
    )
    parser.add_argument("--logs", action="store_true", help="log lines too (left out by default)")
    parser.add_argument("--after", metavar="CURSOR", help="resume after this event's cursor (default: now)")
    parser.set_defaults(handler=handler(_follow))


def resolve_factory(client: FactoryClient, ref: str) -> str:
    """The UID of the factory ``ref`` names; a name no factory has is a usage error (module docstring)."""
    from factoryctl.client.names import factory_uid

    return factory_uid(client, ref, must_exist=True)


def line(event: TeamStreamEvent) -> str:
    """One event as one line: time, run, then what happened (a log text's line breaks escaped)."""
    data, head = event.data, f"{event.raw.get('created_at', '-')}  {event.run_id}"
    if event.kind == "state":
        return f"{head}  {state_text(event)}"
    if event.kind == "followup":
        return f"{head}  [follow-up {data.get('outcome')}] {data.get('message', '')}".rstrip()
    if event.kind == "log":
        text = str(data.get("text", "")).replace("\\", "\\\\").replace("\n", "\\n")
        return f"{head}  {data.get('stream')}: {text}"
    if event.kind == "truncated":
        return f"{head}  {truncated_text(event)}"
    return f"{head}  [{event.kind}] {json.dumps(data, sort_keys=True)}"


@contextlib.contextmanager
def _ctrl_c_after() -> Iterator[None]:
    """Hold a Ctrl-C that comes inside the block until the block is done. Ctrl-C right after a line appeared
    used to land inside ``print`` before the cursor moved: the resume cursor was one event behind, and the
    resumed stream showed that event again."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread gets signals
        yield
        return
    held: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: held.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
    if held:
        raise KeyboardInterrupt


def _follow(client: FactoryClient, args: argparse.Namespace) -> int:
    if args.state and args.logs:
        raise UsageError("--state selects state changes only; it cannot be combined with --logs")
    factories = [resolve_factory(client, ref) for ref in args.factory]
    stream = client.events.stream(factory_uid=factories, state=args.state, logs=args.logs, after=args.after)
    last = args.after
    try:
        for event in stream:
            with _ctrl_c_after():  # a line printed is a line the resume cursor counts
                print(json.dumps(event.raw) if args.format == "json" else line(event), flush=True)
                last = event.cursor or last
    except KeyboardInterrupt:
        resume = f"; resume with --after {last}" if last else ""
        print(f"stopped{resume}", file=sys.stderr)
    return 0
