"""The factory API (docs/api.md, "Factories"): discover factories, create API-managed ones, dispatch work
to a foreman."""
