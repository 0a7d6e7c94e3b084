"""Run environments over the API (DESIGN §7a): API-managed ones are edited here, definitions-managed
ones (``environments/<name>.yaml``, applied by the reconciler) are read-only."""
