"""Helpers shared by e2e tests that run ``factoryctl serve`` as a subprocess."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
from pathlib import Path

import aiohttp


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
