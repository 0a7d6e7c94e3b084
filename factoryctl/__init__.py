"""factoryctl: everything that runs outside the server, and the composition root that assembles it.

- :mod:`factoryctl.cli` and :mod:`factoryctl.commands` — the command line (commands load when chosen);
  :mod:`factoryctl.context` is the only place environment variables are read;
- :mod:`factoryctl.client` — the typed HTTP client of the API (used by the CLI and the worker agent);
- :mod:`factoryctl.worker` — the worker agent: run loop, harnesses, workspaces, environments;
- :mod:`factoryctl.serve` — the ``serve`` process: the server (:mod:`api`), the reconciler loop and
  service-hosted workers wired together.

The layering is written as import-linter contracts in ``pyproject.toml`` (docs/architecture.md).
"""

__version__ = "0.1.0"
