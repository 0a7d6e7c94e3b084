"""The notification sender as an app lifecycle, and the one way to wake it (docs/notifications.md).

Every ``serve`` replica runs one :class:`~api.notifications.sender.Sender`; claims decide who sends what.
Settings come from :data:`NOTIFICATION_SETTINGS` when the app has them (tests shorten the retry schedule),
otherwise the defaults.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from api.context import BOX, CLOCK, SESSIONS
from api.notifications.policy import NotificationSettings
from api.notifications.sender import Sender
from api.notifications.transport import GuardedTransport
from api.periodic import finish

NOTIFICATION_SETTINGS = web.AppKey("notification_settings", NotificationSettings)
NOTIFICATION_SENDER = web.AppKey("notification_sender", Sender)

Lifecycle = Callable[[web.Application], AsyncIterator[None]]


def wake(app: web.Application) -> None:
    """Have this replica's sender look for due messages now (after a commit that made some due)."""
    sender = app.get(NOTIFICATION_SENDER)
    if sender is not None:
        sender.wake()


def notification_sender() -> Lifecycle:
    """A ``cleanup_ctx`` lifecycle running the sender until the app stops (then it ends its current turn,
    or is cancelled after :data:`~api.periodic.STOP_GRACE_SECONDS`; attempts in flight are abandoned and
    made again after their lease, with the same webhook-id)."""

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        settings = app.get(NOTIFICATION_SETTINGS) or NotificationSettings()
        async with GuardedTransport(settings) as transport:
            sender = Sender(app[SESSIONS], app[CLOCK], app[BOX], transport, settings)
            app[NOTIFICATION_SENDER] = sender
            task = asyncio.create_task(sender.run(), name="notification-sender")
            try:
                yield
            finally:
                sender.stop()
                await finish(task)

    return lifecycle


__all__ = ["NOTIFICATION_SENDER", "NOTIFICATION_SETTINGS", "notification_sender", "wake"]
