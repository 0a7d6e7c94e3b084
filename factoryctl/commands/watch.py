"""``factoryctl watch PATH``: apply a factory directory now and again on every saved change.

The same loop ``serve --repo`` runs, without the API: useful next to a separately deployed server
that shares the store. A broken edit is reported with file:line and leaves the last good state live.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path
from typing import Any

from factoryctl.context import CliContext


def register(sub: Any) -> None:
    p = sub.add_parser("watch", help="apply a factory directory on every change (no server)")
    p.add_argument("path", metavar="PATH")
    p.add_argument("--team", default="default")
    p.add_argument("--allow-empty", action="store_true", help="apply an empty tree (prunes everything)")
    p.add_argument("--debounce-ms", type=int, default=300)
    p.set_defaults(handler=_watch)


def _watch(ctx: CliContext, args: argparse.Namespace) -> int:
    root = Path(args.path).resolve()
    if not root.is_dir():
        print(f"error: {root} is not a directory", file=sys.stderr)
        return 1
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("watchfiles").setLevel(logging.WARNING)
    try:
        return asyncio.run(_run(ctx, root, args))
    except KeyboardInterrupt:
        return 0


async def _run(ctx: CliContext, root: Path, args: argparse.Namespace) -> int:
    from reconciler.loadcache import LoadCache
    from reconciler.loop import follow
    from reconciler.service import ReconcileOutcome, reconcile
    from reconciler.sources import Snapshot
    from reconciler.sources.local import DirectorySource
    from store.clock import SystemClock
    from store.db import session_factory

    box, clock, cache = ctx.secret_box(), SystemClock(), LoadCache()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with ctx.engine() as engine:
        sessions = session_factory(engine)

        async def apply(snapshot: Snapshot) -> ReconcileOutcome:
            return await reconcile(
                sessions,
                box,
                clock,
                team=args.team,
                root=snapshot.root,
                revision=None,
                allow_empty=args.allow_empty,
                source=str(root),
                cache=cache,
            )

        print(f"watching {root} (Ctrl-C stops)", file=sys.stderr, flush=True)
        task = asyncio.create_task(follow(DirectorySource(root, debounce_ms=args.debounce_ms), apply, stop))
        await stop.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return 0
