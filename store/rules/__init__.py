"""Pure rules both sides of the house share: no database, no I/O, no SQLAlchemy (a contract in
``pyproject.toml``; docs/architecture.md, "Packages and arrows").

The server, the reconciler and the CLI read these modules for the same answers: the run vocabulary
(:mod:`store.rules.vocabulary`), payload filters, cron, where a URL or an address may be reached, and
what a notification endpoint subscribes to.
"""
