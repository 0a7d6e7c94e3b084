"""Helpers shared by e2e tests that run ``factoryctl serve`` (or ``watch``) as a subprocess.

Tests wait on something they can observe (an API answer, a log record), never for a fixed time:
:func:`wait_for` polls a condition until a deadline, :func:`reconcile_records` reads the reconcile
loop's JSON log records.
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

import aiohttp

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def wait_ready(base: str, proc: subprocess.Popen[bytes], log: Path, seconds: float = 20.0) -> None:
    """Wait until ``GET /healthz`` answers 200; fail with the server's log if it exits or never starts."""
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise AssertionError(f"server exited early:\n{log.read_text()}")  # noqa: ASYNC240
            try:
                async with http.get(f"{base}/healthz") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise AssertionError(f"server did not start:\n{log.read_text()}")  # noqa: ASYNC240


def wait_for(
    predicate: Callable[[], T | Literal[False] | None], timeout: float = 15.0, what: str = "condition"
) -> T:
    """Poll ``predicate`` until it returns a truthy value, and return that value; fail after ``timeout``
    seconds, naming ``what`` was awaited."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not met within {timeout}s")
        time.sleep(0.05)


def reconcile_records(log: Path) -> list[dict[str, Any]]:
    """The ``{"msg": "reconcile", ...}`` records a ``serve``/``watch`` process logged so far, in order
    (one per reconciled snapshot: ``outcome``, ``revision``, ``factory``...)."""
    records = []
    for line in log.read_text().splitlines():
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("msg") == "reconcile":
            records.append(record)
    return records
