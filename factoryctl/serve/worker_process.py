"""``serve --worker-process``: the service-hosted workers in a process of their own.

In-process workers share the primary's event loop and interpreter lock with ingress, streams and every
background job; under sustained load their claims, heartbeats and reports wait behind all of it
(docs/operations.md, "Workers in their own process"). With this option the primary starts one more
child - ``python -m factoryctl.cli serve --secondary FD``, like the HTTP secondaries of ``--processes N``
(:mod:`factoryctl.serve.group`) - that listens on no port and runs only :func:`hosted_workers`, with its
own engine, its own event loop and its own interpreter lock, on the same store.

- The child gets the primary's resolved :class:`~factoryctl.serve.options.ServeOptions` over the
  socketpair, never on a command line or from the environment again.
- Wake-ups: whenever a path in the primary queues a run (:mod:`api.runs.claim_signal`), the primary sends
  ``{"wake": true}`` and the child's claimers wake at once; runs queued elsewhere (an HTTP secondary,
  another replica) are found by the workers' poll, as before.
- Lifecycle: the child is ready once its workers run; SIGTERM stops it like the in-process workers stop
  (running harnesses cancelled, their runs ERROR ``resource_unavailable``, retryable); end of file on its
  channel - the primary died - stops it too; the primary restarts it when it exits on its own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pickle
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from api.app import Lifecycle, create_app
from api.runs.claim_signal import claim_signal
from factoryctl.addresses import egress_refusal
from factoryctl.context import CliContext
from factoryctl.serve.group import Message, PrimaryLink, Supervisor
from factoryctl.serve.local_workers import STOP_TIMEOUT_SECONDS, service_workers
from factoryctl.serve.options import ServeOptions
from factoryctl.serve.runtime import make_runner, open_child_store, stop_on_signals
from factoryctl.worker.execution import scrubbed_environment
from factoryctl.worker.sandbox import Sandbox, service_environment

log = logging.getLogger("factoryctl.serve")

# Its workers get STOP_TIMEOUT_SECONDS to end their runs; then the engine closes.
WORKER_PROCESS_STOP_SECONDS = STOP_TIMEOUT_SECONDS + 10.0
WAKE: Message = {"wake": True}


class Broadcaster(Protocol):
    """Where a message for the workers' process goes (:meth:`Supervisor.broadcast`)."""

    def broadcast(self, message: Message) -> None: ...


@dataclass(frozen=True)
class WorkerProcessConfig:
    """What the workers' process gets from its primary."""

    index: int
    ctx: CliContext
    options: ServeOptions


def hosted_workers(options: ServeOptions) -> Lifecycle:
    """The service-hosted workers ``options`` ask for, wherever they run (the primary or its workers'
    process). Agents never inherit the server's credentials, and what a run controls starts only in a
    sandbox that cannot reach the data directory (docs/workers.md, "Sandbox")."""
    return service_workers(
        options.workers,
        options.harness,
        options.harness_command,
        options.workspace_dir,
        harness_env=scrubbed_environment(service_environment(options.env, options.agent_env)),
        sandbox=Sandbox(
            options.bwrap,
            read_only=options.sandbox_ro,
            writable=options.sandbox_rw,
            address_refusal=egress_refusal,
            open_network=options.sandbox_open_network,
            listed_private=options.sandbox_private_egress,
        ),
        guarded=options.guarded,
        agents=options.agents,
        limits=options.limits,
    )


def worker_process(ctx: CliContext, options: ServeOptions) -> Supervisor:
    """The primary's supervisor of the one workers' process (its log lines carry the next process index
    after the HTTP secondaries)."""

    def config(index: int) -> bytes:
        return pickle.dumps(WorkerProcessConfig(index, ctx, options))

    return Supervisor(
        1,
        config,
        env=ctx.env,
        greeting=lambda: {},
        on_message=lambda _index, _message: None,
        label="workers process",
        first=options.processes,
    )


async def forward_wakes(app: web.Application, group: Broadcaster) -> None:
    """Send every wake of the primary's claim signal to the workers' process: one line per turn of this
    loop, so a burst of runs queued between two turns costs one line, not one per run."""
    signal = claim_signal(app)
    while True:
        await signal.current().wait()
        group.broadcast(WAKE)


async def run_worker_process(link: PrimaryLink, config: WorkerProcessConfig) -> int:
    """The workers' process: its own engine and app (no routes, no port), the workers' lifecycle, until
    SIGTERM/SIGINT or the primary's end."""
    opened = open_child_store(config.ctx, config.index)
    if opened is None:
        return 1
    box, engine = opened
    workers = hosted_workers(config.options)
    app = create_app(config.options.settings, engine, box, lifecycles=[workers], route_modules=())
    signal = claim_signal(app)

    def from_primary(message: Message) -> None:
        if message.get("wake"):
            signal.wake()

    runner = make_runner(app)
    try:
        await runner.setup()  # starts the workers (cleanup_ctx)
    except Exception as exc:
        log.error(json.dumps({"msg": "cannot start the workers", "error": str(exc)}))
        await engine.dispose()
        return 1
    link.send({"ready": os.getpid()})
    log.info(json.dumps({"msg": "service-hosted workers started", "workers": config.options.workers}))
    stop = asyncio.Event()
    stop_on_signals(stop)
    try:
        if await link.follow_until(stop, from_primary):
            log.warning(json.dumps({"msg": "primary process gone; stopping the workers"}))
    finally:
        await runner.cleanup()
        link.close()
        await engine.dispose()
    return 0
