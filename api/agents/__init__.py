"""The SDKs' read surface for agents and environments: ``GET /agent`` and ``GET /agent/environments``."""
