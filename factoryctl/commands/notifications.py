"""``factoryctl notifications ...``: outbound notification endpoints, their messages and resends over HTTP.

Built on the typed client; client settings, exit codes and error output come from
:mod:`factoryctl.commands._http`, shared with every HTTP verb (docs/cli.md, "notifications").

- ``--factory F`` on every verb: a factory ID (``fa_...``, used as is) or its name (looked up with one
  ``GET /factory?search=``; a name no factory has is sent as is, so the server's 404 answers).
- ``ENDPOINT`` is an endpoint's ID or its name: the server resolves either.
- ``attempts`` and ``resend`` take a message ID; with ``--endpoint`` that is one call, without it the
  factory's endpoints (at most 20) are asked in turn until one has the message.

``--format json`` prints the API's JSON unchanged (``list``: ``{"endpoints": [...], "page_info"}``,
``messages``: ``{"messages": [...]}`` with every page up to ``--limit``, ``attempts``: the message with its
``attempt_log``, ``delete``: ``{"id", "deleted": true}``). Text output is a table (rich on a terminal,
plain aligned columns otherwise) or ``key: value`` lines; empty table cells are ``-``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from typing import TYPE_CHECKING, Any

from factoryctl.commands._http import EXIT_REFUSED, UsageError, common_options, handler
from factoryctl.commands._output import fields, print_json, table

if TYPE_CHECKING:  # the client (httpx) is imported when a verb runs, not for --help
    from factoryctl.client import FactoryClient, NotificationEndpoint, NotificationMessage

STATUSES = ("pending", "delivered", "failed")
MESSAGE_HEADERS = (
    "MESSAGE ID",
    "STATUS",
    "EVENT",
    "RUN",
    "ATTEMPTS",
    "LAST RESULT",
    "NEXT ATTEMPT",
    "CREATED",
)


def register(sub: Any) -> None:  # argparse subparsers
    parser = sub.add_parser(
        "notifications", help="endpoints, messages and resends of outbound notifications (HTTP API)"
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    common = common_options()
    common.add_argument("--factory", required=True, metavar="F", help="the factory's ID or name")
    one = argparse.ArgumentParser(add_help=False, parents=[common])
    one.add_argument("endpoint", metavar="ENDPOINT", help="an endpoint's ID or name")
    msg = argparse.ArgumentParser(add_help=False, parents=[common])
    msg.add_argument("message_id", metavar="MSG_ID")
    msg.add_argument("--endpoint", metavar="E", help="its endpoint (default: look through the factory's)")

    verbs.add_parser("list", parents=[common], help="the factory's endpoints").set_defaults(
        handler=handler(_list)
    )
    create = verbs.add_parser("create", parents=[common], help="create an endpoint (admin)")
    create.add_argument("--name", required=True, help="lowercase letters, digits and '-'")
    create.add_argument("--url", required=True, help="https:// (http:// only to a loopback host)")
    create.add_argument(
        "--secret-name", required=True, metavar="S", help="a webhook-scoped team secret holding whsec_..."
    )
    create.add_argument(
        "--event", action="append", required=True, metavar="E", help="a run state, run.<state> or run.*"
    )
    create.add_argument("--filter-json", metavar="JSON", help='e.g. {"factories": ["*"]}')
    create.add_argument("--description", metavar="TEXT")
    create.add_argument("--disabled", action="store_true", help="create it disabled")
    create.set_defaults(handler=handler(_create))
    for verb, action, text in (
        ("get", _get, "show one endpoint"),
        ("enable", _enable, "send to it again (admin)"),
        ("disable", _disable, "send nothing; its pending messages wait (admin)"),
        ("delete", _delete, "delete it with its messages (admin)"),
    ):
        verbs.add_parser(verb, parents=[one], help=text).set_defaults(handler=handler(action))
    messages = verbs.add_parser("messages", parents=[one], help="the endpoint's messages, newest first")
    messages.add_argument("--status", action="append", default=[], choices=STATUSES, help="repeatable")
    messages.add_argument("--run-id", metavar="RUN", help="only the messages about this run")
    messages.add_argument("--limit", type=int, default=50, metavar="N", help="show at most N (default 50)")
    messages.set_defaults(handler=handler(_messages))
    verbs.add_parser("attempts", parents=[msg], help="a message and its attempts").set_defaults(
        handler=handler(_attempts)
    )
    verbs.add_parser(
        "resend", parents=[msg], help="one more attempt of a delivered or failed message, now (admin)"
    ).set_defaults(handler=handler(_resend))


# --- output ----------------------------------------------------------------------------------------


def _cell(value: object) -> str:
    """A table cell: the server's text (timestamps as written, RFC 3339), ``-`` when empty."""
    return "-" if value is None or value == "" else str(value)


def endpoint_fields(e: NotificationEndpoint) -> list[tuple[str, object]]:
    failing = f"yes, since {_cell(e.raw.get('failing_since'))}" if e.failing else "no"
    return [
        ("id", e.id),
        ("name", e.name),
        ("url", e.url),
        ("events", ", ".join(e.events)),
        ("filter", json.dumps(e.filter, sort_keys=True) if e.filter else None),
        ("enabled", "yes" if e.enabled else "no"),
        ("description", e.description),
        ("secret name", e.secret_name),
        ("failing", failing),
        ("consecutive failures", e.consecutive_failures),
        ("last success", e.raw.get("last_success_at")),
        ("managed by", e.managed_by),
        ("definition", e.definition_path),
        ("created", e.raw.get("created_at")),
        ("updated", e.raw.get("updated_at")),
    ]


def message_row(m: NotificationMessage) -> list[str]:
    """One row under :data:`MESSAGE_HEADERS`; the last result is the answer's status, else the error."""
    return [
        m.id,
        m.status,
        _cell(m.event_type),
        _cell(m.run_id),
        str(m.attempts),
        _cell(m.last_response_status or m.last_error),
        _cell(m.raw.get("next_attempt_at") if m.status == "pending" else None),
        _cell(m.raw.get("created_at")),
    ]


# --- addressing ------------------------------------------------------------------------------------


def factory_uid(client: FactoryClient, ref: str) -> str:
    """The factory ID ``ref`` stands for (:mod:`factoryctl.client.names`; a name no factory has is sent
    as is)."""
    from factoryctl.client.names import factory_uid as lookup

    return lookup(client, ref)


def endpoint_of(client: FactoryClient, factory: str, args: argparse.Namespace) -> str | None:
    """The endpoint holding message ``args.message_id``: ``--endpoint``, else the first that has it."""
    from factoryctl.client import NotFoundError

    if args.endpoint:
        return str(args.endpoint)
    for endpoint in client.notifications.list(factory):
        try:
            client.notifications.message(factory, endpoint.id, args.message_id)
        except NotFoundError:
            continue
        return endpoint.id
    return None


def _not_found(args: argparse.Namespace) -> int:
    message = f"no notification endpoint of factory {args.factory} has message {args.message_id!r}"
    if args.format == "json":
        print_json({"error": message, "error_code": "resource_not_found"})
    print(f"error: {message} (resource_not_found)", file=sys.stderr)
    return EXIT_REFUSED


# --- verbs -----------------------------------------------------------------------------------------


def _list(client: FactoryClient, args: argparse.Namespace) -> None:
    raw = client.with_raw_response.notifications.list(factory_uid(client, args.factory))
    if args.format == "json":
        print_json(raw.http_response.json())
        return
    found = raw.parse()
    if not found:
        print("no notification endpoints", file=sys.stderr)
        return
    rows = [
        [
            e.name,
            e.id,
            "yes" if e.enabled else "no",
            ",".join(e.events),
            "yes" if e.failing else "no",
            _cell(e.managed_by),
            e.url,
        ]
        for e in found
    ]
    table(["NAME", "ID", "ENABLED", "EVENTS", "FAILING", "MANAGED BY", "URL"], rows)


def _filter(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--filter-json is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise UsageError('--filter-json must be a JSON object, e.g. {"factories": ["*"]}')
    return value


def _create(client: FactoryClient, args: argparse.Namespace) -> None:
    flt = _filter(args.filter_json)
    created = client.notifications.create(
        factory_uid(client, args.factory),
        args.name,
        url=args.url,
        secret_name=args.secret_name,
        events=args.event,
        filter=flt,
        enabled=False if args.disabled else None,
        description=args.description,
    )
    if args.format == "json":
        print_json(created.raw)
    else:
        fields(endpoint_fields(created))


def _get(client: FactoryClient, args: argparse.Namespace) -> None:
    found = client.notifications.get(factory_uid(client, args.factory), args.endpoint)
    if args.format == "json":
        print_json(found.raw)
    else:
        fields(endpoint_fields(found))


def _toggle(client: FactoryClient, args: argparse.Namespace, enabled: bool) -> None:
    factory = factory_uid(client, args.factory)
    changed = client.notifications.update(factory, args.endpoint, enabled=enabled)
    if args.format == "json":
        print_json(changed.raw)
    else:
        print(f"{changed.id} ({changed.name}) {'enabled' if enabled else 'disabled'}")


def _enable(client: FactoryClient, args: argparse.Namespace) -> None:
    _toggle(client, args, True)


def _disable(client: FactoryClient, args: argparse.Namespace) -> None:
    _toggle(client, args, False)


def _delete(client: FactoryClient, args: argparse.Namespace) -> None:
    client.notifications.delete(factory_uid(client, args.factory), args.endpoint)
    if args.format == "json":
        print_json({"id": args.endpoint, "deleted": True})
    else:
        print(f"deleted notification endpoint {args.endpoint}")


def _messages(client: FactoryClient, args: argparse.Namespace) -> None:
    if args.limit < 1:
        raise UsageError("--limit must be at least 1")
    pages = client.notifications.messages(
        factory_uid(client, args.factory),
        args.endpoint,
        status=args.status or None,
        run_id=args.run_id,
        limit=min(args.limit, 200),
    )
    found = list(itertools.islice(pages, args.limit))
    if args.format == "json":
        print_json({"messages": [m.raw for m in found]})
        return
    if not found:
        print("no messages", file=sys.stderr)
        return
    table(MESSAGE_HEADERS, [message_row(m) for m in found])


def _attempts(client: FactoryClient, args: argparse.Namespace) -> int | None:
    factory = factory_uid(client, args.factory)
    endpoint = endpoint_of(client, factory, args)
    if endpoint is None:
        return _not_found(args)
    detail = client.notifications.message(factory, endpoint, args.message_id)
    if args.format == "json":
        print_json(detail.raw)
        return None
    fields(
        [
            ("message id", detail.id),
            ("endpoint", detail.endpoint_id),
            ("status", detail.status),
            ("event", detail.event_type),
            ("run", detail.run_id),
            ("attempts", detail.attempts),
            ("next attempt", detail.raw.get("next_attempt_at") if detail.status == "pending" else None),
            ("delivered", detail.raw.get("delivered_at")),
            ("created", detail.raw.get("created_at")),
        ]
    )
    if not detail.attempt_log:
        print("no attempts yet", file=sys.stderr)
        return None
    rows = [
        [
            str(a.attempt),
            a.trigger,
            _cell(a.raw.get("started_at")),
            f"{a.duration_ms} ms" if a.duration_ms is not None else "-",
            a.outcome,
            _cell(a.response_status),
            _cell(a.error),
            _cell(a.raw.get("next_attempt_at")),
        ]
        for a in detail.attempt_log
    ]
    table(["ATTEMPT", "TRIGGER", "STARTED", "DURATION", "OUTCOME", "STATUS", "ERROR", "NEXT ATTEMPT"], rows)
    return None


def _resend(client: FactoryClient, args: argparse.Namespace) -> int | None:
    factory = factory_uid(client, args.factory)
    endpoint = endpoint_of(client, factory, args)
    if endpoint is None:
        return _not_found(args)
    queued = client.notifications.resend(factory, endpoint, args.message_id)
    if args.format == "json":
        print_json(queued.raw)
    else:
        print(f"{queued.id} queued: one more attempt now, with the same webhook-id")
    return None
