"""``serve --processes N``: the primary's side (start, feed and stop N-1 secondaries) and a secondary's
whole life (docs/operations.md, "Several processes"). Only the primary runs background jobs; a
secondary serves HTTP and follows the primary's reconciler state."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pickle
import sys
from dataclasses import dataclass
from typing import Any

from api.app import ROUTE_MODULES, create_app
from api.context import RECONCILE, ReconcilerHealth, ReconcileTrigger, ServerSettings
from api.management.validate import VALIDATOR
from api.notifications.policy import NotificationSettings
from api.notifications.service import NOTIFICATION_SETTINGS
from factoryctl.context import CliContext
from factoryctl.serve.group import Message, PrimaryLink, StartFailed, Supervisor
from factoryctl.serve.options import ServeOptions
from factoryctl.serve.runtime import DRAIN_SECONDS, listen, make_runner, open_child_store, stop_on_signals
from factoryctl.serve.validation import make_validator
from factoryctl.serve.worker_process import WorkerProcessConfig, run_worker_process

log = logging.getLogger("factoryctl.serve")

# A secondary drains like the primary (at most DRAIN_SECONDS) and has no background work to stop.
SECONDARY_STOP_SECONDS = DRAIN_SECONDS + 10.0
STATE_POLL_SECONDS = 0.5


@dataclass(frozen=True)
class SecondaryConfig:
    """What a secondary gets from its primary: the primary's resolved settings, nothing read again."""

    index: int
    ctx: CliContext
    settings: ServerSettings
    notifications: NotificationSettings


def _reconciler_state(trigger: ReconcileTrigger) -> Message:
    if trigger.force is None:
        return {"reconciler": None}
    health = trigger.health() if trigger.health is not None else ReconcilerHealth(True)
    return {
        "reconciler": {
            "source": trigger.source,
            "healthy": health.healthy,
            "reason": health.reason,
            "running": health.running,
        }
    }


def _follow_reconciler(trigger: ReconcileTrigger, state: Any, link: PrimaryLink) -> None:
    """A secondary's view of the primary's reconciler: ``/readyz`` reports it and ``POST
    .../reconcile`` wakes it, as in the primary."""
    if not isinstance(state, dict):
        trigger.source, trigger.force, trigger.health = None, None, None
        return
    health = ReconcilerHealth(
        bool(state.get("healthy")), str(state.get("reason") or ""), bool(state.get("running"))
    )
    trigger.source = str(state.get("source") or "")
    trigger.force = lambda: link.send({"reconcile": True})
    trigger.health = lambda: health


def secondaries(ctx: CliContext, options: ServeOptions, trigger: ReconcileTrigger) -> Supervisor:
    def config(index: int) -> bytes:
        return pickle.dumps(SecondaryConfig(index, ctx, options.settings, options.notifications))

    def on_message(index: int, message: Message) -> None:
        if message.get("reconcile") and trigger.force is not None:
            trigger.force()

    return Supervisor(
        options.processes - 1,
        config,
        env=ctx.env,
        greeting=lambda: _reconciler_state(trigger),
        on_message=on_message,
    )


async def start(group: Supervisor, stop: asyncio.Event) -> int:
    """Start the secondaries: 0 once all listen (or when stopped meanwhile), 1 when one cannot start."""
    starting = asyncio.create_task(group.start())
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if not starting.done():
        starting.cancel()
        await asyncio.wait({starting})
        return 0
    try:
        starting.result()
    except StartFailed as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


async def share_reconciler_state(trigger: ReconcileTrigger, group: Supervisor) -> None:
    last = _reconciler_state(trigger)
    while True:
        await asyncio.sleep(STATE_POLL_SECONDS)
        now = _reconciler_state(trigger)
        if now != last:
            group.broadcast(now)
            last = now


async def run_secondary(fd: int) -> int:
    """A secondary of ``serve --processes N`` (started by the primary with ``--secondary FD``): HTTP only -
    no migration, no key bootstrap, no background job - until SIGTERM/SIGINT or the primary's end. The
    workers' process of ``--worker-process`` starts the same way and runs
    :func:`~factoryctl.serve.worker_process.run_worker_process` instead."""
    try:
        link, raw, first = await PrimaryLink.connect(fd)
        config = pickle.loads(raw)  # noqa: S301 - from the primary, over a socketpair only the two hold
    except (OSError, EOFError, asyncio.IncompleteReadError, pickle.UnpicklingError) as exc:
        print(f"error: no configuration from the primary process ({exc!r})", file=sys.stderr)
        return 1
    if isinstance(config, WorkerProcessConfig):
        return await run_worker_process(link, config)
    if not isinstance(config, SecondaryConfig):
        print("error: no configuration from the primary process", file=sys.stderr)
        return 1
    opened = open_child_store(config.ctx, config.index)
    if opened is None:
        return 1
    box, engine = opened
    settings = config.settings
    app = create_app(settings, engine, box, route_modules=ROUTE_MODULES)
    app[NOTIFICATION_SETTINGS] = config.notifications
    app[VALIDATOR] = make_validator(box)
    trigger = app[RECONCILE]

    def from_primary(message: Message) -> None:
        if "reconciler" in message:
            _follow_reconciler(trigger, message["reconciler"], link)

    from_primary(first)
    runner = make_runner(app)
    await runner.setup()
    problem = await listen(runner, settings, shared=True)
    if problem is not None:
        log.error(json.dumps({"msg": "cannot listen", "error": problem}))
        await runner.cleanup()
        await engine.dispose()
        return 1
    link.send({"ready": os.getpid()})
    stop = asyncio.Event()
    stop_on_signals(stop)
    try:
        if await link.follow_until(stop, from_primary):
            log.warning(json.dumps({"msg": "primary process gone; stopping"}))
    finally:
        await runner.cleanup()
        link.close()
        await engine.dispose()
    return 0
