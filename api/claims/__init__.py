"""The server side of the worker protocol: where workers claim runs, hold leases and report.

- :mod:`api.claims.routes` — ``/api/v1/workers/...`` for self-hosted workers (long-poll claims,
  heartbeats, state reports, log lines, the run-scoped secrets a lease holder may read);
- :mod:`api.claims.payload` — the claim answer (prompt, resolved configuration, attachments,
  environment) and claim-time skill resolution, shared with service-hosted workers;
- :mod:`api.claims.reaper` — the lease reaper that applies the lapse rules.

The worker itself (the run loop, harnesses, workspaces) is not here: it runs outside the server
and lives in :mod:`factoryctl.worker`; ``serve --workers N`` wires it to the store in
:mod:`factoryctl.serve.local_workers`. Queue semantics (claims, leases, lapse rules, waking
claimers) live in :mod:`api.runs.queue` and :mod:`api.runs.claim_signal`.
"""
