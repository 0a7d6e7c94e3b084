"""Scheduled agents (docs/schedules.md): the ``/agent/schedules`` API and the scheduler that fires them."""
