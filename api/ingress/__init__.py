"""Pure webhook-ingress policies (DESIGN §5): signature schemes, delivery identity, rate limits.

Nothing here does I/O or knows about aiohttp or the store, so the HTTP handler, the store-backed
counters, the CLI and the benchmarks all share one definition of what a valid delivery is.
"""
