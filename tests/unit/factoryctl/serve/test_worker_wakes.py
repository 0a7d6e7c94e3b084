"""The primary forwards its claim signal to the workers' process (factoryctl/serve/worker_process.py):
one ``{"wake": true}`` line per wake-up, none without one, so a queued run reaches the other process's
claimers without waiting for their poll."""

from __future__ import annotations

import asyncio

from aiohttp import web

from api.runs.claim_signal import claim_signal, wake_claimers
from factoryctl.serve.group import Message
from factoryctl.serve.worker_process import WAKE, forward_wakes


class Lines:
    """What :meth:`factoryctl.serve.group.Supervisor.broadcast` would write to the workers' process."""

    def __init__(self) -> None:
        self.sent: list[Message] = []
        self.changed = asyncio.Event()

    def broadcast(self, message: Message) -> None:
        self.sent.append(message)
        self.changed.set()

    async def count(self, n: int) -> None:
        while len(self.sent) < n:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), 5)


async def test_each_wake_up_becomes_one_line() -> None:
    app = web.Application()
    signal = claim_signal(app)
    lines = Lines()
    task = asyncio.create_task(forward_wakes(app, lines))
    try:
        await asyncio.sleep(0)  # the forwarder waits on the signal now
        assert lines.sent == []
        wake_claimers(app)
        await lines.count(1)
        assert lines.sent == [WAKE]
        waiting = signal.current()
        wake_claimers(app)
        await lines.count(2)
        assert lines.sent == [WAKE, WAKE]
        assert waiting.is_set() and not signal.current().is_set()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

