"""``factoryctl plan`` and ``factoryctl apply``: diff a factory directory against the store, and apply it.

Exit codes: 0 success, 1 error (invalid definitions, refused apply — a factory a running ``serve`` manages
without ``--force`` included, docs/reconcile.md, "Who manages a factory" — not confirmed). ``plan
--detailed-exitcode`` follows Terraform: 0 no changes, 1 error, 2 changes present.

``apply`` asks for confirmation (``yes``) on a terminal. Without a terminal, or with ``--format
json``, it refuses unless ``--auto-approve`` is given: a script never applies by accident. The
confirmed apply re-plans inside its transaction and refuses if the plan differs from what was shown.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from factoryctl.context import CliContext, use_color
from factoryctl.existing_store import missing_store

if TYPE_CHECKING:  # the store (SQLAlchemy) and the reconciler are imported when a command runs
    from reconciler.plan import Plan
    from reconciler.service import ReconcileOutcome

DEFAULT_TEAM = "default"  # store.teams.DEFAULT_TEAM (tests/unit/cli keeps them equal)
CONFIRM = "Do you want to perform these actions? Only 'yes' will be accepted: "


def register(sub: Any) -> None:
    plan = sub.add_parser("plan", help="show what apply would change (nothing is written)")
    plan.add_argument("path", metavar="PATH", help="factory directory (holds factory.yaml)")
    plan.add_argument(
        "--detailed-exitcode", action="store_true", help="exit 0 no changes, 1 error, 2 changes"
    )
    plan.add_argument("--format", choices=("text", "json"), default="text")
    plan.add_argument(
        "--allow-empty",
        action="store_true",
        help="plan a tree with no webhooks/automations/schedules/notifications",
    )
    plan.add_argument("--team", default=DEFAULT_TEAM)
    plan.set_defaults(handler=_plan)
    apply = sub.add_parser("apply", help="apply a factory directory to the store, atomically")
    apply.add_argument("path", metavar="PATH", help="factory directory (holds factory.yaml)")
    apply.add_argument("--git-revision", metavar="SHA", help="revision to record (default: content digest)")
    apply.add_argument("--auto-approve", action="store_true", help="apply without asking")
    apply.add_argument(
        "--allow-empty",
        action="store_true",
        help="apply a tree with no webhooks/automations/schedules/notifications",
    )
    apply.add_argument(
        "--force",
        action="store_true",
        help="apply even though a running serve manages the factory (it re-applies its source on drift)",
    )
    apply.add_argument("--format", choices=("text", "json"), default="text")
    apply.add_argument("--team", default=DEFAULT_TEAM)
    apply.set_defaults(handler=_apply)


def _run(
    ctx: CliContext, args: argparse.Namespace, *, dry_run: bool, expected: str | None = None
) -> ReconcileOutcome:
    from reconciler.service import reconcile
    from store.clock import SystemClock
    from store.db import session_factory

    async def go() -> ReconcileOutcome:
        async with ctx.engine() as engine:
            return await reconcile(
                session_factory(engine),
                ctx.secret_box(),
                SystemClock(),
                team=args.team,
                root=Path(args.path),
                revision=getattr(args, "git_revision", None),
                allow_empty=args.allow_empty,
                dry_run=dry_run,
                expected_plan=expected,
                force=getattr(args, "force", False),
            )

    return asyncio.run(go())


def _report_failure(result: ReconcileOutcome, fmt: str, *, planning: bool) -> int:
    text = _failure_text(result, planning=planning)
    if fmt == "json":
        print(json.dumps({"error": text, "diagnostics": result.diagnostics_json()}, indent=2))
        return 1
    _warn(result)
    print(f"error: {text}", file=sys.stderr)
    return 1


def _warn(result: ReconcileOutcome) -> None:
    for diagnostic in result.diagnostics:
        print(str(diagnostic), file=sys.stderr)


def _failure_text(result: ReconcileOutcome, *, planning: bool) -> str:
    """A plan that fails never applies anything, so it says the plan failed; an apply says nothing
    was applied (its transaction rolled back)."""
    why = result.error or f"{len(result.diagnostics)} definition error(s)"
    return f"the plan failed: {why}" if planning else f"{why}; nothing was applied"


def _plan_json(plan: Plan, result: ReconcileOutcome) -> dict[str, Any]:
    return plan.to_json() | {"revision": result.revision}


def _plan(ctx: CliContext, args: argparse.Namespace) -> int:
    from reconciler.plan import render_text

    problem = missing_store(ctx)
    if problem is None:
        result = _run(ctx, args, dry_run=True)
    else:
        # Nothing applied here yet: plan against an empty store in a scratch directory (the first plan
        # shows everything to add), never creating one where the user pointed (docs/cli.md, "CLI context").
        print(f"note: {problem.split(';')[0]}: planned against an empty store", file=sys.stderr)
        with tempfile.TemporaryDirectory(prefix="factoryctl-plan-") as scratch:
            empty = CliContext(Path(scratch), f"sqlite+aiosqlite:///{Path(scratch) / 'factory.db'}", ctx.env)
            result = _run(empty, args, dry_run=True)
    if not result.ok or result.plan is None:
        return _report_failure(result, args.format, planning=True)
    _warn(result)
    if result.managed_by:  # docs/reconcile.md, "Who manages a factory"
        print(f"note: {result.managed_by} manages this factory; apply needs --force", file=sys.stderr)
    if args.format == "json":
        print(json.dumps(_plan_json(result.plan, result), indent=2))
    else:
        sys.stdout.write(render_text(result.plan, color=use_color()))
    if args.detailed_exitcode and result.plan.has_changes:
        return 2
    return 0


def _confirm() -> bool:
    try:
        answer = input(CONFIRM)
    except EOFError:
        return False
    return answer.strip() == "yes"


def _apply(ctx: CliContext, args: argparse.Namespace) -> int:
    from reconciler.plan import render_text

    expected: str | None = None
    previewed = False
    if not args.auto_approve:
        if args.format == "json" or not sys.stdin.isatty():
            print(
                "error: apply needs confirmation and cannot ask here (stdin is not a terminal, or"
                " --format json); review `factoryctl plan` and pass --auto-approve",
                file=sys.stderr,
            )
            return 1
        preview = _run(ctx, args, dry_run=True)
        if not preview.ok or preview.plan is None:
            return _report_failure(preview, args.format, planning=False)
        if preview.managed_by and not args.force:  # refused before asking (docs/reconcile.md)
            message = f"{preview.managed_by} manages this factory; pass --force to apply anyway"
            print(f"error: {message}", file=sys.stderr)
            return 1
        _warn(preview)
        sys.stdout.write(render_text(preview.plan, color=use_color()))
        previewed = True
        if preview.plan.has_changes:
            if not _confirm():
                print("error: apply cancelled; nothing was changed", file=sys.stderr)
                return 1
            expected = preview.plan.digest()
    result = _run(ctx, args, dry_run=False, expected=expected)
    if not result.ok or result.plan is None:
        return _report_failure(result, args.format, planning=False)
    if not previewed:  # else the preview showed them
        _warn(result)
    if args.format == "json":
        out = _plan_json(result.plan, result) | {"outcome": result.outcome, "duration_ms": result.duration_ms}
        print(json.dumps(out, indent=2))
        return 0
    _print_applied(result.plan, shown=previewed)
    print(f"Factory {result.plan.factory_name} ({result.factory_uid}) is at revision {result.revision}.")
    return 0


def _print_applied(plan: Plan, *, shown: bool) -> None:
    """After apply: every change with its UID (only the created ones if the plan was already shown)."""
    from reconciler.plan import render_change, summary_line

    if not plan.has_changes:
        if not shown:
            print(summary_line(plan))
        return
    color = use_color()
    lines = [c for c in plan.changes if not shown or c.action in ("create", "replace")]
    for change in lines:
        print(render_change(change, color=color))
    if lines:
        print()
    s = plan.summary()
    print(f"Apply complete! Resources: {s['add']} added, {s['change']} changed, {s['destroy']} destroyed.")
