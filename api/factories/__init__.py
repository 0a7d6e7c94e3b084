"""The factory API (DESIGN §7): discover factories, create API-managed ones, dispatch work to a foreman."""
