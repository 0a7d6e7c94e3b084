"""Scripted model servers that the real agent CLIs (Claude Code, Codex, Gemini CLI) talk to in tests.

There is no network to a model provider in tests: each provider's streamed wire protocol is served on
127.0.0.1 by a small aiohttp app that answers from a :class:`~tests.agents.scripted.Script`.
:mod:`agents.scripted` holds what every provider server shares; ``<provider>_server.py`` one protocol each.
"""
