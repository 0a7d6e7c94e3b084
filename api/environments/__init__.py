"""Run environments over the API (docs/agent-config.md): API-managed ones are edited here, definitions-managed
ones (``environments/<name>.yaml``, applied by the reconciler) are read-only."""
