"""What every ``serve`` process does alike around its app: log lines, the aiohttp runner, listening on the
port (shared with SO_REUSEPORT when there are several processes) and stopping on a signal."""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import signal

from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine

from api.context import ServerSettings
from api.ops import JsonAccessLogger
from factoryctl import log_lines
from factoryctl.context import CliContext
from factoryctl.log_lines import TextLineFormatter
from store.crypto import SecretBox
from store.db import create_engine

log = logging.getLogger("factoryctl.serve")

# After SIGTERM/SIGINT the listening socket closes at once and requests already being handled get at most
# this long to finish (docs/operations.md, "Faults and recovery"). Ordinary requests take milliseconds;
# what would otherwise hold the exit is a worker's claim long poll (up to 30 s), which is cut and retried.
# aiohttp waits its shutdown timeout twice (for the handler, then for it after cancelling its body).
DRAIN_SECONDS = 10.0


def configure_logging(index: int | None) -> None:
    """Log lines on stderr in the format ``serve --log-format`` chose (:func:`factoryctl.log_lines.configure`
    ran at the CLI edge; JSON when nothing did); ``index`` (several processes) tags each line with the
    process that wrote it."""
    handlers = logging.getLogger().handlers
    text = any(isinstance(h.formatter, TextLineFormatter) for h in handlers)
    log_lines.configure("text" if text else "json", process=index)


def open_child_store(ctx: CliContext, index: int) -> tuple[SecretBox, AsyncEngine] | None:
    """How a child process of ``serve`` starts (an HTTP secondary, the workers' process): its log lines,
    then the secret box and an engine of its own (the primary migrated the database). None, with the reason
    logged, when the key cannot be read."""
    configure_logging(index)
    try:
        box = ctx.secret_box()
    except Exception as exc:
        log.error(json.dumps({"msg": "cannot start", "error": str(exc)}))
        return None
    return box, create_engine(ctx.database_url)


def make_runner(app: web.Application) -> web.AppRunner:
    return web.AppRunner(
        app, access_log_class=JsonAccessLogger, handle_signals=False, shutdown_timeout=DRAIN_SECONDS / 2
    )


def _listen_error(settings: ServerSettings, exc: OSError) -> str:
    if exc.errno == errno.EADDRINUSE:
        return f"port {settings.port} on {settings.host} is already in use"
    return f"cannot listen on {settings.host}:{settings.port}: {exc.strerror}"


async def listen(runner: web.AppRunner, settings: ServerSettings, *, shared: bool) -> str | None:
    """Listen on host:port (``shared``: with SO_REUSEPORT, next to the other processes of the group);
    an error message when it cannot."""
    site = web.TCPSite(
        runner, settings.host, settings.port, reuse_address=True, reuse_port=True if shared else None
    )
    try:
        await site.start()
    except OSError as exc:
        return _listen_error(settings, exc)
    return None


async def port_taken(settings: ServerSettings) -> str | None:
    """Whether something listens on host:port already. A bind with SO_REUSEPORT would succeed next to
    another server of the same user and silently share its port; this probe binds without it."""
    loop = asyncio.get_running_loop()
    try:
        probe = await loop.create_server(
            asyncio.Protocol, settings.host, settings.port, reuse_address=True, start_serving=False
        )
    except OSError as exc:
        return _listen_error(settings, exc)
    probe.close()
    await probe.wait_closed()
    return None


def stop_on_signals(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
