"""``factoryctl schedules list|get|create|pause|resume|run-now|delete``: scheduled agents over HTTP.

Client, exit codes and error output come from :mod:`factoryctl.commands._http`, shared with every HTTP
verb (``docs/cli.md``); a definition-managed schedule answers 409 to pause, resume and delete, and that
problem (naming the file to edit) is printed like any refusal, exit 1.

A schedule is named by its ID (``sch_...``) or by its name when exactly one schedule has it: names are
what people read in ``list`` and in ``schedules/<name>.yaml``, but API-created schedules may share
one, and so may definitions of two factories: :mod:`factoryctl.client.names` decides, as for every kind
(a name several schedules share is a usage error, exit 2, listing their IDs).

``--format json`` prints the API's JSON unchanged (``list``: ``{"schedules": [...]}``; ``run-now``: the
queued run ``{"run_id", "task_id", "state", "at_capacity"}``; ``delete``: ``{"success": true}``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from factoryctl.commands._http import UsageError, common_options, handler, skill_config
from factoryctl.commands._output import fields, print_json, table

if TYPE_CHECKING:  # the client (httpx) is imported when a verb runs, not for --help
    from factoryctl.client import FactoryClient, RawResponse, ScheduledAgent

TABLE_HEADERS = ("NAME", "ID", "CRON", "TZ", "ENABLED", "NEXT RUN", "LAST RUN", "MANAGED BY")


def register(sub: Any) -> None:  # argparse subparsers
    parser = sub.add_parser("schedules", help="list, pause, resume and run scheduled agents now (HTTP API)")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    common = common_options()
    one = argparse.ArgumentParser(add_help=False, parents=[common])
    one.add_argument("schedule", metavar="SCHEDULE", help="a schedule ID, or a name only one schedule has")

    lst = verbs.add_parser("list", parents=[common], help="every schedule, with its next and last run")
    lst.set_defaults(handler=handler(_list))
    create = verbs.add_parser("create", parents=[common], help="create a schedule (API-managed)")
    create.add_argument("--name", required=True, help="the schedule's name")
    create.add_argument("--cron", required=True, metavar="EXPR", help="5-field cron expression")
    create.add_argument("--timezone", metavar="TZ", help="IANA time zone of the cron times (default UTC)")
    create.add_argument("--prompt", help="the prompt of each run ('-' reads stdin); optional with --skill")
    create.add_argument("--model", help="agent_config.model_id")
    create.add_argument(
        "--skill",
        action="append",
        default=[],
        help="agent_config.skill_spec: owner/repo:skill or a SKILL.md path (repeat: agent_config.skills)",
    )
    create.add_argument("--environment", help="agent_config.environment_id")
    create.add_argument("--host", help="agent_config.worker_host (a self-hosted worker ID)")
    create.add_argument("--metadata", action="append", default=[], metavar="KEY=VALUE", help="repeatable")
    create.add_argument("--disabled", action="store_true", help="create it paused")
    create.set_defaults(handler=handler(_create))
    for verb, action, text in (
        ("get", _get, "show one schedule"),
        ("pause", _pause, "stop firing until resumed"),
        ("resume", _resume, "fire again from now on (missed times do not fire)"),
        ("run-now", _run_now, "start the run a fire would start, now; prints its run ID"),
        ("delete", _delete, "delete an API-created schedule"),
    ):
        verbs.add_parser(verb, parents=[one], help=text).set_defaults(handler=handler(action))


# --- output ----------------------------------------------------------------------------------------


def wire(raw: RawResponse[Any]) -> Any:
    """The API's JSON exactly as sent."""
    return raw.http_response.json()


def _stamp(value: object) -> str:
    """A timestamp as the server wrote it (RFC 3339), or ``-``: a table cell is never empty, so
    ``awk``/``cut`` see the same number of columns on every row."""
    return value if isinstance(value, str) and value else "-"


def _history(item: ScheduledAgent) -> dict[str, Any]:
    history = item.raw.get("history")
    return history if isinstance(history, dict) else {}


def table_rows(items: list[ScheduledAgent]) -> list[list[str]]:
    """One row per schedule under :data:`TABLE_HEADERS`."""
    return [
        [
            s.name,
            s.id,
            s.cron_schedule,
            s.timezone,
            "yes" if s.enabled else "no",
            _stamp(_history(s).get("next_run")),
            _stamp(_history(s).get("last_ran")),
            s.managed_by or "-",
        ]
        for s in items
    ]


def schedule_fields(item: ScheduledAgent) -> list[tuple[str, object]]:
    """``get``'s ``key: value`` lines (empty values are left out)."""
    creator = item.created_by
    who = f"{creator.display_name or ''} ({creator.type} {creator.uid})".strip() if creator else None
    return [
        ("id", item.id),
        ("name", item.name),
        ("cron", item.cron_schedule),
        ("timezone", item.timezone),
        ("enabled", "yes" if item.enabled else "no (paused)"),
        ("next run", _stamp(_history(item).get("next_run"))),
        ("last run", _stamp(_history(item).get("last_ran"))),
        ("last spawn error", item.last_spawn_error),
        ("managed by", item.managed_by),
        ("factory", item.factory_uid),
        ("definition", item.definition_path),
        ("automation", item.automation),
        ("created by", who),
        ("created", _stamp(item.raw.get("created_at"))),
        ("updated", _stamp(item.raw.get("updated_at"))),
        ("metadata", json.dumps(item.metadata, sort_keys=True) if item.metadata else None),
        ("config", json.dumps(item.agent_config, sort_keys=True) if item.agent_config else None),
    ]


def _show(item: ScheduledAgent) -> None:
    fields(schedule_fields(item))
    if item.prompt:
        print("prompt:")
        for line in item.prompt.splitlines():
            print(f"  {line}")


# --- addressing ------------------------------------------------------------------------------------


def resolve(client: FactoryClient, ref: str) -> str:
    """The schedule ID ``ref`` stands for (:func:`factoryctl.client.names.schedule_id`)."""
    from factoryctl.client.names import schedule_id

    return schedule_id(client, ref)


# --- verbs -----------------------------------------------------------------------------------------


def _list(client: FactoryClient, args: argparse.Namespace) -> None:
    raw = client.with_raw_response.schedules.list()
    if args.format == "json":
        print_json(wire(raw))
        return
    items = raw.parse()
    if not items:
        print("no schedules", file=sys.stderr)
        return
    table(TABLE_HEADERS, table_rows(items))


def _get(client: FactoryClient, args: argparse.Namespace) -> None:
    item = client.schedules.get(resolve(client, args.schedule))
    if args.format == "json":
        print_json(item.raw)
    else:
        _show(item)


def _state(item: ScheduledAgent) -> str:
    if not item.enabled:
        return f"{item.id} ({item.name}) paused"
    return f"{item.id} ({item.name}) enabled, next run {_stamp(_history(item).get('next_run'))}"


def _print_state(args: argparse.Namespace, item: ScheduledAgent) -> None:
    if args.format == "json":
        print_json(item.raw)
    else:
        print(_state(item))


def _pause(client: FactoryClient, args: argparse.Namespace) -> None:
    _print_state(args, client.schedules.pause(resolve(client, args.schedule)))


def _resume(client: FactoryClient, args: argparse.Namespace) -> None:
    _print_state(args, client.schedules.resume(resolve(client, args.schedule)))


def _run_now(client: FactoryClient, args: argparse.Namespace) -> None:
    raw = client.with_raw_response.schedules.run_now(resolve(client, args.schedule))
    if args.format == "json":
        print_json(wire(raw))
        return
    started = raw.parse()
    print(started.run_id)  # alone on stdout: RUN=$(factoryctl schedules run-now nightly)
    if started.at_capacity:
        print("note: the workers are at capacity; the run waits in the queue", file=sys.stderr)


def _delete(client: FactoryClient, args: argparse.Namespace) -> None:
    schedule_id = resolve(client, args.schedule)
    raw = client.with_raw_response.schedules.delete(schedule_id)
    if args.format == "json":
        print_json(wire(raw))
    else:
        print(f"deleted schedule {schedule_id}")


def create_request(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments of ``schedules.create`` for the ``schedules create`` flags."""
    config = {
        key: getattr(args, flag)
        for flag, key in (
            ("model", "model_id"),
            ("environment", "environment_id"),
            ("host", "worker_host"),
        )
        if getattr(args, flag)
    }
    config.update(skill_config(args.skill))
    prompt = sys.stdin.read() if args.prompt == "-" else args.prompt
    if not prompt and not args.skill:
        raise UsageError("give --prompt (or --skill)")
    metadata = {}
    for item in args.metadata:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--metadata expects KEY=VALUE, got {item!r}")
        metadata[key] = value
    return {
        "name": args.name,
        "cron_schedule": args.cron,
        "prompt": prompt or None,
        "agent_config": config or None,
        "enabled": False if args.disabled else None,
        "metadata": metadata or None,
        "timezone": args.timezone,
    }


def _create(client: FactoryClient, args: argparse.Namespace) -> None:
    item = client.schedules.create(**create_request(args))
    if args.format == "json":
        print_json(item.raw)
    else:
        _show(item)
