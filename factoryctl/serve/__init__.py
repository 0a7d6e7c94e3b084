"""The ``factoryctl serve`` process, assembled: the one place where store, reconciler, server and worker meet.

- :mod:`~factoryctl.serve.options` — flags and ``FACTORY_*`` variables, read once into ``ServeOptions``;
- :mod:`~factoryctl.serve.process` — the primary process: database connection, admin key, lifecycles, HTTP;
- :mod:`~factoryctl.serve.runtime` — what every process does alike: logging, the runner, listening, signals;
- :mod:`~factoryctl.serve.secondaries` and :mod:`~factoryctl.serve.group` — ``--processes N``: the
  secondaries' life and the supervisor that starts, links and stops them;
- :mod:`~factoryctl.serve.reconcile` — the reconciler loop on a directory or git source, as a lifecycle;
- :mod:`~factoryctl.serve.validation` — the definitions validator injected into ``/factory-files/validate``
  (the server may not import the reconciler);
- :mod:`~factoryctl.serve.local_workers` — service-hosted workers: the worker agent wired to the store.
"""
