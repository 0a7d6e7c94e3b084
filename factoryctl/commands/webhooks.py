"""``factoryctl webhooks|deliveries|automations ...``: webhook management over the HTTP API.

Built on the typed client (:mod:`factoryctl.client`). Client settings, exit codes and error output
come from :mod:`factoryctl.commands._http`, shared with every HTTP verb (``docs/cli.md``).

Output: ``--format json`` prints the API's JSON object unchanged (lists as ``{"webhooks": [...]}`` /
``{"deliveries": [...]}`` with every page fetched; ``delete`` prints ``{"uid", "deleted": true}``).
``deliveries replay`` prints one summary line, then a table of the runs it started (docs/cli.md).
Text output is a table drawn with rich when stdout is a terminal (colour unless ``NO_COLOR``), else
plain aligned columns that scripts can cut. A secret the service shows (``create``,
``rotate-secret``) is printed alone on the last line of stdout, so ``| tail -n 1`` captures it; a
secret the caller supplied (``--secret-from-stdin``) is never echoed in text output.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from factoryctl.commands._http import Handler, UsageError, common_options, handler
from factoryctl.commands._output import fields, print_json, table

if TYPE_CHECKING:  # the client (httpx) is imported when a verb runs, not for --help
    from factoryctl.client import Delivery, FactoryClient, FilterTestResult, Webhook, WebhookWithSecret

AUTH_MODES = ("token", "url_token", "signature")
FACTORY_HELP = "the factory's name or UID"


def register(sub: Any) -> None:  # argparse subparsers
    common = common_options()
    hook_args = argparse.ArgumentParser(add_help=False, parents=[common])
    hook_args.add_argument("factory_uid", metavar="FACTORY", help=FACTORY_HELP)
    hook_args.add_argument("webhook_uid", metavar="WEBHOOK", help="the webhook's name or UID")

    hooks = sub.add_parser("webhooks", help="create, list, enable/disable, rotate and delete webhooks")
    verbs = hooks.add_subparsers(dest="verb", metavar="VERB", required=True)
    create = verbs.add_parser("create", parents=[common], help="create a webhook; prints its secret once")
    create.add_argument("factory_uid", metavar="FACTORY", help=FACTORY_HELP)
    create.add_argument("--name", required=True, help="lowercase letters, digits and '-'")
    create.add_argument("--auth-mode", choices=AUTH_MODES, help="default token")
    create.add_argument(
        "--scheme", metavar="S", help="signature scheme (github, stripe, standard_webhooks...)"
    )
    create.add_argument(
        "--secret-name", metavar="NAME", help="team secret to use (default webhook-<name>-secret)"
    )
    create.add_argument(
        "--secret-from-stdin", action="store_true", help="read the provider's signing secret from stdin"
    )
    create.add_argument("--delivery-id-header", metavar="H", help="header holding the sender's delivery ID")
    create.set_defaults(handler=by_name(_create))
    lst = verbs.add_parser("list", parents=[common], help="list a factory's webhooks")
    lst.add_argument("factory_uid", metavar="FACTORY", help=FACTORY_HELP)
    lst.set_defaults(handler=by_name(_list))
    for verb, action, text in (
        ("get", _get, "show one webhook"),
        ("enable", _enable, "accept deliveries again"),
        ("disable", _disable, "answer 404 to senders until enabled"),
        ("rotate-secret", _rotate, "new secret, shown once (old one dead at once)"),
        ("delete", _delete, "delete (senders get 404 at once)"),
    ):
        verb_parser = verbs.add_parser(verb, parents=[hook_args], help=text)
        verb_parser.set_defaults(handler=by_name(action))
        if verb == "rotate-secret":
            verb_parser.add_argument(
                "--secret-from-stdin",
                action="store_true",
                help="read the provider's new signing secret from stdin",
            )

    deliveries = sub.add_parser("deliveries", help="a webhook's delivery log")
    dverbs = deliveries.add_subparsers(dest="verb", metavar="VERB", required=True)
    dlist = dverbs.add_parser("list", parents=[hook_args], help="newest first")
    dlist.add_argument(
        "--status", action="append", default=[], metavar="S", help="e.g. Accepted (repeatable)"
    )
    dlist.add_argument(
        "--outcome",
        choices=("runs", "no_runs"),
        default=None,
        help="runs: started at least one run; no_runs: accepted but started nothing",
    )
    dlist.add_argument("--limit", type=int, default=50, metavar="N", help="show at most N (default 50)")
    dlist.set_defaults(handler=by_name(_deliveries))
    dget = dverbs.add_parser("get", parents=[hook_args], help="one delivery, with its payload if accepted")
    dget.add_argument("delivery_id", metavar="DELIVERY_ID")
    dget.set_defaults(handler=by_name(_delivery))
    replay = dverbs.add_parser(
        "replay",
        parents=[hook_args],
        help="start the runs an Accepted delivery matches now (not de-duplicated)",
    )
    replay.add_argument("delivery_id", metavar="DELIVERY_ID")
    replay.add_argument(
        "--automation-id", metavar="AU", help="replay into this automation only (name or UID)"
    )
    replay.set_defaults(handler=by_name(_replay))

    autos = sub.add_parser("automations", help="test automation filters against stored deliveries")
    averbs = autos.add_subparsers(dest="verb", metavar="VERB", required=True)
    test = averbs.add_parser(
        "test-filter", parents=[common], help="would a stored delivery start a run of this automation?"
    )
    test.add_argument("factory_uid", metavar="FACTORY", help=FACTORY_HELP)
    test.add_argument("automation_uid", metavar="AUTOMATION", help="the automation's name or UID")
    test.add_argument("--delivery-id", required=True, metavar="ID")
    test.add_argument(
        "--webhook", metavar="WEBHOOK", help="the webhook that logged it, name or UID (when IDs repeat)"
    )
    test.set_defaults(handler=by_name(_test_filter))


# --- names ---------------------------------------------------------------------------------------


def resolve_names(client: FactoryClient, args: argparse.Namespace) -> None:
    """Every FACTORY, WEBHOOK and AUTOMATION argument becomes a UID (:mod:`factoryctl.client.names`)."""
    from factoryctl.client import names

    factory = args.factory_uid = names.factory_uid(client, args.factory_uid)
    if getattr(args, "webhook_uid", None):
        args.webhook_uid = names.webhook_uid(client, factory, args.webhook_uid)
    if getattr(args, "webhook", None):
        args.webhook = names.webhook_uid(client, factory, args.webhook)
    for attribute in ("automation_uid", "automation_id"):
        if getattr(args, attribute, None):
            setattr(args, attribute, names.automation_uid(client, factory, getattr(args, attribute)))


def by_name(action: Callable[[FactoryClient, argparse.Namespace], None]) -> Handler:
    """:func:`handler` for an action whose arguments may be names: the command's own input checks first
    (a usage error sends nothing, docs/cli.md "Exit codes"), then the names are resolved."""

    def resolved(client: FactoryClient, args: argparse.Namespace) -> None:
        check_input(args)
        resolve_names(client, args)
        action(client, args)

    return handler(resolved)


# --- output ----------------------------------------------------------------------------------------


def _stamp(model: Webhook | Delivery, key: str) -> str:
    """A timestamp exactly as the server wrote it (RFC 3339, UTC)."""
    value = model.raw.get(key)
    return value if isinstance(value, str) else ""


def _webhook_fields(hook: Webhook) -> list[tuple[str, object]]:
    configured = {True: "yes", False: "no (give the provider's secret with rotate-secret)", None: None}
    return [
        ("uid", hook.uid),
        ("name", hook.name),
        ("factory", hook.factory_uid),
        ("auth mode", hook.auth_mode),
        ("scheme", hook.signature_scheme),
        ("secret name", hook.secret_name),
        ("secret set", configured[hook.secret_configured]),
        ("delivery id header", hook.delivery_id_header),
        ("enabled", "yes" if hook.enabled else "no"),
        ("managed by", hook.managed_by),
        ("ingress URL", hook.ingress_url),
        ("created", _stamp(hook, "created_at")),
        ("updated", _stamp(hook, "updated_at")),
    ]


def _show_secret(hook: WebhookWithSecret, args: argparse.Namespace, what: str) -> None:
    if args.format == "json":
        print_json(hook.raw)
        return
    fields(_webhook_fields(hook))
    if hook.ingress_url_with_token:
        print(f"full ingress URL (contains the secret): {hook.ingress_url_with_token}")
    if hook.applies_on_next_apply:
        print("note: this definitions-managed webhook keeps its old secret until its definition next applies")
    if hook.secret is None:
        if hook.secret_configured is False:
            print("no secret yet: pipe the provider's signing secret to 'rotate-secret --secret-from-stdin'")
        else:
            print(f"uses the existing team secret {hook.secret_name!r} (value not shown)")
        return
    print(f"{what} (shown once; store it now):")
    print(hook.secret)


def check_input(args: argparse.Namespace) -> None:
    """Usage errors found before any call: ``--limit`` below 1; an empty ``--secret-from-stdin`` (the
    secret is read here, once, into ``args.given_secret``)."""
    if getattr(args, "limit", 1) < 1:
        raise UsageError("--limit must be at least 1")
    args.given_secret = _stdin_secret() if getattr(args, "secret_from_stdin", False) else None


def _stdin_secret() -> str:
    value = sys.stdin.read()
    value = value[:-1] if value.endswith("\n") else value
    value = value[:-1] if value.endswith("\r") else value
    if not value:
        raise UsageError("--secret-from-stdin: stdin was empty")
    return value


# --- webhooks --------------------------------------------------------------------------------------


def _create(client: FactoryClient, args: argparse.Namespace) -> None:
    given: str | None = args.given_secret
    hook = client.webhooks.create(
        args.factory_uid,
        args.name,
        auth_mode=args.auth_mode or ("signature" if args.scheme else None),
        signature_scheme=args.scheme,
        secret=given,
        secret_name=args.secret_name,
        delivery_id_header=args.delivery_id_header,
    )
    if given is not None and args.format == "text":  # the caller already holds the value: not echoed
        fields(_webhook_fields(hook))
        print("the provider's signing secret is in place (not shown)")
        return
    _show_secret(hook, args, "secret")


def _list(client: FactoryClient, args: argparse.Namespace) -> None:
    hooks = list(client.webhooks.iter(args.factory_uid, limit=100))
    if args.format == "json":
        print_json({"webhooks": [h.raw for h in hooks]})
        return
    if not hooks:
        print("no webhooks", file=sys.stderr)
        return
    rows = [
        [h.uid, h.name, h.signature_scheme or h.auth_mode, "yes" if h.enabled else "no", h.ingress_url or ""]
        for h in hooks
    ]
    table(["UID", "NAME", "AUTH", "ENABLED", "INGRESS URL"], rows)


def _get(client: FactoryClient, args: argparse.Namespace) -> None:
    hook = client.webhooks.get(args.factory_uid, args.webhook_uid)
    if args.format == "json":
        print_json(hook.raw)
    else:
        fields(_webhook_fields(hook))


def _toggle(client: FactoryClient, args: argparse.Namespace, enabled: bool) -> None:
    hook = client.webhooks.update(args.factory_uid, args.webhook_uid, enabled=enabled)
    if args.format == "json":
        print_json(hook.raw)
    else:
        print(f"{hook.uid} ({hook.name}) {'enabled' if enabled else 'disabled'}")


def _enable(client: FactoryClient, args: argparse.Namespace) -> None:
    _toggle(client, args, True)


def _disable(client: FactoryClient, args: argparse.Namespace) -> None:
    _toggle(client, args, False)


def _rotate(client: FactoryClient, args: argparse.Namespace) -> None:
    given: str | None = args.given_secret
    hook = client.webhooks.rotate_secret(args.factory_uid, args.webhook_uid, secret=given)
    if given is not None and args.format == "text":  # the caller already holds the value
        fields(_webhook_fields(hook))
        print("the provider's signing secret is in place (not shown)")
        return
    _show_secret(hook, args, "new secret; the old one no longer verifies")


def _delete(client: FactoryClient, args: argparse.Namespace) -> None:
    client.webhooks.delete(args.factory_uid, args.webhook_uid)
    if args.format == "json":
        print_json({"uid": args.webhook_uid, "deleted": True})
    else:
        print(f"deleted webhook {args.webhook_uid}")


# --- deliveries and filters ------------------------------------------------------------------------


def _deliveries(client: FactoryClient, args: argparse.Namespace) -> None:
    pages = client.deliveries.iter(
        args.factory_uid,
        args.webhook_uid,
        status=args.status or None,
        outcome=args.outcome,
        limit=min(args.limit, 200),
    )
    found: list[Delivery] = list(itertools.islice(pages, args.limit))
    if args.format == "json":
        print_json({"deliveries": [d.raw for d in found]})
        return
    if not found:
        print("no deliveries", file=sys.stderr)
        return
    rows = [
        [d.delivery_id, d.status, str(d.size or 0), _stamp(d, "received_at"), ",".join(d.run_ids)]
        for d in found
    ]
    table(["DELIVERY ID", "STATUS", "SIZE", "RECEIVED", "RUNS"], rows)


def _delivery(client: FactoryClient, args: argparse.Namespace) -> None:
    entry = client.deliveries.get(args.factory_uid, args.webhook_uid, args.delivery_id)
    if args.format == "json":
        print_json(entry.raw)
        return
    fields(
        [
            ("delivery id", entry.delivery_id),
            ("webhook", entry.webhook_uid),
            ("status", entry.status),
            ("size", entry.size),
            ("received", _stamp(entry, "received_at")),
            ("runs", ", ".join(entry.run_ids)),
            ("detail", entry.detail),
        ]
    )
    _decisions(entry.raw.get("decisions"))
    if "payload" in entry.raw:
        print("payload:")
        for line in json.dumps(entry.payload, indent=2, ensure_ascii=False).splitlines():
            print(f"  {line}")


def _decisions(decisions: object) -> None:
    """Why the delivery started what it did, one line per automation (docs/management.md, "Delivery log")."""
    if not isinstance(decisions, list):
        return  # not recorded: a rejected or duplicate entry, a GitHub App delivery, an older entry
    started = any(isinstance(d, dict) and d.get("run_id") for d in decisions)
    print("decisions:" + ("" if started else " started nothing"))
    if not decisions:
        print("  no automation has a webhook trigger that selects this webhook")
    for d in decisions:
        who = f"{d.get('automation_name')} ({d.get('automation_uid')})"
        if d.get("matched"):
            run = (
                f"run {d['run_id']} ({d.get('run_state')})" if d.get("run_id") else "its run no longer exists"
            )
            print(f"  matched      {who}: {run}")
        else:
            where = f"{d['failed_path']}: " if d.get("failed_path") else ""
            print(f"  not matched  {who}: {where}{d.get('reason')}")


def _replay(client: FactoryClient, args: argparse.Namespace) -> None:
    done = client.deliveries.replay(
        args.factory_uid, args.webhook_uid, args.delivery_id, automation_id=args.automation_id
    )
    if args.format == "json":
        print_json(done.raw)
        return
    print(f"replayed {done.replay_of} as {done.delivery_id}: {len(done.runs)} run(s) started")
    if done.runs:
        table(["RUN ID", "AUTOMATION"], [[r.run_id, r.automation_id or ""] for r in done.runs])
    else:
        print("no enabled automation matched; the replay is logged", file=sys.stderr)


def _test_filter(client: FactoryClient, args: argparse.Namespace) -> None:
    result: FilterTestResult = client.automations.test_filter(
        args.factory_uid, args.automation_uid, args.delivery_id, webhook_uid=args.webhook
    )
    if args.format == "json":
        print_json(result.raw)
        return
    print(result.result)
    for label, check in (("webhook check", result.webhook_check), ("payload check", result.payload_check)):
        where = f" (at {check.failed_path})" if check.failed_path and not check.passed else ""
        print(f"  {label}: {'passed' if check.passed else 'failed'}: {check.detail}{where}")
