"""Signed outbound notifications (docs/notifications.md): run state changes told to a team's endpoints.

- :mod:`~api.notifications.routes` — endpoints, messages and attempts over the management API; resend.
- :mod:`~api.notifications.fanout` — turns committed run state events into messages (the outbox).
- :mod:`~api.notifications.sender` — claims due messages and delivers them, signed, with retries.
"""
