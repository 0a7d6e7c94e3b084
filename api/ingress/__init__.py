"""Webhook ingress: ``POST /webhooks/w/{uid}`` from sender to committed runs (docs/ingress.md), and
``POST /webhooks/github/{uid}`` for a team's GitHub App (:mod:`~api.ingress.github`, routed by
:mod:`~api.ingress.github_routing`; docs/ingress.md, "GitHub App deliveries") on the same shared parts
(:mod:`~api.ingress.gate`) and accept transaction.

The HTTP handler (:mod:`~api.ingress.routes`) runs the checks cheapest-first over the pure policies —
signature schemes (:mod:`~api.ingress.signatures`), delivery identity (:mod:`~api.ingress.identity`),
rate-limit arithmetic (:mod:`api.ratelimit.policy`), the envelope (:mod:`~api.ingress.envelope`) —
and the store-backed parts: webhook, secret and filter lookups (:mod:`~api.ingress.lookup`) and the
webhook lookup cache (:mod:`~api.ingress.webhook_cache`), limits
shared across replicas by leasing capacity in chunks (:mod:`api.ratelimit`, shared with the
per-client failed-authentication budget), the group-committing accept transaction
(:mod:`~api.ingress.pipeline`, with :mod:`~api.ingress.direct` on SQLite) and log retention
(:mod:`~api.ingress.retention`). The policies do no I/O, so tests, the CLI and the benchmarks share
one definition of a valid delivery.
"""
