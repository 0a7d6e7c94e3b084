"""The server side of the worker protocol: where workers claim runs, hold leases and report.

- :mod:`api.claims.protocol` — one path per worker call (claim, heartbeat, logs, state report,
  secrets), the same for self-hosted workers over HTTP and service-hosted workers in-process;
- :mod:`api.claims.routes` and :mod:`api.claims.bodies` — ``/api/v1/workers/...`` for self-hosted
  workers: the request bodies, authorization, the long-poll claim, the answers;
- :mod:`api.claims.payload` — the claim answer (prompt, resolved configuration, attachments,
  environment, MCP servers) and claim-time skill resolution;
- :mod:`api.claims.queue` — the run queue's SQL: claims (``FOR UPDATE SKIP LOCKED``), leases,
  heartbeats, state reports, lease lapse; :mod:`api.claims.run_logs` — log lines within the run's caps;
- :mod:`api.claims.reaper` — the lease reaper that applies the lapse rules.

Errors (:mod:`api.claims.errors`)::

    store.WriteRefused
    └── LeaseRefused        the run refuses the call: lease not held, or a report the state machine refuses
        └── NotLeaseHolder  the caller does not hold the run's lease

The worker itself (the run loop, harnesses, workspaces) is not here: it runs outside the server
and lives in :mod:`factoryctl.worker`; ``serve --workers N`` wires it to :mod:`api.claims.protocol`
in :mod:`factoryctl.serve.local_workers`. Waking claimers stays in :mod:`api.runs.claim_signal`:
every path that queues a run rings it, and those paths sit below this package.
"""
