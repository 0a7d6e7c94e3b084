"""The ``factoryctl serve`` process, assembled: the one place where store, reconciler, server and worker meet.

- :mod:`~factoryctl.serve.process` — options, database connection, the aiohttp runner and its lifecycles;
- :mod:`~factoryctl.serve.reconcile` — the reconciler loop on a directory or git source, as a lifecycle;
- :mod:`~factoryctl.serve.validation` — the definitions validator injected into ``/factory-files/validate``
  (the server may not import the reconciler);
- :mod:`~factoryctl.serve.local_workers` — service-hosted workers: the worker agent wired to the store.
"""
