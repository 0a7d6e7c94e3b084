"""``factoryctl runs create|list|get|followup|cancel|logs|watch``: the Run API over HTTP (the client).

``watch`` and ``logs --follow`` read the run's event stream (docs/events.md) until the run ends.

Client, exit codes and error output come from :mod:`factoryctl.commands._http`, shared with every
HTTP verb (``docs/cli.md``). ``--format json`` prints the API's JSON unchanged (stable: it is the
documented wire format).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from factoryctl.commands._http import UsageError, common_options, handler, skill_config
from store.rules.vocabulary import RUN_SOURCES, RUN_STATES

if TYPE_CHECKING:  # the client (httpx) is imported when a verb runs, not for --help
    from factoryctl.client import FactoryClient, RawResponse, RunStreamEvent


def register(sub: Any) -> None:
    parser = sub.add_parser("runs", help="create, list, inspect, follow up and cancel runs (HTTP API)")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    common = common_options()

    create = verbs.add_parser("create", parents=[common], help="start a run")
    create.add_argument("--prompt", help="the prompt ('-' reads stdin); optional with --skill")
    create.add_argument("--title")
    create.add_argument("--name", help="config.name (a label to group and filter runs)")
    create.add_argument("--model", help="config.model_id")
    create.add_argument(
        "--skill",
        action="append",
        default=[],
        help="config.skill_spec: owner/repo:skill or owner/repo:path/SKILL.md (repeat: config.skills)",
    )
    create.add_argument(
        "--mcp", action="append", default=[], metavar="NAME=JSON", help="an MCP server (repeatable)"
    )
    create.add_argument("--environment", help="config.environment_id")
    create.add_argument(
        "--host", help="config.worker_host (a self-hosted worker ID; 'warp' = service-hosted)"
    )
    create.add_argument(
        "--attach", action="append", default=[], metavar="FILE", help="attach a file (repeatable)"
    )
    create.add_argument("--metadata", action="append", default=[], metavar="KEY=VALUE", help="repeatable")
    create.set_defaults(handler=handler(_create))

    lst = verbs.add_parser("list", parents=[common], help="list runs, newest-updated first")
    lst.add_argument(
        "--state", action="append", default=[], type=str.upper, choices=RUN_STATES, help="repeatable"
    )
    lst.add_argument("--name")
    lst.add_argument("--model")
    lst.add_argument("--creator", help="creator uid (an API key id)")
    lst.add_argument("--source", type=str.upper, choices=RUN_SOURCES)
    lst.add_argument("--created-after", metavar="RFC3339")
    lst.add_argument("--created-before", metavar="RFC3339")
    lst.add_argument("--updated-after", metavar="RFC3339")
    lst.add_argument("--factory", metavar="FACTORY", help="runs of this factory (name or UID)")
    lst.add_argument(
        "--automation", metavar="AUTOMATION", help="runs of this automation (UID; a name with --factory)"
    )
    lst.add_argument("--schedule-id", metavar="SCHEDULE", help="runs a scheduled agent started (name or ID)")
    lst.add_argument("-q", "--query", help="substring of title or prompt")
    lst.add_argument("--sort-by", choices=("updated_at", "created_at", "title"))
    lst.add_argument("--sort-order", choices=("desc", "asc"))
    lst.add_argument("--limit", type=int, default=20, help="page size 1-500 (default 20)")
    lst.add_argument("--cursor")
    lst.add_argument("--all", action="store_true", help="follow next_cursor through every page")
    lst.set_defaults(handler=handler(_list))

    get = verbs.add_parser("get", parents=[common], help="show one run")
    get.add_argument("run_id", metavar="RUN_ID")
    get.set_defaults(handler=handler(_get))

    fol = verbs.add_parser("followup", parents=[common], help="send a follow-up message to a run")
    fol.add_argument("run_id", metavar="RUN_ID")
    fol.add_argument("--message", required=True, help="the message ('-' reads stdin)")
    fol.add_argument("--mode")
    fol.set_defaults(handler=handler(_followup))

    cancel = verbs.add_parser("cancel", parents=[common], help="cancel a run")
    cancel.add_argument("run_id", metavar="RUN_ID")
    cancel.set_defaults(handler=handler(_cancel))

    logs = verbs.add_parser("logs", parents=[common], help="print a run's log lines")
    logs.add_argument("run_id", metavar="RUN_ID")
    logs.add_argument("--after", type=int, default=0, help="only lines after this id")
    logs.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep printing new lines until the run ends (event stream)",
    )
    logs.set_defaults(handler=handler(_logs))

    watch = verbs.add_parser(
        "watch",
        parents=[common],
        help="print state changes and log lines until the run ends (exit 0: SUCCEEDED)",
    )
    watch.add_argument("run_id", metavar="RUN_ID")
    watch.set_defaults(handler=handler(_watch))


def wire(raw: RawResponse[Any]) -> Any:
    """The API's JSON exactly as sent (``--format json`` prints it unchanged)."""
    return raw.http_response.json()


def _emit(args: argparse.Namespace, data: Any, text: str) -> None:
    print(json.dumps(data, indent=2) if args.format == "json" else text)


def _read_arg(value: str) -> str:
    return sys.stdin.read() if value == "-" else value


def _pairs(items: list[str], flag: str) -> list[tuple[str, str]]:
    out = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UsageError(f"{flag} expects NAME=VALUE, got {item!r}")
        out.append((name, value))
    return out


def create_request(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments of ``runs.create`` for the ``runs create`` flags (files are read here)."""
    config: dict[str, Any] = {}
    for flag, key in (
        ("name", "name"),
        ("model", "model_id"),
        ("environment", "environment_id"),
        ("host", "worker_host"),
    ):
        if getattr(args, flag):
            config[key] = getattr(args, flag)
    config.update(skill_config(args.skill))
    servers: dict[str, Any] = {}
    for name, raw in _pairs(args.mcp, "--mcp"):
        try:
            servers[name] = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--mcp {name}: not valid JSON ({exc})") from None
    if servers:
        config["mcp_servers"] = servers
    from factoryctl.client import Attachment

    attachments = []
    for name in args.attach:
        try:
            attachments.append(Attachment.from_path(Path(name)))
        except OSError as exc:
            raise UsageError(f"--attach {name}: {exc.strerror}") from None
    prompt = _read_arg(args.prompt) if args.prompt is not None else None
    if prompt is None and not args.skill:
        raise UsageError("give --prompt (or --skill)")
    return {
        "prompt": prompt,
        "title": args.title or None,
        "config": config or None,
        "metadata": dict(_pairs(args.metadata, "--metadata")) or None,
        "attachments": attachments,
    }


def _create(client: FactoryClient, args: argparse.Namespace) -> None:
    result = wire(client.with_raw_response.runs.create(**create_request(args)))
    _emit(args, result, f"{result['run_id']}  {result['state']}")


def _list_filters(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "limit": args.limit,
        "state": args.state,
        "name": args.name,
        "model_id": args.model,
        "creator": args.creator,
        "source": args.source,
        "created_after": args.created_after,
        "created_before": args.created_before,
        "updated_after": args.updated_after,
        "factory_uid": args.factory,
        "automation_id": args.automation,
        "schedule_id": args.schedule_id,
        "q": args.query,
        "sort_by": args.sort_by,
        "sort_order": args.sort_order,
    }


def resolve_filters(client: FactoryClient, args: argparse.Namespace) -> None:
    """``--factory``, ``--automation`` (within ``--factory``) and ``--schedule-id`` take names too
    (:mod:`factoryctl.client.names`); a name nothing has is a usage error, as a filter on it would
    list nothing without saying why."""
    from factoryctl.client import names

    if args.factory:
        args.factory = names.factory_uid(client, args.factory, must_exist=True)
        if args.automation:
            args.automation = names.automation_uid(client, args.factory, args.automation, must_exist=True)
    if args.schedule_id:
        args.schedule_id = names.schedule_id(client, args.schedule_id, must_exist=True)


def _list(client: FactoryClient, args: argparse.Namespace) -> None:
    resolve_filters(client, args)
    runs: list[dict[str, Any]] = []
    cursor = args.cursor
    while True:
        page = wire(client.with_raw_response.runs.list(cursor=cursor, **_list_filters(args)))
        runs += page["runs"]
        cursor = page["page_info"]["next_cursor"]
        if not args.all or not cursor:
            break
    if args.format == "json":
        info = {"has_next_page": bool(cursor), "next_cursor": cursor}
        print(json.dumps({"runs": runs, "page_info": info}, indent=2))
        return
    if not runs:
        print("no runs", file=sys.stderr)
    else:
        print(f"{'RUN ID':<30} {'STATE':<10} {'UPDATED':<24} {'SOURCE':<15} TITLE")
    for run in runs:
        stamp = run["updated_at"]
        print(f"{run['run_id']:<30} {run['state']:<10} {stamp:<24} {run['source']:<15} {run['title']}")
    if cursor:
        print(f"more runs: --cursor {cursor}", file=sys.stderr)


def _run_text(run: dict[str, Any]) -> str:
    lines = []
    for key in (
        "run_id",
        "title",
        "state",
        "source",
        "created_at",
        "updated_at",
        "started_at",
        "finished_at",
        "worker_host",
        "factory_uid",
        "automation_id",
        "webhook_uid",
        "delivery_id",
        "session_link",
    ):
        if run.get(key) is not None:
            lines.append(f"{key + ':':<15} {run[key]}")
    creator = run.get("creator") or {}
    who = f"{creator.get('display_name') or ''} ({creator.get('type')} {creator.get('uid')})"
    lines.append(f"{'creator:':<15} {who}")
    if run.get("cancel_requested"):
        lines.append(f"{'cancel:':<15} requested")
    status = run.get("status_message")
    if status:
        code = f" [{status['error_code']}]" if status.get("error_code") else ""
        lines.append(f"{'status:':<15} {status['message']}{code}")
    if run.get("agent_config"):
        lines.append(f"{'config:':<15} {json.dumps(run['agent_config'], sort_keys=True)}")
    if run.get("metadata"):
        lines.append(f"{'metadata:':<15} {json.dumps(run['metadata'], sort_keys=True)}")
    if run.get("attachments"):
        lines.append(f"{'attachments:':<15} {', '.join(run['attachments'])}")
    lines.append("prompt:")
    lines += ["  " + line for line in str(run.get("prompt", "")).splitlines()]
    return "\n".join(lines)


def _get(client: FactoryClient, args: argparse.Namespace) -> None:
    run = wire(client.with_raw_response.runs.get(args.run_id))
    _emit(args, run, _run_text(run))


def _followup(client: FactoryClient, args: argparse.Namespace) -> None:
    raw = client.with_raw_response.runs.followup(args.run_id, _read_arg(args.message), mode=args.mode)
    result = wire(raw)
    _emit(args, result, f"{result['followup_id']}  {result['outcome']}")


def _cancel(client: FactoryClient, args: argparse.Namespace) -> None:
    run_id = client.runs.cancel(args.run_id)
    if args.format == "json":
        print(json.dumps(run_id))
        return
    state = client.runs.get(run_id).state
    done = "cancelled" if state == "CANCELLED" else f"cancel requested (still {state})"
    print(f"{run_id}  {done}")


def _logs(client: FactoryClient, args: argparse.Namespace) -> None:
    if args.follow:
        _follow_logs(client, args)
        return
    after, lines = args.after, []
    while True:
        page = wire(client.with_raw_response.runs.logs(args.run_id, after=after, limit=1000))
        lines += page["logs"]
        after = page["next_after"]
        if not page["has_more"]:
            break
    if args.format == "json":
        print(json.dumps({"logs": lines, "next_after": after}, indent=2))
        return
    for line in lines:
        print(line["text"], file=sys.stderr if line["stream"] == "stderr" else sys.stdout)


def state_text(event: RunStreamEvent) -> str:
    """A ``state`` event as ``[STATE] (cancel requested) message`` (``runs watch`` and ``events``)."""
    message = (event.data.get("status_message") or {}).get("message")
    pending = " (cancel requested)" if event.data.get("cancel_requested") else ""
    return f"[{event.state}]{pending}" + (f" {message}" if message else "")


def truncated_text(event: RunStreamEvent) -> str:
    """A ``truncated`` event (``runs logs --follow`` and ``events``)."""
    return f"[event log truncated after {event.data.get('limit')} events]"


def _print(event: RunStreamEvent, as_json: bool) -> None:
    """A ``log`` event's text on the stream it was written to (stdout or stderr), or its JSON on stdout."""
    if as_json:
        print(json.dumps(event.raw), flush=True)
    else:
        stream = sys.stderr if event.data.get("stream") == "stderr" else sys.stdout
        print(event.data.get("text", ""), file=stream, flush=True)


def _follow_logs(client: FactoryClient, args: argparse.Namespace) -> None:
    """Every log line (replayed from the event log, then live) until the run ends; ``--after`` does not
    apply (event ids are not log line ids). ``--format json``: one event per line."""
    for event in client.runs.events(args.run_id):
        if event.kind == "log":
            _print(event, args.format == "json")
        elif event.kind == "truncated":
            print(truncated_text(event), file=sys.stderr, flush=True)


def _watch(client: FactoryClient, args: argparse.Namespace) -> int:
    """State changes and log lines until the terminal state: exit 0 for SUCCEEDED, 1 otherwise."""
    final: str | None = None
    as_json = args.format == "json"
    for event in client.runs.events(args.run_id):
        if as_json or event.kind == "log":
            _print(event, as_json)
        elif event.kind == "state":
            print(state_text(event), file=sys.stderr, flush=True)
        elif event.kind == "followup":
            print(f"[follow-up {event.data.get('outcome')}]", file=sys.stderr, flush=True)
        if event.terminal:
            final = event.state
    if final is None:  # the stream ended without a terminal event (a run from before the event log)
        final = client.runs.get(args.run_id).state
    return 0 if final == "SUCCEEDED" else 1
