"""Limits counted across replicas (docs/ingress.md, "Limits"; docs/api.md, "Authentication").

One implementation serves every limit of the server: the ingress's per-webhook delivery rate and
failed-request budget, and the per-client-address failed-authentication budget of the API and the console
(:mod:`api.auth_failures`). The sliding-window arithmetic is pure (:mod:`~api.ratelimit.policy`); on
PostgreSQL replicas lease capacity from shared ``rate_counters`` rows in chunks
(:mod:`~api.ratelimit.counters` over the pure :mod:`~api.ratelimit.leases`), on SQLite (one process) the
counts live in memory. Keys are namespaced by their user (``wh-auth:``, ``wh-rate:``, ``client-auth:``).
"""
