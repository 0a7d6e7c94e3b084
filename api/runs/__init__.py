"""Runs: what a run is and how it changes, from the API request to the worker's claim.

- :mod:`~api.runs.states` — the run state machine; :mod:`~api.runs.new_run` — a run a caller starts, as
  one value; :mod:`~api.runs.records` — run rows in the database (create, read, keyset listing, cancel,
  follow-ups, logs);
- :mod:`~api.runs.claim_signal` — waking claimers (the queue and the worker protocol are :mod:`api.claims`);
- :mod:`~api.runs.config`, :mod:`~api.runs.skills` and :mod:`~api.runs.prepare` — the agent
  configuration, resolved and checked before a run is created (a skill's files: what may be one and the
  one reader in :mod:`~api.runs.skill_files`, clones in the bounded :mod:`~api.runs.skill_cache`);
- :mod:`~api.runs.requests`, :mod:`~api.runs.serialize` and :mod:`~api.runs.routes` — the Run API
  over HTTP (parsing, wire shapes, handlers).
"""
