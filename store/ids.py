"""Prefixed, sortable identifiers: ``<prefix>_<26 chars>`` (time-ordered, URL-safe, lowercase).

The first 10 characters encode milliseconds since the epoch so IDs sort by creation time,
which keeps B-tree inserts local; the remaining 16 are random (80 bits).
"""

from __future__ import annotations

import secrets
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"  # Crockford base32, lowercase


def _encode(value: int, length: int) -> str:
    out = []
    for _ in range(length):
        value, rem = divmod(value, 32)
        out.append(_ALPHABET[rem])
    return "".join(reversed(out))


def new_id(prefix: str, *, now_ms: int | None = None) -> str:
    ms = int(time.time() * 1000) if now_ms is None else now_ms
    return f"{prefix}_{_encode(ms, 10)}{_encode(secrets.randbits(80), 16)}"


FACTORY = "fa"
WEBHOOK = "wh"
AUTOMATION = "au"
ENVIRONMENT = "env"
RUN = "run"
FOLLOWUP = "fu"
SECRET = "sec"  # noqa: S105 - an ID prefix, not a password
TEAM = "tm"
KEY = "key"
SCHEDULE = "sch"
NOTIFICATION = "ne"  # an outbound notification endpoint
AGENT = "ag"
SKILL = "sk"
RUNNER = "rn"
SCORER = "sc"
BENCHMARK = "bm"
MESSAGE = "msg"  # one notification message: its Standard Webhooks webhook-id
GITHUB_CONNECTION = "gh"  # a team's GitHub App connection (docs/ingress.md, "GitHub App deliveries")
ARTIFACT = "art"  # one artifact of a run (docs/agents.md, "Artifacts")
